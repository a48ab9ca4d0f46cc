#!/bin/bash
# Process skeleton (issues 2 and 13): privilege separation of the parent and
# its children (control, dns, intercept),
# refusal to start without CAP_NET_ADMIN or a token, worker restart with
# the table left in place, and a graceful SIGTERM.
. "$(dirname "$0")/nslib.sh"
ns_up
mkdir -p "$TMP/always"

# Refusals first: no capability, no token.
out=$(ip netns exec "$SBX" setpriv --inh-caps=-all --bounding-set=-net_admin -- \
	env OPENSANDBOX_EGRESS_TOKEN=x "$EGRESSD_BIN" 2>&1)
rc=$?
check "without CAP_NET_ADMIN egressd exits 77" test "$rc" = 77
check "and says what to grant" grep -q "NET_ADMIN" <<<"$out"
refute "and installs no table" ip netns exec "$SBX" nft list table inet egressd

out=$(ip netns exec "$SBX" env -u OPENSANDBOX_EGRESS_TOKEN "$EGRESSD_BIN" 2>&1)
rc=$?
check "without a token egressd refuses to start" test "$rc" = 2
check "and names the variable" grep -q "OPENSANDBOX_EGRESS_TOKEN" <<<"$out"

# A setting egressd does not implement, and that would change enforcement if
# ignored, refuses the start; an unimplemented harmless one is warned about.
out=$(ip netns exec "$SBX" env OPENSANDBOX_EGRESS_TOKEN=x \
	OPENSANDBOX_EGRESS_CREDENTIAL_VAULT_REQUIRE_TLS=true "$EGRESSD_BIN" 2>&1)
rc=$?
check "an unimplemented enforcement setting (CREDENTIAL_VAULT_REQUIRE_TLS) refuses the start" test "$rc" = 2
check "and names it" grep -q "OPENSANDBOX_EGRESS_CREDENTIAL_VAULT_REQUIRE_TLS is set but not implemented" <<<"$out"
refute "and installs no table" ip netns exec "$SBX" nft list table inet egressd

out=$("$EGRESSD_BIN" --bogus-flag 2>&1)
check "an unknown flag is a clear error" grep -q "unknown or incomplete option" <<<"$out"
check "--version prints the version" bash -c "'$EGRESSD_BIN' --version | grep -q '^egressd [0-9]'"
check "--help lists the OpenSandbox variables" bash -c "'$EGRESSD_BIN' --help | grep -q OPENSANDBOX_EGRESS_HTTP_ADDR"

# A squatted API port makes egressd refuse to start (no restart loop).
ip netns exec "$SBX" socat TCP-LISTEN:18080,bind=127.0.0.1,reuseaddr,fork SYSTEM:true >/dev/null 2>&1 &
squat=$!
PIDS+=($squat)
ns_wait_listen "$SBX" '127.0.0.1:18080'
ip netns exec "$SBX" env OPENSANDBOX_EGRESS_TOKEN=x OPENSANDBOX_EGRESS_HTTP_ADDR=127.0.0.1:18080 \
	OPENSANDBOX_EGRESS_DNS_UPSTREAM=203.0.113.53 EGRESSD_ALWAYS_DIR="$TMP/always" \
	timeout 10 "$EGRESSD_BIN" >"$TMP/squat.log" 2>&1
rc=$?
check "a squatted API port makes egressd exit non-zero" test "$rc" = 1
check "and it says why" grep -q "cannot listen for the control API on 127.0.0.1 port 18080" "$TMP/squat.log"
check "and gives up at once: the parent binds before any worker starts" \
	test "$(grep -c worker_start "$TMP/squat.log")" = 0
kill "$squat"; wait "$squat" 2>/dev/null

ns_egressd OPENSANDBOX_EGRESS_MITMPROXY_SHADOW=true
check "an unimplemented harmless setting is warned about, by name" \
	grep -q '"event":"env_ignored","variable":"OPENSANDBOX_EGRESS_MITMPROXY_SHADOW"' "$TMP/egressd.log"
check "without interception there are two children (control, dns)" \
	test "$(pgrep -P "$EGRESSD_PID" | wc -l)" = 2
