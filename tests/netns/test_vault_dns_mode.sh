#!/bin/bash
# Vault writes in mode dns get 412 (OpenSandbox parity, issue 17 item 7): DNS-only
# filtering lets the workload dial any address directly, around the vault.
. "$(dirname "$0")/nslib.sh"
ns_up
mkdir -p "$TMP/always"
ns_egressd OPENSANDBOX_EGRESS_MODE=dns OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true \
	EGRESSD_CA_EXPORT="$TMP/ca.pem"
for m in POST PATCH DELETE; do
	out=$(api "$m" /credential-vault '{"credentials":[],"bindings":[]}')
	check "$m /credential-vault in mode dns: 412" test "$(tail -1 <<<"$out")" = 412
	check "  'credential vault requires dns+nft egress enforcement'" \
		grep -q "credential vault requires dns+nft egress enforcement" <<<"$out"
done
out=$(api GET /credential-vault)
check "GET /credential-vault still answers (404, no vault)" test "$(tail -1 <<<"$out")" = 404
ns_finish
