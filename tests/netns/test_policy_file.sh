#!/bin/bash
# The YAML policy file in the running sidecar (issues 3 and 4): port-scoped
# name rules, learned entries that expire after the clamped TTL, reload on
# change and on SIGHUP, an invalid file that keeps the previous policy,
# and the deny.always operator overlay.
. "$(dirname "$0")/nslib.sh"
ns_up
mkdir -p "$TMP/always"
ns_dns --address=/api.allowed.test/203.0.113.10 --address=/other.allowed.test/203.0.113.11
for a in 203.0.113.10 203.0.113.11; do
	ns_tcp_server "$a" 443
	ns_tcp_server "$a" 8080
done
ns_wait_listen "$WAN" '203.0.113.11:8080'

cat >"$TMP/policy.yaml" <<'Y'
version: 1
defaultAction: deny
dns:
  ttlMin: 1
  ttlMax: 2
egress:
  - action: allow
    target: api.allowed.test
    ports: [443]
Y
ns_egressd EGRESSD_POLICY="$TMP/policy.yaml"

ans=$(wdig @203.0.113.53 api.allowed.test A)
check "a name of the YAML policy resolves" grep -q 203.0.113.10 <<<"$ans"
check "a port-scoped name is learned as address . port" nft_has learnedp4 "203.0.113.10 . 443"
refute "and not on all ports" nft_has learned4 203.0.113.10
check "its port connects" wconnect 203.0.113.10 443
refute "another port of the same address is refused" wconnect 203.0.113.10 8080
check "the learned element carries the clamped timeout (2s)" bash -c \
	"ip netns exec $SBX nft list set inet egressd learnedp4 | grep -Eq 'timeout 2s'"
gone=0
for i in $(seq 1 60); do
	nft_has learnedp4 "203.0.113.10 . 443" || { gone=1; break; }
	sleep 0.1
done
check "the learned element expires after the clamped TTL" test "$gone" = 1
refute "after expiry the address is refused again" wconnect 203.0.113.10 443

# Reload on change: a new rule takes effect without a restart.
ans=$(wdig @203.0.113.53 other.allowed.test A)
check "a name not yet in the file is denied" grep -q NXDOMAIN <<<"$ans"
cat >>"$TMP/policy.yaml" <<'Y'
  - action: allow
    target: other.allowed.test
Y
ok_reload=0
for i in $(seq 1 60); do
	grep -q '"revision":2' "$TMP/egressd.log" && { ok_reload=1; break; }
	sleep 0.1
done
check "a changed policy file is reloaded" test "$ok_reload" = 1
ans=$(wdig @203.0.113.53 other.allowed.test A)
check "the new rule applies" grep -q 203.0.113.11 <<<"$ans"

# An invalid file keeps the previous policy and says where it is wrong.
cp "$TMP/policy.yaml" "$TMP/policy.good"
printf 'version: 1\ndefaultAction: deny\negress:\n  - action: allow\n    target: [nope\n' >"$TMP/policy.yaml"
kill -HUP "$EGRESSD_PID"
bad=0
for i in $(seq 1 60); do
	grep -q '"event":"policy_invalid"' "$TMP/egressd.log" && { bad=1; break; }
	sleep 0.1
done
check "an invalid file is refused with a logged reason" test "$bad" = 1
check "the reason names file:line:col" grep -q 'policy.yaml:[0-9]*:[0-9]*' "$TMP/egressd.log"
ans=$(wdig @203.0.113.53 other.allowed.test A)
check "the previous policy stays in force" grep -q 203.0.113.11 <<<"$ans"

# deny.always beats the file's allow rules.
cp "$TMP/policy.good" "$TMP/policy.yaml"
echo "other.allowed.test" >"$TMP/always/deny.always"
kill -HUP "$EGRESSD_PID"
denied=0
for i in $(seq 1 60); do
	ans=$(wdig @203.0.113.53 other.allowed.test A)
	grep -q NXDOMAIN <<<"$ans" && { denied=1; break; }
	sleep 0.1
done
check "deny.always overrides an allow rule of the policy file" test "$denied" = 1
refute "and its learned addresses are forgotten" nft_has learned4 203.0.113.11
ns_finish
