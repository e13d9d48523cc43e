import os
import sys
import unittest

sys.path.insert(0, os.environ["GYMFLEET_TEST_DIR"])
import gymfleet_testlib  # noqa: E402


def read(path):
    with open(path) as fh:
        return fh.read()


class Checks(unittest.TestCase):
    def test_executable(self):
        self.assertTrue(os.access('harbor.sh', os.X_OK))
        self.assertEqual(read('harbor.sh'), 'echo harbor\n')


if __name__ == "__main__":
    gymfleet_testlib.main()
