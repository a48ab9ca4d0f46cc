#!/usr/bin/python3
"""fakenet.py: the fake internet of catalogue 1.1, in one process.

Who runs it: tests/lib/fixture.sh (fx_servers_start), as root inside the
wan-$ID namespace, which has no uplink. It binds only documentation addresses,
decoys and the veth's own address; it never opens an outbound connection.

Servers (logs are JSON lines under --dir; "ready" is written once every
socket is bound):
  * authoritative DNS for *.test (dns.log, every query, even malformed):
    203.0.113.53 / 2001:db8::53 udp+tcp 53, udp 5353, udp+tcp 8053, udp 443,
    DoT tcp 853, DoH https 443 /dns-query. Scriptable by --dns-config JSON.
  * echo HTTP/HTTPS: api.allowed.test (api.log), other.allowed.test
    (other.log); /v1/redirect?to=, /v1/err, /v1/gzip, /v1/chunks?n=.
  * co-tenant 203.0.113.12: SNI/Host-routed front.allowed.test and
    cotenant.evil.test (cdn.log), also on 8443 (TLS) and 8080 (plain), and
    a server-speaks-first line service on 2222 ("SSH-2.0-fakenet" banner,
    then each line echoed as "echo: LINE").
  * bad TLS 203.0.113.66: 443 self-signed, 4431 expired, 4432 wrong.test,
    4433 untrusted CA, 4434 TLS 1.0 only, 4435 requests a client cert
    (badtls.log).
  * wildcard pool 198.51.100.0/24 (:9443/:9080 via wan nft redirect, wild.log).
  * attacker sink 203.0.113.20/.21/2001:db8::20, every TCP and UDP port
    (sink.log, hex of every byte), and the metadata / internal decoys
    (decoy.log, answer a minimal HTTP 200).
Every read is bounded in size and time.
"""
import argparse
import base64
import gzip
import hashlib
import ipaddress
import json
import os
import socket
import socketserver
import ssl
import struct
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler

from dnslib import (AAAA, CNAME, MX, NS, QTYPE, RCODE, RR, SOA, SRV, TXT, A,
                    DNSRecord, RD)

MAX_BODY = 4 * 1024 * 1024
IO_TIMEOUT = 10
SINK_MAX = 256 * 1024
DECOYS = {"169.254.169.254", "100.100.100.200", "10.0.0.5", "10.96.0.1",
          "10.200.0.1", "fd00:ec2::254"}

LOG_LOCK = threading.Lock()
ARGS = None


def log(name, rec):
    rec["t"] = round(time.time(), 6)
    line = json.dumps(rec, sort_keys=True) + "\n"
    with LOG_LOCK:
        with open(os.path.join(ARGS.dir, name), "a") as f:
            f.write(line)


# ---------------------------------------------------------------- DNS zone

def pool_ip(name):
    h = hashlib.sha256(name.encode()).digest()
    return "198.51.100.%d" % (1 + h[0] % 250)


DOC_POOLS = ["192.0.2.%d", "198.51.100.%d", "203.0.113.%d"]


