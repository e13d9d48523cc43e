import os
import subprocess
import sys
import unittest

TEST_DIR = os.environ["GYMFLEET_TEST_DIR"]
sys.path.insert(0, TEST_DIR)
import gymfleet_testlib  # noqa: E402

MAIN_SUBJECTS = ["Add app", "Initial commit"]


def git(*args):
    out = subprocess.run(["git", "-C", "repo", *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise AssertionError("git %s failed: %s" % (" ".join(args), out.stderr))
    return out.stdout.strip()


class Checks(unittest.TestCase):
    def test_main_unchanged(self):
        self.assertEqual(git("log", "--format=%s", "main").splitlines(), MAIN_SUBJECTS)
        self.assertEqual(git("ls-tree", "--name-only", "main").splitlines(), ["README.md", "app.py"])

    def test_branch_commit(self):
        self.assertEqual(git("log", "-1", "--format=%s", "feature/greeting"), "Add greeting")
        self.assertEqual(git("rev-parse", "feature/greeting~1"), git("rev-parse", "main"))

    def test_greeting_content(self):
        self.assertEqual(git("show", "feature/greeting:greeting.txt") + "\n", "hello, world\n")
        raw = subprocess.run(["git", "-C", "repo", "cat-file", "blob", "feature/greeting:greeting.txt"],
                             capture_output=True).stdout
        self.assertEqual(raw, b"hello, world\n")

    def test_checked_out_and_clean(self):
        self.assertEqual(git("symbolic-ref", "--short", "HEAD"), "feature/greeting")
        self.assertEqual(git("status", "--porcelain"), "")


if __name__ == "__main__":
    gymfleet_testlib.main()
