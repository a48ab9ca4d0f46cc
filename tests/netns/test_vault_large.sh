#!/bin/bash
# A vault as large as the redactor accepts reaches the intercept whole:
# its document (every value, hex-encoded: about twice the request) goes
# from control through the parent in many chunks, and neither side may
# give up on a full channel. The API answers 201 only once the intercept
# holds it; no child restarts.
. "$(dirname "$0")/nslib.sh"
ns_up
mkdir -p "$TMP/always" "$TMP/ca"
chown 999:999 "$TMP/ca"
ns_egressd OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true EGRESSD_CA_EXPORT="$TMP/ca/ca.pem" \
	OPENSANDBOX_EGRESS_RULES='{"defaultAction":"deny","egress":[{"action":"allow","target":"*.big.test"}]}'
starts=$(grep -c '"event":"worker_start"' "$TMP/egressd.log")
# N credentials of 15000 bytes each (about as much as the redactor takes
# with every encoding of each value), one binding per credential: about
# 75 KB of request and 150 KB of vault document, in 19 chunks.
N=5
"$PY" - "$TMP/vault.json" "$N" <<'PY'
import json, sys
N = int(sys.argv[2])
creds, binds = [], []
for i in range(N):
    v = ("sk-big-%02d-" % i + "abcdef0123456789" * 940)[:15000]
    creds.append({"name": "c%d" % i, "source": {"type": "inline", "value": v}})
    binds.append({"name": "b%d" % i, "match": {"hosts": ["h%d.big.test" % i], "paths": ["/v1/*"], "methods": ["GET"]},
                  "auth": {"type": "bearer", "credential": "c%d" % i}})
json.dump({"credentials": creds, "bindings": binds}, open(sys.argv[1], "w"))
PY
check "the request is under the API's 1 MiB limit" test "$(stat -c %s "$TMP/vault.json")" -lt 1048576
code=$(ip netns exec "$SBX" curl -sS -m30 -X POST -H "OPENSANDBOX-EGRESS-AUTH: $TOKEN" \
	-H 'Content-Type: application/json' --data-binary @"$TMP/vault.json" -o "$TMP/post.out" \
	-w '%{http_code}' http://127.0.0.1:18080/credential-vault)
check "a vault of $N credentials of 15 KB is accepted (201, got $code: $(head -c 300 "$TMP/post.out"))" test "$code" = 201
check "  and the intercept holds it (revision 1, $N bindings)" \
	grep -q "\"proc\":\"intercept\".*\"event\":\"vault_in_force\",\"msg\":\"revision 1, $N bindings\"" "$TMP/egressd.log"
check "no child restarted" test "$(grep -c '"event":"worker_start"' "$TMP/egressd.log")" = "$starts"
refute "no channel broke" grep -q '"event":"chan_lost"\|"event":"chan_violation"\|"event":"push_failed"' "$TMP/egressd.log"
out=$(api GET /credential-vault)
check "the API shows the $N bindings" test "$(grep -o '"name":"b[0-9]*"' <<<"$out" | wc -l)" = "$N"
refute "  and no value" grep -q 'abcdef0123456789abcdef' <<<"$out"
ns_finish
