#!/bin/bash
# Control API (issue 5): every endpoint and status code of /policy,
# /healthz, /metrics and /credential-vault[...]: good and bad JSON, empty
# bodies, null and {}, duplicate keys, bodies over 1 MiB, the rule limit,
# unknown methods, the token (wrong, missing, checked before the method),
# the 412 vault preconditions, revisions and
# expectedRevision (including parallel PATCHes), subresources, and the
# policy/vault coverage interlock. Runs as root in its own namespaces.
. "$(dirname "$0")/nslib.sh"
ns_up
mkdir -p "$TMP/always"
URL=http://127.0.0.1:18080
ALL_LOG="$TMP/all.log"
: >"$ALL_LOG"

# rq [-s SRC] [-n] [-t TOKEN] [-H HEADER] [-f FILE] METHOD PATH [BODY]
# One request from inside sbx. -s binds the client to a loopback source
# address, -n sends no token header, -t
# sends another token. Sets CODE and RB; headers are in $TMP/rh.
rq() {
	local src=127.0.0.1 tok="$TOKEN" notok=0 file="" hdrs=() args=()
	while [ $# -gt 0 ]; do
		case "$1" in
		-s) src=$2; shift 2 ;;
		-n) notok=1; shift ;;
		-t) tok=$2; shift 2 ;;
		-H) hdrs+=(-H "$2"); shift 2 ;;
		-f) file=$2; shift 2 ;;
		*) break ;;
		esac
	done
	[ "$notok" = 0 ] && args+=(-H "OPENSANDBOX-EGRESS-AUTH: $tok")
	if [ "$1" = HEAD ]; then args+=(-I); else args+=(-X "$1"); fi
	if [ -n "$file" ]; then
		args+=(--data-binary "@$file")
	elif [ $# -ge 3 ]; then
		args+=(--data-binary "$3")
	fi
	CODE=$(ip netns exec "$SBX" curl -sS -m20 --interface "$src" "${args[@]}" "${hdrs[@]}" \
		-o "$TMP/rb" -D "$TMP/rh" -w '%{http_code}' "$URL$2" 2>"$TMP/rerr")
	RB=$(cat "$TMP/rb" 2>/dev/null)
}

# A fresh source address for each request that is meant to fail auth (the
# failure budget is global, so this only spreads the sources).
SRCN=10
nextsrc() {
	SRCN=$((SRCN + 1))
	SRC="127.0.1.$SRCN"
}

is() { # description expected actual
	if [ "$2" = "$3" ]; then ok "$1"; else not_ok "$1 (expected '$2', got '$3')"; fi
}

# Value of a response header (last occurrence), without CR.
hdr() {
	grep -i "^$1:" "$TMP/rh" | tail -1 | cut -d: -f2- | sed 's/^ *//; s/\r$//'
}

# jv EXPR: evaluate a Python expression over the JSON body `d`, print it as compact JSON.
jv() {
	$PY -c 'import json,sys
try:
    d = json.load(open(sys.argv[1]))
    print(json.dumps(eval(sys.argv[2]), separators=(",", ":")))
except Exception as e:
    print("ERR:%s" % type(e).__name__)' "$TMP/rb" "$1"
}

# The user policy as GET /policy reports it.
cur_policy() {
	rq GET /policy
	jv 'd["policy"]'
}

restart() { # env assignments...
	if [ -n "$EGRESSD_PID" ]; then
		kill "$EGRESSD_PID" 2>/dev/null
		wait "$EGRESSD_PID" 2>/dev/null
		cat "$TMP/egressd.log" >>"$ALL_LOG"
		EGRESSD_PID=""
	fi
	ns_egressd "$@"
}

alive() {
	kill -0 "$EGRESSD_PID" 2>/dev/null && rq GET /policy && [ "$CODE" = 200 ]
}

P1='{"defaultAction":"deny","egress":[{"action":"allow","target":"api.example.com"},{"action":"allow","target":"*.svc.example.org"}]}'
restart OPENSANDBOX_EGRESS_RULES="$P1"

# --- /healthz -------------------------------------------------------------
rq -n GET /healthz
is "GET /healthz without a token answers 200 when ready" 200 "$CODE"
is "its body is ok" ok "$RB"
nextsrc
rq -s "$SRC" -t wrong GET /healthz
is "GET /healthz with a wrong token is still 200 (no auth)" 200 "$CODE"
rq -n POST /healthz
is "/healthz accepts any method" 200 "$CODE"

# --- GET /policy ----------------------------------------------------------
rq GET /policy
is "GET /policy answers 200" 200 "$CODE"
check "GET /policy is application/json" grep -qi '^application/json' <<<"$(hdr Content-Type)"
is "GET /policy field order" '["status","mode","enforcementMode","policy"]' "$(jv 'list(d)')"
is "GET /policy status" '"ok"' "$(jv 'd["status"]')"
is "GET /policy mode is enforcing with rules" '"enforcing"' "$(jv 'd["mode"]')"
is "GET /policy enforcementMode" '"dns+nft"' "$(jv 'd["enforcementMode"]')"
is "GET /policy policy field order" '["egress","defaultAction"]' "$(jv 'list(d["policy"])')"
is "GET /policy returns the initial rules" \
	'[{"action":"allow","target":"api.example.com"},{"action":"allow","target":"*.svc.example.org"}]' \
	"$(jv 'd["policy"]["egress"]')"

