#!/bin/bash
# OpenSandbox compatibility (issue 5): a scripted client replays the
# request sequence of the OpenSandbox SDK (egress adapter and generated
# egress client: auth header, JSON bodies, one keep-alive connection) and
# of their Credential Vault end-to-end scenarios, then checks every answer
# field by field against the Go sidecar's shapes: status, content type,
# key order, types, exact text of errors ("message\n").
# The sequence and expected answers: tests/data/api/opensandbox_sdk_sequence.json.
. "$(dirname "$0")/nslib.sh"
HERE="$(cd "$(dirname "$0")" && pwd)"
SEQ="$HERE/../data/api/opensandbox_sdk_sequence.json"
ns_up
mkdir -p "$TMP/always"
ns_egressd OPENSANDBOX_EGRESS_MODE=dns+nft OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true \
	OPENSANDBOX_EGRESS_RULES='{"defaultAction":"deny","egress":[{"action":"allow","target":"pypi.org"}]}'

cp "$SEQ" "$TMP/seq.json"
chmod 644 "$TMP/seq.json"
ip netns exec "$SBX" "$PY" "$HERE/api_compat.py" "$TMP/seq.json" 127.0.0.1:18080 "$TOKEN" >"$TMP/compat.out" 2>&1
rc=$?
cat "$TMP/compat.out"
PASS=$((PASS + $(grep -c '^ok ' "$TMP/compat.out")))
FAIL=$((FAIL + $(grep -c '^FAIL ' "$TMP/compat.out")))
check "the replay client ran to the end" test "$rc" -le 1
check "the sequence had checks" test "$(grep -c -E '^(ok|FAIL) ' "$TMP/compat.out")" -gt 100
check "egressd is still running" kill -0 "$EGRESSD_PID"
refute "no secret of the sequence reached the log" grep -qE 'vault-(bearer|api-key|client|spare|runtime|k-value)|dXNlcjpwYXNz|dXNlcjpzM2NyM3Qt' "$TMP/egressd.log"
ns_finish
