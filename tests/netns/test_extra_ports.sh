#!/bin/bash
# OPENSANDBOX_EGRESS_MITMPROXY_EXTRA_PORTS (issue 17 item 7): upstream's
# extra mitmproxy ports map onto egressd's intercept ports. An extra port is
# redirected to the intercept's TLS listener like 443, so a connection to an
# address the policy allows by IP gets the SNI checks there, while another
# port of the same address is not intercepted. Invalid lists refuse to start.
. "$(dirname "$0")/nslib.sh"
ns_up
ns_dns
ns_tcp_server 203.0.113.20 8443
ns_tcp_server 203.0.113.20 9443
ns_wait_listen "$WAN" '203.0.113.20:9443'
RULES='{"defaultAction":"deny","egress":[{"action":"allow","target":"203.0.113.20"}]}'

# Without the variable, 8443 of an IP-allowed address is plain TCP.
ns_egressd OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true EGRESSD_CA_EXPORT="$TMP/ca/ca.pem" \
	OPENSANDBOX_EGRESS_RULES="$RULES"
check "without EXTRA_PORTS, 8443 of an allowed address is not intercepted" wconnect 203.0.113.20 8443
refute "and the nat chain redirects no 8443" bash -c \
	"ip netns exec $SBX nft list table inet egressd | grep -q 'tcp dport 8443 redirect'"
kill "$EGRESSD_PID"
wait "$EGRESSD_PID" 2>/dev/null
EGRESSD_PID=""

ns_egressd OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true EGRESSD_CA_EXPORT="$TMP/ca/ca.pem" \
	OPENSANDBOX_EGRESS_RULES="$RULES" OPENSANDBOX_EGRESS_MITMPROXY_EXTRA_PORTS=8443
check "with EXTRA_PORTS=8443 the nat chain redirects 8443 to the intercept" bash -c \
	"ip netns exec $SBX nft list table inet egressd | grep -q 'tcp dport 8443 redirect'"
check "and still 443" bash -c \
	"ip netns exec $SBX nft list table inet egressd | grep -q 'tcp dport 443 redirect'"
refute "a server-first byte stream on 8443 no longer passes (the TLS listener wants a ClientHello)" \
	wconnect 203.0.113.20 8443
check "another port of the same address is still plain TCP" wconnect 203.0.113.20 9443
ws sh -c "openssl s_client -connect 203.0.113.20:8443 -servername denied.test </dev/null" \
	>"$TMP/sclient" 2>&1
seen=0
for i in $(seq 1 50); do
	grep -q '"event":"conn_reject".*"reason":"sni_denied".*"dport":8443' "$TMP/egressd.log" &&
		{ seen=1; break; }
	sleep 0.1
done
check "a ClientHello for a denied name on 8443 is refused by the SNI check" test "$seen" = 1
kill "$EGRESSD_PID"
wait "$EGRESSD_PID" 2>/dev/null
EGRESSD_PID=""

# Invalid lists: refused at start with the variable named, nothing enforced half.
for bad in "8443,abc" "70000" "0" "8443,,9443"; do
	rc=0
	ip netns exec "$SBX" env OPENSANDBOX_EGRESS_TOKEN="$TOKEN" \
		OPENSANDBOX_EGRESS_DNS_UPSTREAM=203.0.113.53 EGRESSD_WORKER_USER=999:999 \
		OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true EGRESSD_CA_EXPORT="$TMP/ca/ca.pem" \
		OPENSANDBOX_EGRESS_MITMPROXY_EXTRA_PORTS="$bad" timeout 10 "$EGRESSD_BIN" \
		>"$TMP/bad.log" 2>&1 || rc=$?
	check "EXTRA_PORTS='$bad' refuses to start (exit 2)" test "$rc" = 2
	check "and the message names the setting" grep -qi 'extra' "$TMP/bad.log"
done
ns_finish