# --- POST/PUT /policy -----------------------------------------------------
rq POST /policy '{"defaultAction":"deny","egress":[{"action":"allow","target":"a.example.com"}]}'
is "POST /policy answers 200" 200 "$CODE"
is "POST /policy answer fields" '["status","mode","enforcementMode"]' "$(jv 'list(d)')"
is "POST /policy policy is in force" '{"egress":[{"action":"allow","target":"a.example.com"}],"defaultAction":"deny"}' "$(cur_policy)"
rq PUT /policy '{"defaultAction":"allow","egress":[{"action":"deny","target":"b.example.com"}]}'
is "PUT /policy answers 200" 200 "$CODE"
is "PUT /policy policy is in force" '{"egress":[{"action":"deny","target":"b.example.com"}],"defaultAction":"allow"}' "$(cur_policy)"

rq POST /policy ''
is "POST /policy with an empty body answers 200" 200 "$CODE"
is "empty-body reset has a reason and no enforcementMode" \
	'{"status":"ok","mode":"deny_all","reason":"policy reset to default deny-all"}' "$(jv 'd')"
is "after the reset the policy is deny-all with no rules" '{"egress":null,"defaultAction":"deny"}' "$(cur_policy)"
rq PUT /policy $' \n\t '
is "PUT /policy with a blank body resets too" '"policy reset to default deny-all"' "$(jv 'd.get("reason")')"
rq POST /policy "$P1"
rq POST /policy 'null'
is "POST /policy null answers 200" 200 "$CODE"
is "POST null: deny_all with enforcementMode, no reason" \
	'{"status":"ok","mode":"deny_all","enforcementMode":"dns+nft"}' "$(jv 'd')"
is "POST null resets the policy" '{"egress":null,"defaultAction":"deny"}' "$(cur_policy)"
rq POST /policy "$P1"
rq PUT /policy '{}'
is "PUT /policy {} answers 200" 200 "$CODE"
is "PUT {} resets the policy" '{"egress":null,"defaultAction":"deny"}' "$(cur_policy)"

# A 200 means nft already has the change: check the set right after the answer.
rq POST /policy '{"defaultAction":"deny","egress":[{"action":"allow","target":"198.51.100.7"}]}'
is "POST with an IP rule answers 200" 200 "$CODE"
check "  the IP is in nft's allow4 set when the answer arrives" nft_has allow4 198.51.100.7
rq POST /policy '{"defaultAction":"deny","egress":[{"action":"allow","target":"198.51.100.8"},{"action":"bogus","target":"x"}]}'
is "an invalid POST with an IP rule is 400" 400 "$CODE"
refute "  its IP never reached nft" nft_has allow4 198.51.100.8
check "  the previous IP is still allowed in nft" nft_has allow4 198.51.100.7

rq POST /policy "$P1"
refute "a replacing POST removes the old IP from nft" nft_has allow4 198.51.100.7
GOOD=$(cur_policy)
for bad in '{"egress":[' '{"defaultAction":"deny","egress":[{"action":"allow","target":"x.example.com"}]}garbage' \
	'[1,2]' '"deny"' '{"egress":"api.example.com"}' \
	'{"egress":[{"action":"permit","target":"x.example.com"}]}' \
	'{"egress":[{"action":"allow","target":""}]}' \
	'{"egress":[{"action":"allow","target":"x.example.com","target":"y.example.com"}]}' \
	'{"defaultAction":"deny","defaultAction":"allow","egress":[]}'; do
	rq POST /policy "$bad"
	is "POST /policy $bad is refused with 400" 400 "$CODE"
	check "  the error is text/plain" grep -qi '^text/plain' <<<"$(hdr Content-Type)"
	check "  and starts with 'invalid policy: '" grep -q '^invalid policy: ' <<<"$RB"
done
is "refused POSTs leave the previous policy in force" "$GOOD" "$(cur_policy)"
rq PUT /policy '{"egress":[{"action":"allow","target":"x.example.com"}],"egress":[]}'
is "PUT /policy with duplicate keys is 400" 400 "$CODE"
is "and the policy is unchanged" "$GOOD" "$(cur_policy)"

# --- PATCH /policy --------------------------------------------------------
rq PATCH /policy '[{"action":"allow","target":"new.example.com"},{"action":"deny","target":"new.example.com"}]'
is "PATCH /policy answers 200" 200 "$CODE"
is "PATCH answer fields" '["status","mode","enforcementMode"]' "$(jv 'list(d)')"
is "PATCH rules come first, the first duplicate wins" \
	'{"egress":[{"action":"allow","target":"new.example.com"},{"action":"allow","target":"api.example.com"},{"action":"allow","target":"*.svc.example.org"}],"defaultAction":"deny"}' \
	"$(cur_policy)"
rq PATCH /policy '[{"action":"deny","target":"new.example.com"}]'
is "PATCH of an existing target answers 200" 200 "$CODE"
is "the patched rule replaces the old one for the same target" \
	'[{"action":"deny","target":"new.example.com"},{"action":"allow","target":"api.example.com"},{"action":"allow","target":"*.svc.example.org"}]' \
	"$(cur_policy >/dev/null; jv 'd["policy"]["egress"]')"
