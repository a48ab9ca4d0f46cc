#!/bin/bash
# DNS resource abuse (issue 14, items 6 and 8): a flood of denied queries
# writes a bounded number of dns_deny lines and every denial is still
# counted (full lines + summaries + /metrics); a DNS-over-TCP client that
# sends one byte a second is closed by the per-query deadline, not kept
# open by an idle timer each byte resets; the TCP listener has a
# connection cap; CNAME chains past the limit get SERVFAIL. The limits
# are in docs/dns.md.
. "$(dirname "$0")/nslib.sh"
CLIENT="$(dirname "$0")/dns_abuse.py"
cp "$CLIENT" "$TMP/dns_abuse.py"
chmod 644 "$TMP/dns_abuse.py"
ns_up
mkdir -p "$TMP/always"
chain=()
for i in $(seq 0 19); do
	chain+=("--cname=c$i.chain.allowed.test,c$((i + 1)).chain.allowed.test")
done
# As ns_dns, but -k rather than --no-daemon: a long answer makes c-ares
# retry over TCP and keep that connection open, and dnsmasq --no-daemon
# serves TCP in its main loop, so it would stop answering UDP meanwhile.
ip netns exec "$WAN" dnsmasq -k --no-resolv --no-hosts --bind-interfaces \
	--listen-address=203.0.113.53 --listen-address=2001:db8::53 --port=53 \
	--log-queries --log-facility="$TMP/dns.log" --pid-file="$TMP/dnsmasq.pid" \
	--local-ttl=300 --user=root --address=/api.allowed.test/203.0.113.10 \
	--host-record=c20.chain.allowed.test,203.0.113.11 \
	--cname=s0.chain.allowed.test,c18.chain.allowed.test "${chain[@]}" >"$TMP/dnsmasq.out" 2>&1 &
PIDS+=($!)
ns_wait_listen "$WAN" '203.0.113.53:53' || { echo "dnsmasq did not start" >&2; exit 2; }
ns_egressd OPENSANDBOX_EGRESS_RULES='{"defaultAction":"deny","egress":[
 {"action":"allow","target":"api.allowed.test"},
 {"action":"allow","target":"*.chain.allowed.test"}]}'

metric() { # name: its value in /metrics
	api GET /metrics | awk -v m="$1" '$1 == m {print $2}'
}
deny_lines() { grep -c '"event":"dns_deny"' "$TMP/egressd.log"; }

# --- Item 8: a flood of denied queries --------------------------------------
N=2000
denied0=$(metric egressd_dns_denied_total)
supp0=$(metric egressd_dns_log_suppressed_total)
lines0=$(deny_lines)
# 1000 queries over 10 names, and 1000 distinct names.
for i in $(seq 1 1000); do echo "r$((i % 10)).flood.evil.test"; done >"$TMP/names"
for i in $(seq 1 1000); do echo "u$i.flood.evil.test"; done >>"$TMP/names"
out=$(ws timeout 120 $PY "$TMP/dns_abuse.py" flood <"$TMP/names")
echo "# $out"
check "every flood query was answered NXDOMAIN" grep -q "sent=$N nxdomain=$N lost=0" <<<"$out"
denied=$(( $(metric egressd_dns_denied_total) - denied0 ))
supp=$(( $(metric egressd_dns_log_suppressed_total) - supp0 ))
lines=$(( $(deny_lines) - lines0 ))
echo "# denied=$denied dns_deny lines=$lines suppressed=$supp"
check "/metrics counts every denial ($N)" test "$denied" -eq "$N"
check "the log has a bounded number of dns_deny lines (<= 64 names per window)" \
	test "$lines" -le 64
check "lines written + lines suppressed (metric) = denials" test $((lines + supp)) -eq "$N"

# --- Item 6b: the per-query deadline on DNS over TCP ------------------------
out=$(ws timeout 60 $PY "$TMP/dns_abuse.py" slow 30)
echo "# slow: $out"
check "a client sending one byte a second is closed by the server" grep -q '^closed' <<<"$out"
out=$(ws timeout 60 $PY "$TMP/dns_abuse.py" paced api.allowed.test 2 3)
echo "# paced: $out"
check "whole queries 2 s apart on one connection are all answered" grep -q '^codes=0,0,0$' <<<"$out"
check "the deadline closing is logged" grep -q '"event":"dns_tcp_close".*query deadline' "$TMP/egressd.log"
check "and counted" test "$(metric egressd_dns_tcp_timeouts_total)" -ge 1

