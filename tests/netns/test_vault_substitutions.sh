#!/bin/bash
# Vault placeholders and passthrough auth (issue 17 item 2), end to end: the
# workload (curl in sbx) holds placeholders; the echo server in wan
# (fakenet's api.allowed.test and other.allowed.test) logs what it received
# and echoes the request back. On a request that matches the binding the
# placeholder is replaced by the secret in the path, the query, a header and
# the body (a Content-Length request with its new length, or re-framed
# chunked past 256 KiB; a chunked request re-chunked);
# the echo never shows the secret to the workload; a placeholder on a
# request that matches no binding, or another binding, is left as it is and
# logged by credential name; bad substitutions are refused at load (400) and
# the previous vault stays in force.
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

finish() {
	fx_egressd_stop
	echo "$PASS passed, $FAIL failed"
	if [ "$FAIL" -ne 0 ]; then
		echo "--- egressd log (tail) ---"
		tail -n 40 "$FX_DIR/egressd.log"
	fi
}

fx_init "subst$$"
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

POLICY='{"defaultAction":"deny","egress":[
 {"action":"allow","target":"api.allowed.test"},
 {"action":"allow","target":"other.allowed.test"}]}'
fx_egressd_start "$POLICY" OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true \
    EGRESSD_CA_EXPORT="$FX_DIR/sandbox/ca.pem" EGRESSD_UPSTREAM_CA="$FX_CERTS/ca.pem" ||
    { cat "$FX_DIR/egressd.log"; exit 1; }

SBXCA=$FX_DIR/sandbox/ca.pem
LOG=$FX_DIR/egressd.log
FN=$FX_DIR/fakenet
# HTTP/1.1 unless said: the HTTP/2 checks (h2 to this HTTP/1.1 server) are marked.
C=(curl -sS -m 8 --http1.1 --cacert "$SBXCA")
C2=(curl -sS -m 8 --http2 --cacert "$SBXCA")
S1=$FX_S1
S2=$FX_S2
PH1=OSB_PLACEHOLDER_C1_7a1f
PH2=OSB_PLACEHOLDER_C2_93be
mkdir -p "$FX_DIR/out"
out() { printf '%s/out/%s' "$FX_DIR" "$1"; }
logged() { grep -q "\"event\":\"$1\".*$2" "$LOG"; }
# FIELD of the echo server's record of the request whose path starts with PREFIX.
rec() { # LOGFILE PREFIX FIELD
	"$FX_PY" -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("path", "").startswith(sys.argv[2]):
        v = r.get(sys.argv[3])
        print(v if isinstance(v, str) else json.dumps(v))' "$@"
}
post() { fx_api POST /credential-vault -H 'Content-Type: application/json' --data "$1" -o "$(out "$2")" -w '%{http_code}'; }
patch() { fx_api PATCH /credential-vault -H 'Content-Type: application/json' --data "$1" -o "$(out "$2")" -w '%{http_code}'; }

CREDS="[{\"name\":\"c1\",\"source\":{\"type\":\"inline\",\"value\":\"$S1\"}},
 {\"name\":\"c2\",\"source\":{\"type\":\"inline\",\"value\":\"$S2\"}}]"
B1M='{"hosts":["api.allowed.test"],"paths":["/v1/*"],"methods":["GET","POST"]}'
B2='{"name":"b2","match":{"hosts":["other.allowed.test"],"paths":["/v1/*"],"methods":["GET"]},
 "auth":{"type":"bearer","credential":"c2","substitutions":[{"credential":"c2","placeholder":"'$PH2'","in":["header"]}]}}'
vault_with() { # SUBSTITUTIONS_OF_B1
	printf '{"credentials":%s,"bindings":[{"name":"b1","match":%s,"auth":{"type":"passthrough","substitutions":%s}},%s]}' \
	    "$CREDS" "$B1M" "$1" "$B2"
}