class Zone:
    """Default records of F0 plus the per-case script (--dns-config)."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.lock = threading.Lock()
        self.rot = {}
        self.records = {}
        base = {
            "api.allowed.test": {"A": ["203.0.113.10"], "AAAA": ["2001:db8::10"],
                                 "TXT": ["api-txt-record"],
                                 "MX": ["10 mail.evil.test"],
                                 "SRV": ["0 0 443 api.allowed.test"],
                                 "NS": ["ns.evil.test"]},
            "other.allowed.test": {"A": ["203.0.113.11"], "AAAA": ["2001:db8::11"]},
            "front.allowed.test": {"A": ["203.0.113.12"]},
            "shared.cdn.test": {"A": ["203.0.113.12"]},
            "cotenant.evil.test": {"A": ["203.0.113.12"]},
            "badtls.allowed.test": {"A": ["203.0.113.66"], "AAAA": ["2001:db8::66"]},
            "blocked.allowed.test": {"A": ["203.0.113.20"]},
            "doh.evil.test": {"A": ["203.0.113.53"]},
            "evil.test": {"A": ["203.0.113.20"], "AAAA": ["2001:db8::20"],
                          "TXT": ["evil"]},
            "metadata.google.internal": {"A": ["169.254.169.254"]},
            "kubernetes.default.svc.cluster.local": {"A": ["10.96.0.1"]},
        }
        for n, rr in base.items():
            for t, v in rr.items():
                self.records[(n, t)] = {"data": v, "ttl": 60}
        for r in cfg.get("records", []):
            self.records[(r["name"].lower().rstrip("."), r["type"].upper())] = r

    def lookup(self, name, qtype):
        """Returns (rcode, answers list of (owner, type, data, ttl))."""
        answers = []
        seen = set()
        cur = name
        for _ in range(16):
            if cur in seen:
                break
            seen.add(cur)
            cn = self.get(cur, "CNAME")
            if cn and qtype != "CNAME":
                answers.append((cur, "CNAME", cn[0][0], cn[1]))
                cur = cn[0][0].lower().rstrip(".")
                continue
            got = self.get(cur, qtype)
            if got:
                for d in got[0]:
                    answers.append((cur, qtype, d, got[1]))
            elif not answers and not self.exists(cur):
                return RCODE.NXDOMAIN, []
            break
        return RCODE.NOERROR, answers

    def exists(self, name):
        if any(k[0] == name for k in self.records):
            return True
        return (name.endswith(".evil.test") or
                name.endswith(".wild.allowed.test") or
                name.endswith(".allowed.test"))

    def get(self, name, qtype):
        r = self.records.get((name, qtype))
        if r is None and qtype in ("A", "AAAA", "TXT"):
            if name.endswith(".wild.allowed.test"):
                r = {"data": {"A": [pool_ip(name)], "AAAA": [],
                              "TXT": ["wild"]}[qtype], "ttl": 30}
            elif name.endswith(".evil.test"):
                r = {"data": {"A": ["203.0.113.20"],
                              "AAAA": ["2001:db8::20"],
                              "TXT": ["evil"]}[qtype], "ttl": 30}
        if r is None:
            return None
        data = list(r.get("data", []))
        if r.get("count"):
            data = [DOC_POOLS[(i // 250) % 3] % (1 + i % 250)
                    for i in range(int(r["count"]))]
        if r.get("rotate") and data:
            with self.lock:
                i = self.rot.get((name, qtype), 0)
                self.rot[(name, qtype)] = i + 1
            data = [data[i % len(data)]]
        if not data:
            return None
        return data, int(r.get("ttl", 60))


ZONE = None


def rr_for(owner, t, data, ttl):
    if t == "A":
        rd = A(data)
    elif t == "AAAA":
        rd = AAAA(data)
    elif t == "CNAME":
        rd = CNAME(data)
    elif t == "TXT":
        rd = TXT(data)
    elif t == "MX":
        p, h = data.split()
        rd = MX(h, int(p))
    elif t == "NS":
        rd = NS(data)
    elif t == "SRV":
        p, w, port, h = data.split()
        rd = SRV(int(p), int(w), int(port), h)
    else:
        rd = RD(bytes.fromhex(data))
    try:
        code = getattr(QTYPE, t)
    except AttributeError:
        code = int(t.replace("TYPE", ""))
    return RR(owner, code, rdata=rd, ttl=ttl)


def dns_answer(raw, src, proto, port, sport=None):
    """Logs one query and returns the answer bytes (or None to drop)."""
    rec = {"src": src, "proto": proto, "port": port, "len": len(raw),
           "hex": raw[:1024].hex()}
    if sport is not None:
        rec["sport"] = sport
    try:
        q = DNSRecord.parse(raw)
    except Exception as e:  # malformed: log it and drop
        rec["error"] = str(e)[:200]
        log("dns.log", rec)
        return None
    rec["id"] = q.header.id
    rec["flags"] = "%04x" % (struct.unpack("!H", raw[2:4])[0])
    rec["qdcount"] = q.header.q
    rec["questions"] = [[str(x.qname), QTYPE.get(x.qtype, str(x.qtype))]
                        for x in q.questions]
    if q.questions:
        rec["qname"] = str(q.questions[0].qname).rstrip(".")
        rec["qname_lc"] = rec["qname"].lower()
        rec["qtype"] = QTYPE.get(q.questions[0].qtype,
                                 "TYPE%d" % q.questions[0].qtype)
    opts = [ar for ar in q.ar if ar.rtype == QTYPE.OPT]
    if opts:
        rec["edns"] = [{"udp": o.rclass, "ttl": o.ttl,
                        "options": [[x.code, bytes(x.data).hex()]
                                    for x in (o.rdata or [])
                                    if hasattr(x, "code")]} for o in opts]
    log("dns.log", rec)
    a = q.reply()
    if not q.questions:
        a.header.rcode = RCODE.FORMERR
        return a.pack()
    qn = rec["qname_lc"]
    if qn in ARGS_CFG.get("drop", []):
        return None
    delay = ARGS_CFG.get("delay", {}).get(qn)
    if delay:
        time.sleep(min(float(delay), 5.0))
    rcode, ans = ZONE.lookup(qn, rec["qtype"])
    a.header.rcode = rcode
    for owner, t, d, ttl in ans:
        a.add_answer(rr_for(owner, t, d, ttl))
    extra = ARGS_CFG.get("extra", {}).get(qn, {})
    for owner, t, d in extra.get("answer", []):
        a.add_answer(rr_for(owner, t, d, 60))
    for owner, t, d in extra.get("additional", []):
        a.add_ar(rr_for(owner, t, d, 60))
    if not ans and rcode == RCODE.NOERROR:
        a.add_auth(RR("test", QTYPE.SOA, rdata=SOA("ns.test", "h.test",
                                                    (1, 60, 60, 60, 60))))
    out = a.pack()
    if proto == "udp" and len(out) > 1232:
        a2 = q.reply()
        a2.header.tc = 1
        out = a2.pack()
    return out


class DNSUDP(socketserver.BaseRequestHandler):
    def handle(self):
        data, sock = self.request
        out = dns_answer(data, self.client_address[0], "udp",
                         self.server.server_address[1], self.client_address[1])
        if out:
            sock.sendto(out, self.client_address)


def read_exact(f, n):
    b = b""
    while len(b) < n:
        c = f.recv(n - len(b))
        if not c:
            return None
        b += c
    return b


class DNSTCP(socketserver.BaseRequestHandler):
    proto = "tcp"

    def handle(self):
        s = self.request
        s.settimeout(IO_TIMEOUT)
        if self.server.tls_ctx is not None:
            try:
                s = self.server.tls_ctx.wrap_socket(s, server_side=True)
            except Exception as e:
                log("dns.log", {"src": self.client_address[0],
                                "proto": "dot", "error": str(e)[:200]})
                return
        try:
            for _ in range(100):
                h = read_exact(s, 2)
                if not h:
                    return
                data = read_exact(s, struct.unpack("!H", h)[0])
                if data is None:
                    return
                out = dns_answer(data, self.client_address[0],
                                 "dot" if self.server.tls_ctx else "tcp",
                                 self.server.server_address[1])
                if out is None:
                    return
                s.sendall(struct.pack("!H", len(out)) + out)
        except (OSError, ssl.SSLError):
            return


# ---------------------------------------------------------------- HTTP echo

class Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fakenet-echo"
    sys_version = ""

    def setup(self):
        self.sni = None
        self.tls = False
        self.peercert = None
        self.request.settimeout(IO_TIMEOUT)
        ctx = self.server.tls_ctx
        if ctx is not None:
            try:
                self.request = ctx.wrap_socket(self.request, server_side=True)
                self.tls = True
                self.sni = getattr(self.request, "fx_sni", None)
                self.peercert = self.request.getpeercert()
            except Exception as e:
                log(self.server.logname, {"peer": self.client_address[0],
                                          "port": self.server.server_address[1],
                                          "tls_error": str(e)[:300]})
                self.request = None
                self.rfile = self.wfile = None
                return
        super().setup()

    def handle(self):
        if self.request is None:
            return
        try:
            super().handle()
        except (OSError, ssl.SSLError):
            pass

    def finish(self):
        if self.request is None:
            return
        try:
            super().finish()
        except (OSError, ssl.SSLError):
            pass

    def log_message(self, *a):
        pass

    def read_body(self):
        te = self.headers.get("Transfer-Encoding", "")
        if "chunked" in te.lower():
            body = b""
            for _ in range(10000):
                line = self.rfile.readline(1024)
                n = int(line.split(b";")[0].strip() or b"0", 16)
                if n == 0:
                    for _ in range(100):
                        t = self.rfile.readline(8192)
                        if t in (b"\r\n", b"\n", b""):
                            break
                    break
                body += self.rfile.read(min(n, MAX_BODY))
                self.rfile.readline(8)
                if len(body) > MAX_BODY:
                    break
            return body
        n = int(self.headers.get("Content-Length", "0") or 0)
        return self.rfile.read(min(n, MAX_BODY)) if n > 0 else b""

    def route_name(self):
        host = (self.headers.get("Host") or "").split(":")[0].lower()
        return self.server.logname, host

    def any_method(self):
        body = self.read_body()
        logname, host = self.route_name()
        rec = {"server": "fakenet-echo", "log": logname,
               "listen": "%s:%d" % self.server.server_address[:2],
               "peer": self.client_address[0], "tls": self.tls,
               "sni": self.sni, "requestline": self.requestline,
               "method": self.command, "path": self.path,
               "version": self.request_version,
               "headers": [[k, v] for k, v in self.headers.items()],
               "body": body.decode("latin-1")}
        if self.peercert:
            rec["client_cert"] = True
        log(logname, rec)
        u = urllib.parse.urlsplit(self.path)
        qs = urllib.parse.parse_qs(u.query)
        if u.path == "/dns-query":
            return self.doh(body, qs)
        if u.path.startswith("/v1/redirect"):
            to = qs.get("to", ["http://evil.test/"])[0]
            return self.reply(302, b"", [("Location", to)])
        if u.path.startswith("/v1/hdr"):
            auth = self.headers.get("Authorization", "")
            return self.reply(200, b"{}", [("X-Echo-Authorization", auth),
                                           ("Set-Cookie", "k=" + auth)])
        if u.path.startswith("/v1/err"):
            auth = self.headers.get("Authorization", "")
            msg = json.dumps({"error": "invalid api key", "got": auth})
            return self.reply(401, msg.encode(),
                              [("Content-Type", "application/json")])
        payload = json.dumps(rec, indent=1).encode()
        if u.path.startswith("/v1/gzip"):
            return self.reply(200, gzip.compress(payload),
                              [("Content-Type", "application/json"),
                               ("Content-Encoding", "gzip")])
        if u.path.startswith("/v1/chunks"):
            n = max(1, min(int(qs.get("n", ["1"])[0]), 65536))
            return self.chunked(payload, n)
        return self.reply(200, payload, [("Content-Type", "application/json")])

    def doh(self, body, qs):
        if self.command == "GET" and "dns" in qs:
            d = qs["dns"][0]
            raw = base64.urlsafe_b64decode(d + "=" * (-len(d) % 4))
        else:
            raw = body
        out = dns_answer(raw, self.client_address[0], "doh", 443) or b""
        return self.reply(200, out, [("Content-Type", "application/dns-message")])

    def reply(self, code, body, headers):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        if self.command != "HEAD":
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def chunked(self, body, n):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(0, len(body), n):
            c = body[i:i + n]
            self.wfile.write(b"%x\r\n%s\r\n" % (len(c), c))
        self.wfile.write(b"0\r\n\r\n")

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = any_method
    do_OPTIONS = do_CONNECT = do_TRACE = any_method


# ---------------------------------------------------------------- sink

SO_ORIGINAL_DST = 80


def orig_dst(sock, fam):
    try:
        if fam == socket.AF_INET:
            b = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
            port = struct.unpack("!H", b[2:4])[0]
            return socket.inet_ntoa(b[4:8]), port
        b = sock.getsockopt(socket.SOL_IPV6, SO_ORIGINAL_DST, 28)
        port = struct.unpack("!H", b[2:4])[0]
        return socket.inet_ntop(socket.AF_INET6, b[8:24]), port
    except OSError:
        return "?", 0


class SinkTCP(socketserver.BaseRequestHandler):
    def handle(self):
        s = self.request
        dst, port = orig_dst(s, self.server.address_family)
        decoy = dst in DECOYS
        name = "decoy.log" if decoy else "sink.log"
        s.settimeout(3)
        data = b""
        t0 = time.time()
        try:
            while len(data) < SINK_MAX and time.time() - t0 < 5:
                c = s.recv(65536)
                if not c:
                    break
                data += c
                if decoy and b"\r\n\r\n" in data:
                    s.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 14\r\n"
                              b"Connection: close\r\n\r\nFAKENET-DECOY\n")
                    break
        except OSError:
            pass
        log(name, {"proto": "tcp", "src": self.client_address[0],
                   "dst": dst, "dport": port, "len": len(data),
                   "hex": data[:4096].hex()})


class Banner(socketserver.BaseRequestHandler):
    """A server-speaks-first protocol (as SSH or SMTP): a banner, then one
    echoed line per line received, at most 16 lines and 5 s."""
    def handle(self):
        s = self.request
        s.settimeout(5)
        try:
            s.sendall(b"SSH-2.0-fakenet\r\n")
            f = s.makefile("rb")
            for _ in range(16):
                line = f.readline(4096)
                if not line:
                    break
                log(self.server.logname, {"banner": True,
                                          "peer": self.client_address[0],
                                          "hex": line[:256].hex()})
                s.sendall(b"echo: " + line)
        except OSError:
            pass


class SinkUDP(socketserver.BaseRequestHandler):
    def handle(self):
        data, _ = self.request
        log("sink.log", {"proto": "udp", "src": self.client_address[0],
                         "dst": "?", "len": len(data),
                         "hex": data[:4096].hex()})


# ---------------------------------------------------------------- servers

class TCPServer(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, addr, handler, fam, tls_ctx=None, logname=None):
        self.address_family = fam
        self.tls_ctx = tls_ctx
        self.logname = logname
        super().__init__(addr, handler, bind_and_activate=False)
        if fam == socket.AF_INET6:
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        self.server_bind()
        self.server_activate()


class UDPServer(socketserver.ThreadingUDPServer):
    allow_reuse_address = True
    daemon_threads = True
    max_packet_size = 65535

    def __init__(self, addr, handler, fam):
        self.address_family = fam
        super().__init__(addr, handler, bind_and_activate=False)
        if fam == socket.AF_INET6:
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        self.server_bind()


def fam_of(a):
    return socket.AF_INET6 if ":" in a else socket.AF_INET


def tls_ctx(certs, base, sni_map=None, minv=None, maxv=None,
            client_cert=False):
    c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    c.load_cert_chain(os.path.join(certs, base + ".pem"),
                      os.path.join(certs, base + ".key"))
    if minv:
        c.minimum_version = minv
    if maxv:
        c.maximum_version = maxv
    if minv == ssl.TLSVersion.TLSv1:
        c.set_ciphers("DEFAULT:@SECLEVEL=0")
    if client_cert:
        c.verify_mode = ssl.CERT_OPTIONAL
        c.load_verify_locations(os.path.join(certs, "ca.pem"))
    subs = {}
    for name, b in (sni_map or {}).items():
        s = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        s.load_cert_chain(os.path.join(certs, b + ".pem"),
                          os.path.join(certs, b + ".key"))
        subs[name] = s

    def cb(sock, name, ctx):
        sock.fx_sni = name
        if name and name.lower() in subs:
            sock.context = subs[name.lower()]
        return None
    c.sni_callback = cb
    return c


def main():
    global ARGS, ZONE, ARGS_CFG
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--certs", required=True)
    p.add_argument("--dns-config", default=None)
    ARGS = p.parse_args()
    ARGS_CFG = {}
    if ARGS.dns_config and os.path.exists(ARGS.dns_config):
        with open(ARGS.dns_config) as f:
            ARGS_CFG = json.load(f)
    ZONE = Zone(ARGS_CFG)
    for n in ("dns.log", "api.log", "other.log", "cdn.log", "badtls.log",
              "wild.log", "doh.log", "sink.log", "decoy.log"):
        open(os.path.join(ARGS.dir, n), "a").close()
    C = ARGS.certs
    servers = []
    for ip in ("203.0.113.53", "2001:db8::53"):
        f = fam_of(ip)
        for port in (53, 5353, 8053, 443):
            servers.append(UDPServer((ip, port), DNSUDP, f))
        for port in (53, 8053):
            servers.append(TCPServer((ip, port), DNSTCP, f))
        servers.append(TCPServer((ip, 853), DNSTCP, f, tls_ctx(C, "doh")))
        servers.append(TCPServer((ip, 443), Echo, f, tls_ctx(C, "doh"),
                                 "doh.log"))
    for ips, base, logname, sni in (
            (("203.0.113.10", "2001:db8::10"), "api", "api.log", None),
            (("203.0.113.11", "2001:db8::11"), "other", "other.log", None),
            (("203.0.113.12", "2001:db8::12"), "cdn", "cdn.log",
             {"front.allowed.test": "front",
              "cotenant.evil.test": "cotenant"})):
        for ip in ips:
            f = fam_of(ip)
            servers.append(TCPServer((ip, 80), Echo, f, None, logname))
            servers.append(TCPServer((ip, 443), Echo, f,
                                     tls_ctx(C, base, sni), logname))
            if base == "cdn":  # ports that are not intercepted (EX-109)
                servers.append(TCPServer((ip, 8443), Echo, f,
                                         tls_ctx(C, base, sni), logname))
                servers.append(TCPServer((ip, 8080), Echo, f, None, logname))
                servers.append(TCPServer((ip, 2222), Banner, f, None,
                                         logname))
    servers.append(TCPServer(("10.200.0.1", 9443), Echo, socket.AF_INET,
                             tls_ctx(C, "wild"), "wild.log"))
    servers.append(TCPServer(("10.200.0.1", 9080), Echo, socket.AF_INET,
                             None, "wild.log"))
    bad = [(443, tls_ctx(C, "badtls-selfsigned")),
           (4431, tls_ctx(C, "badtls-expired")),
           (4432, tls_ctx(C, "badtls-wrong")),
           (4433, tls_ctx(C, "badtls-untrusted")),
           (4435, tls_ctx(C, "badtls-good", client_cert=True))]
    try:
        bad.append((4434, tls_ctx(C, "badtls-good",
                                  minv=ssl.TLSVersion.TLSv1,
                                  maxv=ssl.TLSVersion.TLSv1)))
    except (ssl.SSLError, ValueError) as e:
        print("TLS 1.0 server unavailable: %s" % e, file=sys.stderr)
    for ip in ("203.0.113.66", "2001:db8::66"):
        for port, ctx in bad:
            servers.append(TCPServer((ip, port), Echo, fam_of(ip), ctx,
                                     "badtls.log"))
    for ip, f in (("0.0.0.0", socket.AF_INET), ("::", socket.AF_INET6)):
        servers.append(TCPServer((ip, 7000), SinkTCP, f))
        servers.append(UDPServer((ip, 7001), SinkUDP, f))
    for s in servers:
        threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.2},
                         daemon=True).start()
    with open(os.path.join(ARGS.dir, "ready.tmp"), "w") as f:
        f.write("%d\n" % os.getpid())
    os.rename(os.path.join(ARGS.dir, "ready.tmp"),
              os.path.join(ARGS.dir, "ready"))
    # Bounded life: a forgotten server ends by itself after an hour.
    time.sleep(3600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
