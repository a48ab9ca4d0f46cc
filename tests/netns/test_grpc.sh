#!/bin/bash
# gRPC through the terminated, credentialed path (issue 18 item 1: HTTP/2).
# A real gRPC server (python3-grpcio, tests/netns/grpc_fixture.py) in the
# fake internet as grpc.allowed.test on 203.0.113.44:443, TLS with a leaf of
# a test CA made here; egressd in front of the workload with a vault
# binding on /echo.Echo/* (POST, bearer). The workload's gRPC client
# (python3-grpcio, trusting only the sandbox CA export) calls with a fake
# key in its metadata: unary, server-streaming and bidi-streaming calls
# succeed, the server gets the real secret exactly once in `authorization`
# and never the fake one, the secret the server echoes in messages,
# trailing metadata and the status message (grpc-message) reaches the
# workload masked; an unbound method path gets no credential; another
# :authority on the same connection (python3-h2, and a gRPC channel with
# another default authority) gets 421 and nothing upstream, the
# connection's other streams go on; HTTP/1.1 clients of the same host (TLS
# and plain) still work; with EGRESSD_HTTP2=false the ALPN is http/1.1 only
# and a gRPC call is refused at the handshake.
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

for m in grpc h2; do
	/usr/bin/python3 -c "import $m" 2>/dev/null ||
	    { echo "python3 module $m is missing: run scripts/deps.sh"; exit 1; }
done

fx_init "grpc$$"
cleanup() {
	fx_down
	if [ "${KEEP_TMP:-0}" = 1 ]; then echo "kept $FX_DIR"; else rm -rf "$FX_DIR"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fx_up || exit 2
fx_safety || exit 2

ADDR=203.0.113.44
HOST=grpc.allowed.test
OTHER=grpc2.allowed.test
printf '{"records":[{"name":"%s","type":"A","data":["%s"],"ttl":60},{"name":"%s","type":"A","data":["%s"],"ttl":60}]}\n' \
    "$HOST" "$ADDR" "$OTHER" "$ADDR" >"$FX_DIR/dns.json"
ip -n "$FX_WAN" addr add "$ADDR/32" dev lo || exit 2
fx_servers_start || exit 2

# The gRPC server's own test CA and leaf (for both names: were the other
# :authority ever sent on, it would be accepted and logged upstream).
G=$FX_DIR/grpcsrv
mkdir -p "$G/pki"
(
	cd "$G/pki" || exit 1
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
	    -subj /CN=GrpcTestCA -keyout ca.key -out ca.pem 2>/dev/null &&
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
	    -subj "/CN=$HOST" -keyout srv.key -out srv.csr 2>/dev/null &&
	printf 'subjectAltName=DNS:%s,DNS:%s\n' "$HOST" "$OTHER" >ext &&
	openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
	    -extfile ext -out srv.pem 2>/dev/null
) || { echo "test CA failed"; exit 2; }
chmod 644 "$G/pki/ca.pem"
ip netns exec "$FX_WAN" "$FX_PY" "$HERE/grpc_fixture.py" server "$ADDR" \
    "$G/pki/srv.pem" "$G/pki/srv.key" "$G" >"$G/out" 2>&1 &
fx_track $!
fx_wait_file "$G/ready" 100 || { echo "gRPC server did not start"; cat "$G/out"; exit 2; }
: >"$G/calls.log"
: >"$G/h1.log"

chown "$FX_WORKER:$FX_WORKER" "$FX_DIR/sandbox"
POLICY='{"defaultAction":"deny","egress":[
 {"action":"allow","target":"grpc.allowed.test"},{"action":"allow","target":"grpc2.allowed.test"}]}'
fx_egressd_start "$POLICY" OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true \
    EGRESSD_CA_EXPORT="$FX_DIR/sandbox/ca.pem" EGRESSD_UPSTREAM_CA="$G/pki/ca.pem" ||
    { cat "$FX_DIR/egressd.log"; exit 1; }
