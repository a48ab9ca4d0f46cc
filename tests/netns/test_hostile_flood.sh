#!/bin/bash
# A hostile intercept child (tests/lib/hostile_worker.c, HOSTILE_FLOOD)
# that asks the real parent for sockets without end and never reads the
# replies: the parent keeps the replies its channel cannot take (a burst
# of a well-behaved child's is never lost, test_hostile_worker), but only
# up to a bound, then kills that child as not reading its channel and
# starts another; the parent stays up and serves the other children.
. "$(dirname "$0")/nslib.sh"
ns_up
mkdir -p "$TMP/always" "$TMP/hostile" "$TMP/ca"
chown 999:999 "$TMP/hostile" "$TMP/ca"
[ -x "${EGRESSD_HOSTILE_BIN:-}" ] || { echo "EGRESSD_HOSTILE_BIN not set" >&2; exit 1; }
# Fewer descriptors than the replies the parent keeps (2 x 4096): the
# sockets among them must be bounded on their own.
ulimit -n 4096
EGRESSD_BIN="$EGRESSD_HOSTILE_BIN" ns_egressd HOSTILE_STATE="$TMP/hostile" HOSTILE_FLOOD=1 \
	OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true EGRESSD_CA_EXPORT="$TMP/ca/ca.pem"
log="$TMP/egressd.log"
base=$(find "/proc/$EGRESSD_PID/fd" -mindepth 1 | wc -l)
peak=$base
touch "$TMP/hostile/go"
for i in $(seq 1 1200); do
	grep -q '"why":"replies not read","role":"intercept"' "$log" && break
	kill -0 "$EGRESSD_PID" 2>/dev/null || break
	n=$(find "/proc/$EGRESSD_PID/fd" -mindepth 1 2>/dev/null | wc -l)
	[ "$n" -gt "$peak" ] && peak=$n
	sleep 0.05
done
check "the flooding intercept is killed for not reading its replies" \
	grep -q '"event":"chan_violation","why":"replies not read","role":"intercept"' "$log"
check "  once" test "$(grep -c '"why":"replies not read"' "$log")" = 1
check "  after it began" grep -q '^HOSTILE flood err=0' "$log"
refute "  before it could send all its requests (the parent read them as they came)" \
	grep -q '^HOSTILE flood-sent' "$log"
for i in $(seq 1 100); do
	[ "$(grep -c '"event":"worker_start","role":"intercept"' "$log")" -ge 2 ] && break
	sleep 0.1
done
check "another intercept is started" \
	test "$(grep -c '"event":"worker_start","role":"intercept"' "$log")" -ge 2
check "the parent is still running" kill -0 "$EGRESSD_PID"
check "  its descriptors stayed bounded meanwhile (from $base to at most $peak)" \
	test "$peak" -le $((base + 1100))
refute "  and never ran out of them" grep -q 'Too many open files' "$log"
refute "no other child was killed" grep -Eq '"event":"chan_violation".*"role":"(dns|control)"' "$log"
check "enforcement stays in place (ready)" test -f "$TMP/ready"
ns_finish
