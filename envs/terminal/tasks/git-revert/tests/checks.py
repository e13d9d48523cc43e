import os
import subprocess
import sys
import unittest

TEST_DIR = os.environ["GYMFLEET_TEST_DIR"]
sys.path.insert(0, TEST_DIR)
import gymfleet_testlib  # noqa: E402

ORIGINAL = ["Add price calculator", "Add notes", "Speed up tax computation", "Document usage"]
GOOD_CALC = """TAX_RATE = 0.07


def total(net):
    return net * (1 + TAX_RATE)


if __name__ == "__main__":
    print("%.2f" % total(100))
"""


def git(*args):
    out = subprocess.run(["git", "-C", "repo", *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise AssertionError("git %s failed: %s" % (" ".join(args), out.stderr))
    return out.stdout


class Checks(unittest.TestCase):
    def test_history_kept(self):
        subjects = git("log", "--reverse", "--format=%s", "main").splitlines()
        self.assertEqual(subjects[:4], ORIGINAL)
        self.assertEqual(len(subjects), 5, "exactly one new commit on top of main")
        self.assertEqual(git("rev-list", "--min-parents=2", "main"), "", "no merge commits")

    def test_new_commit_reverts_the_bad_one(self):
        bad = git("log", "--format=%H", "--grep=^Speed up tax computation$", "main").split()
        self.assertEqual(len(bad), 1)
        self.assertEqual(git("diff", "main~1", "main", "--", "calc.py"),
                         git("diff", bad[0], bad[0] + "~1", "--", "calc.py"))
        self.assertEqual(git("diff", "--name-only", "main~1", "main").split(), ["calc.py"])

    def test_calc_fixed(self):
        self.assertEqual(git("show", "main:calc.py"), GOOD_CALC)
        with open(os.path.join("repo", "calc.py")) as fh:
            self.assertEqual(fh.read(), GOOD_CALC)

    def test_other_changes_kept(self):
        self.assertEqual(git("show", "main:docs/usage.md"), "# Usage\n\nRun `python3 calc.py`.\n")
        self.assertEqual(git("show", "main:NOTES.md"), "Prices include tax.\n")

    def test_clean_on_main(self):
        self.assertEqual(git("symbolic-ref", "--short", "HEAD").strip(), "main")
        self.assertEqual(git("status", "--porcelain"), "")


if __name__ == "__main__":
    gymfleet_testlib.main()