# ---- strict validation at load: 400 with a clear message, nothing applied.
bad() { # DESCRIPTION SUBSTITUTIONS WANT
	local code
	code=$(post "$(vault_with "$2")" bad)
	if [ "$code" = 400 ] && grep -qF "$3" "$(out bad)" && ! grep -qF "$S1" "$(out bad)"; then
		ok "refused at load: $1"
	else
		not_ok "refused at load: $1 (got $code: $(head -c 300 "$(out bad)"))"
	fi
}
bad "an unknown credential" '[{"credential":"nope","placeholder":"'$PH1'","in":["path"]}]' "unknown credential"
bad "a short placeholder" '[{"credential":"c1","placeholder":"PH_1","in":["path"]}]' "placeholder must be 8 to 256 bytes"
bad "a placeholder overlapping another" \
    '[{"credential":"c1","placeholder":"'$PH1'","in":["path"]},{"credential":"c2","placeholder":"X'$PH1'","in":["path"]}]' "overlaps"
bad "an unknown place" '[{"credential":"c1","placeholder":"'$PH1'","in":["cookie"]}]' "unsupported substitution place"
bad "a placeholder inside a secret" '[{"credential":"c1","placeholder":"CANARY1-7f3c9e2a","in":["path"]}]' \
    "a substitution placeholder and a credential value overlap"
bad "passthrough without substitutions" '[]' "passthrough auth requires at least one substitution"
code=$(fx_api GET /credential-vault -o /dev/null -w '%{http_code}')
check "no vault after the refused loads" test "$code" = 404

SUBS1='[{"credential":"c1","placeholder":"'$PH1'","in":["path","query","header","body"]}]'
code=$(post "$(vault_with "$SUBS1")" vault_post)
if [ "$code" != 201 ] && [ "$code" != 200 ]; then
	not_ok "the vault with substitutions is accepted (got $code: $(head -c 300 "$(out vault_post)"))"
	finish
	exit 1
fi
ok "the vault with substitutions is accepted"
check "the state shows the placeholder and the credential name, no secret" \
    bash -c "grep -q '$PH1' '$(out vault_post)' && grep -q passthrough '$(out vault_post)' && ! grep -q '$S1' '$(out vault_post)'"

# ---- path, query, header on a matching request.
fx_ws "${C[@]}" -H "X-Api-Key: key=$PH1" "https://api.allowed.test/v1/p/$PH1?token=$PH1&n=1" >"$(out head)" 2>&1
rec "$FN/api.log" /v1/p/ path >"$(out head_path)"
check "path and query: substituted" grep -qxF "/v1/p/$S1?token=$S1&n=1" "$(out head_path)"
rec "$FN/api.log" /v1/p/ headers >"$(out head_hdrs)"
check "header: substituted" grep -qF "[\"X-Api-Key\", \"key=$S1\"]" "$(out head_hdrs)"
refute "no placeholder reached the upstream" grep -qF "$PH1" "$(out head_path)" "$(out head_hdrs)"
check "the echo answered" grep -q '"/v1/p/' "$(out head)"
refute "the echo never shows the secret to the workload" grep -qF "$S1" "$(out head)"
check "the echoed secret is masked" grep -qF '/v1/p/********' "$(out head)"
refute "passthrough injects no Authorization" grep -qi authorization "$(out head_hdrs)"

# ---- body: Content-Length (re-framed chunked) and chunked.
printf '{"key":"%s","again":"%s"}' "$PH1" "$PH1" >"$FX_DIR/ws/body.json"
chown "$FX_WS_UID" "$FX_DIR/ws/body.json"
fx_ws "${C[@]}" -H 'Content-Type: application/json' --data-binary @body.json \
    https://api.allowed.test/v1/body-cl >"$(out bodycl)" 2>&1
rec "$FN/api.log" /v1/body-cl body >"$(out bodycl_up)"
check "body (Content-Length): substituted, every occurrence" \
    grep -qxF "{\"key\":\"$S1\",\"again\":\"$S1\"}" "$(out bodycl_up)"
rec "$FN/api.log" /v1/body-cl headers >"$(out bodycl_hdrs)"
check "body (Content-Length): sent with its new length" \
    grep -qF "[\"Content-Length\", \"$(( $(wc -c <"$FX_DIR/ws/body.json") + 2 * (${#S1} - ${#PH1}) ))\"]" "$(out bodycl_hdrs)"
