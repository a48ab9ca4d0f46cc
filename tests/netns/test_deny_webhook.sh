#!/bin/bash
# The deny webhook (issue 17 item 4): OPENSANDBOX_EGRESS_DENY_WEBHOOK and
# OPENSANDBOX_EGRESS_SANDBOX_ID. A receiver in the fake internet
# (webhook_recv.py at 198.51.100.80:8080, an address no policy here allows)
# gets upstream's event shape for a DNS denial, a connection the intercept
# refused and a vault refusal; the sidecar reaches it with its report mark
# while the workload cannot; a failed delivery is retried; a full queue
# drops with a warning and a counter; SIGTERM drains what is queued.
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

fx_init "hook$$"
cleanup() {
	fx_down
	if [ "${KEEP_TMP:-0}" = 1 ]; then echo "kept $FX_DIR"; else rm -rf "$FX_DIR"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fx_up || exit 2
fx_safety || exit 2
fx_servers_start || exit 2
ip -n "$FX_WAN" addr add 198.51.100.80/32 dev lo || exit 2
H=$FX_DIR/hook
mkdir -p "$H" "$FX_DIR/out"
ip netns exec "$FX_WAN" "$FX_PY" "$HERE/webhook_recv.py" 198.51.100.80 8080 "$H" \
    >"$H/stdout" 2>&1 &
fx_track $!
fx_wait_file "$H/ready" 100 || { echo "webhook receiver did not start"; exit 2; }

HOOK=http://198.51.100.80:8080/hook
POLICY='{"defaultAction":"deny","egress":[{"action":"allow","target":"api.allowed.test"}]}'
SBXCA=$FX_DIR/sandbox/ca.pem
LOG=$FX_DIR/egressd.log
chown "$FX_WORKER:$FX_WORKER" "$FX_DIR/sandbox"
start() {
	fx_egressd_start "$POLICY" OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true \
	    EGRESSD_CA_EXPORT="$SBXCA" OPENSANDBOX_EGRESS_DENY_WEBHOOK="$HOOK" \
	    OPENSANDBOX_EGRESS_SANDBOX_ID=mytest "$@" || { cat "$LOG"; exit 1; }
}
# wait_event NAME [MIN]: until the receiver holds MIN (1) records for NAME (bounded, 10 s).
wait_event() {
	local i
	for i in $(seq 1 100); do
		[ "$(grep -c "\"hostname\": \"$1\"" "$H/events.jsonl" 2>/dev/null)" -ge "${2:-1}" ] && return 0
		sleep 0.1
	done
	return 1
}
# event_is NAME PYTHON-EXPR: the first record for NAME satisfies the expression (r: record, b: body).
event_is() {
	"$FX_PY" - "$H/events.jsonl" "$1" "$2" <<'PY'
import json, re, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
r = next(x for x in recs if x["body"].get("hostname") == sys.argv[2])
b = r["body"]
sys.exit(0 if eval(sys.argv[3]) else 1)
PY
}
metric() { # name: its value in /metrics
	fx_api GET /metrics -o - 2>/dev/null | awk -v n="$1" '$1 == n {print $2}'
}

start
check "the report process runs" grep -q '"event":"worker_start","role":"report"' "$LOG"

# ---- a DNS denial.
fx_ws dig +time=3 +tries=1 denied-one.example.test A >"$FX_DIR/out/dig1" 2>&1
check "the denied name gets NXDOMAIN" grep -q NXDOMAIN "$FX_DIR/out/dig1"
check "the receiver gets an event for it" wait_event denied-one.example.test
check "upstream's shape: source, sandboxId" event_is denied-one.example.test \
    'b["source"] == "opensandbox-egress" and b["sandboxId"] == "mytest"'
check "upstream's shape: an RFC 3339 UTC timestamp" event_is denied-one.example.test \
    're.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", b["timestamp"]) is not None'
check "egressd's fields: kind dns, reason policy_deny" event_is denied-one.example.test \
    'b["kind"] == "dns" and b["reason"] == "policy_deny"'
check "a JSON POST to the webhook's path" event_is denied-one.example.test \
    'r["path"] == "/hook" and r["headers"]["content-type"] == "application/json"'

# ---- the receiver is the sidecar's only: the workload cannot reach it.
# (Counting the receiver's connections would count egressd's own too: the
# denied connection is itself reported, and that event may come at any time.)
refute "the workload cannot connect to the webhook" fx_ws curl -sS -m 5 -o /dev/null \
    -d '{"probe":"workload-'$$'"}' "$HOOK"
check "and no request of its reached the receiver" bash -c "! grep -q 'workload-$$' '$H/events.jsonl'"

# ---- the report mark is no exemption: it reaches the receiver and nothing
# else, not even an address the policy lets the workload reach (a report
# child taken over through a bug asks for exactly such sockets).
cat >"$FX_DIR/marked.py" <<'PY'
import socket, sys
kind, addr, port, mark = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4], 0)
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM if kind == "tcp" else socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, 36, mark)  # SO_MARK
s.settimeout(3)
try:
    if kind == "tcp":
        s.connect((addr, port))
    else:
        s.sendto(bytes.fromhex("abcd01000001000000000000") + b"\x01x\x04test\x00\x00\x01\x00\x01", (addr, port))
        s.recv(512)
except OSError as e:
    print("refused", e)
    sys.exit(1)
