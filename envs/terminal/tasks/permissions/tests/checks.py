import os
import stat
import sys
import unittest

TEST_DIR = os.environ["GYMFLEET_TEST_DIR"]
sys.path.insert(0, TEST_DIR)
import gymfleet_testlib  # noqa: E402


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


class Checks(unittest.TestCase):
    def test_run_sh(self):
        self.assertEqual(oct(mode("deploy/run.sh")), oct(0o750))

    def test_run_sh_still_runs(self):
        with open("deploy/run.sh") as fh:
            self.assertEqual(fh.read(), "#!/bin/sh\necho deploying\n")

    def test_secret_key(self):
        self.assertEqual(oct(mode("deploy/secret.key")), oct(0o600))
        with open("deploy/secret.key") as fh:
            self.assertEqual(fh.read(), "sk-test-0000\n")

    def test_public_tree(self):
        expected = {
            "deploy/public": 0o755,
            "deploy/public/css": 0o755,
            "deploy/public/index.html": 0o644,
            "deploy/public/css/site.css": 0o644,
        }
        for path, want in expected.items():
            with self.subTest(path=path):
                self.assertFalse(os.path.islink(path))
                self.assertEqual(oct(mode(path)), oct(want))

    def test_logs_sticky(self):
        self.assertTrue(os.path.isdir("deploy/logs"))
        self.assertEqual(oct(mode("deploy/logs")), oct(0o1777))


if __name__ == "__main__":
    gymfleet_testlib.main()
