#!/usr/bin/python3
"""x_framing_upstream.py ADDR CERTDIR LOGDIR: a keep-alive upstream that logs
every byte it receives, for the request-framing exfil cases (catalogue
EX-111, EX-118, EX-130).

Who runs it: an exfil case, as root inside its wan namespace (started with
`setsid -f timeout N`, so its life is bounded), on a documentation address
the case adds to wan's lo. It serves HTTPS on ADDR:443 with the
*.wild.allowed.test leaf of the run's PublicTestCA and plain HTTP on ADDR:80.
It never opens an outbound connection; every read is bounded in size and
time.

It parses what it receives the way an RFC 9112 back end does (a final
`chunked` coding wins over Content-Length, else Content-Length, else no
body) and keeps the connection open between requests, so a request smuggled
past the sidecar shows up here as a request of its own. Logs, in LOGDIR:
  x_framing.log      one JSON line per request it parsed: conn, requestline,
                     header names, the Host values, the Authorization value (wan side only) and the
                     framing headers' values
                     (content_length: list, transfer_encoding: list), body
                     length and body as hex (so a smuggled request carried
                     correctly as a body never reads as a request line);
  x_framing_raw.log  one JSON line per connection when it ends: conn, every
                     byte received, as hex.
A path containing `early401` is answered 401 at once, before its body is
read (the body is then read and discarded per its framing); a request with
`Expect: 100-continue` otherwise gets `100 Continue` first. Every other
request gets 200 with a small JSON body naming its path.
"""
import json
import os
import socket
import ssl
import sys
import threading

ADDR, CERTDIR, LOGDIR = sys.argv[1], sys.argv[2], sys.argv[3]
MAX_HEAD = 65536
MAX_BODY = 1 << 20
LOCK = threading.Lock()
SEQ = {"n": 0}


def log(name, rec):
    with LOCK, open(os.path.join(LOGDIR, name), "a") as f:
        f.write(json.dumps(rec) + "\n")


class Conn:
    def __init__(self, s, n):
        self.s, self.n, self.buf, self.raw = s, n, b"", b""

    def fill(self):
        c = self.s.recv(65536)
        if not c:
            raise EOFError
        self.raw += c
        self.buf += c

    def until(self, sep, limit):
        while sep not in self.buf:
            if len(self.buf) > limit:
                raise EOFError
            self.fill()
        a, self.buf = self.buf.split(sep, 1)
        return a

    def take(self, k):
        while len(self.buf) < k:
            self.fill()
        a, self.buf = self.buf[:k], self.buf[k:]
        return a


def read_body(c, te, cl):
    if te and te[-1].strip().lower().endswith("chunked"):
        body = b""
        for _ in range(10000):
            size = c.until(b"\r\n", 4096).split(b";")[0].strip()
            k = int(size or b"0", 16)
            if k == 0:
                while c.until(b"\r\n", 8192):
                    pass
                return body
            body += c.take(k)
            c.take(2)
            if len(body) > MAX_BODY:
                raise EOFError
        raise EOFError
    if cl:
        return c.take(min(int(cl[0].split(",")[0].strip() or 0), MAX_BODY))
    return b""


def respond(c, status, body):
    c.s.sendall(b"HTTP/1.1 %s\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" %
                (status.encode(), len(body), body))


def handle(s):
    with LOCK:
        SEQ["n"] += 1
        n = SEQ["n"]
    s.settimeout(4)
    c = Conn(s, n)
    try:
        for _ in range(100):
            head = c.until(b"\r\n\r\n", MAX_HEAD).decode("latin-1")
            lines = head.split("\r\n")
            names, te, cl, expect, close = [], [], [], "", False
            auth, host = None, []
            for ln in lines[1:]:
                k, _, v = ln.partition(":")
                kl = k.strip().lower()
                names.append(k)
                if kl == "transfer-encoding":
                    te.append(v.strip())
                elif kl == "content-length":
                    cl.append(v.strip())
                elif kl == "host":
                    host.append(v.strip())
                elif kl == "authorization":
                    auth = v.strip()
                elif kl == "expect":
                    expect = v.strip().lower()
                elif kl == "connection" and "close" in v.lower():
                    close = True
            path = (lines[0].split(" ") + ["", ""])[1]
            early = "early401" in path
            if early:
                respond(c, "401 Unauthorized", b'{"error":"early"}')
            elif expect == "100-continue":
                c.s.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            body = read_body(c, te, cl)
            log("x_framing.log", {"conn": n, "requestline": lines[0],
                                  "header_names": names,
                                  "host": host,
                                  "content_length": cl,
                                  "transfer_encoding": te,
                                  "authorization": auth,
                                  "body_len": len(body),
                                  "body_hex": body.hex()})
            if not early:
                respond(c, "200 OK", json.dumps(
                    {"server": "x-framing", "path": path}).encode())
            if close:
                break
    except (EOFError, OSError, ssl.SSLError, ValueError):
        pass
    finally:
        log("x_framing_raw.log", {"conn": n, "raw_hex": c.raw.hex()})
        try:
            s.close()
        except OSError:
            pass


def serve(tls, conn):
    try:
        if tls is not None:
            conn.settimeout(4)
            conn = tls.wrap_socket(conn, server_side=True)
        handle(conn)
    except (OSError, ssl.SSLError, ValueError):
        try:
            conn.close()
        except OSError:
            pass


def listen(port):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((ADDR, port))
    ls.listen(64)
    return ls


def accept_loop(ls, tls):
    for _ in range(2000):
        conn, _ = ls.accept()
        threading.Thread(target=serve, args=(tls, conn), daemon=True).start()


def main():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(CERTDIR, "wild.pem"),
                        os.path.join(CERTDIR, "wild.key"))
    l443, l80 = listen(443), listen(80)
    for n in ("x_framing.log", "x_framing_raw.log"):
        open(os.path.join(LOGDIR, n), "a").close()
    with open(os.path.join(LOGDIR, "x_framing.ready"), "w") as f:
        f.write("%d\n" % os.getpid())
    threading.Thread(target=accept_loop, args=(l80, None), daemon=True).start()
    accept_loop(l443, ctx)
    return 0


if __name__ == "__main__":
    sys.exit(main())