print("reached")
PY
marked() { ip netns exec "$FX_SBX" "$FX_PY" "$FX_DIR/marked.py" "$@" 0x4 | grep -q '^reached'; }
fx_ws dig +short api.allowed.test A >/dev/null 2>&1
check "control: the workload reaches the allowed address" \
    fx_ws curl -sS -m 5 -o /dev/null http://api.allowed.test/
check "the report mark reaches the webhook receiver" marked tcp 198.51.100.80 8080
refute "  but not the allowed address the workload reaches" marked tcp 203.0.113.10 80
refute "  nor the receiver's address on another port" marked tcp 198.51.100.80 80
refute "  nor the resolver (no DNS)" marked udp 203.0.113.53 53

# ---- a connection the intercept refuses (SNI of a denied name to an allowed address).
fx_ws dig +short api.allowed.test A >/dev/null 2>&1
fx_ws sh -c "openssl s_client -connect 203.0.113.10:443 -servername evil.example.test \
    </dev/null >/dev/null 2>&1"
check "a refused connection gets an event" wait_event evil.example.test
check "kind connection, reason sni_denied, address and port" event_is evil.example.test \
    'b["kind"] == "connection" and b["reason"] == "sni_denied" and b["address"] == "203.0.113.10" and b["port"] == 443'

# ---- a vault refusal: an ambiguous path on a bound host.
cat >"$FX_DIR/private/vault.json" <<J
{"credentials":[{"name":"c1","source":{"type":"inline","value":"$FX_S1"}}],
 "bindings":[{"name":"b1","match":{"hosts":["api.allowed.test"],"paths":["/v1/*"],"methods":["GET"]},
   "auth":{"type":"bearer","credential":"c1"}}]}
J
code=$(fx_api POST /credential-vault -H 'Content-Type: application/json' \
    --data-binary @"$FX_DIR/private/vault.json" -o /dev/null -w '%{http_code}')
check "the vault is accepted" test "$code" = 200 -o "$code" = 201
code=$(fx_ws curl -sS -m 8 --cacert "$SBXCA" -o /dev/null -w '%{http_code}' \
    --path-as-is "https://api.allowed.test/v1/%2e%2e/admin" 2>/dev/null)
check "the ambiguous path is refused (403)" test "$code" = 403
check "the vault refusal gets an event" wait_event api.allowed.test
check "kind vault, reason path_ambiguous" event_is api.allowed.test \
    'b["kind"] == "vault" and b["reason"] == "path_ambiguous"'
refute "no event carries the secret" grep -q "$FX_S1" "$H/events.jsonl"

# ---- a failed delivery is retried.
echo fail1 >"$H/mode"
fx_ws dig +time=3 +tries=1 denied-two.example.test A >/dev/null 2>&1
check "a 503 is retried until it is delivered" wait_event denied-two.example.test 2
delivered=$(metric egressd_deny_events_delivered_total)
check "delivered events are counted in /metrics" test "${delivered:-0}" -ge 4
echo ok >"$H/mode"

# ---- SIGTERM drains the queue.
echo slow >"$H/mode"
for i in 1 2 3 4 5; do
	fx_ws dig +time=3 +tries=1 "drain-$i.example.test" A >/dev/null 2>&1
done
kill -TERM "$FX_EGRESSD_PID"
for i in $(seq 1 150); do
	kill -0 "$FX_EGRESSD_PID" 2>/dev/null || break
	sleep 0.1
done
refute "egressd stopped within the drain" kill -0 "$FX_EGRESSD_PID"
n=0
for i in 1 2 3 4 5; do
	grep -q "\"hostname\": \"drain-$i.example.test\"" "$H/events.jsonl" && n=$((n + 1))
done
check "every event queued at SIGTERM was delivered ($n of 5)" test "$n" = 5
FX_EGRESSD_PID=""

# ---- a full queue drops with a warning and a counter.
echo hold >"$H/mode"
start EGRESSD_REPORT_QUEUE=2
for i in 1 2 3 4 5 6; do
	fx_ws dig +time=3 +tries=1 "flood-$i.example.test" A >/dev/null 2>&1
done
seen=0
for i in $(seq 1 50); do
	grep -q '"event":"event_queue_full"' "$LOG" && { seen=1; break; }
	sleep 0.1
done
check "a full queue is warned about" test "$seen" = 1
dropped=$(metric egressd_deny_events_dropped_total)
check "and dropped events are counted ($dropped)" test "${dropped:-0}" -ge 3
echo ok >"$H/mode"

# An invalid webhook refuses the start, naming the variable.
for bad in "https://198.51.100.80/x" "http://hook.example.test/x" "ftp://198.51.100.80/"; do
	rc=0
	ip netns exec "$FX_SBX" env -i PATH="$FX_PATH" OPENSANDBOX_EGRESS_TOKEN=t \
	    OPENSANDBOX_EGRESS_DENY_WEBHOOK="$bad" timeout 10 "$EGRESSD_BIN" \
	    >"$FX_DIR/out/bad" 2>&1 || rc=$?
	check "DENY_WEBHOOK=$bad refuses to start (exit 2)" test "$rc" = 2
	check "and names the variable" grep -q OPENSANDBOX_EGRESS_DENY_WEBHOOK "$FX_DIR/out/bad"
done

fx_egressd_stop
echo "$PASS passed, $FAIL failed"
if [ "$FAIL" -ne 0 ]; then
	tail -n 40 "$LOG"
fi
[ "$FAIL" -eq 0 ]
