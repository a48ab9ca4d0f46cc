#!/bin/bash
# The real OpenSandbox JS SDK against egressd (issue 17: "the real-SDK
# sequence still passes"). tests/sdk/sequence.mjs drives the control API
# with the SDK's own egress stack (policy get/patch/delete, the Credential
# Vault's create, reads, revision-guarded patch, delete); between its two
# phases the workload makes a request that the vault the SDK wrote must
# broker: the upstream gets the real secret, the workload holds only the
# fake key and never sees the secret. The replay of the same sequence with
# field-by-field shapes is tests/netns/test_api_compat.sh.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/fixture.sh
source "$HERE/../lib/fixture.sh"

PASS=0
FAIL=0
ok() { PASS=$((PASS + 1)); echo "ok   - $*"; }
not_ok() { FAIL=$((FAIL + 1)); echo "FAIL - $*"; }
check() { local d=$1; shift; if "$@" >/dev/null 2>&1; then ok "$d"; else not_ok "$d"; fi; }
refute() { local d=$1; shift; if "$@" >/dev/null 2>&1; then not_ok "$d"; else ok "$d"; fi; }

SDK=$HERE/../sdk
[ -d "$SDK/node_modules/@alibaba-group/opensandbox" ] || { echo "tests/sdk/node_modules is missing: run scripts/deps.sh"; exit 1; }
NODE=$(command -v node) || { echo "node is missing: run scripts/deps.sh"; exit 1; }

fx_init "rsdk$$"
cleanup() {
	fx_down
	if [ "${KEEP_TMP:-0}" = 1 ]; then echo "kept $FX_DIR"; else rm -rf "$FX_DIR"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fx_up || exit 2
fx_safety || exit 2
fx_servers_start || exit 2
SBXCA=$FX_DIR/sandbox/ca.pem
LOG=$FX_DIR/egressd.log
FN=$FX_DIR/fakenet
chown "$FX_WORKER:$FX_WORKER" "$FX_DIR/sandbox"
fx_egressd_start '{"defaultAction":"deny","egress":[{"action":"allow","target":"api.allowed.test"}]}' \
    OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true EGRESSD_CA_EXPORT="$SBXCA" \
    || { cat "$LOG"; exit 1; }

# sdk PHASE: run the sequence as root in the sandbox (the control plane's seat).
sdk() {
	(cd "$SDK" && ip netns exec "$FX_SBX" "$NODE" sequence.mjs http://127.0.0.1:18080 \
	    "$FX_TOKEN" "$FX_S1" "$1") >"$FX_DIR/sdk-$1.out" 2>&1
	local rc=$?
	cat "$FX_DIR/sdk-$1.out"
	PASS=$((PASS + $(grep -c '^ok ' "$FX_DIR/sdk-$1.out")))
	FAIL=$((FAIL + $(grep -c '^FAIL ' "$FX_DIR/sdk-$1.out")))
	return "$rc"
}

if sdk setup; then ok "the SDK's setup phase ran to the end"; else not_ok "the SDK's setup phase ran to the end"; fi
check "  and made its checks" test "$(grep -c '^ok ' "$FX_DIR/sdk-setup.out")" -ge 8

# The vault the SDK wrote brokers the workload's request.
fx_ws dig +short api.allowed.test A >/dev/null 2>&1
n0=$(wc -l <"$FN/api.log" 2>/dev/null || echo 0)
fx_ws curl -sS -m 8 --cacert "$SBXCA" -H "Authorization: Bearer $FX_FAKE_KEY" \
    https://api.allowed.test/v1/sdk-check >"$FX_DIR/out.json" 2>&1
check "the workload's request through the SDK's binding is answered" grep -q '"path": "/v1/sdk-check"' "$FX_DIR/out.json"
check "  upstream got the real secret" bash -c "tail -n +$((n0 + 1)) '$FN/api.log' | grep -q 'Bearer $FX_S1'"
refute "  the workload never saw it" grep -q "$FX_S1" "$FX_DIR/out.json"

if sdk teardown; then ok "the SDK's teardown phase ran to the end"; else not_ok "the SDK's teardown phase ran to the end"; fi
check "  and made its checks" test "$(grep -c '^ok ' "$FX_DIR/sdk-teardown.out")" -ge 3
refute "no secret reached egressd's log" grep -q "$FX_S1" "$LOG"
fx_egressd_stop

echo "$PASS passed, $FAIL failed"
if [ "$FAIL" -ne 0 ]; then
	tail -n 30 "$LOG"
fi
[ "$FAIL" -eq 0 ]
