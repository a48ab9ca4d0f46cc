#!/usr/bin/python3
"""x_resp_up.py ADDR CERTDIR LOGDIR [MODE]: a scripted upstream for the
response-side exfil cases (catalogue EX-175..EX-192).

Who runs it: an exfil case, as root inside its wan namespace, on a
documentation address the case adds to wan's lo. It serves HTTPS on 443 with
the run's *.wild.allowed.test leaf and plain HTTP on 80, keep-alive, HTTP/1.1
only. It never opens an outbound connection; every read is bounded in size
and time; it serves at most 4000 connections and lives at most 120 s.

MODE "reset": every request is read in full and then answered with a TCP
reset (the first address of EX-178). Otherwise:

  /nonce...       200 JSON {path, nonce, auth}: auth is the Authorization it
                  received (an echo for the redactor), nonce a counter
  /poison         a 200, then at once a second, unsolicited response
                  ("POISON") on the same connection (response queue poisoning)
  HEAD /head-body headers echoing Authorization, then a body anyway
  /cond           304 echoing Authorization in a header, then a body anyway
  /ws             WebSocket: 101, then a text frame with the handshake head,
                  then the bearer value split over two fragments, then an
                  echo of the client's frames until a close frame
  /stream?mb=N    N MiB as fast as the peer takes them; LOGDIR/stream.sent
                  holds the bytes written so far
  /bomb           gzip of 256 MiB of zeros (Content-Encoding: gzip)
  /bomb2          gzip inside gzip (Content-Encoding: gzip, gzip)
  /br             Content-Encoding: br (random bytes)
  anything else   200 JSON {path, method, nonce, body_len}
LOGDIR/up.log gets one JSON line per request: mode, path, method, auth (the
value as received: this log stays on the wan side), ext (the
Sec-WebSocket-Extensions it got), body_len, conn (connection number).
"""
import base64
import gzip
import hashlib
import json
import os
import socket
import ssl
import struct
import sys
import threading
import time
import urllib.parse
import zlib

ADDR, CERTDIR, LOGDIR = sys.argv[1], sys.argv[2], sys.argv[3]
MODE = sys.argv[4] if len(sys.argv) > 4 else "normal"
MAX_HEAD = 32768
MAX_BODY = 1 << 20
LOCK = threading.Lock()
STATE = {"nonce": 0, "conn": 0, "bomb": None, "bomb2": None}


def log(rec):
    rec["mode"] = MODE
    rec["t"] = round(time.time(), 6)
    with LOCK, open(os.path.join(LOGDIR, "up.log"), "a") as f:
        f.write(json.dumps(rec) + "\n")


def next_nonce():
    with LOCK:
        STATE["nonce"] += 1
        return STATE["nonce"]


def bomb(nested):
    with LOCK:
        if STATE["bomb"] is None:
            c = zlib.compressobj(9, zlib.DEFLATED, 31)
            zero = b"\0" * (1 << 20)
            STATE["bomb"] = b"".join(c.compress(zero) for _ in range(256)) + c.flush()
            STATE["bomb2"] = gzip.compress(STATE["bomb"])
        return STATE["bomb2"] if nested else STATE["bomb"]


def head(status, headers):
    h = "HTTP/1.1 %s\r\n" % status
    for k, v in headers:
        h += "%s: %s\r\n" % (k, v)
    return (h + "\r\n").encode("latin-1")


def read_head(conn, buf):
    while b"\r\n\r\n" not in buf:
        if len(buf) > MAX_HEAD:
            return None, b""
        c = conn.recv(4096)
        if not c:
            return None, b""
        buf += c
    h, rest = buf.split(b"\r\n\r\n", 1)
    return h.decode("latin-1"), rest


def ws_frame(op, payload, fin=True):
    b0 = (0x80 if fin else 0) | op
    n = len(payload)
    if n < 126:
        return bytes([b0, n]) + payload
    if n < 65536:
        return bytes([b0, 126]) + struct.pack(">H", n) + payload
    return bytes([b0, 127]) + struct.pack(">Q", n) + payload


def ws_read(conn, buf):
    """One client frame: (op, payload, rest) or None."""
    while len(buf) < 2:
        c = conn.recv(4096)
        if not c:
            return None
        buf += c
    n = buf[1] & 0x7F
    off = 2
    if n == 126:
        need = 4
    elif n == 127:
        need = 10
    else:
        need = 2
    while len(buf) < need + 4:
        c = conn.recv(4096)
        if not c:
            return None
        buf += c
    if n == 126:
        n = struct.unpack(">H", buf[2:4])[0]
        off = 4
    elif n == 127:
        n = struct.unpack(">Q", buf[2:10])[0]
        off = 10
    if n > MAX_BODY:
        return None
    mask = buf[off:off + 4]
    off += 4
    while len(buf) < off + n:
        c = conn.recv(4096)
        if not c:
            return None
        buf += c
    data = bytes(b ^ mask[k % 4] for k, b in enumerate(buf[off:off + n]))
    return buf[0] & 0x0F, data, buf[off + n:]


