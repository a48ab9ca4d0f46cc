#!/bin/bash
# DNS upstream health (issue 17 item 6): OPENSANDBOX_EGRESS_DNS_UPSTREAM_TIMEOUT,
# _DNS_UPSTREAM_PROBE and _DNS_UPSTREAM_PROBE_INTERVAL_SEC with upstream's
# meaning, and OPENSANDBOX_EGRESS_NAMESERVER_EXEMPT, which egressd does not
# grant. Two fake resolvers in the fake internet (dns_health_upstream.py at
# 192.0.2.53, answering 198.51.100.1, and 192.0.2.54, answering 198.51.100.2)
# log every query and are switched between answering, answering probes only
# and silent by a mode file. egressd has both as upstreams, timeout 1 s,
# probe interval 1 s. Checked: probes at start (. NS); a query the first one
# drops costs one timeout and is answered by the second; once a probe ejects
# the silent first one, queries no longer reach it (only probes do); a probe
# answer brings it back and it serves again; both silent: SERVFAIL; with
# NAMESERVER_EXEMPT the workload's direct query to that address is still
# filtered (a denied name is refused, the resolver never sees it); a probe
# name is asked as type A; invalid values fall back as upstream's, warned.
# Every wait polls a condition, bounded.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/fixture.sh
source "$HERE/../lib/fixture.sh"

PASS=0
FAIL=0
ok() { PASS=$((PASS + 1)); echo "ok   - $*"; }
not_ok() { FAIL=$((FAIL + 1)); echo "FAIL - $*"; }
check() { local d=$1; shift; if "$@" >/dev/null 2>&1; then ok "$d"; else not_ok "$d"; fi; }
refute() { local d=$1; shift; if "$@" >/dev/null 2>&1; then not_ok "$d"; else ok "$d"; fi; }

