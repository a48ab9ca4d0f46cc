#!/bin/bash
# The sidecar's ports cannot be taken by the workload (issue 14 item 1,
# catalogue EX-036 and EX-206): the parent binds the API, DNS and
# intercept listeners once and holds them for its whole life, so a crashed
# worker frees nothing; and the kept nft table lets only a socket with the
# listeners' own mark serve those ports, so a workload that binds one while the
# whole sidecar restarts receives nothing (not the control plane's token,
# not a DNS query). A descriptor that cannot arrive (EMFILE) is a failed
# request, never a dead worker. Nor can a child taken over serve them on an
# address or family the listeners leave free: they carry a mark of their
# own that no child's socket has.
. "$(dirname "$0")/nslib.sh"
ns_up
ns_dns --address=/allowed.test/203.0.113.10
mkdir -p "$TMP/always"

INTERCEPT=(OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true EGRESSD_CA_EXPORT="$TMP/ca.pem")

# bind_as_workload proto addr port: exit 0 if the workload could bind it.
cat >"$TMP/bind.py" <<'EOF'
import socket, sys
proto, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
s = socket.socket(fam, socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind((addr, port))
    if proto == "tcp":
        s.listen()
except OSError as e:
    print(e.strerror)
    sys.exit(1)
sys.exit(0)
EOF
bind_as_workload() { ws "$PY" "$TMP/bind.py" "$@"; }
# Passes only when the bind failed because the port is taken (not for any other error).
bind_taken() { bind_as_workload "$@" | grep -qx "Address already in use"; }

# A squatter as the workload: binds, then writes whatever reaches it to a file.
cat >"$TMP/squat.py" <<'EOF'
import socket, sys, select, time
out, deadline = open(sys.argv[1], "ab", buffering=0), time.time() + 20
t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind(("127.0.0.1", 18080)); t.listen()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("127.0.0.1", 15353))
print("listening", flush=True)
while time.time() < deadline:
    r, _, _ = select.select([t, u], [], [], 0.2)
    for s in r:
        if s is t:
            c, _ = t.accept(); c.settimeout(2)
            try:
                out.write(b"TCP:" + c.recv(65536))
            except OSError:
                out.write(b"TCP-accepted")
            c.close()
        else:
            out.write(b"UDP:" + u.recv(65536))
EOF

# ws in the background: the same as ws, but $! is the workload process itself.
ws_bg() {
	exec ip netns exec "$SBX" setpriv --reuid 1000 --regid 1000 --clear-groups --no-new-privs \
		--inh-caps=-all --bounding-set=-all -- "$@"
}
dns_ok() { ws dig +time=3 +tries=2 +short @203.0.113.53 api.allowed.test | grep -qx 203.0.113.10; }
allow_dns() { api PATCH /policy '[{"action":"allow","target":"*.allowed.test"}]' >/dev/null; }
ns_egressd "${INTERCEPT[@]}"
allow_dns
KIDS=$(pgrep -P "$EGRESSD_PID" | tr '\n' ' ')
check "three children run (control, dns, intercept)" test "$(wc -w <<<"$KIDS")" = 3
check "egressd answers DNS" dns_ok

# 1. The crash gap. Freeze the parent, kill every child: while no child
#    exists, nobody but the parent holds the ports.
kill -STOP "$EGRESSD_PID"
kill -KILL $KIDS
for i in $(seq 1 50); do kill -0 $KIDS 2>/dev/null || break; sleep 0.05; done
check "with the children dead, the port is taken for the workload: the API port (127.0.0.1)" \
	bind_taken tcp 127.0.0.1 18080
check "nor 0.0.0.0:18080" bind_taken tcp 0.0.0.0 18080
check "nor the DNS proxy's UDP port" bind_taken udp 127.0.0.1 15353
check "nor its TCP port" bind_taken tcp 127.0.0.1 15353
check "nor [::1] of the DNS proxy" bind_taken udp ::1 15353
check "nor the intercept's TLS port" bind_taken tcp 127.0.0.1 15443
check "nor its plain HTTP port" bind_taken tcp 127.0.0.1 15080
check "nor [::1] of the intercept" bind_taken tcp ::1 15443
kill -CONT "$EGRESSD_PID"
for i in $(seq 1 100); do
	ip netns exec "$SBX" curl -sf -m2 http://127.0.0.1:18080/healthz >/dev/null 2>&1 && break
	sleep 0.1
done
check "the restarted control serves the same API port" \
	bash -c "ip netns exec $SBX curl -sf -m3 http://127.0.0.1:18080/healthz | grep -qx ok"
