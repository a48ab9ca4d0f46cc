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
# The workload guesses from 127.0.0.1, the control plane's own address: the
# control plane must keep its access there.
for i in range(12):
    req("127.0.0.1", "guess-lo-%d" % i)
print("right_after_guesses_from_127.0.0.1", req("127.0.0.1", tok))
for i in range(300):
    print("guess", req("127.20.%d.%d" % (i // 200, i % 200 + 1), "guess-%d" % i))
# The budget refills one failure a second: if the refill lands between the
# guesses around the right-token requests (a 401 before or after), spend it
# again and repeat (at most 3 times), so the check does not hang on timing.
for attempt in range(3):
    before = [req("127.21.%d.%d" % (attempt, i + 1), "guess-b%d" % i) for i in range(40)][-1]
    a = req("127.20.0.7", tok)
    b = req("127.0.0.1", tok)
    c = req("127.20.0.8", tok, "POST",
            '{"defaultAction":"deny","egress":[{"action":"allow","target":"b.example.com"}]}')
    after = req("127.20.9.9", "guess-after")
    if before == 429 and after == 429:
        break
print("guess_before", before)
print("right_from_guesser", a)
print("right_from_127.0.0.1", b)
print("right_post", c)
print("guess_after", after)
PY
n401=$(grep -c '^guess 401$' "$TMP/codes")
n429=$(grep -c '^guess 429$' "$TMP/codes")
echo "# 300 guesses: $n401 x 401, $n429 x 429"
check "all 300 guesses were answered" test "$((n401 + n429))" = 300
check "guesses from 300 loopback addresses run into 429" test "$n429" -gt 0
check "at most the burst (32) plus the refill during the run got 401" test "$n401" -lt 100
check "after 12 guesses from 127.0.0.1 the control plane there still gets 200" \
	grep -qx 'right_after_guesses_from_127.0.0.1 200' "$TMP/codes"
check "the right token from an address that was guessing: 200 during the lockout" \
	grep -qx 'right_from_guesser 200' "$TMP/codes"
check "the right token from 127.0.0.1: 200 during the lockout" grep -qx 'right_from_127.0.0.1 200' "$TMP/codes"
check "a policy change with the right token: 200 during the lockout" grep -qx 'right_post 200' "$TMP/codes"
check "the lockout was on before the right-token requests: a guess got 429" grep -qx 'guess_before 429' "$TMP/codes"
check "and still on after them: the next guess got 429" grep -qx 'guess_after 429' "$TMP/codes"
check "the change is in force" grep -q 'b.example.com' <<<"$(api GET /policy)"
n=$(grep -c '"auth_fail"' "$TMP/egressd.log")
check "throttled guesses write no auth_fail line ($n lines for 350+ guesses)" test "$n" -lt 100
refute "no guess is logged" grep -q 'guess-' "$TMP/egressd.log"
refute "the token is never logged" grep -qF "$TOKEN" "$TMP/egressd.log"
ns_finish
