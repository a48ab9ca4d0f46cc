#!/bin/bash
# Session tickets toward the workload (issue 19 item 4): a second
# connection to a terminated host resumes with the ticket of the first
# (no leaf signature or certificate) and gets a fresh one; a ticket is good for the host it was
# issued for only (another terminated host of the same sandbox gets a full
# handshake), in this sandbox only (another egressd's ticket keys are its
# own), and under the policy and vault in force when it was issued; no
# early data is ever accepted.
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

fx_init "tkt$$"
cleanup() {
	fx_down
	if [ "${KEEP_TMP:-0}" = 1 ]; then echo "kept $FX_DIR"; else rm -rf "$FX_DIR"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fx_up || exit 2
fx_safety || exit 2
fx_servers_start || exit 2
chown "$FX_WORKER:$FX_WORKER" "$FX_DIR/sandbox"
mkdir -p "$FX_DIR/out"
chmod 0777 "$FX_DIR/out"

POLICY='{"defaultAction":"deny","egress":[{"action":"allow","target":"api.allowed.test"},
 {"action":"allow","target":"front.allowed.test"}]}'
SBXCA=$FX_DIR/sandbox/ca.pem
LOG=$FX_DIR/egressd.log
start() {
	fx_egressd_start "$POLICY" OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true \
	    EGRESSD_CA_EXPORT="$SBXCA" || { cat "$LOG"; exit 1; }
	cat >"$FX_DIR/private/vault.json" <<J
{"credentials":[{"name":"c1","source":{"type":"inline","value":"$FX_S1"}}],
 "bindings":[{"name":"b1","match":{"hosts":["api.allowed.test"],"paths":["/v1/*"],"methods":["GET"]},
   "auth":{"type":"bearer","credential":"c1"}},
  {"name":"b2","match":{"hosts":["front.allowed.test"],"paths":["/v1/*"],"methods":["GET"]},
   "auth":{"type":"bearer","credential":"c1"}}]}
J
	local code
	code=$(fx_api POST /credential-vault -H 'Content-Type: application/json' \
	    --data-binary @"$FX_DIR/private/vault.json" -o /dev/null -w '%{http_code}')
	[ "$code" = 200 ] || [ "$code" = 201 ] || { echo "vault refused: $code"; exit 1; }
}
# conn HOST OUT [s_client args...]: one TLS connection as the workload, a
# request and its answer (so that the TLS 1.3 tickets after the handshake
# arrive), its s_client report in OUT.
conn() {
	local host=$1 out=$2
	shift 2
	printf 'GET /v1/resume HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n' \
	    "$host" "$FX_FAKE_KEY" |
	    fx_ws timeout 10 openssl s_client -connect "$host:443" -servername "$host" \
	    -CAfile "$SBXCA" -verify_return_error -ign_eof "$@" >"$FX_DIR/out/$out" 2>&1
}
metric() { fx_api GET /metrics 2>/dev/null | awk -v m="$1" '$1 == m {print $2}'; }

start
conn api.allowed.test first -sess_out "$FX_DIR/out/api.sess"
check "a first terminated connection is a full handshake" grep -q '^New, TLSv1.3' "$FX_DIR/out/first"
check "  and gets a session ticket" test -s "$FX_DIR/out/api.sess"
check "  its request is answered" grep -q '"path": "/v1/resume"' "$FX_DIR/out/first"
conn api.allowed.test second -sess_in "$FX_DIR/out/api.sess"
check "a second one to the same host resumes with it" grep -q '^Reused, TLSv1.3' "$FX_DIR/out/second"
# Clients use a TLS 1.3 ticket once (RFC 8446 C.4; OpenSSL's own, wrk's):
# without a fresh one on each resumption, every other connection was full.
check "  and gets a fresh ticket, so a client that uses each once resumes again" \
    grep -q 'Post-Handshake New Session Ticket arrived' "$FX_DIR/out/second"
