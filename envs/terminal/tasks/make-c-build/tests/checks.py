import glob
import hashlib
import json
import os
import subprocess
import sys
import unittest

TEST_DIR = os.environ["GYMFLEET_TEST_DIR"]
sys.path.insert(0, TEST_DIR)
import gymfleet_testlib  # noqa: E402


def make(*args):
    return subprocess.run(["make", *args], capture_output=True, text=True, timeout=60)


class Checks(unittest.TestCase):
    def test_sources_unchanged(self):
        with open(os.path.join(TEST_DIR, "sources.json")) as fh:
            expected = json.load(fh)
        for path, digest in expected.items():
            with open(path, "rb") as fh:
                self.assertEqual(hashlib.sha256(fh.read()).hexdigest(), digest, path + " was changed")
        self.assertEqual(sorted(glob.glob("src/*.c")), ["src/main.c", "src/mathx.c"])

    def test_clean_then_build_and_run(self):
        self.assertEqual(make("clean").returncode, 0, "make clean failed")
        self.assertFalse(os.path.exists("calc"), "make clean must remove calc")
        self.assertEqual(glob.glob("src/*.o") + glob.glob("*.o"), [], "make clean must remove objects")
        built = make()
        self.assertEqual(built.returncode, 0, "make failed: " + built.stderr[-1000:])
        for args, want in ((["3", "4"], "7 12\n"), (["-2", "10"], "8 -20\n")):
            run = subprocess.run(["./calc", *args], capture_output=True, text=True, timeout=10)
            self.assertEqual(run.stdout, want)

    def test_rebuild_after_source_touch(self):
        self.assertEqual(make().returncode, 0)
        os.utime("src/mathx.c")
        rebuilt = make()
        self.assertEqual(rebuilt.returncode, 0)
        self.assertIn("mathx", rebuilt.stdout, "touching src/mathx.c must rebuild it")


if __name__ == "__main__":
    gymfleet_testlib.main()