GOOD=$(cur_policy)
rq PATCH /policy ''
is "PATCH with an empty body is 400" 400 "$CODE"
is "  with 'empty body'" "empty body" "$RB"
for bad in '[]' '{"action":"allow","target":"x.example.com"}' '[{"action":"allow"' \
	'[{"action":"allow","target":"x.example.com","action":"deny"}]' '[{"action":"maybe","target":"x.example.com"}]' \
	'null' '["x.example.com"]'; do
	rq PATCH /policy "$bad"
	is "PATCH /policy $bad is refused with 400" 400 "$CODE"
	check "  with 'invalid patch rules: '" grep -q '^invalid patch rules: ' <<<"$RB"
done
is "refused PATCHes leave the policy unchanged" "$GOOD" "$(cur_policy)"

# --- DELETE /policy -------------------------------------------------------
rq DELETE /policy '["new.example.com"]'
is "DELETE /policy answers 200" 200 "$CODE"
is "DELETE answer has no reason" '["status","mode","enforcementMode"]' "$(jv 'list(d)')"
is "DELETE removed the target (case-insensitively)" \
	'{"egress":[{"action":"allow","target":"api.example.com"},{"action":"allow","target":"*.svc.example.org"}],"defaultAction":"deny"}' \
	"$(cur_policy)"
rq DELETE /policy '["nothere.example.com"]'
is "DELETE of an unknown target answers 200" 200 "$CODE"
is "  with reason 'no matching targets found'" '"no matching targets found"' "$(jv 'd.get("reason")')"
is "  and enforcementMode" '"dns+nft"' "$(jv 'd.get("enforcementMode")')"
GOOD=$(cur_policy)
rq DELETE /policy ''
is "DELETE with an empty body is 400 'empty body'" "400 empty body" "$CODE $RB"
for bad in '[]' '["a",' '{"targets":["api.example.com"]}' '[1]'; do
	rq DELETE /policy "$bad"
	is "DELETE /policy $bad is refused with 400" 400 "$CODE"
	check "  with 'invalid delete targets: '" grep -q '^invalid delete targets: ' <<<"$RB"
done
is "refused DELETEs leave the policy unchanged" "$GOOD" "$(cur_policy)"

# --- body size ------------------------------------------------------------
$PY -c 'import sys; sys.stdout.write("{\"egress\":[" + " " * (1 << 20) + "]}")' >"$TMP/big.json"
rq -f "$TMP/big.json" POST /policy
check "a POST over 1 MiB is refused with 413 or 400 (got $CODE)" grep -Eq '^(413|400)$' <<<"$CODE"
rq -f "$TMP/big.json" PATCH /policy
check "a PATCH over 1 MiB is refused with 413 or 400 (got $CODE)" grep -Eq '^(413|400)$' <<<"$CODE"
rq -f "$TMP/big.json" -H 'Transfer-Encoding: chunked' POST /policy
check "a chunked POST over 1 MiB is refused with 413 or 400 (got $CODE)" grep -Eq '^(413|400)$' <<<"$CODE"
rq -f "$TMP/big.json" -H 'Transfer-Encoding: chunked' POST /credential-vault
check "a chunked vault POST over 1 MiB is refused with 413 or 400 (got $CODE)" grep -Eq '^(413|400|412)$' <<<"$CODE"
check "egressd survives oversized bodies" alive
is "and the policy is unchanged" "$GOOD" "$(cur_policy)"
$PY -c 'import sys; p=sys.argv[1]; sys.stdout.write(p[:-1] + " " * ((1 << 20) - 4096 - len(p)) + "}")' "$P1" >"$TMP/near.json"
rq -f "$TMP/near.json" POST /policy
is "a valid policy just under 1 MiB is accepted" 200 "$CODE"

# --- methods --------------------------------------------------------------
for m in OPTIONS HEAD; do
	rq "$m" /policy
	is "$m /policy answers 405" 405 "$CODE"
	check "  with Allow: GET, POST, PUT, PATCH, DELETE" grep -q 'GET, POST, PUT, PATCH, DELETE' <<<"$(hdr Allow)"
done
rq TRACE /policy
is "TRACE on /policy answers 405" 405 "$CODE"
check "  with an Allow header" grep -q 'GET' <<<"$(hdr Allow)"
nextsrc
rq -s "$SRC" -n OPTIONS /policy
is "a wrong method without auth is 401 (auth before method)" 401 "$CODE"
nextsrc
rq -s "$SRC" -n TRACE /policy
is "TRACE without auth is 401 (auth before method)" 401 "$CODE"
nextsrc
rq -s "$SRC" -n PUT /metrics
is "PUT /metrics without auth is 401" 401 "$CODE"

