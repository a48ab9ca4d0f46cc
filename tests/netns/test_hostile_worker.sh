#!/bin/bash
# The real parent against hostile children (tests/lib/hostile_worker.c),
# one per role (control, dns, intercept): every learn is checked against
# the parent's own copy of the policy, leaves are minted only for names it
# allows, and each child that sends a message its role may not send (any
# type, well-formed) or a type it may send with extreme values is killed,
# while the table and what the workload reaches stay as they were.
. "$(dirname "$0")/nslib.sh"
ns_up
mkdir -p "$TMP/always" "$TMP/hostile" "$TMP/ca"
chown 999:999 "$TMP/hostile" "$TMP/ca"
[ -x "${EGRESSD_HOSTILE_BIN:-}" ] || { echo "EGRESSD_HOSTILE_BIN not set" >&2; exit 1; }
EGRESSD_BIN="$EGRESSD_HOSTILE_BIN" ns_egressd HOSTILE_STATE="$TMP/hostile" \
	OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true EGRESSD_CA_EXPORT="$TMP/ca/ca.pem" \
	OPENSANDBOX_EGRESS_UPSTREAM_PROXY=http://proxy.hostile.test:3128
log="$TMP/egressd.log"
touch "$TMP/hostile/go"

step() { # name err
	grep -q "^HOSTILE $1 err=$2\$" "$log"
}
# The allowed steps first (bounded), then the table as they left it.
for i in $(seq 1 300); do
	grep -q '^HOSTILE proxy-flap ' "$log" && grep -q '^HOSTILE intercept-burst-missing ' "$log" &&
		break
	sleep 0.1
done
check "control's policy is applied (the parent decodes it)" step policy 0
check "it is pushed to the dns process" step dns-policy-pushed 0
check "  and to the intercept" step intercept-policy-pushed 0
check "dns gets a marked UDP socket" step dns-socket-udp 0
check "a learn for a name the policy denies is refused" step learn-denied-name 1
check "a learn of the metadata address for an allowed name is refused" step learn-metadata 1
check "a learn of a loopback address is refused" step learn-loopback 1
check "a learn on all ports for a name allowed on 443 only is refused" step learn-all-ports 1
check "a learn on another port is refused" step learn-other-port 1
check "a learn for the allowed name and port is accepted" step learn-ok-7-days 0
check "a batch with one refused learn is refused whole" step learn-batch-one-bad 1
check "refused learns are logged" grep -q '"event":"learn_refused"' "$log"
check "a proxy address that is loopback is refused" step proxy-loopback 1
check "  nor the metadata address" step proxy-metadata 1
check "  nor one for another name than the proxy's" step proxy-other-name 1
check "a proxy address for its name is accepted (and handed to the intercept)" step proxy-ok 0
check "refused proxy addresses are logged" grep -q '"event":"upstream_proxy_address_refused"' "$log"
check "a change right after is refused as too frequent (EBUSY)" step proxy-flap 16
check "  and logged" grep -q '"event":"upstream_proxy_busy"' "$log"
rules=$(ip netns exec "$SBX" nft list chain inet egressd filter 2>&1)
check "the intercept's mark reaches the accepted proxy address" \
	grep -Eq 'meta mark 0x0*1 .*ip daddr 192\.0\.2\.90 .*tcp dport 3128 accept' <<<"$rules"
for a in 127.0.0.2 169.254.169.254 192.0.2.91 192.0.2.93; do
	refute "  and never $a" grep -q "$a" <<<"$rules"
done
check "the intercept gets a leaf for an allowed name" step leaf-allowed 0
check "  but none for a name the policy denies" step leaf-denied 1
check "the intercept gets a marked TCP socket" step intercept-socket-tcp 0
check "a burst of 300 leaf and 600 socket requests, read only after: every one answered" \
	step intercept-burst-missing 0
refute "  no reply dropped for want of room" grep -q 'reply to intercept failed' "$log"

set4=$(ip netns exec "$SBX" nft list set inet egressd learnedp4 2>&1)
check "the accepted learn is in the kernel" grep -q "192.0.2.10 . 443" <<<"$set4"
check "  with its timeout clamped to the policy's ttlMax (not 7 days)" \
	grep -Eq "192.0.2.10 . 443 timeout (360s|6m)" <<<"$set4"
