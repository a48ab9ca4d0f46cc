#!/bin/bash
# log_skip.always (issue 17 item 7): names, and *.name wildcards, whose
# successful lookups the dns process does not log. The lookup itself is
# unchanged (answered, learned into nft); refusals of such a name are still
# logged; the file reloads like the other always files, and an invalid one
# (an IP line) keeps the previous list with its line number in the log.
. "$(dirname "$0")/nslib.sh"
ns_up
mkdir -p "$TMP/always"
ns_dns --address=/loud.allowed.test/203.0.113.10 --address=/quiet.allowed.test/203.0.113.11 \
	--address=/a.skip.test/203.0.113.20 --address=/blocked.test/198.51.100.7

cat >"$TMP/policy.yaml" <<'Y'
version: 1
defaultAction: deny
egress:
  - action: allow
    target: loud.allowed.test
  - action: allow
    target: quiet.allowed.test
  - action: allow
    target: "*.skip.test"
Y
printf 'quiet.allowed.test\n*.skip.test\nblocked.test\n' >"$TMP/always/log_skip.always"
ns_egressd EGRESSD_POLICY="$TMP/policy.yaml"

learned() { # name: number of dns learn lines for it
	grep -c "\"event\":\"learn\",\"name\":\"$1\"" "$TMP/egressd.log"
}

check "the start applies the three log_skip entries" \
	grep -q '"proc":"dns".*"event":"policy_apply".*"log_skip":3' "$TMP/egressd.log"

ans=$(wdig @203.0.113.53 loud.allowed.test A)
check "a name not in log_skip resolves" grep -q 203.0.113.10 <<<"$ans"
check "and its lookup is logged" test "$(learned loud.allowed.test)" -ge 1

ans=$(wdig @203.0.113.53 quiet.allowed.test A)
check "a log_skip name resolves as before" grep -q 203.0.113.11 <<<"$ans"
check "and is learned into nft as before" nft_has learned4 203.0.113.11
check "but its lookup is not logged" test "$(learned quiet.allowed.test)" = 0

ans=$(wdig @203.0.113.53 a.skip.test A)
check "a name under a *.name entry resolves" grep -q 203.0.113.20 <<<"$ans"
check "and is not logged" test "$(learned a.skip.test)" = 0

ans=$(wdig @203.0.113.53 blocked.test A)
check "a denied log_skip name is refused" grep -q NXDOMAIN <<<"$ans"
check "and the refusal is still logged" \
	grep -q '"event":"dns_deny".*blocked.test' "$TMP/egressd.log"

# Reload: loud.allowed.test joins the list; its lookups stop being logged.
printf 'quiet.allowed.test\n*.skip.test\nblocked.test\nloud.allowed.test\n' \
	>"$TMP/always/log_skip.always"
reloaded=0
for i in $(seq 1 100); do
	grep -q '"proc":"dns".*"event":"policy_apply".*"log_skip":4' "$TMP/egressd.log" &&
		{ reloaded=1; break; }
	sleep 0.1
done
check "a changed log_skip.always is reloaded" test "$reloaded" = 1
before=$(learned loud.allowed.test)
ans=$(wdig @203.0.113.53 loud.allowed.test A)
check "the newly skipped name still resolves" grep -q 203.0.113.10 <<<"$ans"
check "and its lookup is no longer logged" test "$(learned loud.allowed.test)" = "$before"

# An IP line is refused with its line number; the previous list stays.
printf 'quiet.allowed.test\n203.0.113.11\n' >"$TMP/always/log_skip.always"
bad=0
for i in $(seq 1 100); do
	grep -q '"event":"policy_invalid".*log_skip.always:2' "$TMP/egressd.log" && { bad=1; break; }
	sleep 0.1
done
check "an IP line is refused with file and line" test "$bad" = 1
before=$(learned loud.allowed.test)
ans=$(wdig @203.0.113.53 loud.allowed.test A)
check "the previous list stays in force (still resolves)" grep -q 203.0.113.10 <<<"$ans"
check "the previous list stays in force (still unlogged)" \
	test "$(learned loud.allowed.test)" = "$before"
ns_finish