# --- auth -----------------------------------------------------------------
nextsrc
rq -s "$SRC" -n GET /policy
is "no token header: 401" 401 "$CODE"
is "  body 'unauthorized'" unauthorized "$RB"
check "  text/plain" grep -qi '^text/plain' <<<"$(hdr Content-Type)"
nextsrc
rq -s "$SRC" -t "wrong-$TOKEN" GET /policy
is "wrong token: 401" 401 "$CODE"
nextsrc
rq -s "$SRC" -t "${TOKEN}x" GET /policy
is "token with a suffix: 401" 401 "$CODE"
nextsrc
rq -s "$SRC" -t "${TOKEN%?}" GET /policy
is "token missing its last character: 401" 401 "$CODE"
nextsrc
rq -s "$SRC" -n -H 'OPENSANDBOX-EGRESS-AUTH;' GET /policy
is "empty token header: 401" 401 "$CODE"
nextsrc
rq -s "$SRC" -n -H "Authorization: Bearer $TOKEN" GET /policy
is "the token in Authorization instead of the header: 401" 401 "$CODE"
nextsrc
rq -s "$SRC" -n -H "opensandbox-egress-auth: $TOKEN" GET /policy
is "the header name is case-insensitive" 200 "$CODE"
nextsrc
rq -s "$SRC" -n POST /policy '{"defaultAction":"allow"}'
is "POST /policy without auth is 401" 401 "$CODE"
is "  and changes nothing" "$GOOD" "$(cur_policy)"
nextsrc
rq -s "$SRC" -n GET /nope
check "an unknown path without auth is 401 or 404 (got $CODE)" grep -Eq '^(401|404)$' <<<"$CODE"
nextsrc
rq -s "$SRC" -n GET /metrics
is "GET /metrics without a token: 401" 401 "$CODE"
for p in /credential-vault /credential-vault/credentials /credential-vault/bindings/x /credential-vault/other; do
	nextsrc
	rq -s "$SRC" -n GET "$p"
	is "GET $p without a token: 401" 401 "$CODE"
done
nextsrc
rq -s "$SRC" -n POST /credential-vault '{"credentials":[],"bindings":[]}'
is "POST /credential-vault without a token: 401 (before 412)" 401 "$CODE"

# Throttling of failures is global (one budget for all of 127.0.0.0/8) and
# never refuses the right token: tests/netns/test_api_throttle.sh.

# --- /metrics -------------------------------------------------------------
ip netns exec "$SBX" dig +time=2 +tries=1 @203.0.113.53 denied-name.test A >/dev/null 2>&1
rq GET /metrics
is "GET /metrics answers 200" 200 "$CODE"
check "/metrics is Prometheus text (text/plain; version=0.0.4)" grep -q '^text/plain; version=0.0.4' <<<"$(hdr Content-Type)"
for m in egressd_dns_queries_total egressd_dns_denied_total egressd_policy_revision \
	egressd_api_requests_total egressd_api_auth_failures_total egressd_connections_total \
	egressd_injections_total egressd_redactions_total egressd_policy_apply_seconds_bucket \
	egressd_dns_latency_seconds_count; do
	check "/metrics has $m" grep -q "^${m}[ {]" "$TMP/rb"
done
check "egressd_dns_queries_total counted the query" grep -Eq '^egressd_dns_queries_total [1-9]' "$TMP/rb"
check "egressd_api_auth_failures_total counted the failures" grep -Eq '^egressd_api_auth_failures_total [1-9]' "$TMP/rb"
check "/metrics lines are valid exposition format" "$PY" - "$TMP/rb" <<'P'
import re, sys
typed = {}
ok = True
sample = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"(,[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*")*\})? (-?[0-9.]+(e[+-]?[0-9]+)?|NaN|[+-]Inf)$')
for line in open(sys.argv[1]).read().splitlines():
    if line.startswith("# TYPE "):
        _, _, name, kind = line.split(" ", 3)
        typed[name] = kind
        continue
    if line.startswith("# HELP ") or line == "":
        continue
    m = sample.match(line)
    if not m:
        print("bad line", line); ok = False; continue
    name = m.group(1)
    base = re.sub(r'_(bucket|sum|count)$', '', name)
    if name not in typed and base not in typed:
        print("untyped", name); ok = False
sys.exit(0 if ok and typed else 1)
P
check "histograms end with a +Inf bucket" grep -q 'egressd_policy_apply_seconds_bucket{le="+Inf"}' "$TMP/rb"

# --- unknown paths --------------------------------------------------------
for p in /nope /policy/ /policyx /healthz/x /credential-vaultx /metrics/x; do
	rq GET "$p"
	is "GET $p with a token answers 404" 404 "$CODE"
done
rq GET /nope
is "the 404 body is Go's '404 page not found'" "404 page not found" "$RB"

# --- /credential-vault without interception: 412 ------------------------
rq GET /credential-vault
is "GET /credential-vault with no vault: 404" "404 credential vault not found" "$CODE $RB"
for m in POST PATCH DELETE; do
	rq "$m" /credential-vault '{"credentials":[],"bindings":[]}'
	is "$m /credential-vault without interception: 412" 412 "$CODE"
	is "  'credential vault requires transparent mitmproxy'" "credential vault requires transparent mitmproxy" "$RB"
done
rq PUT /credential-vault '{}'
is "PUT /credential-vault: 405" 405 "$CODE"
is "  Allow: GET, POST, PATCH, DELETE" "GET, POST, PATCH, DELETE" "$(hdr Allow)"
nextsrc
rq -s "$SRC" -n GET /credential-vault/_active
is "GET /credential-vault/_active without auth: 403" 403 "$CODE"
rq GET /credential-vault/_active
is "GET /credential-vault/_active with auth: 403 as well" 403 "$CODE"
nextsrc
rq -s "$SRC" -n POST /credential-vault/_active
is "POST /credential-vault/_active: 405 (Allow: GET)" "405 GET" "$CODE $(hdr Allow)"

