#!/usr/bin/python3
"""x_cred_upstream.py ADDR CERTDIR LOGDIR: a scripted bound upstream for the
credential cases EX-146, EX-148, EX-149, EX-152, EX-155, EX-172 and EX-173.

Who runs it: an exfil case, as root inside its wan namespace, on a
documentation address the case adds to wan's lo; HTTPS on 443 with the
*.wild.allowed.test leaf of the run's PublicTestCA. It never opens an
outbound connection; every read is bounded in size and time; a connection
serves at most 32 requests (keep-alive), then closes.

The "value" below is what the request carried in Authorization after its
scheme word ("Bearer x" -> "x"), i.e. the injected secret on a credentialed
request. Routes (any path containing the word):
  /hdr?v=N      the value in response header N (location, cookie, www, link,
                disp, name = a header whose *name* carries it, all = all);
  /enc?e=E      the value encoded as E (base64, base64url, hex, url, json,
                html, b64wrap, reversed, upper) between "<<" and ">>";
  /basic        the Authorization value raw, base64-decoded, and the
                decoded password alone;
  /big?size=N&at=OFF[&chunked=1]  N bytes of filler with "<<value>>" at
                OFF (clamped so it fits), Content-Length or chunked (chunks
                of 65521 bytes);
  /bad?v=V      a malformed response (cl+te, 2cl, lf, extra, headbody,
                interim, fold); the "extra" one smuggles a second response
                carrying the value and the word SMUGGLED;
  /early        103 Early Hints with the value in Link, then a chunked body
                whose trailer X-Echo carries "Bearer value";
  TRACE, TRACK  the request's header fields, values included;
  anything else a JSON echo of the request line, header names and body
                length (the value is not repeated).
LOGDIR/xcred.log gets one JSON line per request: request line, header list
and trailer list, with every canary S1-S3 replaced by <S1>..<S3> (the log
never holds a secret).
"""
import base64
import json
import os
import socket
import ssl
import sys
import threading
import urllib.parse

ADDR, CERTDIR, LOGDIR = sys.argv[1], sys.argv[2], sys.argv[3]
MAX_HEAD = 65536
MAX_BODY = 1 << 20
CANARIES = ["sk-live-CANARY1-7f3c9e2ab41d4c0e9b8a6d5f4e3c2b1a",
            "sk-live-CANARY2-1c8e5a9f3b7d2e6a0f4c8b1d5e9a3c7f",
            "sk-live-CANARY3-9d2b6f0a4e8c1a5d7b3f9e2c6a0d4b8e"]
LOCK = threading.Lock()


def tag(s):
    for k, c in enumerate(CANARIES, 1):
        s = s.replace(c, "<S%d>" % k)
    return s


def log(rec):
    with LOCK, open(os.path.join(LOGDIR, "xcred.log"), "a") as f:
        f.write(tag(json.dumps(rec)) + "\n")


class Conn:
    def __init__(self, s):
        self.s = s
        self.buf = b""

    def fill(self):
        c = self.s.recv(65536)
        if not c:
            raise EOFError
        self.buf += c

    def line(self, limit=8192):
        while b"\n" not in self.buf:
            if len(self.buf) > limit:
                raise EOFError
            self.fill()
        ln, self.buf = self.buf.split(b"\n", 1)
        return ln.rstrip(b"\r")

    def read(self, n):
        while len(self.buf) < n:
            self.fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out


def read_request(c):
    rl = c.line()
    if not rl:
        rl = c.line()
    headers = []
    for _ in range(200):
        ln = c.line()
        if not ln:
            break
        k, _, v = ln.decode("latin-1").partition(":")
        headers.append([k, v.strip()])
    hl = {k.lower(): v for k, v in headers}
    body, trailers = b"", []
    if "chunked" in hl.get("transfer-encoding", "").lower():
        for _ in range(10000):
            n = int(c.line().split(b";")[0].strip() or b"0", 16)
            if n == 0:
                for _ in range(100):
                    t = c.line()
                    if not t:
                        break
                    k, _, v = t.decode("latin-1").partition(":")
                    trailers.append([k, v.strip()])
                break
            body += c.read(min(n, MAX_BODY))
            c.line()
    elif hl.get("content-length", "0").isdigit():
        body = c.read(min(int(hl.get("content-length", "0")), MAX_BODY))
    return rl.decode("latin-1"), headers, hl, body, trailers