fx_init "dnsh$$"
cleanup() {
	fx_down
	if [ "${KEEP_TMP:-0}" = 1 ]; then echo "kept $FX_DIR"; else rm -rf "$FX_DIR"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fx_up || exit 2
fx_safety || exit 2
fx_servers_start || exit 2
A=192.0.2.53
B=192.0.2.54
RA=$FX_DIR/upA
RB=$FX_DIR/upB
for r in "$A:198.51.100.1:$RA" "$B:198.51.100.2:$RB"; do
	IFS=: read -r addr ans dir <<<"$r"
	ip -n "$FX_WAN" addr add "$addr/32" dev lo || exit 2
	mkdir -p "$dir"
	echo answer >"$dir/mode"
	: >"$dir/queries"
	ip netns exec "$FX_WAN" "$FX_PY" "$HERE/dns_health_upstream.py" "$addr" "$ans" "$dir" \
	    >"$dir/stdout" 2>&1 &
	fx_track $!
	fx_wait_file "$dir/ready" 100 || { echo "fake resolver $addr did not start"; exit 2; }
done
mkdir -p "$FX_DIR/out"
LOG=$FX_DIR/egressd.log
POLICY='{"defaultAction":"deny","egress":[{"action":"allow","target":"www.ok.test"}]}'

# until TENTHS CMD...: poll CMD every 0.1 s, at most TENTHS times.
until_ok() {
	local n=$1 i
	shift
	for i in $(seq 1 "$n"); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	return 1
}
count() { grep -c -- "^$2\$" "$1/queries" 2>/dev/null; } # dir "name type"
has_probe() { [ "$(count "$1" ". 2")" -ge 1 ]; }
more() { [ "$(count "$1" "$2")" -gt "$3" ]; } # dir "name type" N: more than N of them
logline() { grep "\"event\":\"$1\"" "$LOG" | grep -q "\"upstream\":\"$2\""; }
nlog() { grep "\"event\":\"$1\"" "$LOG" | grep -c "\"upstream\":\"$2\""; }
# ask NAME [dig args...]: the workload asks; the reply in $FX_DIR/out/dig.
ask() {
	local name=$1
	shift
	fx_ws dig +time=6 +tries=1 "$@" "$name" A >"$FX_DIR/out/dig" 2>&1
}
answered_by() { ask www.ok.test && grep -q "status: NOERROR" "$FX_DIR/out/dig" &&
	grep -qE "www\.ok\.test\.[[:space:]].*A[[:space:]]+$1\$" "$FX_DIR/out/dig"; }

fx_egressd_start "$POLICY" OPENSANDBOX_EGRESS_DNS_UPSTREAM="$A,$B" \
    OPENSANDBOX_EGRESS_DNS_UPSTREAM_TIMEOUT=1 OPENSANDBOX_EGRESS_DNS_UPSTREAM_PROBE_INTERVAL_SEC=1 \
    OPENSANDBOX_EGRESS_NAMESERVER_EXEMPT="$B" || { cat "$LOG"; exit 1; }

check "the settings are logged (timeout 1, probe timeout 1, interval 1, . NS)" grep -q \
    '"event":"dns_upstream_health","timeout_s":1,"probe_timeout_s":1,"probe_interval_s":1,"probe":". NS"' "$LOG"
check "the first resolver gets a probe (. NS) at start" until_ok 50 has_probe "$RA"
check "so does the second" until_ok 50 has_probe "$RB"
check "probes come again (interval 1 s)" until_ok 50 more "$RA" ". 2" 1
check "a query is answered by the first resolver" answered_by 198.51.100.1

# NAMESERVER_EXEMPT is not granted: the direct query to B is still ours.
check "NAMESERVER_EXEMPT is warned about as not granted" bash -c \
    "grep '\"event\":\"env_ignored\"' '$LOG' | grep OPENSANDBOX_EGRESS_NAMESERVER_EXEMPT | grep -q 'not granted'"
ask denied.example.test "@$B"
check "with NAMESERVER_EXEMPT=$B, a denied name asked of $B directly is refused" \
    grep -q "status: NXDOMAIN" "$FX_DIR/out/dig"
check "and $B never saw it" test "$(count "$RB" "denied.example.test 1")" = 0
ask www.ok.test "@$B"
check "an allowed name asked of $B directly is answered by the proxy, from the first resolver" \
    grep -qE "A[[:space:]]+198\.51\.100\.1\$" "$FX_DIR/out/dig"

# A drops queries (but answers probes): one timeout, then B answers.
echo noquery >"$RA/mode"
qa=$(count "$RA" "www.ok.test 1")
check "the first resolver drops the query: the second answers it" answered_by 198.51.100.2
check "the first resolver did get it (one try)" test "$(count "$RA" "www.ok.test 1")" = $((qa + 1))
check "upstream 192.0.2.53:53 exchange error is logged" logline dns_upstream_error "$A:53"

# A silent: a probe fails, A is ejected, queries no longer reach it.
echo silent >"$RA/mode"
check "upstream probe 192.0.2.53:53 failed is logged" until_ok 50 logline dns_upstream_probe_fail "$A:53"
check "and the first resolver is out (dns_upstream_down)" until_ok 50 logline dns_upstream_down "$A:53"
qa=$(count "$RA" "www.ok.test 1")
pa=$(count "$RA" ". 2")
for i in 1 2 3; do
	check "query $i after the ejection is answered by the second resolver" answered_by 198.51.100.2
done
check "the ejected resolver got none of them" test "$(count "$RA" "www.ok.test 1")" = "$qa"
check "but it is still probed" until_ok 50 more "$RA" ". 2" "$pa"

# A answers again: a probe brings it back, it serves again.
ua=$(nlog dns_upstream_up "$A:53")
echo answer >"$RA/mode"
check "a probe answer brings the first resolver back (dns_upstream_up)" until_ok 50 \
    bash -c "[ \$(grep '\"event\":\"dns_upstream_up\"' '$LOG' | grep '\"upstream\":\"$A:53\"' | grep -c '\"by\":\"probe\"') -gt $ua ]"
check "it serves queries again" answered_by 198.51.100.1

# Both silent: probes eject both, queries use the full list, the client gets SERVFAIL.
echo silent >"$RA/mode"
echo silent >"$RB/mode"
da=$(nlog dns_upstream_down "$A:53")
db=$(nlog dns_upstream_down "$B:53")
check "both are ejected" until_ok 50 bash -c \
    "[ \$(grep '\"event\":\"dns_upstream_down\"' '$LOG' | grep -c '$A:53') -gt $da ] &&
     [ \$(grep '\"event\":\"dns_upstream_down\"' '$LOG' | grep -c '$B:53') -gt $db ]"
qa=$(count "$RA" "www.ok.test 1")
qb=$(count "$RB" "www.ok.test 1")
ask www.ok.test
check "with both silent the client gets SERVFAIL" grep -q "status: SERVFAIL" "$FX_DIR/out/dig"
check "none healthy: the full list is tried, with a warning" grep -q '"event":"dns_upstreams_down"' "$LOG"
check "both got the query" test "$(count "$RA" "www.ok.test 1")" -gt "$qa" -a \
    "$(count "$RB" "www.ok.test 1")" -gt "$qb"
echo answer >"$RA/mode"
echo answer >"$RB/mode"
fx_egressd_stop
cp "$LOG" "$FX_DIR/out/egressd-1.log"

# A probe name is asked as type A; an oversized timeout is capped, a bad interval is 30.
: >"$RA/queries"
fx_egressd_start "$POLICY" OPENSANDBOX_EGRESS_DNS_UPSTREAM="$A,$B" \
    OPENSANDBOX_EGRESS_DNS_UPSTREAM_TIMEOUT=500 OPENSANDBOX_EGRESS_DNS_UPSTREAM_PROBE=Probe.OK.test. \
    OPENSANDBOX_EGRESS_DNS_UPSTREAM_PROBE_INTERVAL_SEC=abc || { cat "$LOG"; exit 1; }
check "the probe asks probe.ok.test A" until_ok 50 more "$RA" "probe.ok.test 1" 0
check "and not . NS" test "$(count "$RA" ". 2")" = 0
check "TIMEOUT=500 is capped at 120, warned" bash -c "grep '\"event\":\"config_fallback\"' '$LOG' |
    grep OPENSANDBOX_EGRESS_DNS_UPSTREAM_TIMEOUT | grep -q '\"using\":\"120\"'"
check "PROBE_INTERVAL_SEC=abc falls back to 30, warned" bash -c "grep '\"event\":\"config_fallback\"' '$LOG' |
    grep OPENSANDBOX_EGRESS_DNS_UPSTREAM_PROBE_INTERVAL_SEC | grep -q '\"using\":\"30\"'"
check "the settings line says so" grep -q \
    '"event":"dns_upstream_health","timeout_s":120,"probe_timeout_s":2,"probe_interval_s":30,"probe":"probe.ok.test"' "$LOG"
refute "the variables are not reported as ignored" bash -c \
    "grep '\"event\":\"env_ignored\"' '$LOG' | grep -q DNS_UPSTREAM_"
fx_egressd_stop
cp "$LOG" "$FX_DIR/out/egressd-2.log"

fx_egressd_start "$POLICY" OPENSANDBOX_EGRESS_DNS_UPSTREAM="$A,$B" \
    OPENSANDBOX_EGRESS_DNS_UPSTREAM_TIMEOUT=0 OPENSANDBOX_EGRESS_DNS_UPSTREAM_PROBE=bad..name \
    OPENSANDBOX_EGRESS_DNS_UPSTREAM_PROBE_INTERVAL_SEC=0 || { cat "$LOG"; exit 1; }
check "TIMEOUT=0, PROBE=bad..name, INTERVAL=0: 5 s, . NS, 30 s" grep -q \
    '"event":"dns_upstream_health","timeout_s":5,"probe_timeout_s":2,"probe_interval_s":30,"probe":". NS"' "$LOG"
check "three fallbacks are warned, each naming its variable" test \
    "$(grep '"event":"config_fallback"' "$LOG" | grep -c 'OPENSANDBOX_EGRESS_DNS_UPSTREAM')" = 3
check "queries are still answered" answered_by 198.51.100.1
fx_egressd_stop

echo "$PASS passed, $FAIL failed"
if [ "$FAIL" -ne 0 ]; then
	tail -n 40 "$LOG"
fi
[ "$FAIL" -eq 0 ]
