#!/usr/bin/python3
"""grpc_fixture.py: the two ends of tests/netns/test_grpc.sh.

  server ADDR CERT KEY DIR   (root, in the fake internet)
      A real gRPC server (python3-grpcio) on 127.0.0.1:50051 of its own
      namespace, behind a TLS front on ADDR:443 that chooses by ALPN: h2 is
      piped to the gRPC server, http/1.1 is answered here (an echo of the
      request head as JSON). ADDR:80 answers plain HTTP/1.1 the same way.
      Methods (raw bytes, no protobuf): /echo.Echo/Unary answers
      "echo:<authorization>", /echo.Echo/Stream streams three messages (the
      second "auth:<authorization>"), /echo.Echo/Fail fails PERMISSION_DENIED
      with the message "bad key: <authorization>", /echo.Echo/Bidi answers
      each message "got:<message>" as it arrives, /other.Svc/Unary as Unary.
      Every gRPC call sets the trailing metadata x-echo-auth to the
      authorization it received. DIR/calls.log gets one JSON line per call
      (method, request body, metadata), DIR/h1.log one per HTTP/1.1 request;
      DIR/ready once listening. Upstream of the sidecar, so it may log the
      secret it receives: that is what the test checks.

  call CA TARGET METHOD KIND BODY [key=value ...] [--authority=NAME]
      (the workload) One gRPC call through a TLS channel trusting CA only,
      KIND unary, stream (server streaming), bidi (three messages, then the
      request's end) or pingpong (each message once the previous one is
      answered), 8 s deadline; prints one JSON object: code,
      details, messages, initial and trailing metadata.

  h2raw CA HOST OTHER   (the workload)
      python3-h2 on one TLS connection to HOST (SNI HOST, ALPN h2): streams 1
      (:authority HOST) and 3 (:authority OTHER) at once, then, both ended,
      stream 5 (HOST again); each a gRPC unary call to /echo.Echo/Unary with
      a marker body and the fake key. Prints JSON: the ALPN, per stream the
      status, headers, trailers, data, reset code; a GOAWAY's code.

Never opens a connection outside the test's namespaces (the names resolve
there only); every wait is bounded.
"""
import json
import os
import socket
import ssl
import struct
import sys
import threading
import time

LOCK = threading.Lock()


def jlog(path, obj):
    with LOCK, open(path, "a") as f:
        f.write(json.dumps(obj) + "\n")


def frame(msg):
    """One gRPC length-prefixed message, uncompressed."""
    return b"\x00" + struct.pack("!I", len(msg)) + msg


# ---------------------------------------------------------------- server ----