# --- OPENSANDBOX_EGRESS_MAX_RULES -----------------------------------------
restart OPENSANDBOX_EGRESS_MAX_RULES=3 OPENSANDBOX_EGRESS_RULES="$P1"
R3='{"defaultAction":"deny","egress":[{"action":"allow","target":"a.example.com"},{"action":"allow","target":"b.example.com"},{"action":"allow","target":"c.example.com"}]}'
R4='{"defaultAction":"deny","egress":[{"action":"allow","target":"a.example.com"},{"action":"allow","target":"b.example.com"},{"action":"allow","target":"c.example.com"},{"action":"allow","target":"d.example.com"}]}'
rq POST /policy "$R4"
is "POST with 4 rules over a limit of 3: 413" 413 "$CODE"
check "  and the message names the limit" grep -q 'exceeds limit 3' <<<"$RB"
is "  the policy is unchanged" '{"egress":[{"action":"allow","target":"api.example.com"},{"action":"allow","target":"*.svc.example.org"}],"defaultAction":"deny"}' "$(cur_policy)"
rq POST /policy "$R3"
is "POST with 3 rules at the limit: 200" 200 "$CODE"
rq PATCH /policy '[{"action":"allow","target":"d.example.com"}]'
is "PATCH merging to 4 rules: 413" 413 "$CODE"
rq PATCH /policy '[{"action":"deny","target":"c.example.com"}]'
is "PATCH replacing a target (still 3 rules): 200" 200 "$CODE"
is "  the merged policy has 3 rules" 3 "$(cur_policy >/dev/null; jv 'len(d["policy"]["egress"])')"

# --- vault with interception ----------------------------------------------
restart OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true OPENSANDBOX_EGRESS_RULES="$P1"
cat >"$TMP/create.json" <<'J'
{"credentials":[{"name":"gitlab-token","source":{"type":"inline","value":"glpat-test-value-0001"}},
 {"name":"basic-cred","source":{"type":"inline","value":"dXNlcjpwYXNzd29yZA=="}}],
 "bindings":[{"name":"gitlab-api","match":{"hosts":["api.example.com"],"methods":["get"],"paths":["/api/v4/*"]},
  "auth":{"type":"apiKey","name":"PRIVATE-TOKEN","credential":"gitlab-token"}}]}
J
rq GET /credential-vault
is "GET before create: 404" "404 credential vault not found" "$CODE $RB"
rq GET /credential-vault/credentials
is "GET credentials before create: 404" "404 credential vault not found" "$CODE $RB"
rq PATCH /credential-vault '{}'
is "PATCH before create: 404" "404 credential vault not found" "$CODE $RB"
rq DELETE /credential-vault
is "DELETE before create: 404" 404 "$CODE"
rq -f "$TMP/create.json" POST /credential-vault
if [ "$CODE" = 412 ] && [ "$RB" = "credential proxy is not ready" ]; then
	not_ok "PENDING-INTERCEPTION: vault writes answer 412 'credential proxy is not ready' (interception listener not landed)"
fi
is "POST /credential-vault: 201" 201 "$CODE"
check "  application/json" grep -qi '^application/json' <<<"$(hdr Content-Type)"
is "  State field order" '["revision","credentials","bindings"]' "$(jv 'list(d)')"
is "  revision 1" 1 "$(jv 'd["revision"]')"
is "  credentials sorted by name, with sourceType and revision" \
	'[{"name":"basic-cred","sourceType":"inline","revision":1},{"name":"gitlab-token","sourceType":"inline","revision":1}]' \
	"$(jv 'd["credentials"]')"
is "  binding metadata" \
	'[{"name":"gitlab-api","revision":1,"match":{"schemes":["https"],"ports":[443],"hosts":["api.example.com"],"methods":["GET"],"paths":["/api/v4/*"]},"auth":{"type":"apiKey","name":"Private-Token"}}]' \
	"$(jv 'd["bindings"]')"
refute "  no secret value in the answer" grep -q 'glpat-test-value-0001\|dXNlcjpwYXNzd29yZA' "$TMP/rb"
rq -f "$TMP/create.json" POST /credential-vault
is "POST again: 409 'credential vault already exists'" "409 credential vault already exists" "$CODE $RB"
rq GET /credential-vault
is "GET /credential-vault: 200" 200 "$CODE"
is "  revision 1" 1 "$(jv 'd["revision"]')"

rq PATCH /credential-vault '{"expectedRevision":1,"credentials":{"add":[{"name":"svc-key","source":{"type":"inline","value":"svc-key-value-0002"}}]},
 "bindings":{"add":[{"name":"svc","allowBroad":true,"match":{"hosts":["*.svc.example.org"]},"auth":{"type":"bearer","credential":"svc-key"}}]}}'
is "PATCH add with expectedRevision 1: 200" 200 "$CODE"
is "  revision 2" 2 "$(jv 'd["revision"]')"
is "  the added credential has revision 2, the others keep 1" '[["basic-cred",1],["gitlab-token",1],["svc-key",2]]' \
	"$(jv '[[c["name"],c["revision"]] for c in d["credentials"]]')"
