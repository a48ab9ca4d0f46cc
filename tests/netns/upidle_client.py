#!/usr/bin/env python3
"""The workload's side of test_upstream_idle.sh: N keep-alive HTTPS
connections, one request each (GET /who), one after the other; "ready"
in DIR/state; waits for DIR/go (bounded); then a second request on each,
in the order they were opened, after GET /big on the last (a MiB back:
"big: LINE COUNT") and a 300,000-byte POST on the one before ("upload: LINE").
Prints each answer as "i: BODY", then "ok"
or why not. With "bye" first: one connection, GET /bye (the upstream
closes after it), then GET /who on the same workload connection. With
"drop" or "droppost": GET /drop-next (the upstream drops the next request
unanswered), then GET /who, or POST /who with an empty body, on the same
workload connection; the status of the second is printed as "1: status S".
With "one HOST": one connection to HOST, GET /who, "0: BODY", closed.
With "close HOST": the same, the request saying "Connection: close";
then "close: said" when the answer said "Connection: close" too, and
"eof" when the connection then ended without another byte.
usage: upidle_client.py CA DIR N | upidle_client.py CA DIR bye|drop|droppost
       upidle_client.py CA DIR one|close HOST"""
import http.client
import os
import socket
import ssl
import sys
import time

ca, state = sys.argv[1], sys.argv[2]
ctx = ssl.create_default_context(cafile=ca)


def conn(host="api.allowed.test"):
    return http.client.HTTPSConnection(host, 443, context=ctx, timeout=10)


def get(c, path, method="GET", body=None):
    c.request(method, path, body=body if body is not None else (b"" if method == "POST" else None))
    r = c.getresponse()
    body = r.read().decode().strip()
    if r.status != 200:
        raise OSError("status %d" % r.status)
    return body


# The workload's socket is the same one throughout: http.client would
# reconnect on its own after a close, and hide what this test looks for.
def pinned(c):
    sock = c.sock
    def check():
        if c.sock is not sock:
            raise OSError("the workload connection was closed")
    return check


try:
    if sys.argv[3] == "bye":
        c = conn()
        print("0: " + get(c, "/bye"), flush=True)
        same = pinned(c)
        print("1: " + get(c, "/who"), flush=True)
        same()
        print("ok")
        sys.exit(0)
    if sys.argv[3] == "one":
        c = conn(sys.argv[4])
        print("0: " + get(c, "/who"), flush=True)
        c.close()
        print("ok")
        sys.exit(0)
    if sys.argv[3] == "close":
        # A raw socket: http.client would close its own on the header and
        # hide whether egressd ended the connection.
        host = sys.argv[4]
        raw = socket.create_connection((host, 443), timeout=10)
        s = ctx.wrap_socket(raw, server_hostname=host)
        s.sendall(b"GET /who HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" %
                  host.encode())
        data = b""
        while True:
            d = s.recv(65536)  # the timeout bounds it
            if not d:
                break
            data += d
        head, _, body = data.partition(b"\r\n\r\n")
        print("0: " + body.decode().strip(), flush=True)
        if b"\r\nconnection: close" in head.lower():
            print("close: said", flush=True)
        print("eof", flush=True)
        s.close()
        print("ok")
        sys.exit(0)
    if sys.argv[3] in ("drop", "droppost"):
        c = conn()
        print("0: " + get(c, "/drop-next"), flush=True)
        c.request("POST" if sys.argv[3] == "droppost" else "GET", "/who",
                  body=b"" if sys.argv[3] == "droppost" else None)
        r = c.getresponse()
        print("1: status %d %s" % (r.status, r.read().decode().strip()), flush=True)
        print("ok")
        sys.exit(0)
    cs = [conn() for _ in range(int(sys.argv[3]))]
    same = []
    for i, c in enumerate(cs):
        print("%d: %s" % (i, get(c, "/who")), flush=True)
        same.append(pinned(c))
    with open(os.path.join(state, "state"), "w") as f:
        f.write("ready\n")
    for _ in range(600):
        if os.path.exists(os.path.join(state, "go")):
            break
        time.sleep(0.1)
    else:
        print("bad: no go")
        sys.exit(1)
    # Large both ways first, on the two newest: their upstream legs were kept.
    big = get(cs[-1], "/big")
    print("big: %s %d" % (big.split("\n")[0], big.count("x")), flush=True)
    print("upload: " + get(cs[-2], "/who", "POST", b"y" * 300000), flush=True)
    for i, c in enumerate(cs):
        print("%d: %s" % (i, get(c, "/who")), flush=True)
        same[i]()
    print("ok")
except (OSError, http.client.HTTPException) as e:
    print("bad: %r" % e)
    sys.exit(1)
