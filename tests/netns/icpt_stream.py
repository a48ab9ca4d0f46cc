#!/usr/bin/python3
"""icpt_stream.py ADDR PORT CERT KEY DIR: a small HTTPS server for
tests/netns/test_intercept.sh, run in the wan namespace. It logs every
request head to DIR/stream.log and answers:
  /sse  an event stream (chunked): "data: one <auth>" at once, then
        "data: two" only after DIR/trigger exists (bounded wait), then ends;
  /close a close-delimited body that ends with the Authorization value;
  /ws   a WebSocket-style upgrade (101), then every read is echoed back
        with the Authorization value it received;
  /enc  the Authorization value it received, raw, base64, base64url and
        percent-encoded, in the body and in a response header.
It never opens an outbound connection; every wait is bounded.
"""
import base64
import os
import socket
import ssl
import sys
import threading
import time
import urllib.parse

ADDR, PORT, CERT, KEY, DIR = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]


def log(line):
    with open(os.path.join(DIR, "stream.log"), "a") as f:
        f.write(line + "\n")


def handle(conn):
    conn.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data and len(data) < 65536:
        c = conn.recv(4096)
        if not c:
            return
        data += c
    head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1")
    log(head.replace("\r\n", " | "))
    lines = head.split("\r\n")
    path = lines[0].split(" ")[1]
    auth = ""
    for l in lines[1:]:
        k, _, v = l.partition(":")
        if k.strip().lower() == "authorization":
            auth = v.strip()
    if path.startswith("/close"):
        # Close-delimited body (no length, no chunking), ending with the secret.
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n")
        for i in range(50):
            conn.sendall(b"line %d\n" % i)
        conn.sendall(b"tail " + auth.encode() + b"\n")
        conn.shutdown(socket.SHUT_WR)
        return
    if path.startswith("/ws"):
        conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                     b"Connection: Upgrade\r\n\r\n")
        rest = data.split(b"\r\n\r\n", 1)[1]
        for _ in range(16):
            c = rest or conn.recv(1024)
            rest = b""
            if not c:
                return
            conn.sendall(b"echo " + c.strip() + b" auth=" + auth.encode() + b"\n")
        return
    if path.startswith("/sse"):
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\n\r\n")
        ev = ("data: one %s\n\n" % auth).encode()
        conn.sendall(b"%x\r\n%s\r\n" % (len(ev), ev))
        t0 = time.time()
        while not os.path.exists(os.path.join(DIR, "trigger")) and time.time() - t0 < 20:
            time.sleep(0.05)
        ev = b"data: two\n\n"
        conn.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(ev), ev))
        return
    raw = auth.encode()
    body = b"raw=" + raw + b"\nb64=" + base64.b64encode(raw) + b"\nb64url=" + \
        base64.urlsafe_b64encode(raw).rstrip(b"=") + b"\nurl=" + \
        urllib.parse.quote(auth, safe="").encode() + b"\n"
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Echo-B64: " +
                 base64.b64encode(raw) + b"\r\nContent-Length: " +
                 str(len(body)).encode() + b"\r\n\r\n" + body)


def serve(conn):
    try:
        handle(conn)
    except (OSError, ssl.SSLError, IndexError):
        pass
    finally:
        try:
            conn.close()
        except OSError:
            pass


def main():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(CERT, KEY)
    fam = socket.AF_INET6 if ":" in ADDR else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((ADDR, PORT))
    s.listen(64)
    open(os.path.join(DIR, "stream.ready"), "w").close()
    t0 = time.time()
    s.settimeout(1)
    while time.time() - t0 < 600:
        try:
            c, _ = s.accept()
        except socket.timeout:
            continue
        try:
            c = ctx.wrap_socket(c, server_side=True)
        except (OSError, ssl.SSLError):
            c.close()
            continue
        threading.Thread(target=serve, args=(c,), daemon=True).start()


if __name__ == "__main__":
    main()
