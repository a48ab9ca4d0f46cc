#!/usr/bin/python3
"""x_tls_upstream.py ADDR CERTDIR LOGDIR NAME [--client-cert] [--alpn P,P]
[--cert PATH] [--tls10] [--weak]:
an HTTPS upstream that records what the TLS client (egressd's upstream leg,
or the harness) offered, for the TLS cases EX-094 and EX-095.

Who runs it: an exfil case, as root inside its wan namespace, under
`timeout`, on a documentation address the case adds to wan's lo. It serves
443 with the run's *.wild.allowed.test leaf (PublicTestCA). With
--client-cert it asks for a client certificate (optional, verified against
the PublicTestCA); with --alpn it selects, in its own order of preference,
the first of those protocols the client offered. It never opens an outbound
connection; reads are bounded in size and time. --cert PATH serves
PATH.pem (leaf and chain) with PATH.key instead of the wild leaf; --tls10
allows only TLS 1.0 (CBC-SHA1 suites); --weak lowers OpenSSL's security
level to 0 so that weak keys and signatures can be served at all.

LOGDIR/NAME.log: one JSON line per request: sni, alpn (selected, or null),
client_cert (a verified certificate came), its subject CN, method, path,
auth (whether an Authorization header came; never its value).
LOGDIR/NAME.ready is written when the socket is bound.
"""
import argparse
import json
import os
import socket
import ssl
import threading

MAX_HEAD = 16384
LOCK = threading.Lock()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("addr")
    ap.add_argument("certdir")
    ap.add_argument("logdir")
    ap.add_argument("name")
    ap.add_argument("--client-cert", action="store_true")
    ap.add_argument("--alpn")
    ap.add_argument("--cert")
    ap.add_argument("--tls10", action="store_true")
    ap.add_argument("--weak", action="store_true")
    a = ap.parse_args()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    if a.weak or a.tls10:
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    if a.tls10:
        ctx.minimum_version = ssl.TLSVersion.TLSv1
        ctx.maximum_version = ssl.TLSVersion.TLSv1
        ctx.set_ciphers("ECDHE-ECDSA-AES128-SHA:ECDHE-RSA-AES128-SHA:@SECLEVEL=0")
    base = a.cert or os.path.join(a.certdir, "wild")
    ctx.load_cert_chain(base + ".pem", base + ".key")
    if a.client_cert:
        ctx.verify_mode = ssl.CERT_OPTIONAL
        ctx.load_verify_locations(os.path.join(a.certdir, "ca.pem"))
    if a.alpn:
        ctx.set_alpn_protocols(a.alpn.split(","))
    sni = {}

    def cb(sock, name, _ctx):
        sni[id(sock)] = name
    ctx.sni_callback = cb
    logp = os.path.join(a.logdir, a.name + ".log")

    def log(rec):
        with LOCK, open(logp, "a") as f:
            f.write(json.dumps(rec) + "\n")

    def serve(c):
        c.settimeout(5)
        try:
            s = ctx.wrap_socket(c, server_side=True)
        except (OSError, ssl.SSLError) as e:
            log({"tls_error": str(e)[:200]})
            c.close()
            return
        try:
            head = b""
            while b"\r\n\r\n" not in head and len(head) < MAX_HEAD:
                d = s.recv(4096)
                if not d:
                    break
                head += d
            lines = head.split(b"\r\n")
            parts = lines[0].decode("latin-1").split(" ")
            hdrs = [x.split(b":", 1)[0].strip().lower() for x in lines[1:]]
            cert = s.getpeercert()
            cn = None
            for rdn in (cert or {}).get("subject", ()):
                for k, v in rdn:
                    if k == "commonName":
                        cn = v
            rec = {"sni": sni.pop(id(s), None),
                   "alpn": s.selected_alpn_protocol(),
                   "client_cert": bool(cert), "client_cn": cn,
                   "method": parts[0] if parts else "",
                   "path": parts[1] if len(parts) > 1 else "",
                   "auth": b"authorization" in hdrs}
            log(rec)
            body = json.dumps(rec).encode()
            s.sendall(b"HTTP/1.1 200 OK\r\nServer: x-tls-upstream\r\n"
                      b"Content-Type: application/json\r\nConnection: close"
                      b"\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        except (OSError, ssl.SSLError):
            pass
        finally:
            s.close()

    fam = socket.AF_INET6 if ":" in a.addr else socket.AF_INET
    ls = socket.socket(fam, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((a.addr, 443))
    ls.listen(64)
    with open(os.path.join(a.logdir, a.name + ".ready"), "w") as f:
        f.write("%d\n" % os.getpid())
    for _ in range(1000):  # bounded; the caller's timeout ends it sooner
        c, _ = ls.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()


if __name__ == "__main__":
    main()
