import os
import subprocess
import sys
import unittest

TEST_DIR = os.environ["GYMFLEET_TEST_DIR"]
sys.path.insert(0, TEST_DIR)
import gymfleet_testlib  # noqa: E402

EXPECTED_CONFIG = (
    "[server]\nhost = 0.0.0.0\nport = 8080\ntimeout = 30\nretries = 5\n\n[log]\nlevel = debug\n"
)


def git(*args):
    out = subprocess.run(["git", "-C", "repo", *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise AssertionError("git %s failed: %s" % (" ".join(args), out.stderr))
    return out.stdout


class Checks(unittest.TestCase):
    def test_merge_commit_parents(self):
        parents = git("log", "-1", "--format=%P", "main").split()
        self.assertEqual(len(parents), 2, "main's tip must be a merge commit")
        first = git("log", "-1", "--format=%s", parents[0]).strip()
        self.assertEqual(first, "Raise timeout, log more")
        self.assertEqual(parents[1], git("rev-parse", "feature").strip())

    def test_branches_history_unchanged(self):
        self.assertEqual(git("log", "--format=%s", "feature").splitlines(),
                         ["Retry failed requests", "Initial config"])
        self.assertEqual(git("log", "--first-parent", "--format=%s", "main").splitlines()[1:],
                         ["Raise timeout, log more", "Initial config"])

    def test_config_resolved(self):
        self.assertEqual(git("show", "main:config.ini"), EXPECTED_CONFIG)

    def test_feature_file_kept(self):
        self.assertIn("def retry(fn, n):", git("show", "main:retry.py"))
        self.assertEqual(git("show", "main:server.py"), 'def serve():\n    return "serving"\n')

    def test_clean_on_main(self):
        self.assertEqual(git("symbolic-ref", "--short", "HEAD").strip(), "main")
        self.assertEqual(git("status", "--porcelain"), "")


if __name__ == "__main__":
    gymfleet_testlib.main()
