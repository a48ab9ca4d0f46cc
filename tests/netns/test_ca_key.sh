#!/bin/bash
# What each process holds (issue 13). No child, and above all not the
# intercept, which parses every byte the workload sends through it, holds
# the sandbox CA's private key: the parent drops it after fork and mints
# each leaf for the intercept's own leaf key (CHAN_LEAF_REQ). The API
# token is in control only (wiped in the other children and from the
# environment and argv). A vault secret is in control and the intercept,
# never in dns, also in a dns process forked after the vault was written.
# Each is looked for in the process's whole readable memory.
. "$(dirname "$0")/nslib.sh"
ns_up
mkdir -p "$TMP/always" "$TMP/ca"
chown 999:999 "$TMP/ca"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$TMP/ca.key" \
	-out "$TMP/ca.crt" -days 2 -subj /CN=egressd-test-sandbox-ca \
	-addext basicConstraints=critical,CA:TRUE,pathlen:0 \
	-addext keyUsage=critical,keyCertSign,cRLSign >/dev/null 2>&1
chmod 600 "$TMP/ca.key"
priv=$(openssl pkey -in "$TMP/ca.key" -noout -text 2>/dev/null |
	awk '/^priv:/ {on=1; next} /^pub:/ {on=0} on' | tr -d ' :\n')
