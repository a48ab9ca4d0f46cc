#!/usr/bin/env python3
"""An HTTPS server for test_upstream_idle.sh. It numbers its connections
and answers, keep-alive, "conn=N reused=R auth=ok|bad": N the connection
the request came on, R whether its TLS handshake resumed a session, auth
whether Authorization was exactly "Bearer SECRET" (never echoed: the
secret would only be redacted). GET /bye answers the same, then closes the
connection (close_notify and FIN), as a server whose keep-alive time ran
out does. GET /drop-next answers the same, and the connection's next
request is read and not answered: the connection closes (a server that
closed it just as the request was on its way). A request body is read
and its length is "len" in the answer; GET /big adds a MiB of "x". Each line of DIR/conns is
a connection accepted, each line of DIR/closed one that ended, each line
of DIR/reqs "N METHOD PATH", a request read. A request that says
"Connection: close" is answered with it, and the connection closes after
the answer, as nginx and most servers do.
usage: upidle_server.py ADDR PORT CERT KEY SECRET DIR"""
import os
import socket
import ssl
import sys
import threading

LOCK = threading.Lock()
COUNT = [0]


def note(name, line):
    with LOCK:
        with open(os.path.join(sys.argv[6], name), "a") as f:
            f.write(line + "\n")


def serve(conn, n):
    want = ("bearer " + sys.argv[5]).encode()
    drop = False
    try:
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                d = conn.recv(65536)
                if not d:
                    return
                buf += d
            head, buf = buf.split(b"\r\n\r\n", 1)
            lines = head.split(b"\r\n")
            method, path = lines[0].split(b" ")[:2]
            note("reqs", "%d %s %s" % (n, method.decode(), path.decode()))
            if drop:
                return
            drop = path == b"/drop-next"
            auth = b""
            clen = 0
            close = False
            for ln in lines[1:]:
                k, _, v = ln.partition(b":")
                if k.strip().lower() == b"connection":
                    close |= b"close" in [t.strip().lower() for t in v.split(b",")]
                if k.strip().lower() == b"authorization":
                    auth = v.strip()
                if k.strip().lower() == b"content-length":
                    clen = int(v)
            while len(buf) < clen:
                d = conn.recv(65536)
                if not d:
                    return
                buf += d
            got, buf = buf[:clen], buf[clen:]
            body = b"conn=%d reused=%d auth=%s len=%d\n" % (
                n, int(conn.session_reused),
                b"ok" if auth.lower() == want.lower() else b"bad", len(got))
            if path == b"/big":
                body += b"x" * (1 << 20)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" %
                         (len(body), b"Connection: close\r\n" if close else b"", body))
            if path == b"/bye" or close:
                conn.unwrap()
                return
    except OSError:
        pass
    finally:
        conn.close()
        note("closed", str(n))


def main():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[3], sys.argv[4])
    ls = socket.create_server((sys.argv[1], int(sys.argv[2])))
    open(os.path.join(sys.argv[6], "ready"), "w").close()
    while True:
        raw, _ = ls.accept()
        try:
            conn = ctx.wrap_socket(raw, server_side=True)
        except OSError:
            raw.close()
            continue
        with LOCK:
            COUNT[0] += 1
            n = COUNT[0]
        note("conns", str(n))
        threading.Thread(target=serve, args=(conn, n), daemon=True).start()


main()