allow_dns
check "the restarted dns answers DNS" dns_ok

# 2. Descriptor exhaustion: a worker whose descriptors run out loses the
#    socket the parent sends (MSG_CTRUNC); that is a failed request, and
#    the worker lives on. Hold many connections open (bounded), then ask
#    for one more marked socket (a DNS query opens one upstream).
kill -TERM "$EGRESSD_PID"; wait "$EGRESSD_PID" 2>/dev/null
ns_egressd "${INTERCEPT[@]}" prlimit --nofile=200:200
allow_dns
W=$(ns_child dns)
cat >"$TMP/hold.py" <<'EOF'
import socket, sys, time
held = []
for i in range(400):
    try:
        s = socket.create_connection(("127.0.0.1", 15353), timeout=1)
        held.append(s)
    except OSError:
        break
print(len(held), flush=True)
time.sleep(float(sys.argv[1]))
EOF
ws_bg "$PY" "$TMP/hold.py" 6 >"$TMP/held" 2>&1 &
HOLD=$!
PIDS+=($HOLD)
for i in $(seq 1 50); do [ -s "$TMP/held" ] && break; sleep 0.1; done
ws dig +time=2 +tries=1 @203.0.113.53 x1.allowed.test >/dev/null 2>&1
ws dig +tcp +time=2 +tries=1 @203.0.113.53 x2.allowed.test >/dev/null 2>&1
wait "$HOLD" 2>/dev/null
check "the workload held connections until the descriptors ran out" test "$(cat "$TMP/held")" -gt 50
check "the dns process survived descriptor exhaustion (same pid)" kill -0 "$W"
check "and was not restarted" test "$(grep -c '"event":"worker_start","role":"dns"' "$TMP/egressd.log")" = 1
check "and answers again once descriptors are free" dns_ok
check "healthz answers after the flood" \
	bash -c "ip netns exec $SBX curl -sf -m3 http://127.0.0.1:18080/healthz | grep -qx ok"

# The API has no connection cap of its own (libevent's evhttp): the table's
# input chain holds it to LISTEN_API_MAX_CONNS (64) at once, so the
# workload cannot spend the worker's descriptors through the API port.
cat >"$TMP/apiflood.py" <<'EOF2'
import socket, sys, time
held = []
for n in range(200):
    try:
        held.append(socket.create_connection(("127.0.0.1", 18080), timeout=1))
    except OSError:
        pass
print(len(held), flush=True)
time.sleep(float(sys.argv[1]))
EOF2
ws_bg "$PY" "$TMP/apiflood.py" 3 >"$TMP/apiheld" 2>&1 &
FLOOD=$!
PIDS+=($FLOOD)
for n in $(seq 1 50); do [ -s "$TMP/apiheld" ] && break; sleep 0.1; done
nfd=$(ls "/proc/$(ns_child control)/fd" | wc -l)
wait "$FLOOD" 2>/dev/null
check "the API port held at most 64 of 200 connections (got $(cat "$TMP/apiheld"))" \
	test "$(cat "$TMP/apiheld")" -le 64
check "and at least some (the cap is not a wall)" test "$(cat "$TMP/apiheld")" -ge 32
check "control's descriptors stayed below its limit of 200 ($nfd)" test "$nfd" -lt 200
ok_after=0
for n in $(seq 1 30); do
	ip netns exec "$SBX" curl -sf -m2 http://127.0.0.1:18080/healthz 2>/dev/null | grep -qx ok && { ok_after=1; break; }
	sleep 0.2
done
check "healthz answers once the API flood is over" test "$ok_after" = 1

# 3. The sidecar-restart gap: egressd stops (the table stays), the
#    workload binds the API and DNS ports; the control plane then calls
#    with the token. The input chain refuses every unmarked socket on the
#    sidecar's ports, so nothing reaches the squatter.
kill -TERM "$EGRESSD_PID"; wait "$EGRESSD_PID" 2>/dev/null
check "the table stays after a graceful stop" ip netns exec "$SBX" nft list chain inet egressd input
: >"$TMP/squatted"
chmod 666 "$TMP/squatted"
ws_bg "$PY" "$TMP/squat.py" "$TMP/squatted" >"$TMP/squat.out" 2>&1 &
SQ=$!
PIDS+=($SQ)
for i in $(seq 1 50); do grep -q listening "$TMP/squat.out" && break; sleep 0.1; done
check "the workload could bind the ports while no sidecar runs" grep -q listening "$TMP/squat.out"
ip netns exec "$SBX" curl -s -m3 -X POST -H "OPENSANDBOX-EGRESS-AUTH: $TOKEN" \
	--data-binary '{"credentials":[]}' http://127.0.0.1:18080/credential-vault >/dev/null 2>&1
