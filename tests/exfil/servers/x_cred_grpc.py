#!/usr/bin/python3
"""x_cred_grpc.py ADDR CERTDIR LOGDIR: a gRPC-shaped HTTP/2 upstream for
EX-174 (python3-h2). Who runs it: the exfil case, as root inside its wan
namespace, on a documentation address the case adds to wan's lo; TLS on 443
(ALPN h2) with the *.wild.allowed.test leaf of the run's PublicTestCA. It
never opens an outbound connection, every read is bounded (10 s), and it
serves at most 200 connections.

Every request gets a gRPC "unauthenticated" answer: HEADERS (:status 200,
content-type application/grpc), no message, then trailers grpc-status: 16
and grpc-message: "invalid token " + the received Authorization value,
percent-encoded as gRPC does (space as %20, so the secret itself is in its
raw bytes). LOGDIR/grpc.log gets one line per request (:path and whether an
Authorization field came, never its value), and one line per connection
with the client's SETTINGS_ENABLE_PUSH ("settings enable_push=N"). A
request whose :path ends in /Push is first answered with a PUSH_PROMISE
(written by hand: python3-h2 will not push to a client that disabled
push), which a client that disabled push must treat as a connection error.
"""
import os
import socket
import ssl
import struct
import sys
import threading

import h2.config
import h2.connection
import h2.events
import h2.exceptions

ADDR, CERTDIR, LOGDIR = sys.argv[1], sys.argv[2], sys.argv[3]
LOCK = threading.Lock()


def log(line):
    with LOCK, open(os.path.join(LOGDIR, "grpc.log"), "a") as f:
        f.write(line + "\n")


def grpc_pct(v):
    return "".join(c if 0x20 < ord(c) < 0x7f and c != "%" else
                   "%%%02X" % ord(c) for c in v)


def push_promise(sid, path):
    """A PUSH_PROMISE frame for stream SID promising stream 2, its header
    block literals without indexing (no HPACK state is touched)."""
    def lit(k, v):
        k, v = k.encode(), v.encode()
        return b"\x00" + bytes([len(k)]) + k + bytes([len(v)]) + v
    block = struct.pack(">I", 2) + lit(":method", "GET") + \
        lit(":scheme", "https") + lit(":authority", "grpc.wild.allowed.test") + \
        lit(":path", path[:100])
    return struct.pack(">I", len(block))[1:] + bytes([5, 4]) + \
        struct.pack(">I", sid) + block


def handle(raw, ctx):
    try:
        raw.settimeout(10)
        s = ctx.wrap_socket(raw, server_side=True)
    except (OSError, ssl.SSLError):
        raw.close()
        return
    c = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=False,
                                  validate_inbound_headers=False))
    c.initiate_connection()
    s.sendall(c.data_to_send())
    heads = {}
    said = False
    try:
        for _ in range(200):
            d = s.recv(65536)
            if not d:
                break
            for ev in c.receive_data(d):
                if isinstance(ev, h2.events.RemoteSettingsChanged) and not said:
                    said = True
                    log("settings enable_push=%d" % c.remote_settings.enable_push)
                if isinstance(ev, h2.events.RequestReceived):
                    heads[ev.stream_id] = {k.decode("latin-1").lower():
                                           v.decode("latin-1")
                                           for k, v in ev.headers}
                elif isinstance(ev, h2.events.DataReceived):
                    c.acknowledge_received_data(ev.flow_controlled_length,
                                                ev.stream_id)
                elif isinstance(ev, h2.events.StreamEnded):
                    h = heads.pop(ev.stream_id, {})
                    auth = h.get("authorization", "")
                    log("%s auth=%s" % (h.get(":path", "?"),
                                        "yes" if auth else "no"))
                    if h.get(":path", "").endswith("/Push"):
                        s.sendall(c.data_to_send() + push_promise(ev.stream_id, "/pushed"))
                    c.send_headers(ev.stream_id,
                                   [(":status", "200"),
                                    ("content-type", "application/grpc")])
                    c.send_headers(ev.stream_id,
                                   [("grpc-status", "16"),
                                    ("grpc-message",
                                     grpc_pct("invalid token " + auth))],
                                   end_stream=True)
            s.sendall(c.data_to_send())
    except (OSError, ssl.SSLError, h2.exceptions.ProtocolError):
        pass
    finally:
        try:
            s.close()
        except OSError:
            pass


def main():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(CERTDIR, "wild.pem"),
                        os.path.join(CERTDIR, "wild.key"))
    ctx.set_alpn_protocols(["h2"])
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((ADDR, 443))
    ls.listen(64)
    open(os.path.join(LOGDIR, "grpc.ready"), "w").close()
    for _ in range(200):
        conn, _ = ls.accept()
        threading.Thread(target=handle, args=(conn, ctx), daemon=True).start()


if __name__ == "__main__":
    main()
