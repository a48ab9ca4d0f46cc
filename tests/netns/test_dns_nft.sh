#!/bin/bash
# DNS proxy and nft enforcement (issue 4): denied names never reach the
# upstream, allowed names are learned before the answer, direct IPs,
# other ports, UDP and IPv6 are refused, inner answers are filtered,
# learned entries survive policy updates and expire, a root workload
# without CAP_NET_ADMIN cannot take the sidecar's mark exemption, and the
# sandbox's own networks are in the deny sets and followed when they change.
. "$(dirname "$0")/nslib.sh"
ns_up
mkdir -p "$TMP/always"
ns_dns --address=/api.allowed.test/203.0.113.10 --address=/api.allowed.test/2001:db8::10 \
	--address=/evil.test/203.0.113.20 --address=/secret.evil.test/203.0.113.20 \
	--address=/other.allowed.test/203.0.113.11 \
	--host-record=rebind.allowed.test,127.0.0.1 \
	--host-record=meta.allowed.test,169.254.169.254 \
	--host-record=mixed.allowed.test,203.0.113.11 \
	--address=/short.allowed.test/198.51.100.7 --address=/wild.allowed.test/198.51.100.7 \
	--address=/own.allowed.test/192.0.2.5
for a in 203.0.113.10 203.0.113.11 203.0.113.20 198.51.100.7; do
	ns_tcp_server "$a" 443
	ns_tcp_server "$a" 8080
done
ns_tcp_server 203.0.113.20 22
ip netns exec "$WAN" socat -T2 UDP-RECVFROM:443,bind=203.0.113.10,fork SYSTEM:'echo hello' >/dev/null 2>&1 &
PIDS+=($!)
ip netns exec "$WAN" socat -T2 TCP6-LISTEN:443,bind=[2001:db8::10],fork,reuseaddr SYSTEM:'echo hello' >/dev/null 2>&1 &
PIDS+=($!)
ip netns exec "$WAN" socat -T2 TCP6-LISTEN:443,bind=[2001:db8::20],fork,reuseaddr SYSTEM:'echo hello' >/dev/null 2>&1 &
PIDS+=($!)
ns_wait_listen "$WAN" '203.0.113.20:22'
ns_wait_listen "$WAN" '2001:db8::20\]:443'

cat >"$TMP/policy.json" <<'J'
{"defaultAction":"deny","egress":[
 {"action":"allow","target":"api.allowed.test"},
 {"action":"allow","target":"other.allowed.test"},
 {"action":"allow","target":"rebind.allowed.test"},
 {"action":"allow","target":"meta.allowed.test"},
 {"action":"allow","target":"short.allowed.test"},
 {"action":"allow","target":"own.allowed.test"},
 {"action":"allow","target":"*.wild.allowed.test"}]}
J
ns_egressd OPENSANDBOX_EGRESS_RULES="$(cat "$TMP/policy.json")"

# Marked-socket evidence: count the sidecar's own DNS packets by mark.
ip netns exec "$SBX" nft -f - <<'N'
table inet marktest {
	chain out {
		type filter hook output priority 10;
		meta mark 0x2 udp dport 53 counter
	}
}
N

# Before any lookup the allowed host's address is not reachable.
refute "an allowed name's IP is refused before it was resolved" wconnect 203.0.113.10 443

ans=$(wdig @203.0.113.53 api.allowed.test A)
check "allowed name resolves through the proxy" grep -q "203.0.113.10" <<<"$ans"
check "its address is in learned4" nft_has learned4 203.0.113.10
check "the workload can now connect to it" wconnect 203.0.113.10 443
check "the sidecar's upstream query carried the dns process's mark (dns-mark 0x2)" bash -c \
	"ip netns exec $SBX nft list chain inet marktest out | grep -Eq 'packets [1-9]'"

