#!/usr/bin/env python3
"""A publish authorization service for the tests: answers by the question's `query` —
containing `good` 204, `slow` 204 after 3 s, anything else 403 — and appends every question
(JSON) to a file.

usage: auth_service.py OUT_FILE   (the port is printed on stdout's first line)
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

out_file = sys.argv[1]
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        question = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        with lock, open(out_file, "a") as f:
            f.write(json.dumps(question) + "\n")
        query = question.get("query", "")
        if "slow" in query:
            time.sleep(3)
        status = 204 if ("good" in query or "slow" in query) else 403
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_):
        pass


class Server(ThreadingHTTPServer):
    request_queue_size = 64
    daemon_threads = True


server = Server(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