check "  and is served (the vault's checks are the connection's own)" \
    grep -q '"path": "/v1/resume"' "$FX_DIR/out/second"
check "  counted in /metrics" test "$(metric egressd_client_tls_resumed_total)" -ge 1
conn front.allowed.test other -sess_in "$FX_DIR/out/api.sess"
check "the ticket of one host presented to another is not resumed" grep -q '^New, TLSv1.3' "$FX_DIR/out/other"
refute "  (never 'Reused')" grep -q '^Reused' "$FX_DIR/out/other"
check "  the other host is still served, with a full handshake" grep -q '"path": "/v1/resume"' "$FX_DIR/out/other"
check "  counted as refused" test "$(metric egressd_client_tickets_refused_total)" -ge 1
printf 'GET /v1/early HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n' >"$FX_DIR/out/early.txt"
chmod 0644 "$FX_DIR/out/early.txt"
conn api.allowed.test early -sess_in "$FX_DIR/out/api.sess" -early_data "$FX_DIR/out/early.txt"
refute "no early data (0-RTT) is accepted" grep -q 'Early data was accepted' "$FX_DIR/out/early"
refute "  the ticket does not even allow it" grep -q 'Max Early Data: [1-9]' "$FX_DIR/out/second"
# Bound to the state it was issued under: a policy or vault change ends every ticket.
conn api.allowed.test fresh1 -sess_out "$FX_DIR/out/api1.sess"
conn api.allowed.test fresh1b -sess_in "$FX_DIR/out/api1.sess"
check "a fresh ticket resumes" grep -q '^Reused, TLSv1.3' "$FX_DIR/out/fresh1b"
code=$(fx_api POST /policy -H 'Content-Type: application/json' -o /dev/null -w '%{http_code}' \
    --data '{"defaultAction":"deny","egress":[{"action":"allow","target":"api.allowed.test"},
 {"action":"allow","target":"front.allowed.test"},{"action":"allow","target":"other.allowed.test"}]}')
check "a policy change is accepted ($code)" test "$code" = 200
conn api.allowed.test afterpolicy -sess_in "$FX_DIR/out/api1.sess"
check "  a ticket from before it does not resume" grep -q '^New, TLSv1.3' "$FX_DIR/out/afterpolicy"
check "  the connection is served" grep -q '"path": "/v1/resume"' "$FX_DIR/out/afterpolicy"
conn api.allowed.test fresh2 -sess_out "$FX_DIR/out/api2.sess"
code=$(fx_api PATCH /credential-vault -H 'Content-Type: application/json' -o /dev/null -w '%{http_code}' \
    --data '{"bindings":{"add":[{"name":"b3","match":{"hosts":["api.allowed.test"],"paths":["/v2/*"],"methods":["GET"]},"auth":{"type":"bearer","credential":"c1"}}]}}')
check "a vault change is accepted ($code)" test "$code" = 200
conn api.allowed.test aftervault -sess_in "$FX_DIR/out/api2.sess"
check "  a ticket from before it does not resume" grep -q '^New, TLSv1.3' "$FX_DIR/out/aftervault"
fx_egressd_stop

# Another egressd (another sandbox): its ticket keys are its own.
start
conn api.allowed.test restarted -sess_in "$FX_DIR/out/api.sess"
check "a ticket of another egressd is not resumed" grep -q '^New, TLSv1.3' "$FX_DIR/out/restarted"
check "  the connection is served with a full handshake" grep -q '"path": "/v1/resume"' "$FX_DIR/out/restarted"
fx_egressd_stop

echo "$PASS passed, $FAIL failed"
if [ "$FAIL" -ne 0 ]; then
	tail -n 30 "$LOG"
	for f in first second other early fresh1b afterpolicy aftervault restarted; do echo "== $f"; head -n 40 "$FX_DIR/out/$f"; done
fi
[ "$FAIL" -eq 0 ]