refute "body (Content-Length): not chunked" grep -qi '"Transfer-Encoding"' "$(out bodycl_hdrs)"
refute "body (Content-Length): the echo never shows the secret" grep -qF "$S1" "$(out bodycl)"
# Past the hold bound (256 KiB): re-framed chunked, streamed.
head -c 200000 /dev/zero | tr '\0' 'x' >"$FX_DIR/ws/bigcl.txt"
printf '%s' "$PH1" >>"$FX_DIR/ws/bigcl.txt"
head -c 200000 /dev/zero | tr '\0' 'y' >>"$FX_DIR/ws/bigcl.txt"
chown "$FX_WS_UID" "$FX_DIR/ws/bigcl.txt"
fx_ws "${C[@]}" -H 'Content-Type: text/plain' --data-binary @bigcl.txt \
    https://api.allowed.test/v1/body-bigcl >"$(out bodybigcl)" 2>&1
rec "$FN/api.log" /v1/body-bigcl body >"$(out bodybigcl_up)"
rec "$FN/api.log" /v1/body-bigcl headers >"$(out bodybigcl_hdrs)"
check "body (Content-Length, 400 KB): substituted" grep -qF "xxxx${S1}yyyy" "$(out bodybigcl_up)"
check "body (Content-Length, 400 KB): nothing lost, nothing added" \
    test "$(wc -c <"$(out bodybigcl_up)")" = "$((400000 + ${#S1} + 1))"
check "body (Content-Length, 400 KB): re-framed chunked" \
    grep -qF '["Transfer-Encoding", "chunked"]' "$(out bodybigcl_hdrs)"
refute "body (Content-Length, 400 KB): the echo never shows the secret" grep -qF "$S1" "$(out bodybigcl)"
head -c 70000 /dev/zero | tr '\0' 'x' >"$FX_DIR/ws/big.txt"
printf '%s' "$PH1" >>"$FX_DIR/ws/big.txt"
head -c 70000 /dev/zero | tr '\0' 'y' >>"$FX_DIR/ws/big.txt"
chown "$FX_WS_UID" "$FX_DIR/ws/big.txt"
fx_ws "${C[@]}" -H 'Content-Type: text/plain' -H 'Transfer-Encoding: chunked' --data-binary @big.txt \
    https://api.allowed.test/v1/body-chunked >"$(out bodych)" 2>&1
rec "$FN/api.log" /v1/body-chunked body >"$(out bodych_up)"
check "body (chunked, 140 KB): substituted in the middle" grep -qF "xxxx${S1}yyyy" "$(out bodych_up)"
check "body (chunked): nothing lost, nothing added" \
    test "$(wc -c <"$(out bodych_up)")" = "$((140000 + ${#S1} + 1))"
refute "body (chunked): the echo never shows the secret" grep -qF "$S1" "$(out bodych)"

# ---- the same over HTTP/2 (toward this HTTP/1.1 server: egressd frames the body).
fx_ws "${C2[@]}" -H "X-Api-Key: key=$PH1" "https://api.allowed.test/v1/p2/$PH1?token=$PH1" >"$(out h2head)" 2>&1
check "h2: path and query substituted" grep -qxF "/v1/p2/$S1?token=$S1" "$(rec "$FN/api.log" /v1/p2/ path >"$(out h2_path)"; echo "$(out h2_path)")"
check "h2: header substituted" grep -qiF "\"x-api-key\", \"key=$S1\"]" "$(rec "$FN/api.log" /v1/p2/ headers >"$(out h2_hdrs)"; echo "$(out h2_hdrs)")"
fx_ws "${C2[@]}" -H 'Content-Type: application/json' --data-binary @body.json \
    https://api.allowed.test/v1/h2-body-cl >"$(out h2bodycl)" 2>&1
check "h2: body (content-length) substituted, every occurrence" \
    grep -qxF "{\"key\":\"$S1\",\"again\":\"$S1\"}" "$(rec "$FN/api.log" /v1/h2-body-cl body >"$(out h2bodycl_up)"; echo "$(out h2bodycl_up)")"