for a in 192.0.2.66 169.254.169.254 127.0.0.2 192.0.2.11 192.0.2.67; do
	refute "  and $a is not (learned4)" nft_has learned4 "$a"
	refute "  and $a is not (learnedp4)" grep -q "$a " <<<"$set4"
done
table() { ip netns exec "$SBX" nft list table inet egressd | sed -E 's/ expires [0-9hms]+//g'; }
before=$(table)

# Then every message type, from every role.
touch "$TMP/hostile/fire"
TYPES=13 # CHAN_TYPE_MAX - 1, and one unknown type more
for i in $(seq 1 1200); do
	n=$(grep -c '"event":"chan_violation"' "$log")
	[ "$n" -ge $((3 * (TYPES + 1))) ] && [ "$(grep -c '^HOSTILE idle' "$log")" -ge 3 ] && break
	sleep 0.1
done
for role in control dns intercept; do
	k=$(grep '"event":"chan_violation"' "$log" | grep -c "\"role\":\"$role\"")
	check "every message type killed the $role process ($k of $((TYPES + 1)))" test "$k" = $((TYPES + 1))
done
check "a type the role may not send, well-formed, kills it (control: learn)" \
	grep -q '"event":"chan_violation","why":"control may not send learn"' "$log"
check "  (dns: policy)" grep -q '"why":"dns may not send policy"' "$log"
check "  (dns: vault)" grep -q '"why":"dns may not send vault"' "$log"
check "  (intercept: learn)" grep -q '"why":"intercept may not send learn"' "$log"
check "  (intercept: a UDP socket)" grep -q '"why":"intercept may not send socket_req"' "$log"
check "  (control: a socket)" grep -q '"why":"control may not send socket_req"' "$log"
check "  (control: a leaf)" grep -q '"why":"control may not send leaf_req"' "$log"
check "  (control: a refusal event)" grep -q '"why":"control may not send event"' "$log"
check "  (intercept: a DNS refusal event, the dns child's kind)" \
	grep -q '"why":"intercept may not send event"' "$log"
check "a type the role may send, with extreme values, kills it (dns: learn)" \
	grep -q '"why":"learn message out of range"' "$log"
check "  (control: policy)" grep -q '"why":"policy chunk out of range"' "$log"
check "  (control: vault)" grep -q '"why":"vault chunk out of range"' "$log"
check "  (an ack)" grep -q '"why":"ack out of range"' "$log"
check "an acknowledgement of nothing pushed to it kills it (control: an ack)" \
	grep -q '"why":"acknowledgement of nothing pushed to it","role":"control"' "$log"
check "  (ready)" grep -q '"why":"unexpected flags"' "$log"
check "the parent's own types kill any sender" \
	grep -q '"why":"message type not allowed in this direction"' "$log"
check "an unknown type kills it" grep -q '"why":"unknown message type"' "$log"
pids=$(grep '"event":"chan_violation"' "$log" | sed 's/.*"worker":\([0-9]*\).*/\1/' | sort -u | wc -l)
check "  each by its own pid" test "$pids" -ge $((3 * (TYPES + 1)))
gone=0
for p in $(grep '"event":"chan_violation"' "$log" | sed 's/.*"worker":\([0-9]*\).*/\1/'); do
	kill -0 "$p" 2>/dev/null || gone=$((gone + 1))
done
check "every killed child is gone ($gone)" test "$gone" -ge $((3 * (TYPES + 1)))

after=$(table)
check "the table is exactly as before the violations" test "$before" = "$after"
# Reachability: the learned address on its port only; nothing else.
ns_tcp_server 203.0.113.20 443
ns_tcp_server 203.0.113.20 80
refute "the workload reaches no public address the parent did not allow (443)" \
	wconnect 203.0.113.20 443
refute "  nor on another port (80)" wconnect 203.0.113.20 80
refute "no static allow element holds the metadata or denied addresses" \
	grep -Eq "169\.254\.169\.254 . |192\.0\.2\.66" <<<"$(ip netns exec "$SBX" nft list set inet egressd allow4 2>/dev/null)"
ns_finish
