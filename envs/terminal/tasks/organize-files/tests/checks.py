import os
import sys
import unittest

TEST_DIR = os.environ["GYMFLEET_TEST_DIR"]
sys.path.insert(0, TEST_DIR)
import gymfleet_testlib  # noqa: E402

EXPECTED = {
    "sorted/jpg/holiday.JPG": "holiday.JPG",
    "sorted/jpg/cat.jpg": "cat.jpg",
    "sorted/png/diagram.png": "diagram.png",
    "sorted/txt/notes.txt": "notes.txt",
    "sorted/txt/todo.TXT": "todo.TXT",
    "sorted/pdf/report.pdf": "report.pdf",
    "sorted/other/Makefile": "Makefile",
    "sorted/gz/archive.tar.gz": "archive.tar.gz",
    "sorted/mp3/my song.mp3": "my song.mp3",
}


class Checks(unittest.TestCase):
    def test_files_moved_with_content(self):
        for path, name in EXPECTED.items():
            with self.subTest(path=path):
                self.assertTrue(os.path.isfile(path), path + " is missing")
                with open(path) as fh:
                    self.assertEqual(fh.read(), "content of %s\n" % name)

    def test_nothing_else_in_sorted(self):
        found = set()
        for root, _dirs, files in os.walk("sorted"):
            found.update(os.path.join(root, f) for f in files)
        self.assertEqual(found, set(EXPECTED))

    def test_inbox_empty(self):
        self.assertTrue(os.path.isdir("inbox"), "inbox/ must still exist")
        self.assertEqual(os.listdir("inbox"), [])


if __name__ == "__main__":
    gymfleet_testlib.main()
