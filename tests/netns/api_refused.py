#!/usr/bin/python3
"""Requests that libevent's HTTP layer refuses before the API's dispatch.

  api_refused.py SRC SCENARIO TOKEN BODYTEXT

Sends one scenario to 127.0.0.1:18080 from the local address SRC and prints
the status codes the client read (space separated; a reset can hide the
answer to a request whose body is still being sent). TOKEN is sent in
OPENSANDBOX-EGRESS-AUTH unless it is "-"; BODYTEXT fills every body.

  cl METHOD PATH       head with Content-Length: 1 MiB + 1, no body
  chunked METHOD PATH  chunked body, 64 KiB chunks, past 1 MiB
  expect METHOD PATH   Expect: 100-continue, chunked: the body past 1 MiB
                       follows the 100 Continue
  expect-other METHOD PATH  Expect: x-unknown, Content-Length: 5
  bighead METHOD PATH  head with a 40 000-byte field (over 16 KiB)
  bigline              a request line of 40 000 bytes, never ended
  keepalive            POST /policy (valid), then cl PUT /policy, one connection
  pipelined            the same two requests in one write
  pipelined-get        GET /policy, then cl PUT /policy, in one write
  abandon METHOD PATH  Content-Length: 100, 10 bytes of body, then close
  hold                 keep four connections open (idle, inside a head,
                       inside a body, after an answer), print "held", wait
                       until killed
"""
import re
import signal
import socket
import sys

LIMIT = 1 << 20
src, scen, tok, text = sys.argv[1:5]
args = sys.argv[5:]
POLICY = b'{"defaultAction":"deny","egress":[{"action":"allow","target":"api.example.com"}]}'


def conn():
    return socket.create_connection(("127.0.0.1", 18080), timeout=10, source_address=(src, 0))


def head(method, path, extra=()):
    h = "%s %s HTTP/1.1\r\nHost: 127.0.0.1:18080\r\n" % (method, path)
    if tok != "-":
        h += "OPENSANDBOX-EGRESS-AUTH: %s\r\n" % tok
    for e in extra:
        h += e + "\r\n"
    return (h + "\r\n").encode()


def body(n):
    t = text.encode()
    return (t * (n // len(t) + 1))[:n]


def send(s, *parts):
    try:
        for p in parts:
            s.sendall(p)
    except OSError:
        pass


def read_all(s):
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except OSError:
        pass
    s.close()
    return out


def read_one(s):
    """One whole response (Content-Length framed)."""
    out = b""
    while b"\r\n\r\n" not in out:
        b = s.recv(65536)
        if not b:
            return out
        out += b
    h, rest = out.split(b"\r\n\r\n", 1)
    m = re.search(rb"(?i)\r\ncontent-length: *(\d+)", h)
    n = int(m.group(1)) if m else 0
    while len(rest) < n:
        b = s.recv(65536)
        if not b:
            break
        rest += b
    return out


def codes(out):
    return [x.decode() for x in re.findall(rb"HTTP/1\.[01] (\d{3}) ", out)]


valid = head("POST", "/policy", ["Content-Type: application/json", "Content-Length: %d" % len(POLICY)]) + POLICY
big_cl = head("PUT", "/policy", ["Content-Length: %d" % (LIMIT + 1)])
s = conn()
if scen == "cl":
    send(s, head(args[0], args[1], ["Content-Length: %d" % (LIMIT + 1)]))
    out = read_all(s)
elif scen == "chunked":
    send(s, head(args[0], args[1], ["Transfer-Encoding: chunked"]))
    chunk = body(65536)
    send(s, *[b"10000\r\n" + chunk + b"\r\n" for _ in range(LIMIT // 65536 + 2)], b"0\r\n\r\n")
    out = read_all(s)
elif scen == "expect":
    send(s, head(args[0], args[1], ["Expect: 100-continue", "Transfer-Encoding: chunked"]))
    out = b""
    while b"\r\n\r\n" not in out:
        b = s.recv(65536)
        if not b:
            break
        out += b
    chunk = body(65536)
    send(s, *[b"10000\r\n" + chunk + b"\r\n" for _ in range(LIMIT // 65536 + 2)], b"0\r\n\r\n")
    out += read_all(s)
elif scen == "expect-other":
    send(s, head(args[0], args[1], ["Expect: x-unknown", "Content-Length: 5"]), body(5))
    out = read_all(s)
elif scen == "bighead":
    send(s, head(args[0], args[1], ["X-Pad: " + "a" * 40000]))
    out = read_all(s)
elif scen == "bigline":
    send(s, b"POST /" + b"a" * 40000)
    out = read_all(s)
elif scen == "keepalive":
    send(s, valid)
    out = read_one(s)
    send(s, big_cl)
    out += read_all(s)
elif scen == "pipelined":
    send(s, valid + big_cl)
    out = read_all(s)
elif scen == "pipelined-get":
    send(s, head("GET", "/policy") + big_cl)
    out = read_all(s)
elif scen == "hold":
    idle, inhead, inbody, kept = s, conn(), conn(), conn()
    send(inhead, b"PUT /policy HTTP/1.1\r\nHost: 127.0.0.1\r\nOPENSANDBOX-EGRESS-AUTH: ")
    send(inbody, head("PUT", "/policy", ["Content-Length: 100"]), body(10))
    send(kept, head("GET", "/policy"))
    read_one(kept)
    print("held", flush=True)
    signal.pause()
elif scen == "abandon":
    send(s, head(args[0], args[1], ["Content-Length: 100"]), body(10))
    s.close()
    out = b""
else:
    sys.exit("unknown scenario " + scen)
print(" ".join(codes(out)))
