#!/bin/bash
# Canary test (issue 5): the vault holds credentials with random canary
# values (bearer, basic, apiKey, and a rotated one); every endpoint is
# exercised, error paths included (invalid JSON around the canary, the
# canary as a key or type, unknown fields, duplicates, too-short and
# too-long values, refused policy changes, wrong tokens). The test fails if
# any form of a canary (raw, base64 at any alignment, base64url,
# URL-encoded, \u-escaped, hex, reversed, any 12-char piece of its random
# tail) appears in a response (headers or body) or in egressd's log.
. "$(dirname "$0")/nslib.sh"
HERE="$(cd "$(dirname "$0")" && pwd)"
CAN="$HERE/api_canary.py"
ns_up
mkdir -p "$TMP/always"
ns_egressd OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true OPENSANDBOX_EGRESS_LOG_LEVEL=debug \
	OPENSANDBOX_EGRESS_RULES='{"defaultAction":"deny","egress":[{"action":"allow","target":"api.canary.test"},{"action":"allow","target":"basic.canary.test"},{"action":"allow","target":"key.canary.test"}]}'

"$PY" "$CAN" make "$TMP/secrets.json"
chmod 644 "$TMP/secrets.json"
count() { # file: add its ok/FAIL lines to the totals
	cat "$1"
	PASS=$((PASS + $(grep -c '^ok ' "$1")))
	FAIL=$((FAIL + $(grep -c '^FAIL ' "$1")))
}

"$PY" "$CAN" selftest "$TMP/secrets.json" >"$TMP/selftest.out" 2>&1
count "$TMP/selftest.out"

ip netns exec "$SBX" "$PY" "$CAN" drive "$TMP/secrets.json" "$TMP/responses.txt" 127.0.0.1:18080 "$TOKEN" \
	>"$TMP/drive.out" 2>&1
count "$TMP/drive.out"
check "the scenario ran to the end" grep -q 'GET the new vault' "$TMP/drive.out"
check "the every-field phase ran to the end" grep -q "^ok   - every field phase done" "$TMP/drive.out"
check "egressd is still running" kill -0 "$EGRESSD_PID"

# Stop egressd so every log line is written, then scan.
kill "$EGRESSD_PID"
wait "$EGRESSD_PID"
cp "$TMP/egressd.log" "$TMP/egressd-final.log"
"$PY" "$CAN" scan "$TMP/secrets.json" "$TMP/responses.txt" "$TMP/egressd-final.log" "$TMP/drive.out" >"$TMP/scan.out" 2>&1
count "$TMP/scan.out"
check "the responses were recorded" test "$(grep -c '^### ' "$TMP/responses.txt")" -gt 60
check "the log has the vault audit lines" grep -q '"event":"vault_update"' "$TMP/egressd-final.log"
EGRESSD_PID=""
ns_finish
