#!/usr/bin/env python3
"""The raw passthrough relay's fixture (test_splice.sh).

server ADDR PORT CERT KEY GATE: a TLS echo server. Every byte read is
written back; when the client's side ends (a TCP EOF, with or without
close_notify) it sends "sha256 <hex> <bytes>" of all it read, then closes.
A connection whose first bytes are "gate" is echoed nothing: at its EOF
the server writes GATE/eof, waits for GATE/answer, sends the digest and
closes at once, then writes GATE/sent. One whose first bytes are "close"
gets the digest of them at once, and the server closes.

client HOST PORT CA MODE DIR: the workload's side, through egressd's
passthrough (the server's own certificate, verified against CA):
  pingpong N  - one round trip, then "ready" in DIR/state, waits for DIR/go,
                N round trips of 512 bytes each checked, "done" in DIR/state
  bulk N      - N bytes sent while a reader that starts late takes the echo
                (so the relay meets a full socket both ways): sha256 compared
  halfclose N - N bytes, then a TCP half-close without close_notify: the
                server's digest must still arrive, then the server's EOF
  many N      - N connections one after another, each a few bytes, a
                half-close, the digest and the server's EOF, then closed
  gated       - "gate" and a half-close; the digest and the server's EOF
                must arrive whenever the server lets them go
  reset DIR   - "close", the server's answer and EOF, then "eof" in
                DIR/state; waits for DIR/go, sends 100 bytes and resets the
                connection (SO_LINGER 0)
Prints "ok ..." or "bad ..." and exits 0 or 1.
"""
import hashlib
import os
import select
import socket
import ssl
import struct
import sys
import threading
import time


GATE = None


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
        gated = False
        while True:
            try:
                d = s.recv(65536)
            except ssl.SSLError:
                d = b""
            if not d:
                break
            if n == 0 and d.startswith(b"gate"):
                gated = True
            h.update(d)
            n += len(d)
            if n == len(d) and d.startswith(b"close"):
                break
            if not gated:
                s.sendall(d)
        if gated:
            open(os.path.join(GATE, "eof"), "w").close()
            for _ in range(300):  # bounded: 30 s
                if os.path.exists(os.path.join(GATE, "answer")):
                    break
                time.sleep(0.1)
        s.sendall(b"sha256 %s %d\n" % (h.hexdigest().encode(), n))
        s.close()
        if gated:
            open(os.path.join(GATE, "sent"), "w").close()
    except OSError:
        pass


def connect(host, port, ca):
    ctx = ssl.create_default_context(cafile=ca)
    raw = socket.create_connection((host, port), timeout=30)
    return ctx.wrap_socket(raw, server_hostname=host, suppress_ragged_eofs=True)


def recv_to_eof(s):
    buf = b""
    while True:
        d = s.recv(65536)
        if not d:
            return buf
        buf += d


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


def exchange(s, data, late, halfclose, want):
    """Send data while reading, on one thread (an SSL socket is not to be
    read and written from two): the reading starts only once a send would
    block when late, so the relay meets full sockets both ways. After the
    data, a TCP half-close (no close_notify) when halfclose. Reads until
    want bytes came, or the EOF when want is None. Bounded: 60 s without
    progress. Returns the bytes read."""
    s.setblocking(False)
    sent, shut, reading = 0, False, not late
    got = bytearray()
    idle = 0
    while want is None or len(got) < want:
        r, w, _ = select.select([s] if reading else [], [s] if sent < len(data) else [], [], 1)
        idle = 0 if r or w else idle + 1
        if idle >= 60:
            break
        progressed = False
        if sent < len(data):
            try:
                sent += s.send(data[sent:sent + 65536])
                progressed = True
            except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
                reading = True
        if sent == len(data) and halfclose and not shut:
            socket.socket.shutdown(s, socket.SHUT_WR)
            shut = True
        if sent == len(data):
            reading = True
        if reading:
            while True:
                try:
                    d = s.recv(65536)
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                    break
                if not d:
                    return bytes(got)
                got += d
                progressed = True
        if progressed:
            idle = 0
    return bytes(got)


def bulk(s, n):
    data = os.urandom(n)
    got = exchange(s, data, True, False, n)
    if got != data:
        return "bad echo of %d bytes: %d back" % (n, len(got))
    return "ok %d bytes echoed intact" % n


def halfclose(s, n):
    data = os.urandom(n)
    got = exchange(s, data, True, True, None)
    want = b"sha256 %s %d\n" % (hashlib.sha256(data).hexdigest().encode(), n)
    if got != data + want:
        return "bad echo and digest after the half-close: %d bytes, %r" % (len(got), got[-80:])
    return "ok digest after the half-close, then EOF"


def many(host, port, ca, n):
    for i in range(n):
        s = connect(host, port, ca)
        s.sendall(b"x" * 100)
        socket.socket.shutdown(s, socket.SHUT_WR)
        buf = recv_to_eof(s)
        s.close()
        if not buf.endswith(b" 100\n"):
            return "bad connection %d: %r" % (i, buf[-60:])
    return "ok %d connections" % n


def main():
    global GATE
    if sys.argv[1] == "server":
        GATE = sys.argv[6]
        serve(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5])
        return 0
    host, port, ca, mode = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
    if mode == "many":
        out = many(host, port, ca, int(sys.argv[6]))
        print(out, flush=True)
        return 0 if out.startswith("ok") else 1
    s = connect(host, port, ca)
    if mode == "reset":
        state = sys.argv[6]
        s.sendall(b"close")
        buf = recv_to_eof(s)
        if not buf.endswith(b" 5\n"):
            print("bad answer %r" % buf[-60:], flush=True)
            return 1
        with open(os.path.join(state, "state"), "w") as f:
            f.write("eof\n")
        for _ in range(300):  # bounded: 30 s
            if os.path.exists(os.path.join(state, "go")):
                break
            time.sleep(0.1)
        s.sendall(b"r" * 100)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        socket.socket.close(s)
        print("ok reset sent", flush=True)
        return 0
    if mode == "gated":
        s.sendall(b"gate" + b"g" * 96)
        socket.socket.shutdown(s, socket.SHUT_WR)
        ok = recv_to_eof(s).endswith(b" 100\n")
        print("ok digest and EOF" if ok else "bad answer after the half-close", flush=True)
        return 0 if ok else 1
    if mode == "pingpong":
        out = pingpong(s, int(sys.argv[6]), sys.argv[7])
    elif mode == "bulk":
        out = bulk(s, int(sys.argv[6]))
    else:
        out = halfclose(s, int(sys.argv[6]))
    print(out, flush=True)
    return 0 if out.startswith("ok") else 1


sys.exit(main())
