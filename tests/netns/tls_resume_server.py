#!/usr/bin/python3
"""tls_resume_server.py ADDR PORT CERT KEY DIR: an HTTPS server for
tests/netns/test_upstream_resume.sh, run in the wan namespace. TLS 1.2 and
1.3 with session tickets (the server's own context, so a ticket it issued
resumes). For every connection it appends one line to DIR/conns.log once
the first request head arrived:
  <sni> reused=<True|False> <path>
and answers 200 with a small Content-Length body, keeping the connection
until the client closes it. DIR/ready appears once it listens. It never
opens an outbound connection; every wait is bounded.
"""
import os
import socket
import ssl
import sys
import threading

ADDR, PORT, CERT, KEY, DIR = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
lock = threading.Lock()


def log(line):
    with lock, open(os.path.join(DIR, "conns.log"), "a") as f:
        f.write(line + "\n")


def handle(raw, ctx):
    raw.settimeout(60)
    try:
        conn = ctx.wrap_socket(raw, server_side=True)
    except (OSError, ssl.SSLError):
        raw.close()
        return
    sni = getattr(conn, "_sni", "-")
    first = True
    data = b""
    try:
        while True:
            while b"\r\n\r\n" not in data and len(data) < 65536:
                c = conn.recv(4096)
                if not c:
                    return
                data += c
            head, data = data.split(b"\r\n\r\n", 1)
            path = head.split(b"\r\n", 1)[0].split(b" ")[1].decode("latin-1")
            if first:
                log("%s reused=%s %s" % (sni, conn.session_reused, path))
                first = False
            body = b"resume-ok " + path.encode() + b"\n"
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    except (OSError, ssl.SSLError):
        pass
    finally:
        conn.close()


def main():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(CERT, KEY)
    ctx.num_tickets = 2

    def sni_cb(sock, name, _ctx):
        sock._sni = name or "-"

    ctx.sni_callback = sni_cb
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((ADDR, PORT))
    srv.listen(64)
    open(os.path.join(DIR, "ready"), "w").close()
    while True:
        raw, _ = srv.accept()
        threading.Thread(target=handle, args=(raw, ctx), daemon=True).start()


main()