ans=$(wdig @203.0.113.53 secret.evil.test A)
check "a denied name gets NXDOMAIN" grep -q "NXDOMAIN" <<<"$ans"
refute "the upstream never saw the denied name" grep -q "secret.evil.test" "$TMP/dns.log"
ans=$(wdig @203.0.113.53 secret.evil.test TXT)
check "other qtypes of a denied name get NXDOMAIN too" grep -q "NXDOMAIN" <<<"$ans"
ans=$(wdig @198.51.100.7 secret.evil.test A)
check "a hard-coded resolver address is redirected to the proxy" grep -q "NXDOMAIN" <<<"$ans"
ans=$(ws dig +tcp +time=3 +tries=1 @203.0.113.53 secret.evil.test A 2>&1)
check "DNS over TCP is proxied and filtered too" grep -q "NXDOMAIN" <<<"$ans"
ans=$(ws dig +tcp +time=3 +tries=1 +short @203.0.113.53 other.allowed.test A 2>&1)
check "an allowed name resolves over TCP" grep -q "203.0.113.11" <<<"$ans"
refute "the upstream never saw any denied name" grep -q "evil.test" "$TMP/dns.log"
ans=$(wdig @203.0.113.53 api.allowed.test TXT)
check "a TXT query for an allowed name is answered locally (NODATA)" \
	bash -c 'grep -q "status: NOERROR" <<<"$1" && grep -q "ANSWER: 0," <<<"$1"' _ "$ans"
refute "and never forwarded" grep -q "query\[TXT\]" "$TMP/dns.log"
check "dns_deny is logged" grep -q '"event":"dns_deny".*secret.evil.test' "$TMP/egressd.log"

refute "direct IPv4 to a non-allowed address is refused" wconnect 203.0.113.20 443
refute "direct connection on port 22 is refused" wconnect 203.0.113.20 22
refute "an allowed address on another port is refused" wconnect 203.0.113.10 22
refute "UDP to an allowed address (non-DNS) is refused" \
	ws bash -c 'echo x | socat -T1 - UDP:203.0.113.10:443; exit $?; ' 
wdig @203.0.113.53 api.allowed.test A >/dev/null
refute "UDP (QUIC) to a name allowed without ports is refused" ws bash -c \
	"echo quic | socat -T2 - UDP:203.0.113.10:443 | grep -q hello"
refute "DoT (853) is refused" ws socat -T2 - TCP:203.0.113.10:853,connect-timeout=2
refute "direct IPv6 to a non-allowed address is refused" \
	bash -c "ip netns exec $SBX setpriv --reuid 1000 --regid 1000 --clear-groups --inh-caps=-all --bounding-set=-all -- socat -T3 - 'TCP6:[2001:db8::20]:443,connect-timeout=3' </dev/null | grep -q hello"
ans=$(wdig @203.0.113.53 api.allowed.test AAAA)
check "AAAA of an allowed name resolves" grep -q "2001:db8::10" <<<"$ans"
check "its address is in learned6" nft_has learned6 2001:db8::10
check "IPv6 connect to the learned address works" \
	bash -c "ip netns exec $SBX setpriv --reuid 1000 --regid 1000 --clear-groups --inh-caps=-all --bounding-set=-all -- socat -T3 - 'TCP6:[2001:db8::10]:443,connect-timeout=3' </dev/null | grep -q hello"

# Rebinding: inner answers are removed and never learned.
ans=$(wdig @203.0.113.53 rebind.allowed.test A)
refute "a loopback answer is removed" grep -q "127.0.0.1" <<<"$ans"
ans=$(wdig @203.0.113.53 meta.allowed.test A)
refute "a metadata answer is removed" grep -q "169.254.169.254" <<<"$ans"
refute "the metadata address is never learned" nft_has learned4 169.254.169.254
check "the filtering is logged" grep -q '"event":"dns_filter"' "$TMP/egressd.log"

# A policy update keeps the learned entries of names that stay allowed.
out=$(api PATCH /policy '[{"action":"allow","target":"extra.allowed.test"}]')
check "PATCH /policy answers 200" grep -q '^200$' <<<"$out"
check "api.allowed.test stays learned after a policy update" nft_has learned4 203.0.113.10
check "and still connects" wconnect 203.0.113.10 443
# ...and forgets the ones of names that are no longer allowed.
wdig @203.0.113.53 other.allowed.test A >/dev/null
check "other.allowed.test learned" nft_has learned4 203.0.113.11
out=$(api DELETE /policy '["other.allowed.test"]')
check "DELETE /policy answers 200" grep -q '^200$' <<<"$out"
refute "a name removed from the policy loses its learned addresses" nft_has learned4 203.0.113.11
refute "and cannot be connected to any more" wconnect 203.0.113.11 443

# Tunnelling through unique names under an allowed wildcard is limited.
refused=0
for i in $(seq 1 80); do
	ans=$(ws dig +time=2 +tries=1 @203.0.113.53 "t$i-$RANDOM.wild.allowed.test" A 2>&1)
	grep -q "status: REFUSED" <<<"$ans" && refused=$((refused + 1))
