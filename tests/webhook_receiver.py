#!/usr/bin/env python3
"""A webhook receiver for the tests, written apart from the daemon (Python's own hmac):
verifies `Livepack-Signature` over the raw body, fails some answers on purpose, and appends
each event it accepts to a JSON-lines file.

usage: webhook_receiver.py PORT SECRET_FILE OUT_FILE [--fail-first N] [--fail-every K]
  PORT          0 picks one; the port is printed on stdout's first line
  SECRET_FILE   read at every request (the test writes it once the webhook exists)
  --fail-first  answer 503 to the first N requests
  --fail-every  answer 500 to the first attempt of every event whose id is a multiple of K
  --no-fsync    do not fsync each line (benchmarks: the receiver is not the thing measured)
"""

import hashlib
import hmac
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOLERANCE_SECS = 300

args = sys.argv[1:]
port, secret_file, out_file = int(args[0]), args[1], args[2]
fail_first = int(args[args.index("--fail-first") + 1]) if "--fail-first" in args else 0
fail_every = int(args[args.index("--fail-every") + 1]) if "--fail-every" in args else 0
fsync = "--no-fsync" not in args
requests = 0
seen_attempts = set()
lock = threading.Lock()


def verified(header, body):
    try:
        with open(secret_file) as f:
            secret = f.read().strip()
    except OSError:
        return False
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    if "t" not in parts or "v1" not in parts:
        return False
    if abs(time.time() - int(parts["t"])) > TOLERANCE_SECS:
        return False
    signed = parts["t"].encode() + b"." + body
    expected = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, parts["v1"])


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with lock:
            self.handle_event(body)

    def handle_event(self, body):
        global requests
        requests += 1
        if not verified(self.headers.get("Livepack-Signature", ""), body):
            self.answer(401, {"kind": "bad_signature", "body": body.decode(errors="replace")})
            return
        event = json.loads(body)
        if requests <= fail_first:
            self.answer(503, {"kind": "failed_on_purpose", "id": event["id"]})
            return
        if fail_every and event["id"] % fail_every == 0 and event["id"] not in seen_attempts:
            seen_attempts.add(event["id"])
            self.answer(500, {"kind": "failed_on_purpose", "id": event["id"]})
            return
        event["_attempt"] = int(self.headers.get("Livepack-Delivery-Attempt", "0"))
        event["_received_at"] = time.time()
        self.answer(200, {"kind": "accepted", "event": event})

    def answer(self, status, record):
        # Written before the answer: an event the daemon saw accepted is on disk.
        with open(out_file, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_):
        pass


class Server(ThreadingHTTPServer):
    # The default backlog of 5 drops the connects of a daemon delivering 32 at once (each then
    # waits a second for SYN to be sent again): a real receiver's backlog is far larger.
    request_queue_size = 256
    daemon_threads = True


server = Server(("127.0.0.1", port), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
