#!/bin/bash
# Revocation (issue 4, EX-203): a policy change answers only after the
# established flows to destinations it no longer allows were ended, for
# IP/CIDR rules and for learned names alike; flows that stay allowed live on.
. "$(dirname "$0")/nslib.sh"
ns_up
mkdir -p "$TMP/always"
ns_dns --address=/api.allowed.test/203.0.113.10
# Sinks that record every byte they receive, one file per address.
for a in 198.51.100.7 203.0.113.10 203.0.113.11; do
	ip netns exec "$WAN" socat -T5 -u "TCP-LISTEN:9000,bind=$a,fork,reuseaddr" "OPEN:$TMP/sink-$a,creat,append" \
		>/dev/null 2>&1 &
	PIDS+=($!)
done
ns_wait_listen "$WAN" '203.0.113.11:9000'
ns_egressd OPENSANDBOX_EGRESS_RULES='{"defaultAction":"deny","egress":[
 {"action":"allow","target":"198.51.100.7/32"},{"action":"allow","target":"203.0.113.11"},
 {"action":"allow","target":"api.allowed.test"}]}'
wdig @203.0.113.53 api.allowed.test A >/dev/null

# A workload client: connect, send "before", wait for the go file, send "after".
# With a mark, the client is a sidecar socket (root, SO_MARK): the
# intercept's own upstream legs are ended as well, in their conntrack zone.
client() { # addr tag [mark]
	local run=(ws)
	[ -n "${3:-}" ] && run=(ip netns exec "$SBX" env MARK="$3")
	"${run[@]}" $PY -c '
import os, socket, sys, time
s = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET)
if os.environ.get("MARK"):
    s.setsockopt(socket.SOL_SOCKET, 36, int(os.environ["MARK"], 16))  # SO_MARK
s.settimeout(3)
s.connect((sys.argv[1], 9000))
s.sendall(b"before-" + sys.argv[2].encode() + b"\n")
for _ in range(100):
    if os.path.exists(sys.argv[3]): break
    time.sleep(0.05)
try:
    s.sendall(b"after-" + sys.argv[2].encode() + b"\n")
    time.sleep(0.5)
    s.sendall(b"after2-" + sys.argv[2].encode() + b"\n")
except OSError:
    pass
time.sleep(0.3)' "$1" "$2" "$TMP/go" &
	PIDS+=($!)
}
client 198.51.100.7 cidr
client 203.0.113.11 keep
client 203.0.113.10 name
client 198.51.100.7 marked 0x1
for i in $(seq 1 50); do
	[ "$(cat "$TMP"/sink-* 2>/dev/null | grep -c before)" -ge 4 ] && break
	sleep 0.1
done
check "four flows are established" test "$(cat "$TMP"/sink-* | grep -c before)" = 4

out=$(api PUT /policy '{"defaultAction":"deny","egress":[{"action":"allow","target":"203.0.113.11"}]}')
check "PUT /policy removing the CIDR and the name answers 200" grep -q '^200$' <<<"$out"
touch "$TMP/go"
for p in "${PIDS[@]: -4}"; do wait "$p" 2>/dev/null; done
refute "no byte reaches a CIDR destination after its rule was removed" grep -q after-cidr "$TMP/sink-198.51.100.7"
refute "no byte reaches a learned name's address after the name was removed" grep -q after-name "$TMP/sink-203.0.113.10"
refute "nor from a sidecar flow (mark, conntrack zone 1) to the removed CIDR" grep -q after-marked "$TMP/sink-198.51.100.7"
check "a flow that stays allowed goes on" grep -q after2-keep "$TMP/sink-203.0.113.11"
check "the revocation is logged" grep -q '"event":"ct_revoke"' "$TMP/egressd.log"
ns_finish
