#!/bin/bash
# Audit trail of the control plane (issue 14, item 9): every mutation
# attempt (POST/PUT/PATCH/DELETE on /policy, /credential-vault[/...] and
# any other path), accepted or refused (400, 401, 404, 405, 409, 412, 413,
# 429), writes exactly one api_audit record with the actor (peer, token
# state), endpoint, method, status, revision before and after and a digest
# of the state after; reads write none; no secret or body ever appears.
# Requests that libevent's HTTP layer refuses itself, before the dispatch
# (a body over 1 MiB with Content-Length or chunked, a head over 16 KiB, a
# request line never ended), are audited too, once, with refused_by "http",
# on fresh and on kept-alive or pipelined connections.
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/nslib.sh"
# The client runs as the workload's uid, which cannot read a checkout under
# /root: it gets a copy of its own.
install -m 644 "$HERE/api_refused.py" "$TMP/api_refused.py"
ns_up
mkdir -p "$TMP/always"
URL=http://127.0.0.1:18080
CANARY=canary-SECRET-7f3a9c1e
LOG="$TMP/egressd.log"
declare -A LAST # object -> digest of the last record

# rq [-s SRC] [-n] [-t TOKEN] [-H HEADER] METHOD PATH [BODY]; sets CODE.
rq() {
	local src=127.0.0.1 tok="$TOKEN" notok=0 hdrs=() args=()
	while [ $# -gt 0 ]; do
		case "$1" in
		-s) src=$2; shift 2 ;;
		-n) notok=1; shift ;;
		-t) tok=$2; shift 2 ;;
		-H) hdrs+=(-H "$2"); shift 2 ;;
		*) break ;;
		esac
	done
	[ "$notok" = 0 ] && args+=(-H "OPENSANDBOX-EGRESS-AUTH: $tok")
	args+=(-X "$1")
	[ $# -ge 3 ] && args+=(--data-binary "$3")
	CODE=$(ip netns exec "$SBX" curl -sS -m20 --interface "$src" "${args[@]}" "${hdrs[@]}" \
		-o "$TMP/rb" -w '%{http_code}' "$URL$2" 2>"$TMP/rerr")
}

nrec() { grep -c '"event":"api_audit"' "$LOG"; }