priv=${priv: -64}
check "the test CA's private scalar is known (32 bytes)" test ${#priv} = 64

ns_dns --host-record=tls.allowed.test,203.0.113.20
ns_egressd OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true \
	EGRESSD_CA_CERT="$TMP/ca.crt" EGRESSD_CA_KEY="$TMP/ca.key" EGRESSD_CA_EXPORT="$TMP/ca/ca.pem" \
	OPENSANDBOX_EGRESS_RULES='{"defaultAction":"deny","terminateAll":true,"egress":[{"action":"allow","target":"tls.allowed.test"},{"action":"allow","target":"vault.allowed.test"}]}'
C=$(ns_child control)
D=$(ns_child dns)
I=$(ns_child intercept)
check "the three children run" kill -0 "$C" "$D" "$I"
# The operator CA is never renewed by egressd: 2 days left is warned about at start.
check "an operator CA within 7 days of its end is warned about at start" \
	grep -q '"event":"ca_expiry_warning"' "$TMP/egressd.log"
refute "  and never renewed" grep -q '"event":"ca_renew"' "$TMP/egressd.log"

# A terminated handshake: the leaf can only have come from the parent.
wdig tls.allowed.test >/dev/null
out=$(ws sh -c "openssl s_client -connect 203.0.113.20:443 -servername tls.allowed.test \
	-CAfile '$TMP/ca.crt' </dev/null 2>&1")
check "a terminated handshake verifies against the sandbox CA" grep -q 'Verify return code: 0' <<<"$out"
check "  with a leaf for the SNI" grep -q 'CN *= *tls.allowed.test' <<<"$out"
refute "no leaf was refused" grep -q '"event":"leaf_refused"' "$TMP/egressd.log"

# An ASan build's runtime keeps a copy of the initial environment of its
# own (memscan.py --sanitizer-env); the token's copy on the stack is still
# looked for, and every other copy.
SANENV=()
if grep -q libasan "/proc/$EGRESSD_PID/maps" 2>/dev/null ||
	nm -D "$EGRESSD_BIN" 2>/dev/null | grep -q __asan_init; then
	SANENV=(--sanitizer-env OPENSANDBOX_EGRESS_TOKEN)
fi
scan() { # pid hex: 0 found, 1 not found (2: the scan failed, which fails the check)
	$PY "$EGRESSD_SRC/tests/lib/memscan.py" "$1" "$2" "${SANENV[@]}"
}
found() { scan "$1" "$2"; test $? = 0; }
absent() { scan "$1" "$2"; test $? = 1; }
check "the scan finds the CA key where it is (the parent)" found "$EGRESSD_PID" "$priv"
check "the intercept's memory holds no CA private key" absent "$I" "$priv"
check "  nor dns's" absent "$D" "$priv"
check "  nor control's" absent "$C" "$priv"

# The API token: control checks it; no other child ever needs it.
tok=$(printf %s "$TOKEN" | od -An -tx1 | tr -d ' \n')
check "the scan finds the API token in control" found "$C" "$tok"
check "the intercept's memory holds no API token" absent "$I" "$tok"
check "  nor dns's" absent "$D" "$tok"

# A vault secret reaches the intercept through the parent, never dns.
secret="sk-live-canary-$NS_ID-0123456789abcdef"
code=$(api POST /credential-vault '{"credentials":[{"name":"k","source":{"type":"inline","value":"'"$secret"'"}}],"bindings":[{"name":"b","match":{"hosts":["vault.allowed.test"],"paths":["/v1/*"],"methods":["GET"]},"auth":{"type":"bearer","credential":"k"}}]}' | tail -1)
check "a vault with an inline secret is written (201)" test "$code" = 201
sec=$(printf %s "$secret" | od -An -tx1 | tr -d ' \n')
check "the intercept holds the secret it injects" found "$I" "$sec"
check "dns's memory holds no vault secret" absent "$D" "$sec"
# A dns process forked after the vault was written inherits the parent's memory.
kill -KILL "$D"
D2=""
for i in $(seq 1 100); do
	D2=$(ns_child dns)
	[ -n "$D2" ] && [ "$D2" != "$D" ] && [ -f "$TMP/ready" ] && break
	sleep 0.05
done
check "dns restarted" test -n "$D2" -a "$D2" != "$D"
check "  and the new dns holds no vault secret either" absent "$D2" "$sec"
check "  nor the API token" absent "$D2" "$tok"
check "  nor the CA key" absent "$D2" "$priv"

# A leaf for a name the policy does not allow is never minted (hostile
# worker: tests/netns/test_hostile_worker.sh); here, the workload's SNI
# for a denied name is refused before any leaf is asked for.
out=$(ws sh -c "openssl s_client -connect 203.0.113.20:443 -servername denied.test \
	-CAfile '$TMP/ca.crt' </dev/null 2>&1")
refute "a denied SNI gets no leaf" grep -q 'CN *= *denied.test' <<<"$out"
# The other secrets from the environment: the chained proxy's authorization
# is the intercept's alone, the OTLP headers the report child's alone; the
# parent wipes every secret variable's value in place, so that no child
# inherits it through the environment either.
kill -TERM "$EGRESSD_PID"; wait "$EGRESSD_PID"; EGRESSD_PID=""
pauth="Basic cHJveHktY2FuYXJ5LSRO-$NS_ID-proxyauth"
ohdr="x-api-key=otlp-canary-$NS_ID-headers"
ns_egressd OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true \
	OPENSANDBOX_EGRESS_UPSTREAM_PROXY=http://198.51.100.99:3128 \
	OPENSANDBOX_EGRESS_UPSTREAM_PROXY_AUTH="$pauth" \
	OTEL_EXPORTER_OTLP_ENDPOINT=http://198.51.100.98:4318 OTEL_EXPORTER_OTLP_HEADERS="$ohdr"
C=$(ns_child control)
D=$(ns_child dns)
I=$(ns_child intercept)
R=$(ns_child report)
check "the four children run" kill -0 "$C" "$D" "$I" "$R"
# Whole values: an ASan runtime's copy of the environment is recognised by
# the NAME= before the value (memscan.py --sanitizer-env).
pa=$(printf %s "$pauth" | od -An -tx1 | tr -d ' \n')
oh=$(printf %s "$ohdr" | od -An -tx1 | tr -d ' \n')
senv() { # pid hex variable: 0 found, 1 not (an ASan runtime's own env copy aside)
	if [ ${#SANENV[@]} -gt 0 ]; then
		$PY "$EGRESSD_SRC/tests/lib/memscan.py" "$1" "$2" --sanitizer-env "$3"
	else
		$PY "$EGRESSD_SRC/tests/lib/memscan.py" "$1" "$2"
	fi
}
V=OPENSANDBOX_EGRESS_UPSTREAM_PROXY_AUTH
check "the intercept holds the proxy authorization it sends" test "$(senv "$I" "$pa" $V; echo $?)" = 0
check "control's memory holds no proxy authorization" test "$(senv "$C" "$pa" $V; echo $?)" = 1
check "  nor dns's" test "$(senv "$D" "$pa" $V; echo $?)" = 1
check "  nor report's" test "$(senv "$R" "$pa" $V; echo $?)" = 1
V=OTEL_EXPORTER_OTLP_HEADERS
check "the report child holds the OTLP headers" test "$(senv "$R" "$oh" $V; echo $?)" = 0
check "the intercept's memory holds no OTLP header" test "$(senv "$I" "$oh" $V; echo $?)" = 1
check "  nor control's" test "$(senv "$C" "$oh" $V; echo $?)" = 1
check "  nor dns's" test "$(senv "$D" "$oh" $V; echo $?)" = 1
refute "no child's environment shows the proxy authorization" \
	grep -qa "proxyauth" "/proc/$C/environ" "/proc/$D/environ" "/proc/$I/environ" "/proc/$R/environ"
refute "nor the parent's" grep -qa "proxyauth" "/proc/$EGRESSD_PID/environ"
ns_finish
