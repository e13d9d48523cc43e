import os
import sys
import unittest

TEST_DIR = os.environ["GYMFLEET_TEST_DIR"]
sys.path.insert(0, TEST_DIR)
import gymfleet_testlib  # noqa: E402


class Checks(unittest.TestCase):
    def test_top10_exists(self):
        self.assertTrue(os.path.isfile("top10.txt"), "top10.txt is missing")

    def test_top10_content(self):
        with open(os.path.join(TEST_DIR, "expected.txt")) as fh:
            expected = fh.read().split("\n")
        with open("top10.txt") as fh:
            got = fh.read().split("\n")
        self.assertEqual([l.strip() for l in got if l.strip()], [l for l in expected if l])


if __name__ == "__main__":
    gymfleet_testlib.main()
