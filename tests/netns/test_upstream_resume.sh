#!/bin/bash
# Upstream TLS sessions of terminated connections resume (issue 19), and
# only for the name they were verified for. A TLS server in wan that issues
# session tickets (tls_resume_server.py) reports, per connection, the SNI
# and whether the handshake resumed; egressd terminates every allowed host
# (EGRESSD_TERMINATE_ALL). Each curl is its own workload connection, hence
# its own upstream connection:
#   1. res1 first: a full handshake;
#   2. res1 again: resumed (the first upstream SSL was shut down with a
#      close_notify, so OpenSSL kept its session resumable);
#   3. res2, same address, same certificate (*.wild): a full handshake, the
#      session store is keyed by name, address and port;
#   4. res1 once more: resumed.
# /metrics counts the handshakes and the resumptions the same way. Then one
# keep-alive connection stays idle past the hello deadline (2 s here) and
# the upstream connect deadline (15 s) and is still served, on the same
# upstream connection.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/fixture.sh
source "$HERE/../lib/fixture.sh"

PASS=0
FAIL=0
ok() { PASS=$((PASS + 1)); echo "ok   - $*"; }
not_ok() { FAIL=$((FAIL + 1)); echo "FAIL - $*"; }
check() { local d=$1; shift; if "$@" >/dev/null 2>&1; then ok "$d"; else not_ok "$d"; fi; }

fx_init "ures$$"
cleanup() {
	fx_down
	if [ "${KEEP_TMP:-0}" = 1 ]; then echo "kept $FX_DIR"; else rm -rf "$FX_DIR"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fx_up || exit 2
fx_safety || exit 2
printf '{"records":[
 {"name":"res1.wild.allowed.test","type":"A","data":["203.0.113.13"],"ttl":60},
 {"name":"res2.wild.allowed.test","type":"A","data":["203.0.113.13"],"ttl":60}]}\n' \
    >"$FX_DIR/dns.json"
ip -n "$FX_WAN" addr add 203.0.113.13/32 dev lo || exit 2
fx_servers_start || exit 2
mkdir -p "$FX_DIR/resume"
ip netns exec "$FX_WAN" "$FX_PY" "$HERE/tls_resume_server.py" 203.0.113.13 443 \
    "$FX_CERTS/wild.pem" "$FX_CERTS/wild.key" "$FX_DIR/resume" >"$FX_DIR/resume/out" 2>&1 &
fx_track $!
fx_wait_file "$FX_DIR/resume/ready" 100 || { echo "resume server did not start"; exit 2; }

POLICY='{"defaultAction":"deny","egress":[
 {"action":"allow","target":"res1.wild.allowed.test"},
 {"action":"allow","target":"res2.wild.allowed.test"}]}'
fx_egressd_start "$POLICY" OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true \
    EGRESSD_CA_EXPORT="$FX_DIR/sandbox/ca.pem" EGRESSD_UPSTREAM_CA="$FX_CERTS/ca.pem" \
    EGRESSD_TERMINATE_ALL=1 EGRESSD_HELLO_TIMEOUT=2 || { cat "$FX_DIR/egressd.log"; exit 1; }

SBXCA=$FX_DIR/sandbox/ca.pem
CONNS=$FX_DIR/resume/conns.log
n=0
get() { # host path: one workload connection, one upstream connection
	fx_ws curl -sS -m 8 --cacert "$SBXCA" "https://$1$2" >"$FX_DIR/out/$n" 2>&1
	check "GET https://$1$2 through the terminating intercept" \
	    grep -q "^resume-ok $2\$" "$FX_DIR/out/$n"
	n=$((n + 1))
	# The server logs a connection at its first request head: wait for that line (bounded).
	wait_lines "$CONNS" "$n"
}
wait_lines() {
	local i=0
	while [ "$i" -lt 50 ] && [ "$(wc -l <"$1" 2>/dev/null || echo 0)" -lt "$2" ]; do
		sleep 0.1
		i=$((i + 1))
	done
}

get res1.wild.allowed.test /one
get res1.wild.allowed.test /two
get res2.wild.allowed.test /three
get res1.wild.allowed.test /four

cat "$CONNS"
line() { sed -n "${1}p" "$CONNS"; }
check "the server saw four connections" test "$(wc -l <"$CONNS")" -eq 4
check "1st upstream connection (res1): full handshake" test "$(line 1)" = "res1.wild.allowed.test reused=False /one"
check "2nd upstream connection (res1): the session resumed" test "$(line 2)" = "res1.wild.allowed.test reused=True /two"
check "3rd (res2, same address and certificate): not offered res1's session" \
    test "$(line 3)" = "res2.wild.allowed.test reused=False /three"
check "4th (res1 again): resumed" test "$(line 4)" = "res1.wild.allowed.test reused=True /four"

fx_api GET /metrics >"$FX_DIR/out/metrics" 2>&1
grep -E '^egressd_upstream_tls' "$FX_DIR/out/metrics"
check "/metrics: 4 verified upstream handshakes" \
    grep -qx 'egressd_upstream_tls_handshakes_total 4' "$FX_DIR/out/metrics"
check "/metrics: 2 of them resumed" grep -qx 'egressd_upstream_tls_resumed_total 2' "$FX_DIR/out/metrics"

# An idle keep-alive connection outlives the hello deadline and the
# upstream connect deadline (15 s): neither leg keeps the timeouts of its
# socket once a TLS filter is over it (both closed the connection before).
cat >"$FX_DIR/idle.py" <<'PY'
import socket, ssl, sys, time
ctx = ssl.create_default_context(cafile=sys.argv[1])
s = ctx.wrap_socket(socket.create_connection((sys.argv[2], 443), timeout=30),
                    server_hostname=sys.argv[2])
def get(path):
    s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (path, sys.argv[2])).encode())
    b = b""
    while (b"resume-ok " + path.encode() + b"\n") not in b:
        d = s.recv(4096)
        if not d:
            return "eof"
        b += d
    return "ok"
print("first", get("/idle1"), flush=True)
time.sleep(float(sys.argv[3]))
print("second", get("/idle2"), flush=True)
PY
chmod 644 "$FX_DIR/idle.py"
fx_ws "$FX_PY" "$FX_DIR/idle.py" "$SBXCA" res1.wild.allowed.test 16 >"$FX_DIR/out/idle" 2>&1
cat "$FX_DIR/out/idle"
check "keep-alive: the first request is answered" grep -qx 'first ok' "$FX_DIR/out/idle"
check "keep-alive: after 16 s idle (hello deadline 2 s) the same connection is answered" \
    grep -qx 'second ok' "$FX_DIR/out/idle"
check "keep-alive: both requests went over one upstream connection (5 in all)" \
    test "$(wc -l <"$CONNS")" -eq 5

fx_egressd_stop
if grep -q -E 'ERROR: AddressSanitizer|runtime error:' "$FX_DIR/egressd.log" 2>/dev/null; then
	not_ok "sanitizer report in egressd log"
	grep -E -A30 'AddressSanitizer|runtime error:' "$FX_DIR/egressd.log" | head -60
fi
echo "$PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
