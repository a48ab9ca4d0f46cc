#!/usr/bin/python3
"""x_inv_listen.py: a scripted listener for the x-inv exfil cases.

Who runs it: a case's `as: wan` action, as root in the wan namespace, under
`timeout` (it also stops by itself after --life seconds). It binds one
documentation address and the given UDP/TCP ports and appends one JSON line
per datagram or connection to --log: {"proto","port","len","tos","ttl"}
(tos/ttl of what arrived, read with IP_RECVTOS/IP_RECVTTL for UDP). It
answers nothing except, for TCP, an HTTP-ish "ok\n" line. Reads are bounded.
"""
import argparse
import json
import select
import socket
import time

ap = argparse.ArgumentParser()
ap.add_argument("--addr", required=True)
ap.add_argument("--udp", type=int, action="append", default=[])
ap.add_argument("--tcp", type=int, action="append", default=[])
ap.add_argument("--log", required=True)
ap.add_argument("--ready", required=True)
ap.add_argument("--life", type=float, default=30)
a = ap.parse_args()
fam = socket.AF_INET6 if ":" in a.addr else socket.AF_INET
socks = {}
for p in a.udp:
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if fam == socket.AF_INET:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
        s.setsockopt(socket.IPPROTO_IP, 12, 1)  # IP_RECVTTL
    s.bind((a.addr, p))
    socks[s] = ("udp", p)
for p in a.tcp:
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((a.addr, p))
    s.listen(16)
    socks[s] = ("tcp", p)
open(a.ready, "w").close()
end = time.time() + a.life


def log(rec):
    with open(a.log, "a") as f:
        f.write(json.dumps(rec) + "\n")


while time.time() < end:
    r, _, _ = select.select(list(socks), [], [], 0.5)
    for s in r:
        proto, port = socks[s]
        if proto == "udp":
            data, anc, _, _ = s.recvmsg(65535, 256)
            rec = {"proto": "udp", "port": port, "len": len(data)}
            for lvl, typ, val in anc:
                if typ == socket.IP_TOS:
                    rec["tos"] = val[0]
                elif typ == socket.IP_TTL:
                    rec["ttl"] = int.from_bytes(val[:4], "little")
            log(rec)
        else:
            c, _ = s.accept()
            c.settimeout(2)
            n = 0
            try:
                c.sendall(b"ok\n")
                d = c.recv(65536)
                n = len(d)
            except OSError:
                pass
            log({"proto": "tcp", "port": port, "len": n})
            c.close()
