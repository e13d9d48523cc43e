import os
import sys
import unittest

TEST_DIR = os.environ["GYMFLEET_TEST_DIR"]
sys.path.insert(0, TEST_DIR)
import gymfleet_testlib  # noqa: E402


def cmdlines():
    """Command lines of the processes the agent left running (the grader lists them, then stops
    them all before the tests run)."""
    return gymfleet_testlib.processes()


class Checks(unittest.TestCase):
    def test_noise_stopped_and_emptied(self):
        self.assertTrue(os.path.isfile("logs/noise.log"), "keep logs/noise.log")
        self.assertEqual(os.path.getsize("logs/noise.log"), 0)

    def test_noisy_process_gone(self):
        self.assertEqual([c for c in cmdlines() if "noisy.sh" in c], [])

    def test_keeper_still_beating(self):
        self.assertTrue([c for c in cmdlines() if "bin/keeper.sh" in c], "keeper.sh is not running")
        self.assertTrue(os.path.isfile("logs/heartbeat"), "logs/heartbeat is gone")


if __name__ == "__main__":
    gymfleet_testlib.main()