def websocket(conn, hdrs, raw_head, rest):
    key = hdrs.get("sec-websocket-key", "")
    acc = base64.b64encode(hashlib.sha1(
        (key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
    conn.sendall(head("101 Switching Protocols", [
        ("Upgrade", "websocket"), ("Connection", "Upgrade"),
        ("Sec-WebSocket-Accept", acc)]))
    auth = hdrs.get("authorization", "").encode("latin-1")
    sec = auth[7:] if auth.startswith(b"Bearer ") else auth
    h = len(sec) // 2
    conn.sendall(ws_frame(1, b"HANDSHAKE " + raw_head.encode("latin-1")) +
                 ws_frame(1, b"SPLIT " + sec[:h], fin=False) +
                 ws_frame(0, sec[h:] + b" END", fin=True))
    buf = rest
    for _ in range(64):
        got = ws_read(conn, buf)
        if got is None:
            return
        op, data, buf = got
        if op == 8:
            conn.sendall(ws_frame(8, data[:2]))
            return
        conn.sendall(ws_frame(op if op in (1, 2) else 1, b"ECHO " + data))


def stream(conn, mb):
    total = mb << 20
    conn.sendall(head("200 OK", [("Content-Type", "application/octet-stream"),
                                 ("Content-Length", str(total))]))
    piece = b"x" * 65536
    sent = 0
    path = os.path.join(LOGDIR, "stream.sent")
    conn.settimeout(8)
    try:
        while sent < total:
            conn.sendall(piece)
            sent += len(piece)
            if sent % (1 << 20) == 0:
                with open(path, "w") as f:
                    f.write("%d\n" % sent)
    except OSError:
        pass
    with open(path, "w") as f:
        f.write("%d\n" % sent)


def handle(conn, num):
    conn.settimeout(10)
    buf = b""
    for _ in range(100):
        h, buf = read_head(conn, buf)
        if h is None:
            return
        lines = h.split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3:
            return
        method, target = parts[0], parts[1]
        hdrs = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            hdrs.setdefault(k.strip().lower(), v.strip())
        n = min(int(hdrs.get("content-length", "0") or 0), MAX_BODY)
        while len(buf) < n:
            c = conn.recv(65536)
            if not c:
                return
            buf += c
        body, buf = buf[:n], buf[n:]
        u = urllib.parse.urlsplit(target)
        qs = urllib.parse.parse_qs(u.query)
        auth = hdrs.get("authorization", "")
        nonce = next_nonce()
        log({"path": target, "method": method, "auth": auth,
             "ext": hdrs.get("sec-websocket-extensions", ""),
             "accept_encoding": hdrs.get("accept-encoding", ""),
             "body_len": len(body), "conn": num, "nonce": nonce})
        if MODE == "reset":
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                            struct.pack("ii", 1, 0))
            return
        if u.path.startswith("/nonce"):
            b = json.dumps({"path": target, "nonce": nonce,
                            "auth": auth}).encode()
            conn.sendall(head("200 OK", [("Content-Type", "application/json"),
                                         ("Content-Length", str(len(b)))]) + b)
        elif u.path == "/poison":
            b = b'{"first":%d}' % nonce
            p = b'{"POISON":"' + auth.encode("latin-1") + b'"}'
            conn.sendall(head("200 OK", [("Content-Length", str(len(b)))]) + b +
                         head("200 OK", [("Content-Length", str(len(p)))]) + p)
        elif u.path == "/head-body" and method == "HEAD":
            b = b"HEADBODY-LEAK " + auth.encode("latin-1")
            conn.sendall(head("200 OK", [("X-Echo-Auth", auth),
                                         ("Content-Length", str(len(b)))]) + b)
        elif u.path == "/cond":
            b = b"BODY304-LEAK " + auth.encode("latin-1")
            conn.sendall(head("304 Not Modified", [("X-Echo-Auth", auth),
                                                   ("ETag", '"e1"')]) + b)
        elif u.path == "/ws" and hdrs.get("upgrade", "").lower() == "websocket":
            websocket(conn, hdrs, h, buf)
            return
        elif u.path == "/stream":
            stream(conn, max(1, min(int(qs.get("mb", ["1"])[0]), 256)))
            return
        elif u.path in ("/bomb", "/bomb2"):
            z = bomb(u.path == "/bomb2")
            enc = "gzip, gzip" if u.path == "/bomb2" else "gzip"
            conn.sendall(head("200 OK", [("Content-Encoding", enc),
                                         ("Content-Length", str(len(z)))]) + z)
        elif u.path == "/br":
            z = os.urandom(65536)
            conn.sendall(head("200 OK", [("Content-Encoding", "br"),
                                         ("Content-Length", str(len(z)))]) + z)
        else:
            b = json.dumps({"path": target, "method": method, "nonce": nonce,
                            "body_len": len(body)}).encode()
            conn.sendall(head("200 OK", [("Content-Type", "application/json"),
                                         ("Content-Length", str(len(b)))]) + b)
        if hdrs.get("connection", "").lower() == "close":
            return


def serve(tls, conn, num):
    try:
        if tls is not None:
            conn = tls.wrap_socket(conn, server_side=True)
        handle(conn, num)
    except (OSError, ssl.SSLError, ValueError):
        pass
    finally:
        try:
            conn.close()
        except OSError:
            pass


def listener(port, tls):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((ADDR, port))
    ls.listen(256)
    for _ in range(4000):
        conn, _ = ls.accept()
        with LOCK:
            STATE["conn"] += 1
            num = STATE["conn"]
        threading.Thread(target=serve, args=(tls, conn, num), daemon=True).start()


def main():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(CERTDIR, "wild.pem"),
                        os.path.join(CERTDIR, "wild.key"))
    ctx.set_alpn_protocols(["http/1.1"])
    for port, tls in ((443, ctx), (80, None)):
        threading.Thread(target=listener, args=(port, tls), daemon=True).start()
    time.sleep(0.2)
    with open(os.path.join(LOGDIR, "up.ready." + ADDR), "w") as f:
        f.write("ok\n")
    time.sleep(120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