# audit DESC STATUS TOKEN OBJECT REV(same|+1|0) -- rq-args...
# Runs one request and checks that it wrote exactly one record, and its fields.
audit() {
	local desc=$1 st=$2 tk=$3 obj=$4 rev=$5 before after out
	shift 6
	before=$(nrec)
	rq "$@"
	after=$(nrec)
	local m path
	m=$(for a in "$@"; do case "$a" in POST|PUT|PATCH|DELETE) echo "$a"; break ;; esac; done)
	path=$(for a in "$@"; do case "$a" in /*) echo "$a"; break ;; esac; done)
	out=$($PY - "$LOG" "$before" "$CODE" "$st" "$tk" "$obj" "$rev" "$m" "$path" "${LAST[$obj]:-}" <<'PY'
import json, re, sys
log, before, code, st, tk, obj, rev, m, path, last = sys.argv[1:11]
recs = [json.loads(l) for l in open(log) if '"event":"api_audit"' in l][int(before):]
if len(recs) != 1:
    print("FAIL %d records" % len(recs)); sys.exit()
r = recs[0]
errs = []
want = {"status": int(st), "token": tk, "object": obj, "method": m, "endpoint": path,
        "accepted": 200 <= int(st) < 300}
for k, v in want.items():
    if r.get(k) != v: errs.append("%s=%r (want %r)" % (k, r.get(k), v))
if int(code) != int(st): errs.append("answered %s" % code)
if r.get("peer") is None: errs.append("no peer")
if not re.fullmatch(r"[0-9a-f]{16}", r.get("sha256_after", "")): errs.append("bad digest")
b, a = r.get("revision_before"), r.get("revision_after")
if rev == "same" and a != b: errs.append("revision %s->%s" % (b, a))
if rev == "+1" and a != b + 1: errs.append("revision %s->%s" % (b, a))
if rev == "0" and a != 0: errs.append("revision %s->%s" % (b, a))
if rev == "same" and last and r["sha256_after"] != last: errs.append("digest changed")
if rev != "same" and last and r["sha256_after"] == last: errs.append("digest unchanged")
print("FAIL " + ", ".join(errs) if errs else "OK " + r["sha256_after"])
PY
)
	if [ "${out%% *}" = OK ]; then
		ok "$desc: one record ($st, token $tk, $obj, revision $rev)"
		LAST[$obj]=${out#OK }
	else
		not_ok "$desc: $out"
	fi
}

# noaudit DESC rq-args...: a request that must write no record.
noaudit() {
	local desc=$1 before
	shift
	before=$(nrec)
	rq "$@"
	is_n=$(nrec)
	if [ "$is_n" = "$before" ]; then ok "$desc: no record"; else not_ok "$desc: wrote $((is_n - before)) records"; fi
}

P1='{"defaultAction":"deny","egress":[{"action":"allow","target":"api.example.com"},{"action":"allow","target":"*.svc.example.org"}]}'
ns_egressd OPENSANDBOX_EGRESS_MAX_RULES=3 OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true OPENSANDBOX_EGRESS_RULES="$P1"
for i in $(seq 1 50); do rq -n GET /healthz; [ "$CODE" = 200 ] && break; sleep 0.1; done

# --- reads write nothing ---------------------------------------------------
noaudit "GET /policy" GET /policy
noaudit "GET /credential-vault" GET /credential-vault
noaudit "POST /healthz (ignores the method)" -n POST /healthz
noaudit "DELETE /ca.pem (ignores the method)" -n DELETE /ca.pem
noaudit "a wrong token on GET" -t nope GET /policy

# --- /policy ---------------------------------------------------------------
audit "POST /policy" 200 right policy +1 -- POST /policy \
	'{"defaultAction":"deny","egress":[{"action":"allow","target":"a.example.com"},{"action":"allow","target":"api.example.com"}]}'
audit "PUT /policy" 200 right policy +1 -- PUT /policy \
	'{"defaultAction":"deny","egress":[{"action":"allow","target":"b.example.com"},{"action":"allow","target":"api.example.com"}]}'
audit "PATCH /policy" 200 right policy +1 -- PATCH /policy '[{"action":"allow","target":"c.example.com"}]'
audit "DELETE /policy (a target)" 200 right policy +1 -- DELETE /policy '["c.example.com"]'
audit "DELETE /policy (no match: nothing changes)" 200 right policy same -- DELETE /policy '["zzz.example.com"]'
audit "POST /policy with bad JSON: 400" 400 right policy same -- POST /policy "{\"defaultAction\":\"$CANARY\""
audit "PATCH /policy with an empty body: 400" 400 right policy same -- PATCH /policy ''
audit "POST /policy over the rule limit: 413" 413 right policy same -- POST /policy \
	'{"defaultAction":"deny","egress":[{"action":"allow","target":"a.example.com"},{"action":"allow","target":"b.example.com"},{"action":"allow","target":"c.example.com"},{"action":"allow","target":"d.example.com"}]}'
audit "POST /policy with a wrong token: 401" 401 wrong policy same -- -s 127.0.5.1 -t "$CANARY" POST /policy '{"defaultAction":"allow"}'
audit "DELETE /policy without a token: 401" 401 absent policy same -- -s 127.0.5.2 -n DELETE /policy '["api.example.com"]'
audit "PUT /policy with two token headers: 400" 400 duplicate policy same -- -H "OPENSANDBOX-EGRESS-AUTH: x" PUT /policy '{"defaultAction":"allow"}'
noaudit "POST /metrics (a read whatever the method)" POST /metrics '{}'
audit "DELETE on an unknown path: 404" 404 right policy same -- DELETE /nope

# --- /credential-vault ------------------------------------------------------
CREATE='{"credentials":[{"name":"tok","source":{"type":"inline","value":"'$CANARY'-1"}}],
 "bindings":[{"name":"b1","match":{"hosts":["api.example.com"],"paths":["/v1/*"]},"auth":{"type":"bearer","credential":"tok"}}]}'
audit "POST /credential-vault: 201" 201 right vault +1 -- POST /credential-vault "$CREATE"
audit "POST /credential-vault again: 409" 409 right vault same -- POST /credential-vault "$CREATE"
audit "PATCH /credential-vault: 200" 200 right vault +1 -- PATCH /credential-vault \
	'{"expectedRevision":1,"credentials":{"replace":[{"name":"tok","source":{"type":"inline","value":"'$CANARY'-2"}}]}}'
audit "PATCH with a stale expectedRevision: 409" 409 right vault same -- PATCH /credential-vault '{"expectedRevision":1}'
audit "PATCH with an invalid body: 400" 400 right vault same -- PATCH /credential-vault \
	'{"credentials":{"add":[{"name":"x","source":{"type":"inline","value":"'$CANARY'-3"}}]},"bogus":1}'
audit "PUT /credential-vault: 405" 405 right vault same -- PUT /credential-vault '{}'
audit "POST /credential-vault/_active: 405" 405 right vault same -- POST /credential-vault/_active '{}'
audit "PATCH /credential-vault/credentials: 405" 405 right vault same -- PATCH /credential-vault/credentials '{}'
audit "POST /credential-vault with a wrong token: 401" 401 wrong vault same -- -s 127.0.5.3 -t "$CANARY" POST /credential-vault "$CREATE"
audit "DELETE /credential-vault: 204" 204 right vault 0 -- DELETE /credential-vault
audit "DELETE /credential-vault again: 404" 404 right vault same -- DELETE /credential-vault

# --- refused by the HTTP layer, before the dispatch -----------------------------
# refused DESC SRC EXPECT SCENARIO [ARGS...]: runs api_refused.py SCENARIO as
# the workload from SRC with the token $RTOK ("-": none); EXPECT is the
# records it must write, in order, comma separated, each
# STATUS:METHOD:ENDPOINT:TOKEN:OBJECT:BY (BY "http" for a refusal by
# libevent, "-" for an answer of the dispatch), or "none". Every record
# names SRC as its peer; a refusal by the HTTP layer changes nothing: the
# revision and the digest stay as they were. A prefix "=CODES " on EXPECT
# also requires the client to have read exactly those status codes.
RTOK=$TOKEN
refused() {
	local desc=$1 src=$2 exp=$3 before ans out codes=""
	shift 3
	case "$exp" in "="*) codes=${exp%% *}; codes=${codes#=}; exp=${exp#* } ;; esac
	before=$(nrec)
	ans=$(ws $PY "$TMP/api_refused.py" "$src" "$1" "$RTOK" "$CANARY" "${@:2}" 2>&1)
	out=$($PY - "$LOG" "$before" "$src" "$exp" "${LAST[policy]:-}" "${LAST[vault]:-}" "$ans" "$codes" <<'PY'
import json, re, sys
log, before, src, exp, lastp, lastv, ans, codes = sys.argv[1:9]
recs = [json.loads(l) for l in open(log) if '"event":"api_audit"' in l][int(before):]
want = [] if exp == "none" else [e.split(":") for e in exp.split(",")]
errs = []
if codes and ans.split() != codes.split(","):
    errs.append("client read %r" % ans)
if len(recs) != len(want):
    errs.append("%d records (want %d): %s" % (len(recs), len(want), [(r.get("status"), r.get("method"), r.get("refused_by")) for r in recs]))
last = {"policy": lastp, "vault": lastv}
for r, w in zip(recs, want):
    st, m, ep, tk, obj, by = w
    for k, v in {"status": int(st), "method": m, "endpoint": ep, "token": tk, "object": obj,
                 "accepted": 200 <= int(st) < 300, "peer": src}.items():
        if r.get(k) != v: errs.append("%s=%r (want %r)" % (k, r.get(k), v))
    if r.get("refused_by") != (by if by != "-" else None):
        errs.append("refused_by=%r (want %s)" % (r.get("refused_by"), by))
    if not re.fullmatch(r"[0-9a-f]{16}", r.get("sha256_after", "")): errs.append("bad digest")
    if by == "http":
        if r.get("revision_before") != r.get("revision_after"): errs.append("revision changed")
        if last.get(obj) and r.get("sha256_after") != last[obj]: errs.append("digest changed")
    last[obj] = r.get("sha256_after")
print("FAIL " + ", ".join(errs) if errs else "OK %s %s" % (last["policy"] or "-", last["vault"] or "-"))
PY
)
	if [ "${out%% *}" = OK ]; then
		ok "$desc: ${exp//,/ then } (client read: ${ans:-nothing})"
		set -- $out
		[ "$2" != - ] && LAST[policy]=$2
		[ "$3" != - ] && LAST[vault]=$3
	else
		not_ok "$desc: $out"
	fi
}
refused "PUT /policy, Content-Length over 1 MiB" 127.0.6.1 "=413 413:PUT:/policy:right:policy:http" cl PUT /policy
refused "POST /policy, a chunked body over 1 MiB" 127.0.6.2 "413:POST:/policy:right:policy:http" chunked POST /policy
refused "PATCH /policy, a chunked body over 1 MiB" 127.0.6.3 "413:PATCH:/policy:right:policy:http" chunked PATCH /policy
refused "DELETE /policy, Content-Length over 1 MiB" 127.0.6.4 "=413 413:DELETE:/policy:right:policy:http" cl DELETE /policy
refused "POST /credential-vault, Content-Length over 1 MiB" 127.0.6.5 "=413 413:POST:/credential-vault:right:vault:http" cl POST /credential-vault
refused "PUT /policy, Expect: 100-continue, then a chunked body over 1 MiB" 127.0.6.19 "=100,413 413:PUT:/policy:right:policy:http" expect PUT /policy
refused "PATCH /policy with an Expect libevent does not know: 417" 127.0.6.20 "=417 417:PATCH:/policy:unknown:policy:http" expect-other PATCH /policy
refused "a head over 16 KiB on POST /policy" 127.0.6.6 "400:POST:/policy:unknown:policy:http" bighead POST /policy
refused "a request line over 16 KiB (method and endpoint unknown)" 127.0.6.7 "400:?:?:unknown:policy:http" bigline
refused "POST /policy then PUT over 1 MiB on one connection" 127.0.6.8 "=200,413 200:POST:/policy:right:policy:-,413:PUT:/policy:right:policy:http" keepalive
refused "the same two requests pipelined" 127.0.6.9 "=200,413 200:POST:/policy:right:policy:-,413:PUT:/policy:right:policy:http" pipelined
refused "GET /policy then PUT over 1 MiB, pipelined" 127.0.6.10 "=200,413 413:PUT:/policy:right:policy:http" pipelined-get
refused "PUT /credential-vault/x over 1 MiB on an unknown path" 127.0.6.11 "=413 413:PUT:/credential-vault/x:right:vault:http" cl PUT /credential-vault/x
refused "a GET over 1 MiB is a read" 127.0.6.12 "=413 none" cl GET /policy
refused "a head over 16 KiB on GET /policy is a read" 127.0.6.13 "none" bighead GET /policy
refused "POST /healthz over 1 MiB is a read" 127.0.6.14 "=413 none" cl POST /healthz
refused "a PUT abandoned inside its body is not answered" 127.0.6.15 "none" abandon PUT /policy
RTOK=$CANARY
refused "PATCH /credential-vault over 1 MiB with a wrong token" 127.0.6.16 "=413 413:PATCH:/credential-vault:wrong:vault:http" cl PATCH /credential-vault
refused "POST /policy chunked over 1 MiB with a wrong token" 127.0.6.17 "413:POST:/policy:wrong:policy:http" chunked POST /policy
RTOK=-
refused "DELETE /policy over 1 MiB without a token" 127.0.6.18 "=413 413:DELETE:/policy:absent:policy:http" cl DELETE /policy
RTOK=$TOKEN
audit "after the refusals, a mutation is still audited once" 200 right policy +1 -- PUT /policy \
	'{"defaultAction":"deny","egress":[{"action":"allow","target":"d.example.com"},{"action":"allow","target":"api.example.com"}]}'

# --- 429: throttled attempts are audited too, and the right token passes ---
# throttled DESC TOKEN(wrong|absent) OBJECT METHOD PATH [BODY]: one workload
# process spends the failure budget (40 guesses) and sends the mutation at
# once. The budget refills one failure a second, so if the refill lands in
# between (a 401), it tries again (at most 3 times); every attempt must have
# its own record, and the last one must be a 429.
throttled() {
	local desc=$1 tk=$2 obj=$3 m=$4 path=$5 body=${6-} before out
	before=$(nrec)
	ws $PY - "$tk" "$m" "$path" "$body" "$CANARY" >"$TMP/thr" 2>&1 <<'PY'
import http.client, sys
tk, m, path, body, canary = sys.argv[1:6]
def req(src, method, p, token, b=None):
    c = http.client.HTTPConnection("127.0.0.1", 18080, timeout=5, source_address=(src, 0))
    c.request(method, p, body=b, headers={"OPENSANDBOX-EGRESS-AUTH": token} if token else {})
    st = c.getresponse().status
    c.close()
    return st
for attempt in range(3):
    for i in range(40):
        req("127.0.8.%d" % (i + 1), "GET", "/policy", "guess-%d" % i)
    st = req("127.0.9.%d" % (attempt + 1), m, path, canary if tk == "wrong" else None, body or None)
    print(st)
    if st == 429:
        break
PY
	out=$($PY - "$LOG" "$before" "$tk" "$obj" "$m" "$path" "$TMP/thr" "${LAST[$obj]:-}" <<'PY'
import json, sys
log, before, tk, obj, m, path, thr, last = sys.argv[1:9]
sts = [int(x) for x in open(thr).read().split()]
recs = [json.loads(l) for l in open(log) if '"event":"api_audit"' in l][int(before):]
errs = []
if not sts or sts[-1] != 429: errs.append("answers %s" % sts)
if [r.get("status") for r in recs] != sts: errs.append("records %s for answers %s" % ([r.get("status") for r in recs], sts))
for r in recs:
    for k, v in {"token": tk, "object": obj, "method": m, "endpoint": path, "accepted": False}.items():
        if r.get(k) != v: errs.append("%s=%r" % (k, r.get(k)))
    if r.get("revision_before") != r.get("revision_after"): errs.append("revision changed")
    if last and r.get("sha256_after") != last: errs.append("digest changed")
print("FAIL " + ", ".join(errs) if errs else "OK")
PY
)
	if [ "$out" = OK ]; then ok "$desc: one record per attempt, the last a 429 ($(tr '\n' ' ' <"$TMP/thr"))"; else not_ok "$desc: $out"; fi
}
throttled "POST /policy with a wrong token while throttled" wrong policy POST /policy '{}'
throttled "DELETE /credential-vault without a token while throttled" absent vault DELETE /credential-vault
audit "the right token while throttled is applied: 200" 200 right policy +1 -- POST /policy \
	'{"defaultAction":"deny","egress":[{"action":"allow","target":"api.example.com"}]}'

# --- egressd stops with API connections open: nothing dangles -----------------
# (under an ASan build a use after free or a double free shows in this log;
# LeakSanitizer cannot run in the non-dumpable worker)
ws $PY "$TMP/api_refused.py" 127.0.6.30 hold "$TOKEN" "$CANARY" >"$TMP/hold.out" 2>&1 &
HOLD=$!
for i in $(seq 1 100); do grep -q '^held' "$TMP/hold.out" && break; sleep 0.1; done
check "four API connections are open (idle, inside a head, inside a body, after an answer)" grep -q '^held' "$TMP/hold.out"

# --- 412: vault writes without interception ----------------------------------
kill "$EGRESSD_PID"; wait "$EGRESSD_PID" 2>/dev/null
check "the worker stopped cleanly with them open" grep -q '"event":"worker_exit".*"status":0' "$LOG"
refute "no sanitizer report" grep -qE 'AddressSanitizer|LeakSanitizer|runtime error:' "$LOG"
# $HOLD is the subshell of the ws function; the client is its child.
pkill -TERM -P "$HOLD" 2>/dev/null
kill "$HOLD" 2>/dev/null
wait "$HOLD" 2>/dev/null
cat "$LOG" >>"$TMP/all.log"
LAST=()
ns_egressd OPENSANDBOX_EGRESS_RULES="$P1"
audit "POST /credential-vault without interception: 412" 412 right vault same -- POST /credential-vault "$CREATE"
audit "PATCH /credential-vault without interception: 412" 412 right vault same -- PATCH /credential-vault '{}'
cat "$LOG" >>"$TMP/all.log"

refute "the canary secret never appears in a log" grep -qF "$CANARY" "$TMP/all.log"
refute "the token never appears in a log" grep -qF "$TOKEN" "$TMP/all.log"
refute "no request body reaches an audit record" grep -q '"event":"api_audit".*example.com' "$TMP/all.log"
ns_finish
