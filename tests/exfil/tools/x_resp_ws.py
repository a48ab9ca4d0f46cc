#!/usr/bin/python3
"""x_resp_ws.py HOST PATH: a minimal WebSocket client for catalogue EX-177
(python3-websockets is not in the fixture; this is the faithful small
equivalent). It offers permessage-deflate, prints the status line of the
handshake answer and every header of it, then the first three server
messages (fragments reassembled, each as `MSG <op> <payload>`), sends one
masked text frame and prints the echo, then closes. Bounded: 10 s per read,
at most 8 frames. Runs as the workload: it trusts $TRUST.
"""
import base64
import os
import socket
import ssl
import struct
import sys


def recv_exact(s, buf, n):
    while len(buf) < n:
        c = s.recv(65536)
        if not c:
            raise EOFError
        buf += c
    return buf[:n], buf[n:]


def frame(s, buf):
    h, buf = recv_exact(s, buf, 2)
    fin, op, n = h[0] & 0x80, h[0] & 0x0F, h[1] & 0x7F
    if n == 126:
        e, buf = recv_exact(s, buf, 2)
        n = struct.unpack(">H", e)[0]
    elif n == 127:
        e, buf = recv_exact(s, buf, 8)
        n = struct.unpack(">Q", e)[0]
    if n > 1 << 20:
        raise ValueError("frame too large")
    p, buf = recv_exact(s, buf, n)
    return bool(fin), op, p, buf


def main():
    host, path = sys.argv[1], sys.argv[2]
    ctx = ssl.create_default_context(cafile=os.environ["TRUST"])
    s = ctx.wrap_socket(socket.create_connection((host, 443), timeout=10),
                        server_hostname=host)
    s.settimeout(10)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\n"
               "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
               "Sec-WebSocket-Version: 13\r\n"
               "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"
               "Authorization: Bearer %s\r\n\r\n" %
               (path, host, key, os.environ.get("FAKE_KEY", "sk-fake-0"))).encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        c = s.recv(4096)
        if not c:
            print("EOF in handshake")
            return 1
        buf += c
    head, buf = buf.split(b"\r\n\r\n", 1)
    print(head.decode("latin-1").replace("\r\n", "\n"))
    if b" 101 " not in head.split(b"\r\n")[0]:
        print("BODY %r" % buf[:200])
        return 0
    msgs, cur, cur_op = 0, b"", None
    for _ in range(8):
        fin, op, p, buf = frame(s, buf)
        if op != 0:
            cur_op, cur = op, p
        else:
            cur += p
        if fin:
            print("MSG %d %s" % (cur_op, cur.decode("latin-1").replace("\r\n", " | ")))
            msgs += 1
            if msgs == 2:
                break
    payload = b"hello-from-workload"
    mask = os.urandom(4)
    s.sendall(bytes([0x81, 0x80 | len(payload)]) + mask +
              bytes(b ^ mask[k % 4] for k, b in enumerate(payload)))
    fin, op, p, buf = frame(s, buf)
    print("MSG %d %s" % (op, p.decode("latin-1")))
    s.sendall(bytes([0x88, 0x82]) + mask + bytes(b ^ mask[k % 4] for k, b in enumerate(b"\x03\xe8")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
