#!/usr/bin/python3
"""x_inv_fields.py: a client that chooses its own transport fields (EX-031).

Who runs it: the workload (P0) in exfil case EX-031. It sets IP_TOS 0xb8,
IP_TTL 7 and TCP_MAXSEG 1111 on its socket, then either speaks TLS with an
HTTP/1.1 GET (mode https HOST PATH, trusting $TRUST) or sends one line
(mode plain ADDR PORT). Prints the status line or "sent". Bounded: 8 s.
"""
import os
import socket
import ssl
import sys


def sock():
    s = socket.socket()
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, 0xB8)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, 7)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 1111)
    s.settimeout(8)
    return s


mode = sys.argv[1]
if mode == "https":
    host, path = sys.argv[2], sys.argv[3]
    s = sock()
    s.connect((socket.gethostbyname(host), 443))
    ctx = ssl.create_default_context(cafile=os.environ["TRUST"])
    t = ctx.wrap_socket(s, server_hostname=host)
    t.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
               % (path, host)).encode())
    data = b""
    while len(data) < 65536:
        d = t.recv(4096)
        if not d:
            break
        data += d
    print(data.split(b"\r\n", 1)[0].decode("latin-1"))
else:
    s = sock()
    s.connect((sys.argv[2], int(sys.argv[3])))
    s.sendall(b"fields\n")
    s.recv(16)
    print("sent")
