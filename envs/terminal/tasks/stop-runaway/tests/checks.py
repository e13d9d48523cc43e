import os
import sys
import time
import unittest

TEST_DIR = os.environ["GYMFLEET_TEST_DIR"]
sys.path.insert(0, TEST_DIR)
import gymfleet_testlib  # noqa: E402


def cmdlines():
    """Command lines of every live process in the sandbox."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as fh:
                found.append(fh.read().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            pass
    return found


class Checks(unittest.TestCase):
    def test_noise_stopped_and_emptied(self):
        self.assertTrue(os.path.isfile("logs/noise.log"), "keep logs/noise.log")
        time.sleep(0.5)
        self.assertEqual(os.path.getsize("logs/noise.log"), 0)

    def test_noisy_process_gone(self):
        self.assertEqual([c for c in cmdlines() if "noisy.sh" in c], [])

    def test_keeper_still_beating(self):
        self.assertTrue([c for c in cmdlines() if "bin/keeper.sh" in c], "keeper.sh is not running")
        with open("logs/heartbeat") as fh:
            first = fh.read()
        time.sleep(0.6)
        with open("logs/heartbeat") as fh:
            self.assertNotEqual(fh.read(), first, "the heartbeat stopped")


if __name__ == "__main__":
    gymfleet_testlib.main()