def serve(addr, cert, key, d):
    import grpc
    from concurrent import futures

    calls = os.path.join(d, "calls.log")

    def auth_of(ctx):
        md = list(ctx.invocation_metadata())
        return md, ",".join(v for k, v in md if k == "authorization")

    def record(name, req, ctx):
        md, auth = auth_of(ctx)
        jlog(calls, {"method": name, "body": req.decode("latin-1"),
                     "md": [[k, v if isinstance(v, str) else v.decode("latin-1")]
                            for k, v in md]})
        ctx.set_trailing_metadata((("x-echo-auth", auth or "none"),))
        return auth

    def unary(name):
        def h(req, ctx):
            return b"echo:" + record(name, req, ctx).encode()
        return grpc.unary_unary_rpc_method_handler(h)

    def stream(req, ctx):
        auth = record("/echo.Echo/Stream", req, ctx)
        yield b"part-0"
        yield b"auth:" + auth.encode()
        yield b"part-2"

    def bidi(reqs, ctx):
        """Each message answered as it arrives: "got:<message>"."""
        first = True
        for req in reqs:
            if first:
                record("/echo.Echo/Bidi", req, ctx)
                first = False
            yield b"got:" + req

    def fail(req, ctx):
        auth = record("/echo.Echo/Fail", req, ctx)
        ctx.abort(grpc.StatusCode.PERMISSION_DENIED, "bad key: " + auth)

    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    srv.add_generic_rpc_handlers((
        grpc.method_handlers_generic_handler("echo.Echo", {
            "Unary": unary("/echo.Echo/Unary"),
            "Stream": grpc.unary_stream_rpc_method_handler(stream),
            "Fail": grpc.unary_unary_rpc_method_handler(fail),
            "Bidi": grpc.stream_stream_rpc_method_handler(bidi)}),
        grpc.method_handlers_generic_handler("other.Svc", {
            "Unary": unary("/other.Svc/Unary")}),
    ))
    srv.add_insecure_port("127.0.0.1:50051")
    srv.start()

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    h1log = os.path.join(d, "h1.log")

    def h1(s, scheme):
        """HTTP/1.1 keep-alive: each request's head echoed back as JSON."""
        buf = b""
        for _ in range(100):
            while b"\r\n\r\n" not in buf:
                c = s.recv(65536)
                if not c:
                    return
                buf += c
            head, _, buf = buf.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            hdrs = [l.split(":", 1) for l in lines[1:] if ":" in l]
            hdrs = [[k.strip(), v.strip()] for k, v in hdrs]
            n = sum(int(v) for k, v in hdrs if k.lower() == "content-length")
            while len(buf) < n:
                c = s.recv(65536)
                if not c:
                    return
                buf += c
            body, buf = buf[:n], buf[n:]
            rec = {"scheme": scheme, "requestline": lines[0], "headers": hdrs,
                   "body": body.decode("latin-1")}
            jlog(h1log, rec)
            out = json.dumps(rec, indent=1).encode()
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(out) + out)

    def relay(s, g):
        """Both ways in one thread: an SSL socket must not be read and
        written from two threads at once (that broke streams mid-call)."""
        import select
        deadline = time.time() + 60
        while time.time() < deadline:
            if s.pending() == 0:
                r, _, _ = select.select([s, g], [], [], 1)
            else:
                r = [s]
            try:
                if s in r:
                    c = s.recv(65536)
                    if not c:
                        break
                    g.sendall(c)
                if g in r:
                    c = g.recv(65536)
                    if not c:
                        break
                    s.sendall(c)
            except ssl.SSLWantReadError:
                continue
            except OSError:
                break
        for x in (s, g):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def conn(raw, tls):
        raw.settimeout(30)
        try:
            if not tls:
                h1(raw, "http")
                return
            s = ctx.wrap_socket(raw, server_side=True)
            if s.selected_alpn_protocol() == "h2":
                g = socket.create_connection(("127.0.0.1", 50051), timeout=30)
                relay(s, g)
                g.close()
            else:
                h1(s, "https")
            s.close()
        except (OSError, ssl.SSLError):
            pass
        finally:
            raw.close()

    def listen(port, tls):
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((addr, port))
        ls.listen(64)
        return ls

    def accept(ls, tls):
        for _ in range(2000):
            raw, _ = ls.accept()
            threading.Thread(target=conn, args=(raw, tls), daemon=True).start()

    socks = [(listen(443, True), True), (listen(80, False), False)]
    for ls, tls in socks:
        threading.Thread(target=accept, args=(ls, tls), daemon=True).start()
    open(os.path.join(d, "ready"), "w").close()
    time.sleep(600)


# ---------------------------------------------------------------- client ----


def call(ca, target, method, kind, body, args):
    import grpc

    authority = None
    md = []
    for a in args:
        if a.startswith("--authority="):
            authority = a.split("=", 1)[1]
        else:
            k, _, v = a.partition("=")
            md.append((k, v))
    opts = []
    if authority:
        # The certificate is checked (and SNI sent) for the target's name,
        # while :authority names another host.
        opts = [("grpc.default_authority", authority),
                ("grpc.ssl_target_name_override", target.split(":")[0])]
    creds = grpc.ssl_channel_credentials(root_certificates=open(ca, "rb").read())
    out = {"messages": []}
    with grpc.secure_channel(target, creds, options=opts) as ch:
        try:
            if kind == "unary":
                fn = ch.unary_unary(method)
                resp, c = fn.with_call(body.encode(), metadata=md, timeout=8)
                out["messages"].append(resp.decode("latin-1"))
            elif kind == "stream":
                c = ch.unary_stream(method)(body.encode(), metadata=md, timeout=8)
                for m in c:
                    out["messages"].append(m.decode("latin-1"))
            else:
                # bidi: three messages, then the end of the request stream;
                # pingpong: each message only once the previous one's
                # answer arrived (a conversation).
                got = threading.Semaphore(0)

                def reqs():
                    for i in range(3):
                        if kind == "pingpong" and i and not got.acquire(timeout=8):
                            return
                        yield ("%s-%d" % (body, i)).encode()
                c = ch.stream_stream(method)(reqs(), metadata=md, timeout=8)
                for m in c:
                    out["messages"].append(m.decode("latin-1"))
                    got.release()
            out["code"] = c.code().name
            out["details"] = c.details()
            out["initial"] = [list(x) for x in c.initial_metadata() or ()]
            out["trailing"] = [list(x) for x in c.trailing_metadata() or ()]
        except grpc.RpcError as e:
            out["code"] = e.code().name
            out["details"] = e.details()
            out["trailing"] = [list(x) for x in (e.trailing_metadata() or ())]
    print(json.dumps(out))