rec "$FN/api.log" /v1/h2-body-cl headers >"$(out h2bodycl_hdrs)"
check "h2: body (content-length) sent with its new length" \
    grep -qiF "\"Content-Length\", \"$(( $(wc -c <"$FX_DIR/ws/body.json") + 2 * (${#S1} - ${#PH1}) ))\"]" "$(out h2bodycl_hdrs)"
refute "h2: the echo never shows the secret" grep -qF "$S1" "$(out h2bodycl)"
fx_ws "${C2[@]}" -H 'Content-Type: text/plain' --data-binary @bigcl.txt \
    https://api.allowed.test/v1/h2-body-bigcl >"$(out h2bigcl)" 2>&1
rec "$FN/api.log" /v1/h2-body-bigcl body >"$(out h2bigcl_up)"
check "h2: body (400 KB) substituted" grep -qF "xxxx${S1}yyyy" "$(out h2bigcl_up)"
check "h2: body (400 KB) nothing lost, nothing added" \
    test "$(wc -c <"$(out h2bigcl_up)")" = "$((400000 + ${#S1} + 1))"
refute "h2: body (400 KB) the echo never shows the secret" grep -qF "$S1" "$(out h2bigcl)"

# ---- no substitution outside the binding: left as it is, logged by credential name.
fx_ws "${C[@]}" "https://api.allowed.test/unbound/$PH1" >"$(out unbound)" 2>&1
check "no binding: the placeholder reaches the upstream as it is" grep -qF "/unbound/$PH1" "$FN/api.log"
refute "no binding: no secret upstream" grep -qF "$S1" "$(rec "$FN/api.log" /unbound/ headers >"$(out unb_hdrs)"; echo "$(out unb_hdrs)")"
check "no binding: logged with the credential name" \
    logged placeholder_unmatched '"reason":"no_binding".*"credential":"c1"'
fx_ws "${C[@]}" -H "X-Key: $PH1" -H "X-Mine: $PH2" "https://other.allowed.test/v1/other" >"$(out other)" 2>&1
rec "$FN/other.log" /v1/other headers >"$(out other_hdrs)"
check "another binding: its own placeholder is substituted" grep -qF "[\"X-Mine\", \"$S2\"]" "$(out other_hdrs)"
check "another binding: its own auth is injected" grep -qF "[\"Authorization\", \"Bearer $S2\"]" "$(out other_hdrs)"
check "another binding: the first binding's placeholder is left" grep -qF "[\"X-Key\", \"$PH1\"]" "$(out other_hdrs)"
refute "another binding: the first binding's secret never goes there" grep -qF "$S1" "$FN/other.log"
check "another binding: logged" logged placeholder_unmatched '"reason":"other_binding".*"credential":"c1"'
fx_ws "${C[@]}" -X DELETE "https://api.allowed.test/v1/p/$PH1" >"$(out delete)" 2>&1
check "a method the binding does not allow: left as it is" grep -qF "\"DELETE /v1/p/$PH1" "$FN/api.log"
refute "no log line carries a secret" grep -qF -e "$S1" -e "$S2" "$LOG"
refute "no log line carries a placeholder" grep -qF -e "$PH1" -e "$PH2" "$LOG"

# ---- a bad update is refused and the previous vault stays in force.
code=$(patch '{"bindings":{"replace":[{"name":"b1","match":'"$B1M"',"auth":{"type":"passthrough","substitutions":[{"credential":"c1","placeholder":"'$PH1'","in":["path","path"]}]}}]}}' badpatch)
check "a bad update is refused (400)" test "$code" = 400
check "with a clear message" grep -q "duplicate place" "$(out badpatch)"
fx_ws "${C[@]}" "https://api.allowed.test/v1/kept/$PH1" >"$(out kept)" 2>&1
check "the previous vault is kept" grep -qF "/v1/kept/$S1" "$FN/api.log"

finish
[ "$FAIL" -eq 0 ]
