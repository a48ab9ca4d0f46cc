#!/bin/bash
# The real parent against a hostile worker (tests/lib/hostile_worker.c):
# every learn is checked against the parent's own copy of the policy, the
# parent computes the static sets itself, and a message the worker may not
# send kills it while the table stays as it was.
. "$(dirname "$0")/nslib.sh"
ns_up
mkdir -p "$TMP/always" "$TMP/hostile"
chown 999:999 "$TMP/hostile"
[ -x "${EGRESSD_HOSTILE_BIN:-}" ] || { echo "EGRESSD_HOSTILE_BIN not set" >&2; exit 1; }
EGRESSD_BIN="$EGRESSD_HOSTILE_BIN" ns_egressd HOSTILE_STATE="$TMP/hostile"
log="$TMP/egressd.log"
touch "$TMP/hostile/go"

# Seven incarnations, one violation each; the parent restarts with backoff.
n=0
for i in $(seq 1 300); do
	n=$(grep -c '"event":"chan_violation"' "$log")
	[ "$n" -ge 7 ] && grep -q 'HOSTILE idle' "$log" && break
	sleep 0.1
done

step() { # name err
	grep -q "^HOSTILE $1 err=$2\$" "$log"
}
check "the worker's own policy is applied (the parent decodes it)" step policy 0
check "a learn for a name the policy denies is refused" step learn-denied-name 1
check "a learn of the metadata address for an allowed name is refused" step learn-metadata 1
check "a learn of a loopback address is refused" step learn-loopback 1
check "a learn on all ports for a name allowed on 443 only is refused" step learn-all-ports 1
check "a learn on another port is refused" step learn-other-port 1
check "a learn for the allowed name and port is accepted" step learn-ok-7-days 0
check "a batch with one refused learn is refused whole" step learn-batch-one-bad 1
check "refused learns are logged" grep -q '"event":"learn_refused"' "$log"

set4=$(ip netns exec "$SBX" nft list set inet egressd learnedp4 2>&1)
check "the accepted learn is in the kernel" grep -q "192.0.2.10 . 443" <<<"$set4"
check "  with its timeout clamped to the policy's ttlMax (not 7 days)" \
	grep -Eq "192.0.2.10 . 443 timeout (360s|6m)" <<<"$set4"
for a in 192.0.2.66 169.254.169.254 127.0.0.2 192.0.2.11 192.0.2.67 192.0.2.12 192.0.2.13; do
	refute "  and $a is not (learned4)" nft_has learned4 "$a"
	refute "  and $a is not (learnedp4)" grep -q "$a " <<<"$set4"
done

check "every violation killed its worker (7 violations)" test "$n" -ge 7
for why in "policy chunk out of sequence" "message type not allowed in this direction" \
	"unknown message type" "learn name not canonical" "learn batch too long" \
	"policy begun twice" "leaf request without interception"; do
	check "  killed for: $why" grep -q "\"event\":\"chan_violation\",\"why\":\"$why\"" "$log"
done
pids=$(grep '"event":"chan_violation"' "$log" | sed 's/.*"worker":\([0-9]*\).*/\1/' | sort -u | wc -l)
check "  each by its own pid" test "$pids" -ge 7
for p in $(grep '"event":"chan_violation"' "$log" | sed 's/.*"worker":\([0-9]*\).*/\1/'); do
	refute "  worker $p is gone" kill -0 "$p"
done
# Reachability: the learned address on its port only; nothing else.
ns_tcp_server 203.0.113.20 443
ns_tcp_server 203.0.113.20 80
refute "the workload reaches no public address the parent did not allow (443)" \
	wconnect 203.0.113.20 443
refute "  nor on another port (80)" wconnect 203.0.113.20 80
tbl=$(ip netns exec "$SBX" nft list table inet egressd)
check "the table is still installed" test -n "$tbl"
refute "no static allow element holds the metadata or denied addresses" \
	grep -Eq "169\.254\.169\.254 . |192\.0\.2\.66" <<<"$(ip netns exec "$SBX" nft list set inet egressd allow4 2>/dev/null)"
ns_finish
