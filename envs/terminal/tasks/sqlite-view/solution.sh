sqlite3 shop.db <<'SQL'
CREATE VIEW customer_totals AS
SELECT c.name AS name, COUNT(o.id) AS n_orders, ROUND(SUM(o.amount), 2) AS total
FROM customers c JOIN orders o ON o.customer_id = c.id
WHERE o.status = 'paid'
GROUP BY c.id, c.name;
SQL
sqlite3 -header shop.db 'SELECT * FROM customer_totals ORDER BY total DESC;'
