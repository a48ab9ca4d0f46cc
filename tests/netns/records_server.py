#!/usr/bin/env python3
"""An HTTPS server for test_records.sh: every response is written in one
send, so egressd reads each whole. GET /chunked answers a chunked body of
three chunks, GET /length a Content-Length body, GET /empty a 204.
usage: records_server.py ADDR PORT CERT KEY"""
import socket
import ssl
import sys
import threading

BODIES = {
    b"/chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                 b"5\r\nhello\r\n6\r\n world\r\n1\r\n!\r\n0\r\n\r\n",
    b"/length": b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\nhello world!",
    b"/empty": b"HTTP/1.1 204 No Content\r\n\r\n",
}


def serve(conn):
    try:
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                d = conn.recv(65536)
                if not d:
                    return
                buf += d
            head, buf = buf.split(b"\r\n\r\n", 1)
            path = head.split(b" ")[1]
            conn.sendall(BODIES.get(path, b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"))
    except OSError:
        pass
    finally:
        conn.close()


def main():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[3], sys.argv[4])
    ls = socket.create_server((sys.argv[1], int(sys.argv[2])))
    while True:
        raw, _ = ls.accept()
        try:
            conn = ctx.wrap_socket(raw, server_side=True)
        except OSError:
            raw.close()
            continue
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


main()