ip netns exec "$SBX" curl -s -m3 -H "OPENSANDBOX-EGRESS-AUTH: $TOKEN" \
	http://127.0.0.1:18080/policy >/dev/null 2>&1
ws dig +time=2 +tries=1 @203.0.113.53 api.allowed.test >/dev/null 2>&1
refute "the squatter received no control-plane connection" grep -q TCP "$TMP/squatted"
refute "the squatter never saw the token" grep -q "$TOKEN" "$TMP/squatted"
refute "the squatter received no DNS query" grep -q UDP "$TMP/squatted"

# The sidecar comes back while the squatter holds the port: it refuses to
# start, once, and names the port (no restart loop, never a silent start).
ip netns exec "$SBX" env OPENSANDBOX_EGRESS_TOKEN="$TOKEN" OPENSANDBOX_EGRESS_DNS_UPSTREAM=203.0.113.53 \
	OPENSANDBOX_EGRESS_HTTP_ADDR=127.0.0.1:18080 EGRESSD_WORKER_USER=999:999 \
	EGRESSD_ALWAYS_DIR="$TMP/always" timeout 10 "$EGRESSD_BIN" >"$TMP/restart.log" 2>&1
rc=$?
check "a squatted port makes egressd exit 1" test "$rc" = 1
check "and the error names the listener and the port" \
	grep -q "cannot listen for the control API on 127.0.0.1 port 18080" "$TMP/restart.log"
check "and no worker was started" test "$(grep -c worker_start "$TMP/restart.log")" = 0
kill "$SQ" 2>/dev/null; wait "$SQ" 2>/dev/null
ns_egressd "${INTERCEPT[@]}"
check "with the port free again egressd starts and serves" \
	bash -c "ip netns exec $SBX curl -sf -m3 http://127.0.0.1:18080/healthz | grep -qx ok"
# 4. A child taken over: it holds sockets with its role's mark (the parent
#    gives it those), and binds the API port where the API does not listen:
#    the other family ([::]:18080, IPV6_V6ONLY, beside 127.0.0.1:18080) and
#    another address of the same one (127.0.0.2). Only the listeners' own
#    mark, which no child gets, may serve the port: the control plane's
#    call reaches none of them. (Root sets SO_MARK here for each role's mark.)
cat >"$TMP/msquat.py" <<'EOF'
import socket, sys, select, time
mark, out = int(sys.argv[1], 0), open(sys.argv[2], "ab", buffering=0)
socks = []
for fam, addr in ((socket.AF_INET6, "::"), (socket.AF_INET, "127.0.0.2")):
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, mark)
    if fam == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, 18080))
    s.listen()
    socks.append(s)
print("listening", flush=True)
deadline = time.time() + 8
while time.time() < deadline:
    r, _, _ = select.select(socks, [], [], 0.2)
    for s in r:
        c, _ = s.accept()
        c.settimeout(2)
        try:
            out.write(b"TCP:" + c.recv(65536))
        except OSError:
            out.write(b"TCP-accepted")
        c.close()
EOF
for m in 0x1 0x2 0x4; do
	: >"$TMP/msquatted"
	ip netns exec "$SBX" "$PY" "$TMP/msquat.py" "$m" "$TMP/msquatted" >"$TMP/msquat.out" 2>&1 &
	MS=$!
	PIDS+=($MS)
	for i in $(seq 1 50); do grep -q listening "$TMP/msquat.out" && break; sleep 0.1; done
	check "a socket with mark $m could bind [::]:18080 and 127.0.0.2:18080" \
		grep -q listening "$TMP/msquat.out"
	for url in "http://[::1]:18080/policy" "http://127.0.0.2:18080/policy"; do
		ip netns exec "$SBX" curl -s -m3 -H "OPENSANDBOX-EGRESS-AUTH: $TOKEN" "$url" \
			>/dev/null 2>&1
	done
	kill "$MS" 2>/dev/null
	wait "$MS" 2>/dev/null
	refute "the mark $m squatter received no control-plane connection" \
		grep -q TCP "$TMP/msquatted"
	refute "and never saw the token" grep -q "$TOKEN" "$TMP/msquatted"
done
check "the API still serves on its own address" \
	bash -c "ip netns exec $SBX curl -sf -m3 http://127.0.0.1:18080/healthz | grep -qx ok"
ns_finish
