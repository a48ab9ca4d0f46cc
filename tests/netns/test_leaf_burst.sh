#!/bin/bash
# A burst of first connections to a bound host costs one leaf: 24 TLS
# connections whose ClientHellos all arrive before the first is answered
# each wait for the same leaf, which the parent mints once (the intercept
# asks for a host's leaf once while a request for it is out), and every
# handshake completes.
. "$(dirname "$0")/nslib.sh"
ns_up
ns_dns --address=/api.allowed.test/203.0.113.10
mkdir -p "$TMP/pki" "$TMP/ca"
chown 999:999 "$TMP/ca"
ns_pki "$TMP/pki" api.allowed.test BurstCA || exit 1
cp "$(dirname "$0")/records_server.py" "$TMP/srv.py"
ip netns exec "$WAN" "$PY" "$TMP/srv.py" 203.0.113.10 443 "$TMP/pki/srv.pem" "$TMP/pki/srv.key" \
    >"$TMP/srv.out" 2>&1 &
PIDS+=($!)
ns_wait_listen "$WAN" '203.0.113.10:443' || { cat "$TMP/srv.out"; exit 1; }
ns_egressd OPENSANDBOX_EGRESS_RULES='{"defaultAction":"deny","egress":[{"action":"allow","target":"api.allowed.test"}]}' \
    OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true EGRESSD_CA_EXPORT="$TMP/ca/ca.pem" \
    EGRESSD_UPSTREAM_CA="$TMP/pki/ca.pem" OPENSANDBOX_EGRESS_LOG_LEVEL=debug
vault='{"credentials":[{"name":"k","source":{"type":"inline","value":"sk-burst-0123456789abcdef"}}],
 "bindings":[{"name":"b","match":{"hosts":["api.allowed.test"],"paths":["/length"],"methods":["GET"]},
 "auth":{"type":"bearer","credential":"k"}}]}'
code=$(api POST /credential-vault "$vault" | tail -1)
check "the binding is accepted" test "$code" = 200 -o "$code" = 201
cp "$(dirname "$0")/leaf_burst.py" "$TMP/burst.py"
out=$(ws "$PY" "$TMP/burst.py" "$TMP/ca/ca.pem" api.allowed.test 443 24 2>&1)
check "every handshake of the burst completes ($out)" test "$out" = "handshakes 24/24"
mints=$(grep -c '"event":"leaf_mint","host":"api.allowed.test"' "$TMP/egressd.log")
check "the parent minted the host's leaf once ($mints)" test "$mints" = 1
refute "no reply of the parent was lost" grep -q '"reply to intercept' "$TMP/egressd.log"
ns_finish
