#!/usr/bin/env python3
"""The raw passthrough relay's fixture (test_splice.sh).

server ADDR PORT CERT KEY: a TLS echo server. Every byte read is written
back; when the client's side ends (a TCP EOF, with or without
close_notify) it sends "sha256 <hex> <bytes>" of all it read, then closes.

client HOST PORT CA MODE DIR: the workload's side, through egressd's
passthrough (the server's own certificate, verified against CA):
  pingpong N  - one round trip, then "ready" in DIR/state, waits for DIR/go,
                N round trips of 512 bytes each checked, "done" in DIR/state
  bulk N      - N bytes sent while a reader that starts late takes the echo
                (so the relay meets a full socket both ways): sha256 compared
  halfclose N - N bytes, then a TCP half-close without close_notify: the
                server's digest must still arrive, then the server's EOF
Prints "ok ..." or "bad ..." and exits 0 or 1.
"""
import hashlib
import os
import socket
import ssl
import sys
import threading
import time


def serve(addr, port, cert, key):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ls = socket.create_server((addr, port))
    while True:
        raw, _ = ls.accept()
        threading.Thread(target=echo, args=(ctx, raw), daemon=True).start()


def echo(ctx, raw):
    try:
        s = ctx.wrap_socket(raw, server_side=True, suppress_ragged_eofs=True)
        h = hashlib.sha256()
        n = 0
        while True:
            try:
                d = s.recv(65536)
            except ssl.SSLError:
                d = b""
            if not d:
                break
            h.update(d)
            n += len(d)
            s.sendall(d)
        s.sendall(b"sha256 %s %d\n" % (h.hexdigest().encode(), n))
        s.close()
    except OSError:
        pass


def connect(host, port, ca):
    ctx = ssl.create_default_context(cafile=ca)
    raw = socket.create_connection((host, port), timeout=30)
    return ctx.wrap_socket(raw, server_hostname=host, suppress_ragged_eofs=True)


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        d = s.recv(n - len(buf))
        if not d:
            break
        buf += d
    return buf


def pingpong(s, n, state):
    msg = os.urandom(256).hex().encode()  # 512 bytes
    s.sendall(msg)
    if recv_exact(s, len(msg)) != msg:
        return "bad first round trip"
    with open(os.path.join(state, "state"), "w") as f:
        f.write("ready\n")
    for _ in range(600):  # bounded: at most 60 s for the test to attach
        if os.path.exists(os.path.join(state, "go")):
            break
        time.sleep(0.1)
    else:
        return "bad no go"
    for i in range(n):
        msg = os.urandom(256).hex().encode()
        s.sendall(msg)
        if recv_exact(s, len(msg)) != msg:
            return "bad round trip %d" % i
    with open(os.path.join(state, "state"), "a") as f:
        f.write("done\n")
    return "ok %d round trips" % n


def bulk(s, n):
    data = os.urandom(n)
    got = hashlib.sha256()
    count = [0]

    def reader():
        time.sleep(1)  # ordering only: the relay finds the workload's socket full
        while count[0] < n:
            d = s.recv(65536)
            if not d:
                break
            got.update(d)
            count[0] += len(d)

    t = threading.Thread(target=reader)
    t.start()
    for off in range(0, n, 65536):
        s.sendall(data[off:off + 65536])
    t.join(60)
    if count[0] != n or got.hexdigest() != hashlib.sha256(data).hexdigest():
        return "bad echo of %d bytes: %d back" % (n, count[0])
    return "ok %d bytes echoed intact" % n


def halfclose(s, n):
    data = os.urandom(n)
    total = [0]
    tail = []

    def reader():
        buf = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            buf += d
            keep = len(buf) - min(len(buf), 200)
            total[0] += keep
            buf = buf[keep:]
        tail.append(buf)

    t = threading.Thread(target=reader)
    t.start()
    s.sendall(data)
    socket.socket.shutdown(s, socket.SHUT_WR)  # the TCP half-close, no close_notify
    t.join(60)
    if t.is_alive():
        return "bad no EOF from the server"
    echo_and_tail = tail[0]
    want = b"sha256 %s %d\n" % (hashlib.sha256(data).hexdigest().encode(), n)
    if not echo_and_tail.endswith(want) or total[0] + len(echo_and_tail) != n + len(want):
        return "bad digest after the half-close: %r" % echo_and_tail[-100:]
    return "ok digest after the half-close, then EOF"


def main():
    if sys.argv[1] == "server":
        serve(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5])
        return 0
    host, port, ca, mode = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
    s = connect(host, port, ca)
    if mode == "pingpong":
        out = pingpong(s, int(sys.argv[6]), sys.argv[7])
    elif mode == "bulk":
        out = bulk(s, int(sys.argv[6]))
    else:
        out = halfclose(s, int(sys.argv[6]))
    print(out, flush=True)
    return 0 if out.startswith("ok") else 1


sys.exit(main())
