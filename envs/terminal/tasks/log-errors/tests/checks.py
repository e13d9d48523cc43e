import os
import sys
import unittest

TEST_DIR = os.environ["GYMFLEET_TEST_DIR"]
sys.path.insert(0, TEST_DIR)
import gymfleet_testlib  # noqa: E402


def lines(path):
    with open(path) as fh:
        return [line.strip() for line in fh.read().splitlines() if line.strip()]


class Checks(unittest.TestCase):
    def test_header(self):
        self.assertEqual(lines("errors.csv")[0], "code,count")

    def test_rows(self):
        self.assertEqual(lines("errors.csv")[1:], lines(os.path.join(TEST_DIR, "expected.csv"))[1:])


if __name__ == "__main__":
    gymfleet_testlib.main()
