# A small shop database.
set -e
sqlite3 shop.db <<'SQL'
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE orders (
  id INTEGER PRIMARY KEY,
  customer_id INTEGER NOT NULL REFERENCES customers(id),
  amount REAL NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('paid', 'refunded', 'pending'))
);
INSERT INTO customers VALUES (1, 'Alice'), (2, 'Bob'), (3, 'Chen'), (4, 'Dara'), (5, 'Eve');
INSERT INTO orders VALUES
  (1, 1, 19.99, 'paid'), (2, 1, 5.01, 'paid'), (3, 1, 100.00, 'refunded'),
  (4, 2, 42.50, 'paid'), (5, 2, 7.25, 'pending'),
  (6, 3, 10.10, 'paid'), (7, 3, 20.20, 'paid'), (8, 3, 30.30, 'paid'),
  (9, 4, 99.00, 'pending'), (10, 4, 1.00, 'refunded'),
  (11, 5, 0.333, 'paid'), (12, 5, 0.333, 'paid');
SQL