# A client that pipelines and does not read: reading pauses at the output
# bound and resumes as the client drains (every answer arrives).
out=$(ws timeout 90 $PY "$TMP/dns_abuse.py" pipe 20000 1)
echo "# pipe: $out"
check "20000 pipelined queries read late are all answered" grep -q 'pipelined=20000 answered=20000' <<<"$out"

# --- Item 6c: the TCP connection cap ----------------------------------------
out=$(ws timeout 60 $PY "$TMP/dns_abuse.py" cap 256 api.allowed.test)
echo "# cap: $out"
check "a connection past the cap (256) is closed by the server" grep -q 'extra_closed=1' <<<"$out"
check "connections under the cap keep working" grep -q 'first=0 last=0' <<<"$out"
check "a new connection works once the others closed" grep -q 'after=0' <<<"$out"
check "the refusal is logged" grep -q '"event":"dns_tcp_refused"' "$TMP/egressd.log"
check "and counted" test "$(metric egressd_dns_tcp_refused_total)" -ge 1

# --- Item 6a: CNAME chains ---------------------------------------------------
ans=$(wdig @203.0.113.53 c0.chain.allowed.test A)
echo "# chain of 20: $(grep -E 'status|CNAME' <<<"$ans" | head -3 | tr '\n' ' ')"
check "a chain of 20 CNAMEs gets SERVFAIL" grep -q "status: SERVFAIL" <<<"$ans"
refute "and nothing is learned" nft_has learned4 203.0.113.11
ans=$(wdig @203.0.113.53 s0.chain.allowed.test A)
check "a chain of 3 CNAMEs resolves" grep -q "203.0.113.11" <<<"$ans"
check "the refused answer is logged" grep -q '"event":"dns_bad_answer".*c0.chain.allowed.test' "$TMP/egressd.log"

# --- An upstream that answers with an error rcode -----------------------------
# dnsmasq refuses AAAA for a name it has only an A record for: every such
# query gets SERVFAIL from egressd, and the failure is logged once per name
# and window, with the upstream's rcode (it was one line per query, saying
# "Input/output error").
codes=""
for i in $(seq 1 30); do
	codes="$codes$(wdig @203.0.113.53 api.allowed.test AAAA | grep -o 'status: [A-Z]*' | cut -d' ' -f2),"
done
check "30 AAAA queries the upstream refuses each get SERVFAIL" \
	test "$codes" = "$(printf 'SERVFAIL,%.0s' $(seq 1 30))"
fails=$(grep -c '"event":"dns_upstream_fail","name":"api.allowed.test"' "$TMP/egressd.log")
check "one dns_upstream_fail line for them ($fails)" test "$fails" = 1
check "  naming the upstream's rcode" \
	grep -q '"event":"dns_upstream_fail","name":"api.allowed.test","rcode":"REFUSED"' "$TMP/egressd.log"

# --- Item 8: the summaries survive a shutdown ---------------------------------
denied_all=$(metric egressd_dns_denied_total)
kill "$EGRESSD_PID"
wait "$EGRESSD_PID" 2>/dev/null
EGRESSD_PID=""
total=$($PY - "$TMP/egressd.log" <<'P'
import json, sys
full = supp = over = 0
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    ev = r.get("event")
    if ev == "dns_deny":
        full += 1
    elif ev == "dns_deny_summary":
        supp += r["suppressed"]
    elif ev == "dns_deny_overflow":
        over += r["count"]
print(full + supp + over)
P
)
echo "# full + summaries + overflow = $total, denials counted = $denied_all"
check "full lines + summary counts + overflow counts = every denial in /metrics" \
	test "$total" -eq "$denied_all"
check "which includes the $N of the flood" test "$denied_all" -ge "$N"
ns_finish
