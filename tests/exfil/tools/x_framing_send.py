#!/usr/bin/python3
"""x_framing_send.py MODE ADDR NAME [--pace S] VARIANT...: a binary-safe raw
HTTP/1.x client for the request-parsing exfil cases (catalogue EX-111..134).

Who runs it: an exfil case, as the workload (uid 1000 in sbx). MODE is
`tls` (TLS to ADDR:443 with SNI NAME, trusting $TRUST, so egressd's
intercept terminates it) or `plain` (ADDR:80). Each VARIANT is
`label=bytes`, the bytes written with Python backslash escapes (\\r \\n \\t
\\x00 ...); `{N*c}` expands to N copies of the character c and then
`{N*(text)}` to N copies of text (for oversized parts; a variant is at
most 4 MB). The cases spell their Content-Lengths themselves.
A variant whose bytes contain the marker `<PAUSE>` is sent in two writes
with --pace seconds between them (default 0.5).

One fresh connection per variant; the whole request is sent in one write
(or two around <PAUSE>), then the answer is read until the peer closes or
is silent for 2.5 s (at most 256 KB). It prints one line per variant:

  label code=400 responses=1 closed=1 first="HTTP/1.1 400 Bad Request"

`code` is the first final response's status (NONE when nothing came
back), `responses` how many final responses came back (each walked by its
own framing; 1xx interim answers are not counted). It never prints a body, so a
credential an upstream echoed is never on its output. Exit status 0 when
every variant ran (whatever the answers), 2 on a usage error.
"""
import os
import re
import socket
import ssl
import sys
import time

MAX_READ = 256 << 10
MAX_SEND = 4 << 20
IDLE = 2.5


def decode(spec):
    spec = re.sub(r"\{(\d+)\*(.)\}", lambda m: m.group(2) * int(m.group(1)),
                  spec)
    spec = re.sub(r"\{(\d+)\*\((.*?)\)\}",
                  lambda m: m.group(2) * int(m.group(1)), spec)
    if len(spec) > MAX_SEND:
        raise ValueError("variant larger than %d bytes" % MAX_SEND)
    return spec.encode("latin-1").decode("unicode_escape").encode("latin-1")


def parse_responses(got):
    """Status codes of the responses in got, in order, walking each
    response's framing (1xx interim answers are listed too)."""
    codes = []
    for _ in range(1000):
        if not got.startswith(b"HTTP/"):
            break
        head, sep, rest = got.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        m = re.match(rb"HTTP/\d\.\d (\d{3})", lines[0])
        if not m:
            break
        codes.append(m.group(1))
        if not sep:
            break
        if m.group(1).startswith(b"1"):
            got = rest
            continue
        hdrs = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(b":")
            hdrs[k.strip().lower()] = v.strip().lower()
        if b"chunked" in hdrs.get(b"transfer-encoding", b""):
            for _ in range(100000):
                size, sep2, rest = rest.partition(b"\r\n")
                if not sep2:
                    return codes
                try:
                    k = int(size.split(b";")[0] or b"0", 16)
                except ValueError:
                    return codes
                if k == 0:
                    _, _, rest = rest.partition(b"\r\n")
                    break
                rest = rest[k + 2:]
            got = rest
        elif b"content-length" in hdrs:
            try:
                got = rest[int(hdrs[b"content-length"]):]
            except ValueError:
                break
        else:
            break
    return codes


def run_one(mode, addr, name, data, pace):
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect((addr, 443 if mode == "tls" else 80))
        if mode == "tls":
            ctx = ssl.create_default_context(cafile=os.environ.get("TRUST"))
            ctx.set_alpn_protocols(["http/1.1"])
            s = ctx.wrap_socket(s, server_hostname=name)
    except (OSError, ssl.SSLError) as e:
        return None, 0, 1, "connect-error %s" % type(e).__name__
    try:
        parts = data.split(b"<PAUSE>")
        for k, p in enumerate(parts):
            if k:
                time.sleep(pace)
            if p:
                s.sendall(p)
    except (OSError, ssl.SSLError):
        pass  # refused mid-request: what it answered may still be readable
    got = b""
    closed = 0
    s.settimeout(IDLE)
    while len(got) < MAX_READ:
        try:
            c = s.recv(65536)
        except socket.timeout:
            break
        except (OSError, ssl.SSLError):
            closed = 1
            break
        if not c:
            closed = 1
            break
        got += c
    try:
        s.close()
    except OSError:
        pass
    codes = parse_responses(got)
    first = got.split(b"\r\n", 1)[0][:80].decode("latin-1")
    final = [c.decode() for c in codes if not c.startswith(b"1")]
    return final[0] if final else None, len(final), closed, first


def main():
    a = sys.argv[1:]
    if len(a) < 4 or a[0] not in ("tls", "plain"):
        print(__doc__, file=sys.stderr)
        return 2
    mode, addr, name = a[0], a[1], a[2]
    rest = a[3:]
    pace = 0.5
    if rest[0] == "--pace":
        pace = float(rest[1])
        rest = rest[2:]
    for v in rest:
        label, sep, spec = v.partition("=")
        if not sep:
            print("bad variant %r" % label, file=sys.stderr)
            return 2
        code, n, closed, first = run_one(mode, addr, name, decode(spec), pace)
        first = re.sub(r"[^\x20-\x7e]", "?", first)
        print('%s code=%s responses=%d closed=%d first="%s"' %
              (label, code or "NONE", n, closed, first), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
