#!/bin/bash
# DoH through an allowed resolver host (issue 14, item 10d):
# OPENSANDBOX_EGRESS_BLOCK_DOH_443 with OPENSANDBOX_EGRESS_DOH_BLOCKLIST
# refuses port 443 to the listed resolvers even where the policy allows the
# address (other ports and other hosts keep working); with the flag and no
# list every port 443 is refused; an invalid entry stops the start.
. "$(dirname "$0")/nslib.sh"
ns_up
mkdir -p "$TMP/always"
for a in 203.0.113.53 203.0.113.20; do
	ns_tcp_server "$a" 443
	ns_tcp_server "$a" 80
done
ip netns exec "$WAN" socat -T2 "TCP6-LISTEN:443,bind=[2001:db8::53],fork,reuseaddr" SYSTEM:'echo hello' \
	>/dev/null 2>&1 &
PIDS+=($!)
ns_wait_listen "$WAN" '203.0.113.20:80'
ns_wait_listen "$WAN" '2001:db8::53\]:443'
RULES='{"defaultAction":"deny","egress":[{"action":"allow","target":"203.0.113.53"},{"action":"allow","target":"203.0.113.20"},{"action":"allow","target":"2001:db8::53"}]}'

stop() {
	kill "$EGRESSD_PID" 2>/dev/null
	wait "$EGRESSD_PID" 2>/dev/null
	EGRESSD_PID=""
}

# Without the flag, the allowed resolver answers on 443 (the hole).
ns_egressd OPENSANDBOX_EGRESS_RULES="$RULES"
check "without BLOCK_DOH_443, 203.0.113.53:443 is reachable (allowed by IP)" wconnect 203.0.113.53 443
refute "  and the table has no DoH set" ip netns exec "$SBX" nft list set inet egressd doh4
stop

# The blocklist: 443 to the listed resolvers is refused, nothing else.
ns_egressd OPENSANDBOX_EGRESS_BLOCK_DOH_443=true \
	OPENSANDBOX_EGRESS_DOH_BLOCKLIST=" 203.0.113.53 , 2001:db8::53/128,198.51.100.0/24" \
	OPENSANDBOX_EGRESS_RULES="$RULES"
refute "DoH to a listed resolver (203.0.113.53:443) is refused although its address is allowed" \
	wconnect 203.0.113.53 443
refute "DoH to a listed IPv6 resolver ([2001:db8::53]:443) is refused" wconnect '[2001:db8::53]' 443
check "the listed resolver stays reachable on another port (80)" wconnect 203.0.113.53 80
check "an unlisted allowed host keeps 443" wconnect 203.0.113.20 443
refused() { ws socat -T3 - "TCP:$1:$2,connect-timeout=3" </dev/null 2>&1 | grep -qi 'refused'; }
check "the refusal is a reset (fails fast)" refused 203.0.113.53 443
check "doh4 holds the IPv4 entries" nft_has doh4 '198.51.100.0/24'
check "doh6 holds the IPv6 entry" nft_has doh6 '2001:db8::53'
check "UDP 443 (DoH over HTTP/3) is refused to the list too" \
	bash -c "ip netns exec $SBX nft list chain inet egressd filter | grep -Eq 'udp dport 443 ip daddr @doh4 (log prefix \"egressd:doh\" group [0-9]+ snaplen 128 )?reject'"
stop

# The flag alone: every port 443 is refused, other ports are not.
ns_egressd OPENSANDBOX_EGRESS_BLOCK_DOH_443=1 OPENSANDBOX_EGRESS_RULES="$RULES"
refute "with BLOCK_DOH_443 and no list, 203.0.113.20:443 is refused" wconnect 203.0.113.20 443
check "  and 203.0.113.20:80 still works" wconnect 203.0.113.20 80
stop

# An entry that is not an IP/CIDR is refused at start, not skipped.
rm -f "$TMP/ready"
ip netns exec "$SBX" env OPENSANDBOX_EGRESS_TOKEN="$TOKEN" OPENSANDBOX_EGRESS_BLOCK_DOH_443=yes \
	OPENSANDBOX_EGRESS_DOH_BLOCKLIST="203.0.113.53,dns.example" EGRESSD_WORKER_USER=999:999 \
	EGRESSD_READY_FILE="$TMP/ready" timeout 10 "$EGRESSD_BIN" >"$TMP/bad.log" 2>&1
check "an invalid DoH blocklist entry stops the start" grep -q 'doh-blocklist: invalid entry "dns.example"' "$TMP/bad.log"
refute "  and egressd never became ready" test -f "$TMP/ready"
ns_finish
