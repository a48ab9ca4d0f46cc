#!/usr/bin/env python3
"""The workload of test_fd_budget.sh: N keep-alive TLS connections to
api.allowed.test (terminated, credential bound), a GET /who on each, held
open; ready is written to STATE/state and the client waits (bounded) for
STATE/go; then a second GET on each, then M more connections, each asked
once. Prints "round1 ok=K", "round2 ok=K", "extra answered=K refused=R"
(refused: closed or reset before an answer). Bounded in count and time.
usage: fdbudget_client.py CAFILE STATEDIR N M"""
import os
import socket
import ssl
import sys
import time

CA, ST, N, M = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
REQ = b"GET /who HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n"


def ctx():
    c = ssl.create_default_context(cafile=CA)
    c.set_alpn_protocols(["http/1.1"])
    return c


def connect(c):
    # By name: an address is reachable once DNS answered for it.
    raw = socket.create_connection(("api.allowed.test", 443), timeout=5)
    try:
        return c.wrap_socket(raw, server_hostname="api.allowed.test")
    except (OSError, ssl.SSLError):
        raw.close()
        raise


def ask(s):
    """One GET: True when a 200 with the credential came back."""
    s.sendall(REQ)
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        if not d:
            return False
        buf += d
    head, body = buf.split(b"\r\n\r\n", 1)
    n = 0
    for ln in head.split(b"\r\n")[1:]:
        k, _, v = ln.partition(b":")
        if k.strip().lower() == b"content-length":
            n = int(v)
    while len(body) < n:
        d = s.recv(65536)
        if not d:
            return False
        body += d
    return head.startswith(b"HTTP/1.1 200") and b"auth=ok" in body


def step(state, then):
    """Say STATE, then wait (at most 30 s) for the test's file THEN."""
    with open(os.path.join(ST, "state"), "w") as f:
        f.write(state + "\n")
    end = time.time() + 30
    while time.time() < end and not os.path.exists(os.path.join(ST, then)):
        time.sleep(0.1)


def main():
    c = ctx()
    held, ok = [], 0
    for _ in range(N):
        try:
            s = connect(c)
            if ask(s):
                ok += 1
            held.append(s)
        except (OSError, ssl.SSLError):
            pass
    print("round1 ok=%d of %d" % (ok, N), flush=True)
    step("ready", "go")
    ok = 0
    for s in held:
        try:
            if ask(s):
                ok += 1
        except (OSError, ssl.SSLError):
            pass
    print("round2 ok=%d of %d" % (ok, len(held)), flush=True)
    answered = refused = 0
    extra = []
    for _ in range(M):
        try:
            s = connect(c)
            extra.append(s)
            if ask(s):
                answered += 1
            else:
                refused += 1
        except (OSError, ssl.SSLError):
            refused += 1
    print("extra answered=%d refused=%d" % (answered, refused), flush=True)
    step("done", "end")
    for s in held + extra:
        s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
