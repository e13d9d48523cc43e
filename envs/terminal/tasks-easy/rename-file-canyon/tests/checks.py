import os
import sys
import unittest

sys.path.insert(0, os.environ["GYMFLEET_TEST_DIR"])
import gymfleet_testlib  # noqa: E402


def read(path):
    with open(path) as fh:
        return fh.read()


class Checks(unittest.TestCase):
    def test_renamed(self):
        self.assertEqual(read('done.txt'), 'canyon notes\n')
        self.assertFalse(os.path.exists('canyon.txt'))


if __name__ == "__main__":
    gymfleet_testlib.main()