def h2raw(ca, host, other):
    import h2.config
    import h2.connection
    import h2.events

    ctx = ssl.create_default_context(cafile=ca)
    ctx.set_alpn_protocols(["h2"])
    s = ctx.wrap_socket(socket.create_connection((host, 443), timeout=8),
                        server_hostname=host)
    out = {"alpn": s.selected_alpn_protocol()}
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    c.initiate_connection()

    def req(sid, authority, marker):
        c.send_headers(sid, [(":method", "POST"), (":scheme", "https"),
                             (":authority", authority), (":path", "/echo.Echo/Unary"),
                             ("content-type", "application/grpc"), ("te", "trailers"),
                             ("authorization", "Bearer " + os.environ.get("FAKE_KEY", "fake")),
                             ("x-probe", marker)])
        c.send_data(sid, frame(marker.encode()), end_stream=True)
        out[str(sid)] = {"authority": authority, "data": ""}

    req(1, host, "h2raw-same-1")
    req(3, other, "h2raw-other-3")
    s.sendall(c.data_to_send())
    done = set()
    sent5 = False
    deadline = time.time() + 8
    while time.time() < deadline and len(done) < 3:
        if not sent5 and {1, 3} <= done:
            req(5, host, "h2raw-same-5")
            s.sendall(c.data_to_send())
            sent5 = True
        try:
            d = s.recv(65536)
        except socket.timeout:
            break
        if not d:
            break
        for ev in c.receive_data(d):
            sid = getattr(ev, "stream_id", None)
            st = out.get(str(sid))
            if isinstance(ev, h2.events.ResponseReceived):
                h = [[k.decode(), v.decode("latin-1")] for k, v in ev.headers]
                st["headers"] = h
                st["status"] = dict(h).get(":status")
            elif isinstance(ev, h2.events.TrailersReceived):
                st["trailers"] = [[k.decode(), v.decode("latin-1")] for k, v in ev.headers]
            elif isinstance(ev, h2.events.DataReceived):
                st["data"] += ev.data.decode("latin-1")
                c.acknowledge_received_data(ev.flow_controlled_length, sid)
            elif isinstance(ev, h2.events.StreamEnded):
                done.add(sid)
            elif isinstance(ev, h2.events.StreamReset):
                st["reset"] = int(ev.error_code)
                done.add(sid)
            elif isinstance(ev, h2.events.ConnectionTerminated):
                out["goaway"] = int(ev.error_code)
                deadline = 0
        s.sendall(c.data_to_send())
    print(json.dumps(out))


def main():
    a = sys.argv[1:]
    if a[:1] == ["server"] and len(a) == 5:
        serve(*a[1:])
    elif a[:1] == ["call"] and len(a) >= 6:
        call(a[1], a[2], a[3], a[4], a[5], a[6:])
    elif a[:1] == ["h2raw"] and len(a) == 4:
        h2raw(a[1], a[2], a[3])
    else:
        sys.exit("usage: grpc_fixture.py server ADDR CERT KEY DIR | "
                 "call CA TARGET METHOD unary|stream BODY [k=v ...] [--authority=NAME] | "
                 "h2raw CA HOST OTHER")


if __name__ == "__main__":
    main()
