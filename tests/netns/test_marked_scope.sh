#!/bin/bash
# The sidecar's packet marks are no blanket exemption (issue 13, "the
# parent checks its callers"). A socket with the dns process's mark
# (dns-mark, 0x2), which is what a dns process taken over through a parser
# bug can get from the parent, reaches the configured resolvers and nothing
# else. A socket with the other mark (0x1, the intercept's) sends no DNS,
# and everything else it sends meets the same kernel sets as the
# workload's traffic: never an inner address, and under deny-all nothing
# the policy does not allow. The probe below stands for those hostile
# children: root in the sandbox, setting SO_MARK itself.
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
kind, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
MARK = int(sys.argv[4], 0) if len(sys.argv) > 4 else 0x1
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
dnsmarked() { marked "$@" 0x2; }

# deny-all (the initial policy)
refute "a marked socket does not reach a denied address under deny-all" marked tcp 203.0.113.20 80
refute "nor the metadata address" marked tcp 169.254.169.254 80
refute "the intercept's mark sends no DNS, not to a rogue server" marked udp 198.51.100.99 53
refute "  nor to the configured resolver" marked udp 203.0.113.53 53
check "the dns process's mark reaches the configured resolver" dnsmarked udp 203.0.113.53 53
refute "  but not a server that is not a configured resolver" dnsmarked udp 198.51.100.99 53
refute "  nor a denied address" dnsmarked tcp 203.0.113.20 80
refute "  nor the metadata address" dnsmarked tcp 169.254.169.254 80

# An allowed, learned name: the sidecar's socket may reach it (passthrough and vault upstreams).
api PATCH /policy '[{"action":"allow","target":"api.allowed.test"}]' >/dev/null
ws dig +time=3 +tries=1 +short api.allowed.test >/dev/null
check "a marked socket reaches an address the policy allows (learned)" marked tcp 203.0.113.10 80
refute "but still not a denied one" marked tcp 203.0.113.20 80
refute "the dns process's mark does not reach even the allowed address" dnsmarked tcp 203.0.113.10 80

# defaultAction allow: inner addresses stay closed to the mark too.
api PUT /policy '{"defaultAction":"allow","egress":[]}' >/dev/null
check "under allow-all a marked socket reaches a public address" marked tcp 203.0.113.20 80
refute "but never the metadata address" marked tcp 169.254.169.254 80
refute "and it sends no DNS" marked udp 198.51.100.99 53
refute "the dns process's mark reaches no public address under allow-all" dnsmarked tcp 203.0.113.20 80
refute "  nor a rogue DNS server" dnsmarked udp 198.51.100.99 53
check "  only the resolver" dnsmarked udp 203.0.113.53 53
ns_finish
