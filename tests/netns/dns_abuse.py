#!/usr/bin/python3
"""Workload side of tests/netns/test_dns_abuse.sh (runs as uid 1000 in sbx).

Every loop is bounded in count and time; every socket has a timeout.
Subcommands print one result line that the shell test checks.
"""
import socket
import struct
import sys
import time

RESOLVER = "203.0.113.53"  # redirected to the proxy by egressd's nft rules


def query(name, qtype=1, qid=0x1234):
    q = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for lab in name.split("."):
        q += bytes([len(lab)]) + lab.encode()
    return q + b"\x00" + struct.pack("!HH", qtype, 1)


def rcode(msg):
    return msg[3] & 0x0F if len(msg) >= 4 else -1


def flood(names):
    """Send each query and wait for its answer (no drops): prints counts."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(2)
    s.connect((RESOLVER, 53))
    nx = lost = 0
    for i, n in enumerate(names):
        s.send(query(n, qid=i & 0xFFFF))
        try:
            if rcode(s.recv(4096)) == 3:
                nx += 1
        except socket.timeout:
            lost += 1
    print(f"sent={len(names)} nxdomain={nx} lost={lost}")


def closed_by_server(s, wait):
    """True when the server closed s within `wait` seconds (EOF or reset)."""
    s.settimeout(wait)
    try:
        return s.recv(1) == b""
    except socket.timeout:
        return False
    except (ConnectionResetError, BrokenPipeError):
        return True


def slow_query(max_bytes):
    """One byte of a 64-byte query per second; reports when the server closed."""
    s = socket.create_connection((RESOLVER, 53), timeout=3)
    frame = b"\x00\x40" + b"\x00" * 64
    for i in range(max_bytes):
        try:
            s.send(frame[i:i + 1])
        except (BrokenPipeError, ConnectionResetError):
            print(f"closed after={i}")
            return
        if closed_by_server(s, 1.0):
            print(f"closed after={i + 1}")
            return
    print(f"open after={max_bytes}")


def tcp_query(s, name):
    q = query(name)
    s.sendall(struct.pack("!H", len(q)) + q)
    hdr = b""
    while len(hdr) < 2:
        b = s.recv(2 - len(hdr))
        if not b:
            return -1
        hdr += b
    (n,) = struct.unpack("!H", hdr)
    body = b""
    while len(body) < n:
        b = s.recv(n - len(body))
        if not b:
            return -1
        body += b
    return rcode(body)


def paced(name, gap, count):
    """Whole queries `gap` seconds apart on one connection: all answered?"""
    s = socket.create_connection((RESOLVER, 53), timeout=5)
    codes = []
    for i in range(count):
        if i:
            time.sleep(gap)
        codes.append(tcp_query(s, name))
    print("codes=" + ",".join(str(c) for c in codes))


def cap(n, name):
    """Hold n connections, then one more: is it closed, do the n still work?"""
    held = []
    for _ in range(n):
        held.append(socket.create_connection((RESOLVER, 53), timeout=5))
    extra = socket.create_connection((RESOLVER, 53), timeout=5)
    refused = closed_by_server(extra, 3.0)
    first = tcp_query(held[0], name)
    last = tcp_query(held[-1], name)
    for s in held:
        s.close()
    # The cap frees as connections close: a new one is served (bounded wait).
    after = -1
    for _ in range(20):
        try:
            s = socket.create_connection((RESOLVER, 53), timeout=2)
            s.settimeout(2)
            after = tcp_query(s, name)
            s.close()
        except OSError:
            after = -1
        if after >= 0:
            break
        time.sleep(0.25)
    print(f"extra_closed={int(refused)} first={first} last={last} after={after}")


def pipelined(n, wait):
    """n queries on one connection, unread for `wait` s, then every answer read.

    Long denied names make the answers outgrow the socket buffers, so the
    proxy's reading pauses at its output bound and must resume.
    """
    import threading
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window
    s.settimeout(10)
    s.connect((RESOLVER, 53))
    lab = "a" * 60
    frames = []
    for i in range(n):
        q = query(f"p{i}.{lab}.{lab}.{lab}.evil.test", qid=i & 0xFFFF)
        frames.append(struct.pack("!H", len(q)) + q)
    sent = []
    t = threading.Thread(target=lambda: sent.append(s.sendall(b"".join(frames))))
    t.daemon = True
    t.start()
    time.sleep(wait)
    got = 0
    buf = b""
    deadline = time.time() + 60
    while got < n and time.time() < deadline:
        try:
            b = s.recv(65536)
        except socket.timeout:
            break
        if not b:
            break
        buf += b
        while len(buf) >= 2:
            (m,) = struct.unpack("!H", buf[:2])
            if len(buf) < 2 + m:
                break
            if rcode(buf[2:2 + m]) == 3:
                got += 1
            buf = buf[2 + m:]
    t.join(5)
    print(f"pipelined={n} answered={got}")


def main():
    cmd = sys.argv[1]
    if cmd == "flood":
        flood(sys.argv[2:] if len(sys.argv) > 2 else [l.strip() for l in sys.stdin if l.strip()])
    elif cmd == "slow":
        slow_query(int(sys.argv[2]))
    elif cmd == "paced":
        paced(sys.argv[2], float(sys.argv[3]), int(sys.argv[4]))
    elif cmd == "pipe":
        pipelined(int(sys.argv[2]), float(sys.argv[3]))
    elif cmd == "cap":
        cap(int(sys.argv[2]), sys.argv[3])
    else:
        sys.exit("unknown command")


if __name__ == "__main__":
    main()