is "  every binding reports the vault revision" '[["gitlab-api",2],["svc",2]]' "$(jv '[[b["name"],b["revision"]] for b in d["bindings"]]')"
rq PATCH /credential-vault '{"credentials":{"replace":[{"name":"gitlab-token","source":{"type":"inline","value":"glpat-test-value-0003"}}]}}'
is "PATCH replace: 200, revision 3" "200 3" "$CODE $(jv 'd["revision"]')"
is "  the replaced credential has revision 3" 3 "$(jv '[c["revision"] for c in d["credentials"] if c["name"]=="gitlab-token"][0]')"
rq PATCH /credential-vault '{"expectedRevision":1,"credentials":{"delete":["basic-cred"]}}'
is "PATCH with a stale expectedRevision: 409" 409 "$CODE"
is "  message" "expectedRevision 1 does not match current revision 3" "$RB"
rq PATCH /credential-vault '{"bindings":{"delete":["svc"]},"credentials":{"delete":["svc-key"]}}'
is "PATCH delete binding and credential: 200, revision 4" "200 4" "$CODE $(jv 'd["revision"]')"
is "  they are gone" '[["basic-cred","gitlab-token"],["gitlab-api"]]' \
	"$(jv '[[c["name"] for c in d["credentials"]],[b["name"] for b in d["bindings"]]]')"
rq PATCH /credential-vault '{}'
is "PATCH {}: 200, revision 5" "200 5" "$CODE $(jv 'd["revision"]')"
rq GET /credential-vault
STATE5=$(jv 'd')

bad_patch() { # description expected-codes body
	rq PATCH /credential-vault "$3"
	check "$1: $2 (got $CODE)" grep -Eq "^($2)\$" <<<"$CODE"
	rq GET /credential-vault
	is "  and the vault is unchanged" "$STATE5" "$(jv 'd')"
}
bad_patch "PATCH with bad JSON" 400 '{"credentials":{"add":['
bad_patch "PATCH with an unknown field" 400 '{"credentials":{"add":[]},"bogus":1}'
bad_patch "PATCH with an unknown operation" 400 '{"credentials":{"upsert":[]}}'
bad_patch "PATCH with duplicate keys" 400 '{"expectedRevision":5,"expectedRevision":4}'
bad_patch "PATCH with a string expectedRevision" 400 '{"expectedRevision":"5"}'
bad_patch "PATCH that is not an object" 400 '[]'
bad_patch "PATCH with an empty body" 400 ''
bad_patch "PATCH deleting a missing credential" 400 '{"credentials":{"delete":["nope"]}}'
bad_patch "PATCH deleting a credential a binding uses" 400 '{"credentials":{"delete":["gitlab-token"]}}'
bad_patch "PATCH replacing a missing credential" 400 '{"credentials":{"replace":[{"name":"nope","source":{"type":"inline","value":"v"}}]}}'
bad_patch "PATCH adding an existing credential" '400|409' '{"credentials":{"add":[{"name":"gitlab-token","source":{"type":"inline","value":"v"}}]}}'
bad_patch "PATCH naming one credential in two operations" 400 \
	'{"credentials":{"delete":["basic-cred"],"add":[{"name":"basic-cred","source":{"type":"inline","value":"v"}}]}}'
bad_patch "PATCH with an empty inline value" 400 '{"credentials":{"add":[{"name":"e","source":{"type":"inline","value":""}}]}}'
bad_patch "PATCH with an unsupported source type" 400 '{"credentials":{"add":[{"name":"e","source":{"type":"vault","value":"x"}}]}}'
bad_patch "PATCH binding a host no allow rule covers" 400 \
	'{"bindings":{"add":[{"name":"evil","match":{"hosts":["evil.example.net"],"paths":["/x"]},"auth":{"type":"bearer","credential":"basic-cred"}}]}}'
bad_patch "PATCH binding an IP host" 400 \
	'{"bindings":{"add":[{"name":"ip","match":{"hosts":["203.0.113.10"],"paths":["/x"]},"auth":{"type":"bearer","credential":"basic-cred"}}]}}'
bad_patch "PATCH binding a port that is not intercepted" 400 \
	'{"bindings":{"add":[{"name":"p","match":{"hosts":["x.svc.example.org"],"ports":[8443],"paths":["/x"]},"auth":{"type":"bearer","credential":"basic-cred"}}]}}'
bad_patch "PATCH binding an unknown credential" 400 \
	'{"bindings":{"add":[{"name":"u","match":{"hosts":["x.svc.example.org"],"paths":["/x"]},"auth":{"type":"bearer","credential":"nope"}}]}}'
bad_patch "PATCH with an ambiguous binding" 400 \
	'{"bindings":{"add":[{"name":"dup","match":{"hosts":["api.example.com"],"methods":["GET"],"paths":["/api/*"]},"auth":{"type":"bearer","credential":"basic-cred"}}]}}'
bad_patch "PATCH with an unsupported auth type" 400 \
	'{"bindings":{"add":[{"name":"t","match":{"hosts":["x.svc.example.org"],"paths":["/x"]},"auth":{"type":"digest","credential":"basic-cred"}}]}}'
bad_patch "PATCH with a reserved header name" 400 \
	'{"bindings":{"add":[{"name":"h","match":{"hosts":["x.svc.example.org"],"paths":["/x"]},"auth":{"type":"apiKey","name":"Host","credential":"basic-cred"}}]}}'