for role in control dns; do
	W=$(ns_child $role)
	check "a $role process runs" kill -0 "$W"
	check "  it is the parent's child" test "$(awk '{print $4}' "/proc/$W/stat")" = "$EGRESSD_PID"
	check "  $role CapEff is 0" grep -q "^CapEff:[[:space:]]*0000000000000000" "/proc/$W/status"
	check "  $role CapPrm is 0" grep -q "^CapPrm:[[:space:]]*0000000000000000" "/proc/$W/status"
	check "  $role CapBnd is 0" grep -q "^CapBnd:[[:space:]]*0000000000000000" "/proc/$W/status"
	check "  $role runs as the configured uid 999" grep -q "^Uid:[[:space:]]*999[[:space:]]*999[[:space:]]*999[[:space:]]*999" "/proc/$W/status"
	check "  $role runs as the configured gid 999" grep -q "^Gid:[[:space:]]*999[[:space:]]*999[[:space:]]*999[[:space:]]*999" "/proc/$W/status"
	check "  $role has no supplementary groups" grep -q "^Groups:[[:space:]]*$" "/proc/$W/status"
	check "  $role has no_new_privs" grep -q "^NoNewPrivs:[[:space:]]*1" "/proc/$W/status"
	check "  $role core size limit is 0" grep -q "^Max core file size *0 *0" "/proc/$W/limits"
	check "  $role is not dumpable (proc files owned by root)" test "$(stat -c %u "/proc/$W/status")" = 0
done
# Each child holds only its own listeners: the API in control, DNS in dns.
C=$(ns_child control)
D=$(ns_child dns)
socks=$(ip netns exec "$SBX" ss -Hltnup)
check "control holds the API port" grep -q "127.0.0.1:18080 .*pid=$C," <<<"$socks"
refute "  and no DNS port" grep -q ":15353 .*pid=$C," <<<"$socks"
check "dns holds the DNS port (udp and tcp)" test "$(grep -c ":15353 .*pid=$D," <<<"$socks")" -ge 2
refute "  and not the API port" grep -q "127.0.0.1:18080 .*pid=$D," <<<"$socks"
pe=$(awk '/^CapEff/ {print $2}' "/proc/$EGRESSD_PID/status")
check "parent keeps CAP_NET_ADMIN" test $(( 0x$pe >> 12 & 1 )) = 1
check "parent core size limit is 0" grep -q "^Max core file size *0 *0" "/proc/$EGRESSD_PID/limits"
check "the nft table is installed" ip netns exec "$SBX" nft list table inet egressd
check "log lines are JSON with level, module and event" \
	$PY -c 'import json,sys
n=0
for l in open(sys.argv[1]):
    if not l.startswith("{"): continue
    o=json.loads(l); assert {"ts","level","proc","module","event"} <= o.keys(); n+=1
assert n>3' "$TMP/egressd.log"
check "healthz is 200 once ready" bash -c "ip netns exec $SBX curl -sf http://127.0.0.1:18080/healthz | grep -qx ok"

# Tampering (only possible with CAP_NET_ADMIN) is detected, reported and repaired.
ip netns exec "$SBX" nft flush ruleset
back=0
for i in $(seq 1 60); do
	grep -q '"event":"nft_tamper"' "$TMP/egressd.log" &&
		ip netns exec "$SBX" nft list chain inet egressd filter >/dev/null 2>&1 && { back=1; break; }
	sleep 0.1
done
check "a flushed ruleset is reported (nft_tamper) and reinstalled" test "$back" = 1
check "the report names the unsafe capability" grep -q 'unsafe_capabilities' "$TMP/egressd.log"

# A policy the API applied survives a worker crash: the parent holds its
# own copy of the policy in force and hands it to the new worker.
api PUT /policy '{"defaultAction":"deny","egress":[{"action":"allow","target":"kept.example.test"}]}' >/dev/null
out=$(api GET /policy)
check "the API policy is in force before the crash" grep -q kept.example.test <<<"$out"

# A crashed child is restarted; the table stays in place meanwhile. Control
# (which owns the API's policy) first, then dns.
for role in control dns; do
	W=$(ns_child $role)
	kill -KILL "$W"
	W2=""
	for i in $(seq 1 100); do
		W2=$(ns_child $role)
		[ -n "$W2" ] && [ "$W2" != "$W" ] && [ -f "$TMP/ready" ] && break
		sleep 0.05
	done
	check "the parent restarts a killed $role" test -n "$W2" -a "$W2" != "$W"
	check "  and egressd is ready again" test -f "$TMP/ready"
	check "  the table survived the crash" ip netns exec "$SBX" nft list table inet egressd
done
check "the restart is logged, by role" grep -q '"event":"worker_restart","role":"control"' "$TMP/egressd.log"
check "the restarted control starts from the parent's policy" \
	grep -q '"event":"policy_inherit"' "$TMP/egressd.log"
