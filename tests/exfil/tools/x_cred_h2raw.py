#!/usr/bin/python3
"""x_cred_h2raw.py: the catalogue's `h2raw` (1.3), an HTTP/2 client that can
send what a conforming client would not (python3-h2 with validation and
normalisation off). Who runs it: exfil cases (EX-143, EX-174), as the
workload. One request per run:

  x_cred_h2raw.py --connect IP:PORT --sni NAME --cafile FILE
      [--method POST] [--path /] [--authority NAME] [--header k:v ...]
      [--data TEXT | --data-hex HEX] [--data2 TEXT] [--trailer k:v ...]

It prints "alpn=<protocol>" (or "alpn=refused (<reason>)" when the
handshake fails, and exits 3 unless that is h2), then one line
per event: "status=N", "header k: v", "data <len> <bytes, escaped>",
"trailer k: v", "push <promised path>", "reset=<error code>",
"goaway=<error code>", "end". Every
wait is bounded (5 s per read, 40 reads at most).
"""
import argparse
import socket
import ssl
import sys

import h2.config
import h2.connection
import h2.events


def field(h):
    """'name:value', where a pseudo-header keeps its leading colon."""
    if h.startswith(":"):
        k, _, v = h[1:].partition(":")
        return (":" + k, v)
    k, _, v = h.partition(":")
    return (k, v)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--connect", required=True)
    ap.add_argument("--sni", required=True)
    ap.add_argument("--cafile", required=True)
    ap.add_argument("--method", default="GET")
    ap.add_argument("--path", default="/")
    ap.add_argument("--authority")
    ap.add_argument("--header", action="append", default=[])
    ap.add_argument("--trailer", action="append", default=[])
    ap.add_argument("--data")
    ap.add_argument("--data-hex")
    ap.add_argument("--data2")
    a = ap.parse_args()
    host, _, port = a.connect.rpartition(":")
    ctx = ssl.create_default_context(cafile=a.cafile)
    ctx.set_alpn_protocols(["h2"])
    raw = socket.create_connection((host.strip("[]"), int(port)), timeout=5)
    try:
        s = ctx.wrap_socket(raw, server_hostname=a.sni)
    except ssl.SSLError as e:  # an offer egressd does not speak: alert 120
        print("alpn=refused (%s)" % (e.reason or str(e))[:120], flush=True)
        return 3
    proto = s.selected_alpn_protocol()
    print("alpn=%s" % proto, flush=True)
    if proto != "h2":
        return 3
    cfg = h2.config.H2Configuration(client_side=True,
                                    validate_outbound_headers=False,
                                    normalize_outbound_headers=False,
                                    validate_inbound_headers=False)
    c = h2.connection.H2Connection(cfg)
    c.initiate_connection()
    hdrs = [(":method", a.method), (":scheme", "https"),
            (":authority", a.authority or a.sni), (":path", a.path)]
    hdrs += [field(h) for h in a.header]
    body = bytes.fromhex(a.data_hex) if a.data_hex else \
        (a.data.encode() if a.data is not None else None)
    last = body is None and a.data2 is None and not a.trailer
    c.send_headers(1, hdrs, end_stream=last)
    if body is not None:
        c.send_data(1, body, end_stream=a.data2 is None and not a.trailer)
    if a.data2 is not None:
        c.send_data(1, a.data2.encode(), end_stream=not a.trailer)
    if a.trailer:
        c.send_headers(1, [field(t) for t in a.trailer],
                       end_stream=True)
    s.sendall(c.data_to_send())
    for _ in range(40):
        try:
            d = s.recv(65536)
        except (socket.timeout, OSError):
            print("timeout")
            break
        if not d:
            print("closed")
            break
        for ev in c.receive_data(d):
            if isinstance(ev, h2.events.ResponseReceived):
                for k, v in ev.headers:
                    k, v = k.decode("latin-1"), v.decode("latin-1")
                    print("status=%s" % v if k == ":status" else
                          "header %s: %s" % (k, v))
            elif isinstance(ev, h2.events.DataReceived):
                c.acknowledge_received_data(ev.flow_controlled_length,
                                            ev.stream_id)
                print("data %d %r" % (len(ev.data), ev.data[:400]))
            elif isinstance(ev, h2.events.TrailersReceived):
                for k, v in ev.headers:
                    print("trailer %s: %s" % (k.decode("latin-1"),
                                              v.decode("latin-1")))
            elif isinstance(ev, h2.events.PushedStreamReceived):
                print("push %r" % dict(ev.headers).get(b":path"))
            elif isinstance(ev, h2.events.StreamReset):
                print("reset=%s" % ev.error_code)
                return 0
            elif isinstance(ev, h2.events.ConnectionTerminated):
                print("goaway=%s" % ev.error_code)
                return 0
            elif isinstance(ev, h2.events.StreamEnded):
                print("end")
                return 0
        s.sendall(c.data_to_send())
    return 0


if __name__ == "__main__":
    sys.exit(main())