done
check "unique names under a wildcard are refused past the limit (50)" test "$refused" -ge 8
check "the upstream saw at most the limit of them" \
	test "$(grep -o 'query\[A\] t[0-9]*-[0-9]*.wild.allowed.test' "$TMP/dns.log" | sort -u | wc -l)" -le 50
check "dns_tunnel_suspected is logged" grep -q '"event":"dns_tunnel_suspected"' "$TMP/egressd.log"

# A root workload without CAP_NET_ADMIN cannot take the mark exemption.
out=$(ip netns exec "$SBX" setpriv --inh-caps=-all --bounding-set=-all -- $PY -c '
import socket
s=socket.socket()
try:
    s.setsockopt(socket.SOL_SOCKET, 36, 1)
    print("MARKED")
except PermissionError:
    print("EPERM")' 2>&1)
check "root without CAP_NET_ADMIN cannot set SO_MARK" grep -q EPERM <<<"$out"
refute "root without CAP_NET_ADMIN cannot reach a denied IP" \
	bash -c "ip netns exec $SBX setpriv --inh-caps=-all --bounding-set=-all -- socat -T3 - TCP:203.0.113.20:443,connect-timeout=3 </dev/null | grep -q hello"
refute "uid switching does not help (uid 999, the worker's)" \
	bash -c "ip netns exec $SBX setpriv --reuid 999 --regid 999 --clear-groups --inh-caps=-all --bounding-set=-all -- socat -T3 - TCP:203.0.113.20:443,connect-timeout=3 </dev/null | grep -q hello"
out=$(api GET /policy)
check "GET /policy reports dns+nft" grep -q '"enforcementMode":"dns+nft"' <<<"$out"

# The sandbox's own networks (the veth's subnets, the gateway inside them)
# are in the deny sets from the start, and followed: an address added
# later puts its subnet there, a removed one takes it out; the learned
# sets are kept across the update.
nft_wait() { # has|lacks set element: bounded wait for the parent's update
	local i
	for i in $(seq 1 50); do
		if nft_has "$2" "$3"; then [ "$1" = has ] && return 0; else [ "$1" = lacks ] && return 0; fi
		sleep 0.1
	done
	return 1
}
check "the sandbox's own subnet is in deny4" nft_has deny4 10.200.0.0/24
check "its IPv6 subnet is in deny6" nft_has deny6 fd00:200::/64
check "and its NAT64 spelling" nft_has deny6 64:ff9b::ac8:0/120
check "own_networks is logged at start" grep -q '"event":"own_networks".*10.200.0.0/24' "$TMP/egressd.log"
wdig @203.0.113.53 api.allowed.test A >/dev/null
ip -n "$SBX" addr add 10.77.0.2/24 dev "s$NS_ID"
check "an address added later puts its subnet in deny4" nft_wait has deny4 10.77.0.0/24
check "own_networks_change is logged" grep -q '"event":"own_networks_change".*10.77.0.0/24' "$TMP/egressd.log"
check "learned entries are kept across that update" nft_has learned4 203.0.113.10
ip -n "$SBX" addr del 10.77.0.2/24 dev "s$NS_ID"
check "a removed address takes its subnet out again" nft_wait lacks deny4 10.77.0.0/24
check "the sandbox's own subnet stays" nft_has deny4 10.200.0.0/24
# The DNS filter follows too: once 192.0.2.0/24 (public, so filterPrivate
# plays no part) is the sandbox's own, an answer in it is removed by the
# worker (dns_filter) rather than refused by the parent (learn_refused).
ip -n "$SBX" addr add 192.0.2.2/24 dev "s$NS_ID"
check "a public subnet added later is in deny4" nft_wait has deny4 192.0.2.0/24
ans=$(wdig @203.0.113.53 own.allowed.test A)
check "an answer in it gets an empty NOERROR" \
	bash -c 'grep -q "status: NOERROR" <<<"$1" && ! grep -q "192.0.2.5" <<<"$1"' _ "$ans"
check "the worker's filter removed it" grep -q '"event":"dns_filter".*"addr":"192.0.2.5"' "$TMP/egressd.log"
refute "the parent did not have to refuse it" grep -q '"event":"learn_refused"' "$TMP/egressd.log"
refute "it is not learned" nft_has learned4 192.0.2.5
ip -n "$SBX" addr del 192.0.2.2/24 dev "s$NS_ID"
ns_finish
