import os
import sqlite3
import sys
import unittest

TEST_DIR = os.environ["GYMFLEET_TEST_DIR"]
sys.path.insert(0, TEST_DIR)
import gymfleet_testlib  # noqa: E402

EXPECTED = {("Alice", 2, 25.0), ("Bob", 1, 42.5), ("Chen", 3, 60.6), ("Eve", 2, 0.67)}
ORDERS = [
    (1, 1, 19.99, "paid"), (2, 1, 5.01, "paid"), (3, 1, 100.0, "refunded"),
    (4, 2, 42.5, "paid"), (5, 2, 7.25, "pending"),
    (6, 3, 10.1, "paid"), (7, 3, 20.2, "paid"), (8, 3, 30.3, "paid"),
    (9, 4, 99.0, "pending"), (10, 4, 1.0, "refunded"),
    (11, 5, 0.333, "paid"), (12, 5, 0.333, "paid"),
]


def connect():
    if not os.path.isfile("shop.db"):
        raise AssertionError("shop.db is missing")
    return sqlite3.connect("file:shop.db?mode=ro", uri=True)


class Checks(unittest.TestCase):
    def test_is_a_view(self):
        with connect() as db:
            kind = db.execute("SELECT type FROM sqlite_master WHERE name = 'customer_totals'").fetchone()
        self.assertEqual(kind, ("view",))

    def test_columns(self):
        with connect() as db:
            cursor = db.execute("SELECT * FROM customer_totals")
            self.assertEqual([d[0] for d in cursor.description], ["name", "n_orders", "total"])

    def test_rows(self):
        with connect() as db:
            rows = db.execute("SELECT name, n_orders, total FROM customer_totals").fetchall()
        self.assertEqual(len(rows), len(EXPECTED))
        self.assertEqual({(n, c, round(t, 2)) for n, c, t in rows}, EXPECTED)

    def test_data_unchanged(self):
        with connect() as db:
            orders = db.execute("SELECT id, customer_id, amount, status FROM orders ORDER BY id").fetchall()
            customers = db.execute("SELECT id, name FROM customers ORDER BY id").fetchall()
        self.assertEqual(orders, ORDERS)
        self.assertEqual(customers, [(1, "Alice"), (2, "Bob"), (3, "Chen"), (4, "Dara"), (5, "Eve")])


if __name__ == "__main__":
    gymfleet_testlib.main()
