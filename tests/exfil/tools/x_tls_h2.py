#!/usr/bin/python3
"""x_tls_h2.py HOST PORT SNI CAFILE [AUTHORITY:METHOD:PATH ...]: several
requests on ONE HTTP/2 connection (catalogue EX-107, connection
coalescing), with python3-h2.

Who runs it: exfil cases, as the workload. It offers ALPN h2 and speaks h2
even when the server selected nothing (prior knowledge), so it also shows
what a server that does not speak h2 does with it. Prints
"alpn: <selected>" (or "alpn: refused (<reason>)" when the handshake
fails, exit 3), then one line per stream: "stream N AUTHORITY: status S"
(or "reset"/"no answer") and the first 300 bytes of each body. Bounded: 8 s
in all, 1 MB read.
"""
import socket
import ssl
import sys
import time

import h2.config
import h2.connection
import h2.events


def main():
    host, port, sni, cafile = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    reqs = [r.split(":", 2) for r in sys.argv[5:]]
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.set_alpn_protocols(["h2"])
    raw = socket.create_connection((host, port), timeout=4)
    try:
        s = ctx.wrap_socket(raw, server_hostname=sni)
    except ssl.SSLError as e:  # an offer egressd does not speak: alert 120
        print("alpn: refused (%s)" % (e.reason or str(e))[:120])
        return 3
    print("alpn: %s" % s.selected_alpn_protocol())
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    ids = {}
    for auth, method, path in reqs:
        sid = conn.get_next_available_stream_id()
        ids[sid] = auth
        conn.send_headers(sid, [(":method", method), (":scheme", "https"),
                                (":authority", auth), (":path", path)],
                          end_stream=True)
    s.sendall(conn.data_to_send())
    status, body, done = {}, {}, set()
    end = time.time() + 8
    total = 0
    while time.time() < end and len(done) < len(ids) and total < 1 << 20:
        s.settimeout(max(0.1, end - time.time()))
        try:
            data = s.recv(65536)
        except (socket.timeout, ssl.SSLError, OSError):
            break
        if not data:
            break
        total += len(data)
        try:
            events = conn.receive_data(data)
        except Exception as e:  # a non-h2 answer (e.g. an HTTP/1.1 400)
            print("not h2: %s %r" % (type(e).__name__, data[:120]))
            break
        for ev in events:
            if isinstance(ev, h2.events.ResponseReceived):
                status[ev.stream_id] = dict(ev.headers).get(b":status", b"?").decode()
            elif isinstance(ev, h2.events.DataReceived):
                body[ev.stream_id] = body.get(ev.stream_id, b"") + ev.data
                conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, (h2.events.StreamEnded, h2.events.StreamReset)):
                done.add(ev.stream_id)
                if isinstance(ev, h2.events.StreamReset):
                    status.setdefault(ev.stream_id, "reset")
            elif isinstance(ev, h2.events.ConnectionTerminated):
                done.update(ids)
        out = conn.data_to_send()
        if out:
            s.sendall(out)
    for sid, auth in sorted(ids.items()):
        print("stream %d %s: status %s" % (sid, auth, status.get(sid, "no answer")))
        if sid in body:
            print("  body: %s" % body[sid][:300].decode("utf-8", "replace").replace("\n", " "))
    return 0


if __name__ == "__main__":
    sys.exit(main())
