#!/usr/bin/python3
"""x_resp_pipe.py [--conns N] [--tls|--plain] [--port P] [--header H:V] HOST REQ...

A pipelining HTTP/1.1 client for the response-side exfil cases (catalogue
EX-175, EX-176): on each of N connections (in parallel) it writes every REQ
(`PATH` for a GET, or `METHOD:PATH`) in ONE write, then reads the responses
strictly by RFC 9112 framing (no body for HEAD, 1xx, 204 and 304), and prints
one line per response (then one `c<conn> r<k> H name: value` line per X-
header of it):

  c<conn> r<k> want=<path> status=<code> got=<"path" field of a JSON body or -> body=<first 80 bytes>

A response that cannot be parsed prints `c<conn> r<k> BAD <bytes>`; a short
read prints `c<conn> r<k> EOF`. Bytes after the last expected response
(within 1 s) print `c<conn> EXTRA <bytes>`. Bounded: 10 s per read, 64
requests, 64 connections. Runs as the workload: it trusts $TRUST.
"""
import argparse
import json
import os
import socket
import ssl
import sys
import threading

LOCK = threading.Lock()


def out(line):
    with LOCK:
        print(line, flush=True)


class Reader:
    def __init__(self, s):
        self.s, self.buf = s, b""

    def fill(self):
        c = self.s.recv(65536)
        if not c:
            raise EOFError
        self.buf += c

    def line(self):
        while b"\r\n" not in self.buf:
            if len(self.buf) > 65536:
                raise ValueError("line too long")
            self.fill()
        ln, self.buf = self.buf.split(b"\r\n", 1)
        return ln

    def exact(self, n):
        while len(self.buf) < n:
            self.fill()
        b, self.buf = self.buf[:n], self.buf[n:]
        return b


def read_response(r, method):
    st = r.line()
    parts = st.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise ValueError(st + r.buf[:80])
    code = int(parts[1])
    hdrs = {}
    while True:
        ln = r.line()
        if not ln:
            break
        k, _, v = ln.partition(b":")
        hdrs[k.strip().lower()] = v.strip()
    if code < 200:
        return read_response(r, method)
    body = b""
    if method != "HEAD" and code not in (204, 304):
        if b"chunked" in hdrs.get(b"transfer-encoding", b"").lower():
            while True:
                n = int(r.line().split(b";")[0], 16)
                if n == 0:
                    while r.line():
                        pass
                    break
                body += r.exact(n)
                r.exact(2)
        elif b"content-length" in hdrs:
            body = r.exact(int(hdrs[b"content-length"]))
        else:
            try:
                while True:
                    r.fill()
            except EOFError:
                pass
            body, r.buf = r.buf, b""
    return code, hdrs, body


def one(cid, args):
    raw = socket.create_connection((args.host, args.port), timeout=10)
    if args.tls:
        ctx = ssl.create_default_context(cafile=os.environ["TRUST"])
        ctx.set_alpn_protocols(["http/1.1"])
        s = ctx.wrap_socket(raw, server_hostname=args.host)
    else:
        s = raw
    s.settimeout(10)
    reqs = []
    wire = b""
    for q in args.req[:64]:
        m, _, p = q.rpartition(":") if q.split(":", 1)[0].isupper() else ("", "", q)
        m = m or "GET"
        reqs.append((m, p))
        extra = "".join("%s\r\n" % h for h in args.header)
        wire += ("%s %s HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (m, p, args.host, extra)).encode()
    s.sendall(wire)
    r = Reader(s)
    for k, (m, p) in enumerate(reqs):
        try:
            code, hdrs, body = read_response(r, m)
        except EOFError:
            out("c%d r%d EOF" % (cid, k))
            return
        except ValueError as e:
            out("c%d r%d BAD %r" % (cid, k, bytes(str(e), "latin-1")[:120]))
            return
        got = "-"
        try:
            got = json.loads(body).get("path", "-")
        except (ValueError, AttributeError):
            pass
        out("c%d r%d want=%s status=%d got=%s body=%r" % (cid, k, p, code, got, body[:80]))
        for hk, hv in hdrs.items():
            if hk.startswith(b"x-"):
                out("c%d r%d H %s: %s" % (cid, k, hk.decode("latin-1"), hv.decode("latin-1")))
    s.settimeout(1)
    try:
        r.fill()
        out("c%d EXTRA %r" % (cid, r.buf[:120]))
    except (EOFError, OSError, ssl.SSLError):
        pass
    s.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conns", type=int, default=1)
    ap.add_argument("--plain", dest="tls", action="store_false", default=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--header", action="append", default=[])
    ap.add_argument("host")
    ap.add_argument("req", nargs="+")
    args = ap.parse_args()
    args.port = args.port or (443 if args.tls else 80)
    ts = []
    for c in range(min(args.conns, 64)):
        t = threading.Thread(target=lambda c=c: one_safe(c, args))
        t.start()
        ts.append(t)
    for t in ts:
        t.join(30)
    return 0


def one_safe(c, args):
    try:
        one(c, args)
    except (OSError, ssl.SSLError) as e:
        out("c%d ERR %s" % (c, e))


if __name__ == "__main__":
    sys.exit(main())