SBXCA=$FX_DIR/sandbox/ca.pem
LOG=$FX_DIR/egressd.log
S1=$FX_S1
FAKE=$FX_FAKE_KEY
STARS=$(printf '%*s' ${#S1} '' | tr ' ' '*')

cat >"$FX_DIR/private/vault.json" <<J
{"credentials":[{"name":"g1","source":{"type":"inline","value":"$S1"}}],
 "bindings":[{"name":"grpc","match":{"hosts":["$HOST"],"paths":["/echo.Echo/*"],"methods":["POST"]},
   "auth":{"type":"bearer","credential":"g1"}}]}
J
code=$(fx_api POST /credential-vault -H 'Content-Type: application/json' \
    --data-binary @"$FX_DIR/private/vault.json" -o "$FX_DIR/out/vault_post" -w '%{http_code}')
check "POST /credential-vault is accepted (got $code)" test "$code" = 200 -o "$code" = 201

cp "$HERE/grpc_fixture.py" "$FX_DIR/ws/grpc_fixture.py"
chown "$FX_WS_UID" "$FX_DIR/ws/grpc_fixture.py"
out() { printf '%s/out/%s' "$FX_DIR" "$1"; }
# gcall NAME METHOD KIND BODY [args...]: one gRPC call as the workload, its
# JSON result in $(out NAME).
gcall() {
	local name=$1
	shift
	fx_ws env GRPC_DNS_RESOLVER=native timeout 20 /usr/bin/python3 grpc_fixture.py call \
	    "$SBXCA" "$HOST:443" "$@" >"$(out "$name")" 2>"$(out "$name.err")"
}
# jtrue FILE EXPR: EXPR (python, the JSON object is o) holds for FILE.
jtrue() {
	"$FX_PY" -c 'import json, sys; o = json.load(open(sys.argv[1])); sys.exit(0 if eval(sys.argv[2]) else 1)' "$1" "$2"
}
# auths BODY: the authorization values of the server's calls with that body,
# one line per value.
auths() {
	"$FX_PY" -c '
import json, sys
for l in open(sys.argv[1]):
    c = json.loads(l)
    if c["body"] == sys.argv[2]:
        for k, v in c["md"]:
            if k == "authorization":
                print(v)' "$G/calls.log" "$1"
}
# h1auths BODY: the same for the HTTP/1.1 requests the server answered.
h1auths() {
	"$FX_PY" -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r["body"] == sys.argv[2]:
        for k, v in r["headers"]:
            if k.lower() == "authorization":
                print(v)' "$G/h1.log" "$1"
}
ncalls() { grep -c "\"body\": \"$1\"" "$G/calls.log"; }
logged() { grep -q "\"event\":\"$1\".*$2" "$LOG"; }

check "egressd --features lists h2" bash -c "'$EGRESSD_BIN' --features 2>/dev/null | grep -qw h2"
fx_ws sh -c "openssl s_client -connect $HOST:443 -servername $HOST -CAfile '$SBXCA' \
    -alpn h2,http/1.1 </dev/null 2>/dev/null" >"$(out alpn_h2)"
check "a bound host offered h2,http/1.1 negotiates h2" grep -q 'ALPN protocol: h2' "$(out alpn_h2)"
check "  with the sandbox CA's leaf" grep -q 'Verify return code: 0' "$(out alpn_h2)"

# ---- unary, bound path: the real secret once, the fake one never, echoes masked.
gcall unary /echo.Echo/Unary unary u-1 "authorization=Bearer $FAKE" x-probe=u-1
check "unary call on the bound path: status OK" jtrue "$(out unary)" 'o["code"] == "OK"'
check "  the server got exactly one authorization, the real secret" \
    test "$(auths u-1)" = "Bearer $S1"
check "  the server was called once" test "$(ncalls u-1)" = 1
refute "  the server never got the fake key" grep -q "$FAKE" "$G/calls.log"
check "  the reply echoing the secret arrives masked (length kept)" \
    jtrue "$(out unary)" "o['messages'] == ['echo:Bearer $STARS']"
check "  trailing metadata x-echo-auth arrives masked" \
    jtrue "$(out unary)" "['x-echo-auth', 'Bearer $STARS'] in o['trailing']"
refute "  the secret is nowhere in what the workload got" grep -q "$S1" "$(out unary)" "$(out unary.err)"
check "  the injection is logged (binding grpc, POST)" logged inject "\"host\":\"$HOST\",\"method\":\"POST\",\"binding\":\"grpc\""

# ---- server streaming.
gcall stream /echo.Echo/Stream stream s-1 "authorization=Bearer $FAKE"
check "server-streaming call: status OK" jtrue "$(out stream)" 'o["code"] == "OK"'
check "  all three messages arrive, the echoed secret masked" \
    jtrue "$(out stream)" "o['messages'] == ['part-0', 'auth:Bearer $STARS', 'part-2']"
check "  the server got the real secret once" test "$(auths s-1)" = "Bearer $S1"
check "  trailing metadata masked" jtrue "$(out stream)" "['x-echo-auth', 'Bearer $STARS'] in o['trailing']"
refute "  the secret is nowhere in what the workload got" grep -q "$S1" "$(out stream)" "$(out stream.err)"

# ---- bidirectional streaming, the request stream whole (three messages, then its end).
gcall bidi /echo.Echo/Bidi bidi b-1 "authorization=Bearer $FAKE"
check "bidi-streaming call: status OK" jtrue "$(out bidi)" 'o["code"] == "OK"'
check "  each of the three messages answered" \
    jtrue "$(out bidi)" "o['messages'] == ['got:b-1-0', 'got:b-1-1', 'got:b-1-2']"
check "  the server got the real secret once" test "$(auths b-1-0)" = "Bearer $S1"
check "  trailing metadata masked" jtrue "$(out bidi)" "['x-echo-auth', 'Bearer $STARS'] in o['trailing']"

# ---- ping-pong: each message only once the previous one was answered (no
# END_STREAM until the last): the head and each message must go at once.
gcall pp /echo.Echo/Bidi pingpong pp-1 "authorization=Bearer $FAKE"
check "ping-pong call: status OK" jtrue "$(out pp)" 'o["code"] == "OK"'
check "  each message answered before the next was sent" \
    jtrue "$(out pp)" "o['messages'] == ['got:pp-1-0', 'got:pp-1-1', 'got:pp-1-2']"
check "  the server got the real secret once" test "$(auths pp-1-0)" = "Bearer $S1"

# ---- a status message (grpc-message, a trailer) quoting the secret.
gcall fail /echo.Echo/Fail unary f-1 "authorization=Bearer $FAKE"
check "a failing call keeps the server's status (PERMISSION_DENIED)" \
    jtrue "$(out fail)" 'o["code"] == "PERMISSION_DENIED"'
check "  its status message arrives masked" jtrue "$(out fail)" "o['details'] == 'bad key: Bearer $STARS'"
refute "  the secret is not in it" grep -q "$S1" "$(out fail)" "$(out fail.err)"
check "  the server got the real secret" test "$(auths f-1)" = "Bearer $S1"

# ---- an unbound method path: forwarded, no credential.
gcall unbound /other.Svc/Unary unary o-1 "authorization=Bearer $FAKE"
check "a call to an unbound method path succeeds" jtrue "$(out unbound)" 'o["code"] == "OK"'
check "  and reached the server" test "$(ncalls o-1)" = 1
refute "  without the secret" bash -c "grep '\"o-1\"' '$G/calls.log' | grep -q '$S1'"

# ---- another :authority on one connection (python3-h2): 421, nothing upstream.
fx_ws env FAKE_KEY="$FAKE" timeout 20 /usr/bin/python3 grpc_fixture.py h2raw "$SBXCA" "$HOST" "$OTHER" \
    >"$(out h2raw)" 2>"$(out h2raw.err)"
check "h2: the connection negotiated h2" jtrue "$(out h2raw)" 'o["alpn"] == "h2"'
check "  stream 1 (:authority $HOST) is answered 200, grpc-status 0" \
    jtrue "$(out h2raw)" 'o["1"].get("status") == "200" and ["grpc-status", "0"] in o["1"].get("trailers", [])'
check "  stream 3 (:authority $OTHER) gets 421" jtrue "$(out h2raw)" 'o["3"].get("status") == "421"'
check "  nothing of stream 3 reached upstream" test "$(ncalls h2raw-other-3)" = 0
check "  stream 5 after it, on the same connection, is answered 200" \
    jtrue "$(out h2raw)" 'o["5"].get("status") == "200" and "goaway" not in o'
check "  streams 1 and 5 got the real secret once each" \
    test "$(auths h2raw-same-1)$(auths h2raw-same-5)" = "Bearer ${S1}Bearer $S1"
refute "  the secret is nowhere in what the workload got" grep -q "$S1" "$(out h2raw)"
check "  the refused stream is logged (http_reject 421)" bash -c "grep '\"event\":\"http_reject\"' '$LOG' | grep -q 421"
# The same through grpc: a channel whose :authority is the other name.
gcall authority /echo.Echo/Unary unary a-1 "authorization=Bearer $FAKE" "--authority=$OTHER"
check "a gRPC channel with another :authority fails (HTTP 421)" \
    jtrue "$(out authority)" 'o["code"] != "OK" and "421" in (o["details"] or "")'
check "  and nothing reached upstream" test "$(ncalls a-1)" = 0

fx_api GET /metrics >"$(out metrics)" 2>&1
h2c=$(awk '$1 == "egressd_intercept_h2_connections_total" {print $2}' "$(out metrics)")
check "the h2 connections are counted (${h2c:-none}, at least the 6 gRPC/h2 clients)" test "${h2c:-0}" -ge 6
check "  none was ended for a flood" grep -q '^egressd_intercept_h2_calm_total 0$' "$(out metrics)"

# ---- HTTP/1.1 clients of the same host still work.
C=(curl -sS -m 8)
fx_ws "${C[@]}" --http1.1 --cacert "$SBXCA" -H "Authorization: Bearer $FAKE" -H 'Content-Type: application/grpc' \
    --data-binary h1-bound "https://$HOST/echo.Echo/Unary" >"$(out h1bound)" 2>&1
check "an HTTP/1.1 (TLS) request to the bound path is relayed" grep -q '"body": "h1-bound"' "$(out h1bound)"
check "  over HTTP/1.1 upstream" grep -q '"requestline": "POST /echo.Echo/Unary HTTP/1.1".*"h1-bound"' "$G/h1.log"
check "  with exactly one authorization, the real secret" test "$(h1auths h1-bound)" = "Bearer $S1"
refute "  its echo carries no secret" grep -q "$S1" "$(out h1bound)"
fx_ws "${C[@]}" --http1.1 --cacert "$SBXCA" "https://$HOST/h1-unbound" >"$(out h1)" 2>&1
check "an HTTP/1.1 (TLS) request to an unbound path is relayed" grep -q '"requestline": "GET /h1-unbound HTTP/1.1"' "$(out h1)"
fx_ws "${C[@]}" "http://$HOST/h1-plain" >"$(out h1plain)" 2>&1
check "a plain HTTP/1.1 request to the same host is relayed" grep -q '"requestline": "GET /h1-plain HTTP/1.1"' "$(out h1plain)"
refute "no log line carries the secret" grep -q "$S1" "$LOG"

sanitizer() {
	if grep -q -E 'ERROR: AddressSanitizer|runtime error:' "$LOG" 2>/dev/null; then
		not_ok "sanitizer report in egressd log"
		grep -E -A30 'AddressSanitizer|runtime error:' "$LOG" | head -60
	fi
}
fx_egressd_stop
sanitizer
cp "$LOG" "$FX_DIR/egressd.h2on.log"

# ---- EGRESSD_HTTP2=false: ALPN back to http/1.1 only, an h2-only client refused.
fx_egressd_start "$POLICY" OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true \
    EGRESSD_CA_EXPORT="$FX_DIR/sandbox/ca.pem" EGRESSD_UPSTREAM_CA="$G/pki/ca.pem" EGRESSD_HTTP2=false ||
    { cat "$FX_DIR/egressd.log"; exit 1; }
code=$(fx_api POST /credential-vault -H 'Content-Type: application/json' \
    --data-binary @"$FX_DIR/private/vault.json" -o "$FX_DIR/out/vault_post2" -w '%{http_code}')
check "EGRESSD_HTTP2=false: the vault is accepted (got $code)" test "$code" = 200 -o "$code" = 201
fx_ws sh -c "openssl s_client -connect $HOST:443 -servername $HOST -CAfile '$SBXCA' \
    -alpn h2,http/1.1 </dev/null 2>/dev/null" >"$(out alpn_off)"
check "  h2,http/1.1 offered: http/1.1 is chosen" grep -q 'ALPN protocol: http/1.1' "$(out alpn_off)"
gcall off /echo.Echo/Unary unary off-1 "authorization=Bearer $FAKE"
check "  a gRPC (h2-only) call fails" jtrue "$(out off)" 'o["code"] == "UNAVAILABLE"'
check "  refused at the handshake (alpn_unsupported)" logged conn_reject '"reason":"alpn_unsupported"'
check "  and nothing reached upstream" test "$(ncalls off-1)" = 0
fx_ws "${C[@]}" --http1.1 --cacert "$SBXCA" -H "Authorization: Bearer $FAKE" \
    --data-binary h1-off "https://$HOST/echo.Echo/Unary" >"$(out h1off)" 2>&1
check "  HTTP/1.1 to the bound path still gets the real secret once" test "$(h1auths h1-off)" = "Bearer $S1"
refute "  and its echo carries no secret" grep -q "$S1" "$(out h1off)"
refute "no log line carries the secret" grep -q "$S1" "$LOG"
fx_egressd_stop
sanitizer
echo "$PASS passed, $FAIL failed"
if [ "$FAIL" -ne 0 ]; then
	echo "--- egressd log (tail) ---"
	tail -n 40 "$LOG"
fi
[ "$FAIL" -eq 0 ]