# Issue 15: bindings are exact unless allowBroad, and values must fit a header.
bad_patch "PATCH binding a wildcard host without allowBroad" 400 \
	'{"bindings":{"add":[{"name":"w","match":{"hosts":["*.svc.example.org"],"paths":["/x"]},"auth":{"type":"bearer","credential":"basic-cred"}}]}}'
rq PATCH /credential-vault '{"bindings":{"add":[{"name":"w","match":{"hosts":["*.svc.example.org"],"paths":["/x"]},"auth":{"type":"bearer","credential":"basic-cred"}}]}}'
check "  the error names the field (bindings[1].match.hosts[0]) and not the host" \
	grep -q 'bindings\[1\]\.match\.hosts\[0\]: a wildcard host is refused unless the binding sets allowBroad: true' <<<"$RB"
refute "  the host is not echoed" grep -q 'svc.example.org' <<<"$RB"
bad_patch "PATCH binding all paths (/*) without allowBroad" 400 \
	'{"bindings":{"add":[{"name":"w","match":{"hosts":["x.svc.example.org"],"paths":["/*"]},"auth":{"type":"bearer","credential":"basic-cred"}}]}}'
bad_patch "PATCH binding without paths (the /* default) without allowBroad" 400 \
	'{"bindings":{"add":[{"name":"w","match":{"hosts":["x.svc.example.org"]},"auth":{"type":"bearer","credential":"basic-cred"}}]}}'
bad_patch "PATCH binding https on port 80" 400 \
	'{"bindings":{"add":[{"name":"w","match":{"hosts":["x.svc.example.org"],"ports":[80],"paths":["/x"]},"auth":{"type":"bearer","credential":"basic-cred"}}]}}'
bad_patch "PATCH binding allowBroad as a string" 400 \
	'{"bindings":{"add":[{"name":"w","allowBroad":"true","match":{"hosts":["*.svc.example.org"]},"auth":{"type":"bearer","credential":"basic-cred"}}]}}'
for v in 'a\r\nX-Injected: 1' 'tok\u0000en' 'tok\nen' 'tok\u007fen' ' lead' 'trail\t'; do
	bad_patch "PATCH adding a value a header cannot carry ($v)" 400 \
		"{\"credentials\":{\"add\":[{\"name\":\"crlf\",\"source\":{\"type\":\"inline\",\"value\":\"$v\"}}]}}"
done
rq PATCH /credential-vault '{"credentials":{"replace":[{"name":"basic-cred","source":{"type":"inline","value":"ok\r\nX-Injected: 1"}}]}}'
check "  the error names the credential by position, the field and the rule" \
	grep -Eq 'credentials\[[0-9]+\]\.source\.value: the value holds a byte a header field cannot carry' <<<"$RB"
refute "  the value is not echoed" grep -q 'Injected' <<<"$RB"

# Parallel PATCHes with the same expectedRevision: exactly one wins.
N=6
RACE=()
for i in $(seq 1 $N); do
	ip netns exec "$SBX" curl -sS -m20 -o /dev/null -w '%{http_code}\n' -X PATCH \
		-H "OPENSANDBOX-EGRESS-AUTH: $TOKEN" \
		--data-binary "{\"expectedRevision\":5,\"credentials\":{\"add\":[{\"name\":\"race-$i\",\"source\":{\"type\":\"inline\",\"value\":\"race-value-$i\"}}]}}" \
		"$URL/credential-vault" >"$TMP/race.$i" 2>&1 &
	RACE+=($!)
done
wait "${RACE[@]}"
wins=$(cat "$TMP"/race.* | grep -c '^200$')
losses=$(cat "$TMP"/race.* | grep -c '^409$')
is "parallel PATCHes with expectedRevision 5: exactly one 200" 1 "$wins"
is "  and the other $((N - 1)) get 409" $((N - 1)) "$losses"
rq GET /credential-vault
is "  the vault is at revision 6" 6 "$(jv 'd["revision"]')"
is "  with exactly one race credential" 1 "$(jv 'len([c for c in d["credentials"] if c["name"].startswith("race-")])')"

# Subresources.
rq GET /credential-vault/credentials
is "GET /credential-vault/credentials: 200" 200 "$CODE"
is "  fields revision, credentials" '["revision","credentials"]' "$(jv 'list(d)')"
is "  revision 6" 6 "$(jv 'd["revision"]')"
rq GET /credential-vault/credentials/gitlab-token
is "GET /credential-vault/credentials/gitlab-token: 200" 200 "$CODE"
is "  CredentialMetadata" '{"name":"gitlab-token","sourceType":"inline","revision":3}' "$(jv 'd')"
rq GET /credential-vault/credentials/gitlab%2Dtoken
is "  the name is URL-decoded" 200 "$CODE"
rq GET /credential-vault/credentials/nope
is "GET an unknown credential: 404 'credential not found'" "404 credential not found" "$CODE $RB"
rq GET /credential-vault/bindings
is "GET /credential-vault/bindings: 200" 200 "$CODE"
is "  fields revision, bindings" '["revision","bindings"]' "$(jv 'list(d)')"
rq GET /credential-vault/bindings/gitlab-api
is "GET /credential-vault/bindings/gitlab-api: 200" 200 "$CODE"
is "  BindingMetadata fields" '["name","revision","match","auth"]' "$(jv 'list(d)')"
rq GET /credential-vault/bindings/nope
is "GET an unknown binding: 404 'binding not found'" "404 binding not found" "$CODE $RB"
for m in POST PUT PATCH DELETE; do
	rq "$m" /credential-vault/credentials '{}'
	is "$m /credential-vault/credentials: 405 Allow GET" "405 GET" "$CODE $(hdr Allow)"
	rq "$m" /credential-vault/bindings/gitlab-api '{}'
	is "$m /credential-vault/bindings/gitlab-api: 405 Allow GET" "405 GET" "$CODE $(hdr Allow)"
