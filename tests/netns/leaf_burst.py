"""leaf_burst.py CAFILE HOST PORT N: N TLS connections whose ClientHellos all
leave before any handshake completes (non-blocking sockets, each hello sent
before the first answer is read), then every handshake completed (bounded:
10 s). Prints "handshakes OK/N"."""
import select, socket, ssl, sys, time

ca, host, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ctx = ssl.create_default_context(cafile=ca)
addr = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)[0][4]
socks = []
for _ in range(n):
    s = socket.create_connection(addr, timeout=5)
    s.setblocking(False)
    socks.append(ctx.wrap_socket(s, server_hostname=host, do_handshake_on_connect=False))
pending = set(range(n))
done = 0
deadline = time.monotonic() + 10
while pending and time.monotonic() < deadline:
    for i in list(pending):
        try:
            socks[i].do_handshake()
            pending.discard(i)
            done += 1
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            pass
        except (ssl.SSLError, OSError):
            pending.discard(i)
    if pending:
        select.select([socks[i] for i in pending], [], [], 0.05)
print("handshakes %d/%d" % (done, n), flush=True)