out=$(api GET /policy)
check "the API policy is still in force after the crash (not the env's)" \
	grep -q kept.example.test <<<"$out"
check "the restarted dns decides on it too" grep -q '"proc":"dns".*"event":"policy_apply"' "$TMP/egressd.log"
# SIGTERM stops every process within a second and keeps the table.
C=$(ns_child control)
kill -TERM "$EGRESSD_PID"
gone=0
for i in $(seq 1 20); do
	if ! kill -0 "$EGRESSD_PID" 2>/dev/null && ! kill -0 "$W2" 2>/dev/null &&
		! kill -0 "$C" 2>/dev/null; then gone=1; break; fi
	sleep 0.05
done
check "SIGTERM ends the parent and its children within a second" test "$gone" = 1
wait "$EGRESSD_PID"
check "egressd exits 0 on SIGTERM" test $? = 0
EGRESSD_PID=""
check "the table is kept after a graceful stop (traffic stays blocked)" \
	ip netns exec "$SBX" nft list table inet egressd
check "the ready file is removed on stop" test ! -e "$TMP/ready"

# As a container entrypoint egressd is pid 1: its worker must still start.
rm -f "$TMP/ready1"
ip netns exec "$SBX" unshare --pid --fork --kill-child env OPENSANDBOX_EGRESS_TOKEN=x \
	OPENSANDBOX_EGRESS_HTTP_ADDR=127.0.0.1:18081 OPENSANDBOX_EGRESS_DNS_UPSTREAM=203.0.113.53 \
	EGRESSD_DNS_PORT=15354 EGRESSD_TABLE=egressdpid1 EGRESSD_READY_FILE="$TMP/ready1" \
	EGRESSD_WORKER_USER=999:999 EGRESSD_ALWAYS_DIR="$TMP/always" EGRESSD_REMOVE_TABLE_ON_EXIT=1 \
	"$EGRESSD_BIN" >"$TMP/pid1.log" 2>&1 &
pid1=$!
for i in $(seq 1 100); do [ -f "$TMP/ready1" ] && break; sleep 0.05; done
check "egressd as pid 1 (container entrypoint) becomes ready" test -f "$TMP/ready1"
check "its log shows pid 1 as the parent" grep -q '"proc":"parent","pid":1,' "$TMP/pid1.log"
# unshare does not forward signals: stop egressd itself, then unshare returns.
kill -TERM $(pgrep -P "$pid1") 2>/dev/null
wait "$pid1" 2>/dev/null

# With interception, the sandbox CA survives a worker crash (the workload trusts it).
mkdir -p "$TMP/ca" && chown 999:999 "$TMP/ca"
ns_egressd OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true EGRESSD_CA_EXPORT="$TMP/ca/ca.pem"
sum1=$(sha256sum <"$TMP/ca/ca.pem")
check "with interception there are three children" test "$(pgrep -P "$EGRESSD_PID" | wc -l)" = 3
I=$(ns_child intercept)
check "  the intercept has no capabilities" grep -q "^CapEff:[[:space:]]*0000000000000000" "/proc/$I/status"
check "  and is not dumpable" test "$(stat -c %u "/proc/$I/status")" = 0
socks=$(ip netns exec "$SBX" ss -Hltnp)
check "  it holds the intercept's listeners" grep -q ":15443 .*pid=$I," <<<"$socks"
refute "  and not the API port" grep -q "127.0.0.1:18080 .*pid=$I," <<<"$socks"
kill -KILL "$I"
for i in $(seq 1 100); do
	W2=$(ns_child intercept)
	[ -n "$W2" ] && [ "$W2" != "$I" ] && [ -f "$TMP/ready" ] && break
	sleep 0.05
done
check "the intercept restarted" test -f "$TMP/ready" -a "$W2" != "$I"
check "the restarted intercept serves the same sandbox CA" test "$(sha256sum <"$TMP/ca/ca.pem")" = "$sum1"
kill -TERM "$EGRESSD_PID"; wait "$EGRESSD_PID"; EGRESSD_PID=""

# With remove-table-on-exit the table goes away.
ns_egressd EGRESSD_REMOVE_TABLE_ON_EXIT=1
kill -TERM "$EGRESSD_PID"; wait "$EGRESSD_PID"; EGRESSD_PID=""
refute "remove-table-on-exit deletes the table" ip netns exec "$SBX" nft list table inet egressd
ns_finish
