#!/usr/bin/env python3
# A fake upstream resolver for tests/netns/test_dns_upstream_health.sh, run
# in the wan namespace: dns_health_upstream.py ADDR ANSWER_IP DIR. It serves
# UDP and TCP on ADDR:53, appends "qname qtype" for every query it receives
# to DIR/queries (the root "." stands for itself), and reads DIR/mode on
# each one: "answer" answers (A: ANSWER_IP, anything else: NOERROR, no
# records), "noquery" answers only probes (". NS" and "probe.ok.test A")
# and drops the rest, "silent" drops everything. DIR/ready once bound.
import os
import socket
import socketserver
import struct
import sys
import threading

ADDR, ANSWER, DIR = sys.argv[1], sys.argv[2], sys.argv[3]
LOCK = threading.Lock()
PROBES = {(".", 2), ("probe.ok.test", 1)}


def mode():
    try:
        with open(os.path.join(DIR, "mode")) as f:
            return f.read().strip()
    except OSError:
        return "answer"


def parse(msg):
    """(qname, qtype, end of the question) or None."""
    if len(msg) < 12 or struct.unpack("!H", msg[4:6])[0] != 1:
        return None
    i, labels = 12, []
    while i < len(msg) and msg[i] != 0:
        n = msg[i]
        if n > 63 or i + 1 + n > len(msg):
            return None
        labels.append(msg[i + 1:i + 1 + n].decode("ascii", "replace").lower())
        i += 1 + n
    if i + 5 > len(msg):
        return None
    qtype = struct.unpack("!H", msg[i + 1:i + 3])[0]
    return (".".join(labels) or "."), qtype, i + 5


def answer(msg):
    q = parse(msg)
    if q is None:
        return None
    name, qtype, end = q
    with LOCK:
        with open(os.path.join(DIR, "queries"), "a") as f:
            f.write("%s %d\n" % (name, qtype))
    m = mode()
    if m == "silent" or (m == "noquery" and (name, qtype) not in PROBES):
        return None
    flags = 0x8000 | (struct.unpack("!H", msg[2:4])[0] & 0x0100) | 0x0080
    an = b""
    if qtype == 1 and name != ".":
        an = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + socket.inet_aton(ANSWER)
    return msg[:2] + struct.pack("!HHHHH", flags, 1, 1 if an else 0, 0, 0) + msg[12:end] + an


class UDP(socketserver.BaseRequestHandler):
    def handle(self):
        data, sock = self.request
        out = answer(data)
        if out is not None:
            sock.sendto(out, self.client_address)


class TCP(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.settimeout(5)
        try:
            while True:
                hdr = self.request.recv(2)
                if len(hdr) < 2:
                    return
                n = struct.unpack("!H", hdr)[0]
                data = b""
                while len(data) < n:
                    chunk = self.request.recv(n - len(data))
                    if not chunk:
                        return
                    data += chunk
                out = answer(data)
                if out is not None:
                    self.request.sendall(struct.pack("!H", len(out)) + out)
        except OSError:
            return


class UDPServer(socketserver.ThreadingUDPServer):
    daemon_threads = True
    allow_reuse_address = True


class TCPServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


u = UDPServer((ADDR, 53), UDP)
t = TCPServer((ADDR, 53), TCP)
threading.Thread(target=t.serve_forever, daemon=True).start()
open(os.path.join(DIR, "ready"), "w").close()
u.serve_forever()