def head(status, hdrs):
    h = "HTTP/1.1 %s\r\n" % status
    for k, v in hdrs:
        h += "%s: %s\r\n" % (k, v)
    return (h + "\r\n").encode("latin-1")


def send(s, status, hdrs, body, is_head=False):
    hdrs = list(hdrs) + [("Content-Length", str(len(body)))]
    s.sendall(head(status, hdrs) + (b"" if is_head else body))


def encode(e, v):
    b = v.encode()
    if e == "base64":
        return base64.b64encode(b).decode()
    if e == "base64url":
        return base64.urlsafe_b64encode(b).decode().rstrip("=")
    if e == "hex":
        return b.hex()
    if e == "url":
        return "".join("%%%02X" % x for x in b)
    if e == "json":
        return "".join("\\u%04x" % x for x in b)
    if e == "html":
        return "".join("&#%d;" % x for x in b)
    if e == "b64wrap":  # "Bearer value" twice, base64 with 76-column lines
        enc = base64.b64encode(("Bearer %s Bearer %s" % (v, v)).encode())
        return "\n".join(enc[k:k + 76].decode()
                         for k in range(0, len(enc), 76))
    if e == "reversed":
        return v[::-1]
    if e == "upper":
        return v.upper()
    return v


def respond(s, method, target, hl, body):
    u = urllib.parse.urlsplit(target)
    q = {k: v[0] for k, v in urllib.parse.parse_qs(u.query).items()}
    auth = hl.get("authorization", "")
    value = auth.split(" ", 1)[1] if " " in auth else auth
    p = u.path
    if "/hdr" in p:
        v = q.get("v", "all")
        hs = []
        if v in ("location", "all"):
            hs.append(("Location", "https://x.test/?token=" + value))
        if v in ("cookie", "all"):
            hs.append(("Set-Cookie", "t=%s; Path=/" % value))
        if v in ("www", "all"):
            hs.append(("WWW-Authenticate",
                       'Bearer error="invalid_token", token="%s"' % value))
        if v in ("link", "all"):
            hs.append(("Link", "<https://x.test/%s>; rel=next" % value))
        if v in ("disp", "all"):
            hs.append(("Content-Disposition",
                       'attachment; filename="%s.txt"' % value))
        if v in ("name", "all"):
            hs.append(("X-" + value, "1"))
        hs.append(("X-Hdr-Variant", v))
        return send(s, "200 OK", hs, b"hdr-ok\n", method == "HEAD")
    if "/enc" in p:
        e = q.get("e", "raw")
        out = ("enc=%s <<%s>>\n" % (e, encode(e, value))).encode()
        return send(s, "200 OK", [("Content-Type", "text/plain")], out)
    if "/basic" in p:
        dec = ""
        try:
            dec = base64.b64decode(value).decode("latin-1")
        except ValueError:
            pass
        pw = dec.split(":", 1)[1] if ":" in dec else ""
        out = ("header <<%s>>\ndecoded <<%s>>\npassword <<%s>>\n" %
               (auth, dec, pw)).encode()
        return send(s, "200 OK", [("Content-Type", "text/plain")], out)
    if "/big" in p:
        size = max(16, min(int(q.get("size", "1024")), 200 << 20))
        mark = ("<<%s>>" % value).encode()
        at = max(0, min(int(q.get("at", "0")), size - len(mark)))
        fill = b"abcdefghijklmnopqrstuvwxyz01234\n" * 2048  # 64 KiB
        pieces = []
        pos = 0
        while pos < size:  # filler up to at, the mark, filler to size
            if pos == at:
                pieces.append(mark)
                pos += len(mark)
                continue
            end = at if pos < at else size
            n = min(end - pos, len(fill))
            pieces.append(fill[:n])
            pos += n
        if q.get("chunked") == "1":
            s.sendall(head("200 OK", [("Content-Type", "text/plain"),
                                      ("Transfer-Encoding", "chunked")]))
            buf = b""  # fixed 65521-byte chunks, so a mark can straddle two
            for b in pieces:
                buf += b
                while len(buf) >= 65521:
                    s.sendall(b"%x\r\n%s\r\n" % (65521, buf[:65521]))
                    buf = buf[65521:]
            if buf:
                s.sendall(b"%x\r\n%s\r\n" % (len(buf), buf))
            s.sendall(b"0\r\n\r\n")
        else:
            s.sendall(head("200 OK", [("Content-Type", "text/plain"),
                                      ("Content-Length", str(size))]))
            for b in pieces:
                s.sendall(b)
        return None
    if "/bad" in p:
        v = q.get("v", "")
        echo = ("<<%s>>" % auth).encode()
        if v == "cl+te":
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n"
                      b"5\r\nhello\r\n0\r\n\r\n")
        elif v == "2cl":
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"
                      b"Content-Length: 40\r\n\r\nhello")
        elif v == "lf":
            s.sendall(b"HTTP/1.1 200 OK\nContent-Length: 5\n\nhello")
        elif v == "extra":
            smug = b"SMUGGLED " + echo
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
                      b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" %
                      (len(smug), smug))
        elif v == "headbody":  # a body after a HEAD response: a response
            smug = b"SMUGGLED " + echo
            body = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (
                len(smug), smug)
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" %
                      (len(body), body))
        elif v == "interim":
            s.sendall(b"HTTP/1.1 100 Continue\r\n\r\n" * 1000 +
                      b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nfinally\n")
        elif v == "fold":
            half = len(auth) // 2
            s.sendall(b"HTTP/1.1 200 OK\r\nX-Echo: " +
                      auth[:half].encode() + b"\r\n " +
                      auth[half:].encode() +
                      b"\r\nContent-Length: 5\r\n\r\nhello")
        else:
            send(s, "200 OK", [], b"no such variant\n")
        return None
    if "/early" in p:
        s.sendall(head("103 Early Hints",
                       [("Link", "</style.css?k=%s>; rel=preload" % value)]))
        s.sendall(head("200 OK", [("Content-Type", "text/plain"),
                                  ("Transfer-Encoding", "chunked"),
                                  ("Trailer", "X-Echo")]))
        s.sendall(b"6\r\nearly\n\r\n0\r\nX-Echo: " + auth.encode() +
                  b"\r\n\r\n")
        return None
    if method in ("TRACE", "TRACK"):  # echo the request head, as TRACE does
        out = "".join("%s: %s\r\n" % kv for kv in hl.items()).encode()
        return send(s, "200 OK", [("Content-Type", "message/http")], out)
    rec = {"server": "xcred", "method": method, "target": target,
           "header_names": sorted(hl), "body_len": len(body)}
    return send(s, "200 OK", [("Content-Type", "application/json")],
                json.dumps(rec).encode() + b"\n", method == "HEAD")


def handle(raw, ctx):
    try:
        raw.settimeout(10)
        s = ctx.wrap_socket(raw, server_side=True)
    except (OSError, ssl.SSLError):
        raw.close()
        return
    c = Conn(s)
    try:
        for _ in range(32):
            rl, headers, hl, body, trailers = read_request(c)
            parts = rl.split(" ")
            method = parts[0]
            target = parts[1] if len(parts) > 1 else "/"
            log({"requestline": rl, "headers": headers, "trailers": trailers,
                 "body_len": len(body)})
            respond(s, method, target, hl, body)
            if "/bad" in target or "close" in hl.get("connection", ""):
                break
    except (OSError, ssl.SSLError, EOFError, ValueError):
        pass
    finally:
        try:
            s.close()
        except OSError:
            pass


def main():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(CERTDIR, "wild.pem"),
                        os.path.join(CERTDIR, "wild.key"))
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((ADDR, 443))
    ls.listen(64)
    open(os.path.join(LOGDIR, "xcred.ready"), "w").close()
    for _ in range(2000):
        conn, _ = ls.accept()
        threading.Thread(target=handle, args=(conn, ctx), daemon=True).start()


if __name__ == "__main__":
    main()