done
rq GET /credential-vault/other
is "GET /credential-vault/other: 404 'not found'" "404 not found" "$CODE $RB"
rq GET /credential-vault/_active
is "GET /credential-vault/_active over TCP: 403" 403 "$CODE"

# Policy changes must keep every binding covered.
POL=$(cur_policy)
rq DELETE /policy '["api.example.com"]'
is "DELETE /policy of the rule covering a binding: 400" 400 "$CODE"
check "  'credential vault policy validation: ...'" grep -q '^credential vault policy validation: ' <<<"$RB"
is "  the policy is unchanged" "$POL" "$(cur_policy)"
rq POST /policy ''
is "an empty-body reset while a binding exists: 400" 400 "$CODE"
is "  the policy is unchanged" "$POL" "$(cur_policy)"
rq PUT /policy '{"defaultAction":"allow"}'
is "default-allow with no rules does not count as coverage: 400" 400 "$CODE"
rq PATCH /policy '[{"action":"deny","target":"api.example.com"}]'
is "PATCH denying the bound host: 400" 400 "$CODE"
is "  the policy is unchanged" "$POL" "$(cur_policy)"
rq PATCH /policy '[{"action":"allow","target":"more.example.com"}]'
is "an unrelated PATCH still works: 200" 200 "$CODE"

# DELETE, then everything is 404 and the policy is free again.
rq DELETE /credential-vault
is "DELETE /credential-vault: 204" 204 "$CODE"
is "  with an empty body" "" "$RB"
rq GET /credential-vault
is "GET after DELETE: 404" "404 credential vault not found" "$CODE $RB"
rq GET /credential-vault/bindings/gitlab-api
is "GET a binding after DELETE: 404" 404 "$CODE"
rq DELETE /credential-vault
is "DELETE again: 404" 404 "$CODE"
rq DELETE /policy '["api.example.com"]'
is "without bindings the rule can be deleted: 200" 200 "$CODE"
rq POST /credential-vault '{"credentials":[],"bindings":[]}'
is "a new empty vault starts again at revision 1" "201 1" "$CODE $(jv 'd["revision"]')"
rq POST /credential-vault/ '{}'
is "POST /credential-vault/ (subtree root): 404" 404 "$CODE"
rq DELETE /credential-vault
for bad in '{"credentials":[],"bindings":[],"extra":1}' '{"credentials":[' \
	'{"credentials":[{"name":"a","source":{"type":"inline","value":"v1"}},{"name":"a","source":{"type":"inline","value":"v2"}}]}' \
	'{"credentials":[],"credentials":[]}' '[]' ''; do
	rq POST /credential-vault "$bad"
	is "POST /credential-vault $bad: 400" 400 "$CODE"
	check "  with 'invalid credential vault request' or a validation message" test -n "$RB"
done
rq GET /credential-vault
is "refused creates leave no vault" 404 "$CODE"

# Insecure upstream TLS disables vault writes.
restart OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true OPENSANDBOX_EGRESS_MITMPROXY_SSL_INSECURE=true OPENSANDBOX_EGRESS_RULES="$P1"
rq POST /credential-vault '{"credentials":[],"bindings":[]}'
is "with SSL_INSECURE vault writes are 412" "412 credential vault rejects insecure upstream TLS mode" "$CODE $RB"

# Without a token (explicit opt-in) vault writes are 412 as well.
restart OPENSANDBOX_EGRESS_TOKEN= EGRESSD_INSECURE_NO_TOKEN=1 OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true OPENSANDBOX_EGRESS_RULES="$P1"
rq -n GET /policy
is "with the insecure opt-in, /policy needs no token" 200 "$CODE"
rq -n POST /credential-vault '{"credentials":[],"bindings":[]}'
is "without a token vault writes are 412" "412 credential vault requires egress API auth token" "$CODE $RB"
check "the insecure opt-in is warned about at start" grep -qi 'warn.*token\|token.*warn' "$TMP/egressd.log"

# The token never reaches a log line, nor do the wrong guesses.
cat "$TMP/egressd.log" >>"$ALL_LOG"
refute "the token is never logged" grep -qF "$TOKEN" "$ALL_LOG"
refute "wrong tokens are never logged" grep -qE "guess-|wrong-test-token" "$ALL_LOG"
if grep -q -E 'AddressSanitizer|runtime error:|LeakSanitizer' "$ALL_LOG"; then
	not_ok "sanitizer report in an earlier egressd log"
	grep -E -A20 'AddressSanitizer|runtime error:|LeakSanitizer' "$ALL_LOG" | head -40
fi
ns_finish
