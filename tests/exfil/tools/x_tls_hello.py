#!/usr/bin/python3
"""x_tls_hello.py: send a crafted TLS ClientHello and say what came back
(the catalogue's scapy ClientHellos, EX-086, EX-087, EX-089; Debian python
only).

Who runs it: exfil cases, as the workload. The hello starts as a real one
made by Python's ssl module (MemoryBIO, TLS 1.2-1.3) for --sni, then its
server_name extension or extension list is rewritten as asked, and it is
sent framed as asked (records, one byte per send). Unmodified hellos finish
the handshake and can send --request, so a split hello can prove it got the
same decision as an unsplit one.

  x_tls_hello.py HOST PORT --sni NAME [options]
    --entries T:NAME,T:NAME  server_name list entries (type:name; NAME may
                             use \\x00 escapes), replacing the real one
    --dup-sni                a second server_name extension
    --sni-len-plus N         list length field N larger than the data
    --no-sni                 drop server_name
    --add-ext TYPE:LEN       append an extension of LEN random bytes
                             (0xfe0d ECH, 0xffce ESNI, 0x0015 padding)
    --records N              split the hello over N TLS records
    --byte-delay MS          one byte per send(), MS ms apart (TCP_NODELAY)
    --cafile F --request R   finish the handshake (unmodified hello only),
                             send R (\\r\\n escapes) and print the reply
    --alpn P[,P]             ALPN offers
    --hrr-then NAME          offer no key share (the server must answer a
                             HelloRetryRequest), then send a second hello
                             whose SNI is NAME (- for none); the result is
                             the answer to it
    --hrr-eager              with --hrr-then: send the second hello with
                             the first (one write), before the
                             HelloRetryRequest

Prints one line "RESULT: SERVERHELLO|ALERT <desc>|CLOSED|TIMEOUT", then with
--request "HANDSHAKE: ok|failed ..." and the reply. Exit status 0 when a
ServerHello came back, 1 otherwise. Every read is bounded (8 s in all).
"""
import argparse
import os
import socket
import ssl
import struct
import sys
import time

DEADLINE = 8.0
HRR_RANDOM = bytes.fromhex(
    "cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c")


def unesc(s):
    return s.encode("latin-1").decode("unicode_escape").encode("latin-1")


def real_hello(sni, alpn, cafile):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cafile:
        ctx.load_verify_locations(cafile)
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if alpn:
        ctx.set_alpn_protocols(alpn)
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_side=False, server_hostname=sni)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return obj, inc, out, out.read()


def split_hello(rec):
    """(handshake message, record version) of a one-record hello."""
    assert rec[0] == 22
    ver = rec[1:3]
    n = struct.unpack("!H", rec[3:5])[0]
    return rec[5:5 + n], ver


def rewrite(hs, a):
    """Rewrite the extensions of ClientHello handshake message hs."""
    body = hs[4:]
    p = 2 + 32
    sid = body[p]
    p += 1 + sid
    cs = struct.unpack("!H", body[p:p + 2])[0]
    p += 2 + cs
    comp = body[p]
    p += 1 + comp
    head = body[:p]
    elen = struct.unpack("!H", body[p:p + 2])[0]
    ext = body[p + 2:p + 2 + elen]
    exts = []
    q = 0
    while q < len(ext):
        t, n = struct.unpack("!HH", ext[q:q + 4])
        exts.append([t, ext[q + 4:q + 4 + n]])
        q += 4 + n
    sni = None
    if a.entries is not None:
        lst = b""
        for e in filter(None, a.entries.split(",")):
            t, name = e.split(":", 1)
            nb = unesc(name)
            lst += struct.pack("!BH", int(t), len(nb)) + nb
        sni = struct.pack("!H", len(lst) + a.sni_len_plus) + lst
    elif a.sni_len_plus:
        for e in exts:
            if e[0] == 0:
                n = struct.unpack("!H", e[1][:2])[0]
                sni = struct.pack("!H", n + a.sni_len_plus) + e[1][2:]
    if sni is not None:
        found = False
        for e in exts:
            if e[0] == 0:
                e[1] = sni
                found = True
        if not found:
            exts.insert(0, [0, sni])
    if a.no_sni:
        exts = [e for e in exts if e[0] != 0]
    if a.hrr_then:
        for e in exts:
            if e[0] == 51:  # key_share: an empty client_shares list
                e[1] = b"\x00\x00"
    if a.dup_sni:
        for e in list(exts):
            if e[0] == 0:
                exts.insert(1, [0, e[1]])
                break
    for x in a.add_ext:
        t, n = x.split(":")
        t = int(t, 0)
        data = bytes(int(n)) if t == 0x15 else os.urandom(int(n))
        exts = [e for e in exts if e[0] != t]  # replace one already there
        new = [t, data]
        # pre_shared_key must stay last.
        if exts and exts[-1][0] == 41:
            exts.insert(len(exts) - 1, new)
        else:
            exts.append(new)
    ext = b"".join(struct.pack("!HH", t, len(d)) + d for t, d in exts)
    body = head + struct.pack("!H", len(ext)) + ext
    return b"\x01" + struct.pack("!I", len(body))[1:] + body


