#!/bin/bash
# API auth throttling (issue 14, item 4): the failure budget is global, not
# per source. The workload owns all of 127.0.0.0/8, so 300 wrong tokens
# from 300 loopback addresses must run into 429; and the right token is
# never refused, not even from an address that was guessing, while every
# other request is locked out. Runs as root in its own namespaces.
. "$(dirname "$0")/nslib.sh"
ns_up
mkdir -p "$TMP/always"
ns_egressd OPENSANDBOX_EGRESS_RULES='{"defaultAction":"deny","egress":[{"action":"allow","target":"api.example.com"}]}'

# One workload process: 300 guesses, each from its own loopback address,
# then (within milliseconds, still locked out) the right token from a
# guessing address and from 127.0.0.1, a policy change with the right
# token, and one more guess. Prints one status per line, tagged.
ws $PY - "$TOKEN" >"$TMP/codes" 2>"$TMP/flood.err" <<'PY'
import http.client, sys
tok = sys.argv[1]
def req(src, token, method="GET", body=None):
    c = http.client.HTTPConnection("127.0.0.1", 18080, timeout=5, source_address=(src, 0))
    h = {"OPENSANDBOX-EGRESS-AUTH": token}
    c.request(method, "/policy", body=body, headers=h)
    r = c.getresponse()
    r.read()
    c.close()
    return r.status
for i in range(300):
    print("guess", req("127.20.%d.%d" % (i // 200, i % 200 + 1), "guess-%d" % i))
print("right_from_guesser", req("127.20.0.7", tok))
print("right_from_127.0.0.1", req("127.0.0.1", tok))
print("right_post", req("127.20.0.8", tok, "POST",
      '{"defaultAction":"deny","egress":[{"action":"allow","target":"b.example.com"}]}'))
print("guess_after", req("127.20.9.9", "guess-after"))
PY
n401=$(grep -c '^guess 401$' "$TMP/codes")
n429=$(grep -c '^guess 429$' "$TMP/codes")
echo "# 300 guesses: $n401 x 401, $n429 x 429"
check "all 300 guesses were answered" test "$((n401 + n429))" = 300
check "guesses from 300 loopback addresses run into 429" test "$n429" -gt 0
check "at most the burst (32) plus the refill during the run got 401" test "$n401" -lt 100
check "the right token from an address that was guessing: 200 during the lockout" \
	grep -qx 'right_from_guesser 200' "$TMP/codes"
check "the right token from 127.0.0.1: 200 during the lockout" grep -qx 'right_from_127.0.0.1 200' "$TMP/codes"
check "a policy change with the right token: 200 during the lockout" grep -qx 'right_post 200' "$TMP/codes"
check "the lockout was still on: the next guess got 429" grep -qx 'guess_after 429' "$TMP/codes"
check "the change is in force" grep -q 'b.example.com' <<<"$(api GET /policy)"
n=$(grep -c '"auth_fail"' "$TMP/egressd.log")
check "auth_fail lines are written only for the 401s ($n for $n401)" test "$n" -le "$n401"
refute "no guess is logged" grep -q 'guess-' "$TMP/egressd.log"
refute "the token is never logged" grep -qF "$TOKEN" "$TMP/egressd.log"
ns_finish
