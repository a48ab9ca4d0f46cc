#!/usr/bin/env python3
"""Deny-webhook receiver for tests/netns/test_deny_webhook.sh.

Usage: webhook_recv.py ADDR PORT DIR

Appends one JSON line per POST to DIR/events.jsonl: {"path", "headers",
"body"} (body decoded from JSON; {"raw": ...} when it is not JSON). Its
answer is set by the file DIR/mode, read at each request:
  ok      200 (the default)
  fail1   503 to the first request of each body, 200 to its retry
  hold    accept and never answer
  slow    200 after half a second
Writes DIR/ready once listening. Every connection's peer goes to DIR/peers.
"""
import json
import os
import socketserver
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

ADDR, PORT, DIR = sys.argv[1], int(sys.argv[2]), sys.argv[3]
LOCK = threading.Lock()
SEEN = {}


def mode():
    try:
        with open(os.path.join(DIR, "mode")) as f:
            return f.read().strip() or "ok"
    except OSError:
        return "ok"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(min(n, 1 << 16))
        try:
            body = json.loads(raw)
        except ValueError:
            body = {"raw": raw.decode("latin-1")}
        rec = {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
               "body": body}
        m = mode()
        with LOCK:
            with open(os.path.join(DIR, "events.jsonl"), "a") as f:
                f.write(json.dumps(rec) + "\n")
            SEEN[raw] = SEEN.get(raw, 0) + 1
            first = SEEN[raw] == 1
        if m == "hold":
            time.sleep(30)
            return
        if m == "slow":
            time.sleep(0.5)
        code = 503 if m == "fail1" and first else 200
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.send_header("Connection", "close")
        self.end_headers()


class Server(socketserver.ThreadingMixIn, HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def verify_request(self, request, client_address):
        with LOCK, open(os.path.join(DIR, "peers"), "a") as f:
            f.write(client_address[0] + "\n")
        return True


srv = Server((ADDR, PORT), Handler)
with open(os.path.join(DIR, "ready"), "w") as f:
    f.write("ready\n")
srv.serve_forever()
