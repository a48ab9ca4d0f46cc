#!/usr/bin/python3
"""reflect.py ADDR CERTDIR LOGDIR: a bound upstream that reflects, for the
vault's redaction cases (issue 15 items 5 and 6).

Who runs it: an exfil case, as root inside its wan namespace, on a
documentation address the case adds to wan's lo; it serves HTTPS on 443
with the *.wild.allowed.test leaf of the run's PublicTestCA. It never opens
an outbound connection; every read is bounded in size and time; one request
per connection (Connection: close).

  /reflect?k=N  the guess oracle: a chunked body that ends with a guess of
                constant length matching the first N bytes of the bearer
                value this request carried ("~" before them), written in
                one write with the last-chunk;
  /sse-split    text/event-stream: the bearer value split over two events
                (and over two data lines in a third), in one write;
  /store        remembers the bearer value (a secret the server stored);
  /public/get   returns what /store remembered; gzip when Accept-Encoding
                allows it, a 206 slice when Range asks for one.
LOGDIR/reflect.log gets one JSON line per request: path, Accept-Encoding,
Range; never the Authorization value.
"""
import gzip
import json
import os
import re
import socket
import ssl
import sys
import threading
import urllib.parse

ADDR, CERTDIR, LOGDIR = sys.argv[1], sys.argv[2], sys.argv[3]
MAX_HEAD = 16384
STORED = {"v": b""}
LOCK = threading.Lock()


def log(rec):
    with LOCK, open(os.path.join(LOGDIR, "reflect.log"), "a") as f:
        f.write(json.dumps(rec) + "\n")


def chunk(b):
    return b"%x\r\n%s\r\n" % (len(b), b)


def respond(conn, status, headers, body):
    head = "HTTP/1.1 %s\r\n" % status
    for k, v in headers:
        head += "%s: %s\r\n" % (k, v)
    head += "Connection: close\r\n\r\n"
    conn.sendall(head.encode() + body)


def handle(conn):
    conn.settimeout(5)
    data = b""
    while b"\r\n\r\n" not in data and len(data) < MAX_HEAD:
        c = conn.recv(4096)
        if not c:
            return
        data += c
    lines = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) < 2:
        return
    hdrs = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        hdrs.setdefault(k.strip().lower(), []).append(v.strip())
    u = urllib.parse.urlsplit(parts[1])
    qs = urllib.parse.parse_qs(u.query)
    ae = ", ".join(hdrs.get("accept-encoding", []))
    rng = ", ".join(hdrs.get("range", []))
    log({"path": u.path, "accept_encoding": ae, "range": rng})
    auth = (hdrs.get("authorization", [""])[0]).encode()
    sec = auth[7:] if auth.startswith(b"Bearer ") else auth
    if u.path == "/reflect":
        n = max(0, min(int(qs.get("k", ["0"])[0]), len(sec)))
        body = b'{"error":"invalid key","echo":"' + b"~" * (len(sec) - n) + sec[:n]
        respond(conn, "200 OK", [("Content-Type", "application/json"),
                                 ("Transfer-Encoding", "chunked")],
                chunk(body) + b"0\r\n\r\n")
        return
    if u.path == "/sse-split":
        h = len(sec) // 2
        ev = (b"data: " + sec[:h] + b"\n\ndata: " + sec[h:] + b"\n\n" +
              b"data: " + sec[:h] + b"\ndata: " + sec[h:] + b"\n\n")
        respond(conn, "200 OK", [("Content-Type", "text/event-stream"),
                                 ("Transfer-Encoding", "chunked")],
                chunk(ev) + b"0\r\n\r\n")
        return
    if u.path == "/store":
        STORED["v"] = sec
        respond(conn, "200 OK", [("Content-Length", "7")], b"stored\n")
        return
    if u.path == "/public/get":
        body = b'{"note":"' + STORED["v"] + b'"}'
        m = re.match(r"bytes=(\d+)-(\d+)$", rng)
        if m:
            a, b = int(m.group(1)), int(m.group(2))
            piece = body[a:b + 1]
            respond(conn, "206 Partial Content",
                    [("Content-Range", "bytes %d-%d/%d" % (a, a + len(piece) - 1, len(body))),
                     ("Content-Length", str(len(piece)))], piece)
            return
        if "gzip" in ae:
            z = gzip.compress(body)
            respond(conn, "200 OK", [("Content-Encoding", "gzip"),
                                     ("Content-Length", str(len(z)))], z)
            return
        respond(conn, "200 OK", [("Content-Length", str(len(body)))], body)
        return
    respond(conn, "404 Not Found", [("Content-Length", "0")], b"")


def serve(tls, conn):
    try:
        with tls.wrap_socket(conn, server_side=True) as s:
            handle(s)
    except (OSError, ssl.SSLError, ValueError):
        pass


def main():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(CERTDIR, "wild.pem"), os.path.join(CERTDIR, "wild.key"))
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((ADDR, 443))
    ls.listen(64)
    with open(os.path.join(LOGDIR, "reflect.ready"), "w") as f:
        f.write("ok\n")
    for _ in range(2000):
        conn, _ = ls.accept()
        threading.Thread(target=serve, args=(ctx, conn), daemon=True).start()
    return 0


if __name__ == "__main__":
    sys.exit(main())
