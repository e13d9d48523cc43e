cat > server.py <<'PY'
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


class Handler(BaseHTTPRequestHandler):
    def reply(self, status, body):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        url = urlparse(self.path)
        if url.path == "/health":
            return self.reply(200, "ok")
        if url.path == "/add":
            query = parse_qs(url.query)
            try:
                return self.reply(200, str(int(query["a"][0]) + int(query["b"][0])))
            except (KeyError, ValueError):
                return self.reply(400, "bad request")
        return self.reply(404, "not found")


ThreadingHTTPServer(("127.0.0.1", 8765), Handler).serve_forever()
PY
nohup python3 server.py > server.log 2>&1 &
python3 - <<'PY'
import socket
import time

for _ in range(50):
    try:
        socket.create_connection(("127.0.0.1", 8765), timeout=1).close()
        print("server is up")
        break
    except OSError:
        time.sleep(0.1)
PY
