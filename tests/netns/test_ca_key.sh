#!/bin/bash
# The worker, which parses every byte the workload sends, never holds the
# sandbox CA's private key: the parent drops it from the worker after fork
# and mints each leaf for the worker's own leaf key (CHAN_LEAF_REQ). A
# terminated handshake verifies against the CA, and the key's private
# scalar is found in the parent's memory but not in the worker's.
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
	OPENSANDBOX_EGRESS_RULES='{"defaultAction":"deny","terminateAll":true,"egress":[{"action":"allow","target":"tls.allowed.test"}]}'
W=$(pgrep -P "$EGRESSD_PID" | head -1)
check "a worker runs" test -n "$W"

# A terminated handshake: the leaf can only have come from the parent.
wdig tls.allowed.test >/dev/null
out=$(ws sh -c "openssl s_client -connect 203.0.113.20:443 -servername tls.allowed.test \
	-CAfile '$TMP/ca.crt' </dev/null 2>&1")
check "a terminated handshake verifies against the sandbox CA" grep -q 'Verify return code: 0' <<<"$out"
check "  with a leaf for the SNI" grep -q 'CN *= *tls.allowed.test' <<<"$out"
refute "no leaf was refused" grep -q '"event":"leaf_refused"' "$TMP/egressd.log"

$PY "$EGRESSD_SRC/tests/lib/memscan.py" "$EGRESSD_PID" "$priv"
check "the scan finds the CA key where it is (the parent)" test $? = 0
$PY "$EGRESSD_SRC/tests/lib/memscan.py" "$W" "$priv"
check "the worker's memory holds no CA private key" test $? = 1

# A leaf for a name the policy does not allow is never minted (hostile
# worker: tests/netns/test_hostile_worker.sh); here, the workload's SNI
# for a denied name is refused before any leaf is asked for.
out=$(ws sh -c "openssl s_client -connect 203.0.113.20:443 -servername denied.test \
	-CAfile '$TMP/ca.crt' </dev/null 2>&1")
refute "a denied SNI gets no leaf" grep -q 'CN *= *denied.test' <<<"$out"
ns_finish