def frame(hs, ver, records):
    n = max(1, records)
    step = -(-len(hs) // n)
    out = b""
    for k in range(0, len(hs), step):
        part = hs[k:k + step]
        out += b"\x16" + ver + struct.pack("!H", len(part)) + part
    if n == 1 and len(hs) > 16384:  # one record cannot hold it
        return frame(hs, ver, -(-len(hs) // 16384))
    return out


def nrec(wire):
    n = k = 0
    while k + 5 <= len(wire):
        n += 1
        k += 5 + struct.unpack("!H", wire[k + 3:k + 5])[0]
    return n


def recv_some(s, end):
    s.settimeout(max(0.1, end - time.time()))
    try:
        return s.recv(65536)
    except socket.timeout:
        return None


def skip_record(s, end, buf):
    """The bytes after buf's first record, read to its end first."""
    while len(buf) < 5 or len(buf) < 5 + struct.unpack("!H", buf[3:5])[0]:
        d = recv_some(s, end)
        if not d:
            return b""
        buf += d
    return buf[5 + struct.unpack("!H", buf[3:5])[0]:]


def classify(s, end, buf=b""):
    while len(buf) < 6:
        d = recv_some(s, end)
        if d is None:
            return "TIMEOUT", buf
        if not d:
            return "CLOSED", buf
        buf += d
    if buf[0] == 21:
        return "ALERT %d" % buf[6] if len(buf) > 6 else "ALERT", buf
    if buf[0] == 22 and buf[5] == 2:
        return "SERVERHELLO", buf
    return "OTHER %02x" % buf[0], buf


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("--sni", default="api.allowed.test")
    ap.add_argument("--entries")
    ap.add_argument("--dup-sni", action="store_true")
    ap.add_argument("--sni-len-plus", type=int, default=0)
    ap.add_argument("--no-sni", action="store_true")
    ap.add_argument("--add-ext", action="append", default=[])
    ap.add_argument("--records", type=int, default=1)
    ap.add_argument("--byte-delay", type=float, default=0)
    ap.add_argument("--cafile")
    ap.add_argument("--request")
    ap.add_argument("--alpn")
    ap.add_argument("--hrr-then")
    ap.add_argument("--hrr-eager", action="store_true")
    a = ap.parse_args()
    alpn = a.alpn.split(",") if a.alpn else None
    obj, inc, out, rec = real_hello(a.sni, alpn, a.cafile)
    hs, ver = split_hello(rec)
    modified = bool(a.entries is not None or a.dup_sni or a.sni_len_plus or
                    a.no_sni or a.add_ext or a.hrr_then)
    if modified:
        hs = rewrite(hs, a)
    wire = frame(hs, ver, a.records)
    second = b""
    if a.hrr_then:
        _, _, _, rec2 = real_hello(
            None if a.hrr_then == "-" else a.hrr_then, alpn, None)
        hs2, _ = split_hello(rec2)
        second = b"\x14\x03\x03\x00\x01\x01" + frame(hs2, b"\x03\x03", 1)
    end = time.time() + DEADLINE
    s = socket.create_connection((a.host, a.port), timeout=4)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        if a.byte_delay > 0:
            for k in range(len(wire)):
                s.sendall(wire[k:k + 1])
                time.sleep(a.byte_delay / 1000.0)
            end = time.time() + DEADLINE
        else:
            # --hrr-eager: both hellos in one write, so in one read of the peer
            s.sendall(wire + second if a.hrr_eager else wire)
    except OSError as e:
        print("RESULT: CLOSED (send: %s)" % e)
        return 1
    res, buf = classify(s, end)
    if a.hrr_then:
        if res != "SERVERHELLO" or buf[11:43] != HRR_RANDOM:
            print("RESULT: NO-HRR %s" % res)
            return 1
        print("HRR: received")
        # What comes after the HRR record (and the server's CCS) is the answer.
        rest = skip_record(s, end, buf)
        while rest and rest[0] == 20:
            rest = skip_record(s, end, rest)
        if not a.hrr_eager:
            s.sendall(second)
        res, buf = classify(s, end, rest)
    print("RESULT: %s (hello %d bytes in %d records)" % (
        res, len(hs), nrec(wire)))
    if a.request is None or modified or res != "SERVERHELLO":
        return 0 if res == "SERVERHELLO" else 1
    # Finish the handshake over the same socket, then one request.
    inc.write(buf)
    ok = False
    while time.time() < end:
        try:
            obj.do_handshake()
            ok = True
            break
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLError as e:
            print("HANDSHAKE: failed %s" % e.reason)
            return 1
        o = out.read()
        if o:
            s.sendall(o)
        d = recv_some(s, end)
        if not d:
            print("HANDSHAKE: failed (closed)")
            return 1
        inc.write(d)
    o = out.read()
    if o:
        s.sendall(o)
    if not ok:
        print("HANDSHAKE: failed (timeout)")
        return 1
    print("HANDSHAKE: ok %s alpn=%s" % (obj.version(),
                                        obj.selected_alpn_protocol()))
    obj.write(unesc(a.request))
    s.sendall(out.read())
    reply = b""
    while time.time() < end and len(reply) < 1 << 20:
        try:
            chunk = obj.read(65536)
            if not chunk:
                break
            reply += chunk
            continue
        except ssl.SSLWantReadError:
            pass
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
            break
        o = out.read()
        if o:
            s.sendall(o)
        d = recv_some(s, end)
        if not d:
            break
        inc.write(d)
    sys.stdout.write(reply.decode("utf-8", "replace") + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
