import os
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

TEST_DIR = os.environ["GYMFLEET_TEST_DIR"]
sys.path.insert(0, TEST_DIR)
import gymfleet_testlib  # noqa: E402

SCRIPT = os.path.abspath("rotate.sh")
OTHERS = ["notes.txt", "backup-latest.tar.gz", "backup-2026011.tar.gz", "backup-20260101.tar.gz.part",
          "xbackup-20200101.tar.gz", "backup-20200101.tgz"]


class Checks(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="rotate test ", dir=TEST_DIR)

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def make(self, names, mtimes_reversed=False):
        for i, name in enumerate(names):
            path = os.path.join(self.dir, name)
            with open(path, "w") as fh:
                fh.write(name)
            stamp = 1_700_000_000 + (len(names) - i if mtimes_reversed else i) * 1000
            os.utime(path, (stamp, stamp))

    def run_script(self, *args):
        return subprocess.run([SCRIPT, *args], capture_output=True, text=True, timeout=20)

    def left(self):
        return sorted(os.listdir(self.dir))

    def test_executable(self):
        self.assertTrue(os.stat(SCRIPT).st_mode & stat.S_IXUSR, "rotate.sh must be executable")

    def test_keeps_newest_by_name_date(self):
        backups = ["backup-20251231.tar.gz", "backup-20260105.tar.gz", "backup-20260102.tar.gz",
                   "backup-20260110.tar.gz", "backup-20240229.tar.gz"]
        self.make(backups + OTHERS, mtimes_reversed=True)
        run = self.run_script(self.dir, "2")
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(run.stdout.split("\n")[:-1],
                         ["backup-20240229.tar.gz", "backup-20251231.tar.gz", "backup-20260102.tar.gz"])
        self.assertEqual(self.left(), sorted(["backup-20260105.tar.gz", "backup-20260110.tar.gz"] + OTHERS))

    def test_keep_more_than_present(self):
        self.make(["backup-20260101.tar.gz", "backup-20260102.tar.gz"] + OTHERS)
        run = self.run_script(self.dir, "5")
        self.assertEqual((run.returncode, run.stdout), (0, ""))
        self.assertEqual(len(self.left()), 2 + len(OTHERS))

    def test_keep_zero(self):
        self.make(["backup-20260101.tar.gz", "backup-20260102.tar.gz"] + OTHERS)
        run = self.run_script(self.dir, "0")
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(run.stdout, "backup-20260101.tar.gz\nbackup-20260102.tar.gz\n")
        self.assertEqual(self.left(), sorted(OTHERS))

    def test_folders_never_touched(self):
        os.mkdir(os.path.join(self.dir, "backup-20000101.tar.gz"))
        self.make(["backup-20260101.tar.gz"])
        run = self.run_script(self.dir, "0")
        self.assertEqual(run.stdout, "backup-20260101.tar.gz\n")
        self.assertEqual(self.left(), ["backup-20000101.tar.gz"])

    def test_usage_errors(self):
        self.make(["backup-20260101.tar.gz", "backup-20260102.tar.gz"])
        for args in ([], [self.dir], [self.dir, "-1"], [self.dir, "two"], [self.dir, "1", "x"],
                     [os.path.join(self.dir, "missing"), "1"], [self.dir, "1.5"]):
            with self.subTest(args=" ".join(args).replace(self.dir, "DIR")):
                run = self.run_script(*args)
                self.assertEqual(run.returncode, 2)
                self.assertTrue(run.stderr.strip(), "usage message on stderr")
                self.assertEqual(len(self.left()), 2, "nothing deleted")


if __name__ == "__main__":
    gymfleet_testlib.main()
