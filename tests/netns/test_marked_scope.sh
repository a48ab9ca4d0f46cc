#!/bin/bash
# The sidecar's packet mark is no blanket exemption (issue 13, "the parent
# checks its callers"): a socket carrying the mark, which is what a worker
# taken over through a parser bug can get from the parent, sends DNS only
# to the configured resolvers, and everything else it sends meets the same
# kernel sets as the workload's traffic: never an inner address, and under
# deny-all nothing the policy does not allow. The probe below stands for
# that hostile worker: root in the sandbox, setting SO_MARK itself.
. "$(dirname "$0")/nslib.sh"
ns_up
ns_dns --address=/allowed.test/203.0.113.10
ip -n "$WAN" addr add 169.254.169.254/32 dev lo
ip -n "$WAN" addr add 198.51.100.99/32 dev lo
ns_tcp_server 203.0.113.10 80
ns_tcp_server 203.0.113.20 80
ns_tcp_server 169.254.169.254 80
ip netns exec "$WAN" socat -T2 UDP-RECVFROM:53,bind=198.51.100.99,fork SYSTEM:'echo rogue' >/dev/null 2>&1 &
PIDS+=($!)
mkdir -p "$TMP/always"
ns_egressd

cat >"$TMP/marked.py" <<'EOF2'
import socket, sys
MARK = 0x1
kind, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
s = socket.socket(fam, socket.SOCK_STREAM if kind == "tcp" else socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, 36, MARK)  # SO_MARK
s.settimeout(3)
try:
    if kind == "tcp":
        s.connect((addr, port))
        data = s.recv(64)
    else:
        # A DNS query for api.allowed.test (A).
        q = bytes.fromhex("abcd01000001000000000000") + b"\x03api\x07allowed\x04test\x00" + b"\x00\x01\x00\x01"
        s.sendto(q, (addr, port))
        data = s.recv(512)
except OSError as e:
    print("refused", e)
    sys.exit(1)
print("reached", len(data))
EOF2
marked() { ip netns exec "$SBX" "$PY" "$TMP/marked.py" "$@" | grep -q '^reached'; }

# deny-all (the initial policy)
refute "a marked socket does not reach a denied address under deny-all" marked tcp 203.0.113.20 80
refute "nor the metadata address" marked tcp 169.254.169.254 80
refute "marked DNS does not reach a server that is not a configured resolver" marked udp 198.51.100.99 53
check "marked DNS reaches the configured resolver" marked udp 203.0.113.53 53

# An allowed, learned name: the sidecar's socket may reach it (passthrough and vault upstreams).
api PATCH /policy '[{"action":"allow","target":"api.allowed.test"}]' >/dev/null
ws dig +time=3 +tries=1 +short api.allowed.test >/dev/null
check "a marked socket reaches an address the policy allows (learned)" marked tcp 203.0.113.10 80
refute "but still not a denied one" marked tcp 203.0.113.20 80

# defaultAction allow: inner addresses stay closed to the mark too.
api PUT /policy '{"defaultAction":"allow","egress":[]}' >/dev/null
check "under allow-all a marked socket reaches a public address" marked tcp 203.0.113.20 80
refute "but never the metadata address" marked tcp 169.254.169.254 80
refute "and its DNS still only goes to the resolvers" marked udp 198.51.100.99 53
ns_finish
