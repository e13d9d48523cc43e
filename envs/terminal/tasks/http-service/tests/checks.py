import os
import signal
import subprocess
import sys
import time
import unittest
import urllib.error
import urllib.request

TEST_DIR = os.environ["GYMFLEET_TEST_DIR"]
sys.path.insert(0, TEST_DIR)
import gymfleet_testlib  # noqa: E402

BASE = "http://127.0.0.1:8765"
DEADLINE = 0.0  # set when the server starts: it gets 10 s in all to open its port
SERVER = None


def setUpModule():  # noqa: N802 - unittest's name
    """Starts the agent's server.py (every process the agent left was stopped by the grader)."""
    global DEADLINE, SERVER
    SERVER = subprocess.Popen([sys.executable, "server.py"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={"PATH": "/usr/local/bin:/usr/bin:/bin"}, start_new_session=True)
    DEADLINE = time.monotonic() + 10


def tearDownModule():  # noqa: N802
    try:
        os.killpg(SERVER.pid, signal.SIGKILL)
    except OSError:
        pass
    SERVER.wait()
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy


def get(path):
    """(status, body) of GET path; retries while the port is closed, until DEADLINE."""
    while True:
        try:
            with OPENER.open(BASE + path, timeout=5) as resp:
                return resp.status, resp.read().decode().strip()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode().strip()
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > DEADLINE:
                raise
            time.sleep(0.2)


class Checks(unittest.TestCase):
    def test_health(self):
        self.assertEqual(get("/health"), (200, "ok"))

    def test_add(self):
        self.assertEqual(get("/add?a=2&b=3"), (200, "5"))
        self.assertEqual(get("/add?a=-40&b=2"), (200, "-38"))
        self.assertEqual(get("/add?b=1000000&a=1"), (200, "1000001"))

    def test_add_bad_input(self):
        self.assertEqual(get("/add?a=2")[0], 400)
        self.assertEqual(get("/add?a=x&b=1")[0], 400)

    def test_not_found(self):
        self.assertEqual(get("/nope")[0], 404)


if __name__ == "__main__":
    gymfleet_testlib.main()
