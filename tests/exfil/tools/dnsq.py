#!/usr/bin/python3
"""dnsq.py: the catalogue's `dnsraw` helper. Builds DNS queries with bytes an
ordinary resolver library would refuse to send (several questions, odd
opcodes and flags, raw label bytes, chosen ids, EDNS options) and sends them
over an ordinary UDP/TCP/TLS socket, so it needs no privilege.

Who runs it: exfil cases, as the workload (uid 1000). It sends exactly one
query and waits at most --timeout seconds for one answer.

Prints `status: RCODE` and `ANSWER: N` like dig, then the answer records;
prints `no response` and exits 1 when nothing came back.
"""
import argparse
import socket
import ssl
import struct
import sys

from dnslib import QTYPE, RCODE, DNSRecord


def label_bytes(name):
    """NAME with \\xHH escapes and \\. for a dot inside a label."""
    out = b""
    raw = name.encode("latin-1").decode("unicode_escape").encode("latin-1")
    labels, cur, i = [], b"", 0
    while i < len(raw):
        c = raw[i:i + 1]
        if c == b"\\" and raw[i + 1:i + 2] == b".":
            cur += b"."
            i += 2
            continue
        if c == b".":
            labels.append(cur)
            cur = b""
        else:
            cur += c
        i += 1
    if cur:
        labels.append(cur)
    for lab in labels:
        out += bytes([len(lab)]) + lab
    return out + b"\0"


def question(name, qtype):
    t = getattr(QTYPE, qtype) if not qtype.isdigit() else int(qtype)
    return label_bytes(name) + struct.pack("!HH", t, 1)


def build(a):
    flags = (a.opcode & 15) << 11
    if a.qr:
        flags |= 0x8000
    if not a.no_rd:
        flags |= 0x0100
    if a.flags is not None:
        flags = int(a.flags, 16)
    qs = []
    if not a.qd0:
        qs.append(question(a.qname, a.qtype))
    for extra in a.also or []:
        qs.append(question(extra, a.qtype))
    body = b"".join(qs)
    if a.truncate_last and body:
        body = body[:-3]
    arcount = 0
    for opt in a.ednsopt or []:
        code, hexdata = opt.split(":", 1)
        data = bytes.fromhex(hexdata)
        rdata = struct.pack("!HH", int(code), len(data)) + data
        body += b"\0" + struct.pack("!HHIH", 41, a.udp_size,
                                    (a.edns_version << 16), len(rdata)) + rdata
        arcount += 1
    hdr = struct.pack("!HHHHHH", a.id & 0xFFFF, flags, len(qs), 0, 0,
                      arcount)
    return hdr + body


def main():
    p = argparse.ArgumentParser()
    p.add_argument("qname")
    p.add_argument("--qtype", default="A")
    p.add_argument("--server", default="203.0.113.53")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--proto", choices=("udp", "tcp", "dot"), default="udp")
    p.add_argument("--id", type=lambda x: int(x, 0), default=0x1234)
    p.add_argument("--opcode", type=int, default=0)
    p.add_argument("--qr", action="store_true")
    p.add_argument("--no-rd", action="store_true")
    p.add_argument("--flags", default=None, help="raw 16-bit flags, hex")
    p.add_argument("--also", action="append", help="another question")
    p.add_argument("--qd0", action="store_true", help="no question at all")
    p.add_argument("--truncate-last", action="store_true")
    p.add_argument("--ednsopt", action="append", help="CODE:HEX")
    p.add_argument("--edns-version", type=int, default=0)
    p.add_argument("--udp-size", type=int, default=1232)
    p.add_argument("--raw", default=None, help="send these hex bytes as is")
    p.add_argument("--timeout", type=float, default=3.0)
    a = p.parse_args()
    pkt = bytes.fromhex(a.raw) if a.raw is not None else build(a)
    port = a.port or (853 if a.proto == "dot" else 53)
    fam = socket.AF_INET6 if ":" in a.server else socket.AF_INET
    try:
        if a.proto == "udp":
            s = socket.socket(fam, socket.SOCK_DGRAM)
            s.settimeout(a.timeout)
            s.sendto(pkt, (a.server, port))
            resp = s.recv(65535)
        else:
            s = socket.create_connection((a.server, port), timeout=a.timeout)
            if a.proto == "dot":
                ctx = ssl.create_default_context()
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
                s = ctx.wrap_socket(s)
            s.sendall(struct.pack("!H", len(pkt)) + pkt)
            n = s.recv(2)
            if len(n) < 2:
                raise OSError("closed")
            want = struct.unpack("!H", n)[0]
            resp = b""
            while len(resp) < want:
                c = s.recv(want - len(resp))
                if not c:
                    break
                resp += c
    except OSError as e:
        print("no response (%s)" % e)
        return 1
    try:
        r = DNSRecord.parse(resp)
    except Exception as e:  # a reply we cannot parse still came back
        print("status: UNPARSABLE (%s) %s" % (e, resp[:64].hex()))
        return 0
    print("id: %d" % r.header.id)
    print("status: %s" % RCODE.get(r.header.rcode, r.header.rcode))
    print("ANSWER: %d" % len(r.rr))
    for rr in r.rr:
        print(rr.toZone())
    return 0


if __name__ == "__main__":
    sys.exit(main())
