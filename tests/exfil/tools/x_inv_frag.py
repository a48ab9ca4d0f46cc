#!/usr/bin/python3
"""x_inv_frag.py: IPv4 fragments built by hand (catalogue EX-030, P1).

Who runs it: the workload with CAP_NET_RAW (profile P1) in exfil case
EX-030. Stdlib only: an IPPROTO_RAW socket (IP_HDRINCL) sends each fragment
as given, so the kernel's output path sees fragments, not a datagram.

  x_inv_frag.py plain DST PORT      a 3000-byte UDP datagram in 512-byte
                                    fragments (the catalogue's first action)
  x_inv_frag.py tcp DST PORT        a TCP SYN (with 40 data bytes) in three
                                    fragments, none overlapping
  x_inv_frag.py overlap DST P1 P2   the same SYN to P1, plus a fragment at
      offset 0 (16 bytes: the ports) that rewrites the port to P2
Prints "sent N" (N fragments).
"""
import random
import socket
import struct
import sys


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def iphdr(src, dst, ident, off8, mf, plen, proto=17):
    flags = (1 << 13 if mf else 0) | off8
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + plen, ident, flags, 64, proto,
                    0, socket.inet_aton(src), socket.inet_aton(dst))
    return h[:10] + struct.pack("!H", csum(h)) + h[12:]


def udp(src, dst, sport, dport, payload):
    ln = 8 + len(payload)
    ph = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack(
        "!BBH", 0, 17, ln)
    h = struct.pack("!HHHH", sport, dport, ln, 0)
    c = csum(ph + h + payload) or 0xFFFF
    return struct.pack("!HHHH", sport, dport, ln, c) + payload


def tcp(src, dst, sport, dport, payload):
    ph = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack(
        "!BBH", 0, 6, 20 + len(payload))
    h = struct.pack("!HHIIBBHHH", sport, dport, 1, 0, 0x50, 2, 1024, 0, 0)
    c = csum(ph + h + payload)
    return h[:16] + struct.pack("!H", c) + h[18:] + payload


def main():
    mode, dst = sys.argv[1], sys.argv[2]
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.connect((dst, 9))
    src = probe.getsockname()[0]
    probe.close()
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    ident = random.randrange(1, 65535)
    frags = []
    if mode == "plain":
        dgram = udp(src, dst, 40000, int(sys.argv[3]), b"A" * 3000)
        for off in range(0, len(dgram), 512):
            part = dgram[off:off + 512]
            mf = off + 512 < len(dgram)
            frags.append(iphdr(src, dst, ident, off // 8, mf, len(part)) + part)
    else:
        p1 = int(sys.argv[3])
        seg = tcp(src, dst, 40000, p1, b"B" * 40)  # 60 bytes
        parts = [(0, seg[:24], True), (3, seg[24:48], True), (6, seg[48:], False)]
        if mode == "overlap":
            p2 = int(sys.argv[4])
            bad = tcp(src, dst, 40000, p2, b"B" * 40)[:16]
            parts.insert(1, (0, bad, True))
        for off8, part, mf in parts:
            frags.append(iphdr(src, dst, ident, off8, mf, len(part), 6) + part)
    for f in frags:
        s.sendto(f, (dst, 0))
    print("sent %d" % len(frags))


if __name__ == "__main__":
    main()
