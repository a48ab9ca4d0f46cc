#!/bin/bash
# Persisting the user policy (issue 14, item 10b): OPENSANDBOX_EGRESS_POLICY_FILE
# is written through a new file of a random name (O_EXCL|O_NOFOLLOW, 0600) in
# its directory, then renamed. A symlink planted at the old fixed temp path
# "<file>.tmp" is not followed, and a directory writable by others, or owned
# by another user, is refused. The worker runs as uid 999 here.
. "$(dirname "$0")/nslib.sh"
ns_up
mkdir -p "$TMP/always"
P1='{"defaultAction":"deny","egress":[{"action":"allow","target":"api.example.com"}]}'
P2='{"defaultAction":"deny","egress":[{"action":"allow","target":"persisted.example.com"}]}'
D="$TMP/pol"
mkdir -p "$D"
chown 999:999 "$D"
chmod 700 "$D"
# The victim is a file the worker could write: only a followed link reaches it.
echo "victim-untouched" >"$TMP/victim"
chown 999:999 "$TMP/victim"
ln -s "$TMP/victim" "$D/policy.json.tmp"
ns_egressd OPENSANDBOX_EGRESS_POLICY_FILE="$D/policy.json" OPENSANDBOX_EGRESS_RULES="$P1"
r=$(api POST /policy "$P2")
check "POST /policy answers 200" test "${r##*$'\n'}" = 200
check "the policy file holds the new policy" grep -q persisted.example.com "$D/policy.json"
check "the symlink planted at <file>.tmp was not followed" grep -qx victim-untouched "$TMP/victim"
check "the planted symlink is still there" test -L "$D/policy.json.tmp"
check "the policy file is a regular file" test -f "$D/policy.json" -a ! -L "$D/policy.json"
check "the policy file is mode 0600" test "$(stat -c %a "$D/policy.json")" = 600
check "no temp file is left behind" test "$(ls -A "$D" | grep -c '\.tmp$')" = 1
refute "no persist_error" grep -q persist_error "$TMP/egressd.log"

# A directory that others can write into is refused (they could swap entries).
chmod 777 "$D"
r=$(api POST /policy '{"defaultAction":"deny","egress":[{"action":"allow","target":"world.example.com"}]}')
check "the change still applies (200)" test "${r##*$'\n'}" = 200
refute "but it is not written to a world-writable directory" grep -q world.example.com "$D/policy.json"
check "  and the refusal is logged" grep -q 'persist_error.*writable by group or others' "$TMP/egressd.log"

# A directory owned by another user is refused even when we could write to it.
chmod 700 "$D"
chown 1000:1000 "$D"
setfacl -m u:999:rwx "$D" 2>/dev/null || chmod 755 "$D"
r=$(api POST /policy '{"defaultAction":"deny","egress":[{"action":"allow","target":"other.example.com"}]}')
check "the change applies (200)" test "${r##*$'\n'}" = 200
refute "but it is not written to a directory of another user" grep -q other.example.com "$D/policy.json"
check "  and the refusal is logged" grep -q 'persist_error.*must belong to root or uid' "$TMP/egressd.log"
refute "the token is never logged" grep -qF "$TOKEN" "$TMP/egressd.log"
ns_finish
