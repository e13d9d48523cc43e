import importlib.util
import os
import sys
import unittest

TEST_DIR = os.environ["GYMFLEET_TEST_DIR"]
sys.path.insert(0, TEST_DIR)
import gymfleet_testlib  # noqa: E402


def load_stats():
    spec = importlib.util.spec_from_file_location("task_stats", os.path.abspath("stats.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Checks(unittest.TestCase):
    def setUp(self):
        self.stats = load_stats()

    def test_odd_unsorted(self):
        self.assertEqual(self.stats.median([3, 1, 2]), 2)
        self.assertEqual(self.stats.median([9, -4, 7, 1, 0]), 1)

    def test_even(self):
        self.assertEqual(self.stats.median([1, 2, 3, 4]), 2.5)
        self.assertEqual(self.stats.median([10, 2, 8, 4]), 6)
        self.assertEqual(self.stats.median([1.5, 0.5]), 1.0)

    def test_single(self):
        self.assertEqual(self.stats.median([42]), 42)

    def test_tuple_and_generator(self):
        self.assertEqual(self.stats.median((5, 1, 3)), 3)
        self.assertEqual(self.stats.median(x for x in [4, 1, 3, 2]), 2.5)

    def test_empty_raises(self):
        with self.assertRaises(ValueError):
            self.stats.median([])

    def test_input_not_modified(self):
        data = [3, 1, 2]
        self.stats.median(data)
        self.assertEqual(data, [3, 1, 2])

    def test_mean_and_mode_unchanged(self):
        self.assertEqual(self.stats.mean([1, 2, 3, 4]), 2.5)
        self.assertEqual(self.stats.mode([3, 1, 3, 1, 2]), 1)
        with self.assertRaises(ValueError):
            self.stats.mode([])


if __name__ == "__main__":
    gymfleet_testlib.main()
