#!/bin/bash
# Audit records of the kernel's refusals (issue 18 items 3 and 4): every
# refusing rule of the table logs to NFLOG, the parent reads the group and
# the dns child turns each record into one conn_reject line per rule,
# protocol and destination and window, with the 5-tuple, the reason and
# the rule; counters by reason in /metrics; the deny webhook gets each;
# a flood of refusals writes a bounded number of lines; `egressd explain`
# names the rule of a recorded refusal.
. "$(dirname "$0")/nslib.sh"
ns_up
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$TMP/always" "$TMP/hook"
ns_dns --address=/api.allowed.test/203.0.113.10 --address=/port.allowed.test/203.0.113.11
for a in 203.0.113.10 203.0.113.11 203.0.113.20 198.51.100.7; do
	ns_tcp_server "$a" 443
done
ns_tcp_server 203.0.113.20 8080
ns_tcp_server 203.0.113.11 22
ip -n "$WAN" addr add 198.51.100.80/32 dev lo
ip netns exec "$WAN" "$PY" "$HERE/webhook_recv.py" 198.51.100.80 8080 "$TMP/hook" \
	>"$TMP/hook/stdout" 2>&1 &
PIDS+=($!)
for i in $(seq 1 50); do [ -f "$TMP/hook/ready" ] && break; sleep 0.1; done
ns_wait_listen "$WAN" '203.0.113.20:8080'

cat >"$TMP/policy.json" <<'J'
{"defaultAction":"deny","egress":[
 {"action":"allow","target":"api.allowed.test"},
 {"action":"allow","target":"port.allowed.test","ports":[443]},
 {"action":"deny","target":"198.51.100.7"}]}
J
ns_egressd OPENSANDBOX_EGRESS_RULES="$(cat "$TMP/policy.json")" \
	OPENSANDBOX_EGRESS_DENY_WEBHOOK=http://198.51.100.80:8080/hook
LOG=$TMP/egressd.log

check "the refusing rules log to the NFLOG group (default 4201)" bash -c \
	"ip netns exec $SBX nft list chain inet egressd filter | grep -q 'log prefix \"egressd:default_tcp\" group 4201 snaplen 128'"
check "  the deny sets' rules too" bash -c \
	"ip netns exec $SBX nft list chain inet egressd filter | grep -q 'log prefix \"egressd:deny\" group 4201'"

# udpsend ADDR PORT N: N datagrams from one socket, as the workload.
udpsend() {
	ws "$PY" -c '
import socket, sys
a, p, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_DGRAM)
for i in range(n):
    try:
        s.sendto(b"x", (a, p))
    except OSError:
        pass' "$@"
}

# Each kind twice (two connections, two source ports): one record each.
refute "an allowed name's address before it was resolved is refused" wconnect 203.0.113.10 443
refute "  (twice)" wconnect 203.0.113.10 443
refute "a direct IP is refused" wconnect 203.0.113.20 443
refute "  (twice)" wconnect 203.0.113.20 443
wdig @203.0.113.53 port.allowed.test A >/dev/null
wdig @203.0.113.53 api.allowed.test A >/dev/null
check "the name allowed on 443 connects there" wconnect 203.0.113.11 443
refute "another port of it is refused" wconnect 203.0.113.11 22
refute "  (twice)" wconnect 203.0.113.11 22
refute "a denied address is refused" wconnect 198.51.100.7 443
refute "  (twice)" wconnect 198.51.100.7 443
udpsend 203.0.113.10 9999 2
refute "direct IPv6 is refused" ws socat -T2 - 'TCP6:[2001:db8::20]:443,connect-timeout=2'
ip netns exec "$SBX" "$PY" -c 'import socket
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
s.sendto(b"\x08\x00\xf7\xff\x00\x00\x00\x00", ("203.0.113.20", 0))' 2>/dev/null

# rec DST DPORT: the conn_reject lines for that destination.
rec() { grep '"event":"conn_reject"' "$LOG" | grep "\"dst\":\"$1\"" | grep "\"dport\":$2[,}]"; }
wait_rec() { # DST DPORT: bounded wait for its record
	local i
	for i in $(seq 1 50); do rec "$1" "$2" | grep -q . && return 0; sleep 0.1; done
	return 1
}
one() { # desc DST DPORT PATTERN...: exactly one record, matching every pattern
	local d=$1 dst=$2 port=$3 out n p
	shift 3
	wait_rec "$dst" "$port"
	out=$(rec "$dst" "$port")
	n=$(grep -c . <<<"$out")
	if [ "$n" != 1 ]; then
		not_ok "$d: $n records"
		return
	fi
	for p in "$@"; do
		if ! grep -q -- "$p" <<<"$out"; then
			not_ok "$d: no $p in $out"
			return
		fi
	done
	ok "$d"
}
one "unlearned address: one record, rule default_tcp, reason not_allowed" 203.0.113.10 443 \
	'"rule":"default_tcp"' '"reason":"not_allowed"' '"proto":"tcp"' '"src":"10.200.0.2"' '"sport":[0-9]'
one "direct IP: one record" 203.0.113.20 443 '"rule":"default_tcp"' '"reason":"not_allowed"'
one "a port the name is not allowed on: one record" 203.0.113.11 22 '"rule":"default_tcp"' \
	'"reason":"not_allowed"'
one "denied address: one record, rule deny, reason address_denied" 198.51.100.7 443 \
	'"rule":"deny"' '"reason":"address_denied"'
one "UDP to a non-DNS port: one record, rule default, reason udp_not_allowed" 203.0.113.10 9999 \
	'"rule":"default"' '"reason":"udp_not_allowed"' '"proto":"udp"'
one "IPv6: one record" 2001:db8::20 443 '"family":"ipv6"' '"src":"fd00:200::2"' '"rule":"default_tcp"'
check "ICMP: one record, reason protocol_not_allowed, with its type" bash -c \
	"grep '\"event\":\"conn_reject\"' '$LOG' | grep '\"dst\":\"203.0.113.20\"' | grep '\"proto\":\"icmp\"' | grep '\"reason\":\"protocol_not_allowed\"' | grep -c '\"icmp_type\":8' | grep -qx 1"
refute "DNS and the allowed connection left no record" bash -c \
	"grep '\"event\":\"conn_reject\"' '$LOG' | grep -Eq '\"dport\":53[,}]|\"dst\":\"203.0.113.11\",\"dport\":443'"
refute "the parent parsed nothing: its records go to the dns child" \
	grep -q '"event":"conn_reject_dropped"' "$LOG"

out=$(api GET /metrics)
check "/metrics counts by reason (not_allowed: 7)" grep -q '^egressd_conn_reject_not_allowed_total 7$' <<<"$out"
check "  address_denied: 2 (and the kernel's own MLD reports to ff02::16, a deny6 range)" grep -Eq '^egressd_conn_reject_address_denied_total [2-9]$' <<<"$out"
check "  udp_not_allowed: 2" grep -q '^egressd_conn_reject_udp_not_allowed_total 2$' <<<"$out"
check "  protocol_not_allowed: 1" grep -q '^egressd_conn_reject_protocol_not_allowed_total 1$' <<<"$out"
check "  the repeats were folded" grep -q '^egressd_conn_reject_log_suppressed_total [1-9]' <<<"$out"

# The deny webhook gets one event per record.
wait_hook() { # ADDR PORT
	local i
	for i in $(seq 1 50); do
		grep -q "\"address\": \"$1\", \"port\": $2" "$TMP/hook/events.jsonl" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}
check "the webhook got the direct IP's refusal" wait_hook 203.0.113.20 443
check "  as a connection event with its reason" bash -c \
	"grep '\"address\": \"203.0.113.20\", \"port\": 443' '$TMP/hook/events.jsonl' | grep -q '\"kind\": \"connection\", \"reason\": \"not_allowed\"'"
check "  once" test "$(grep -c '"address": "203.0.113.20", "port": 443' "$TMP/hook/events.jsonl")" = 1
check "the webhook got the denied address's refusal" wait_hook 198.51.100.7 443
check "  with its reason" bash -c \
	"grep '\"address\": \"198.51.100.7\", \"port\": 443' '$TMP/hook/events.jsonl' | grep -q '\"reason\": \"address_denied\"'"

# A flood: 2000 datagrams to one destination, 2000 to as many ports.
before=$(grep -c '"event":"conn_reject' "$LOG")
udpsend 203.0.113.20 7777 2000
ws "$PY" -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for p in range(20000, 22000):
    try:
        s.sendto(b"x", ("203.0.113.20", p))
    except OSError:
        pass'
sleep 1
after=$(grep -c '"event":"conn_reject' "$LOG")
check "a flood of 4000 refusals writes a bounded number of lines ($((after - before)) <= 66)" \
	test $((after - before)) -le 66
check "  the single destination: one record" test "$(rec 203.0.113.20 7777 | grep -c .)" = 1
out=$(api GET /metrics)
n=$(sed -n 's/^egressd_conn_reject_udp_not_allowed_total //p' <<<"$out")
check "  but the refusals read are counted ($n of 4002: more than the lines)" test "${n:-0}" -ge 500
check "the dns process is still there" kill -0 "$(ns_child dns)"

# explain: which rule refused a recorded refusal.
line=$(rec 198.51.100.7 443)
out=$("$EGRESSD_BIN" explain "$TMP/policy.json" --conn-reject "$line" 2>&1)
check "explain names the table rule of a logged conn_reject line" grep -q '^  table rule: deny ' <<<"$out"
check "  its reason" grep -q '^  reason: address_denied$' <<<"$out"
check "  and the policy rule behind it" grep -q 'egress\[2\] deny 198.51.100.7' <<<"$out"
line=$(rec 203.0.113.10 9999)
out=$("$EGRESSD_BIN" explain "$TMP/policy.json" --conn-reject "$line" 2>&1)
check "  (the UDP refusal: rule default, udp_not_allowed)" bash -c \
	"grep -q '^  table rule: default ' <<<'$out' && grep -q '^  reason: udp_not_allowed$' <<<'$out'"

# A second reader of the group (another egressd here): refused before it
# touches the ruleset, and the first one keeps its records.
ip netns exec "$SBX" env OPENSANDBOX_EGRESS_TOKEN="$TOKEN" \
	OPENSANDBOX_EGRESS_DNS_UPSTREAM=203.0.113.53 OPENSANDBOX_EGRESS_HTTP_ADDR=127.0.0.1:18081 \
	EGRESSD_DNS_PORT=15354 EGRESSD_TABLE=egressd2 EGRESSD_WORKER_USER=999:999 \
	EGRESSD_ALWAYS_DIR="$TMP/always" timeout 10 "$EGRESSD_BIN" >"$TMP/second.log" 2>&1
rc=$?
check "a second egressd on the same NFLOG group refuses to start (rc $rc)" test "$rc" = 1
check "  saying why" grep -q '"event":"nflog_error".*nflog group 4201' "$TMP/second.log"
refute "  before it installed a table" ip netns exec "$SBX" nft list table inet egressd2
refute "the first one still refuses" wconnect 203.0.113.20 443
# (the flood filled this window's table: a new destination is counted, not written)
n0=$(api GET /metrics | sed -n 's/^egressd_conn_reject_not_allowed_total //p')
for i in $(seq 1 50); do
	wconnect 203.0.113.20 443
	n1=$(api GET /metrics | sed -n 's/^egressd_conn_reject_not_allowed_total //p')
	[ "${n1:-0}" -gt "${n0:-0}" ] && break
	sleep 0.1
done
check "  and still reads the records (not_allowed $n0 -> $n1)" test "${n1:-0}" -gt "${n0:-0}"

# On stop the pending summaries are written: the repeats of each record.
kill "$EGRESSD_PID"
wait "$EGRESSD_PID" 2>/dev/null
EGRESSD_PID=""
check "the summary of a record counts its repeats" bash -c \
	"grep '\"event\":\"conn_reject_summary\"' '$LOG' | grep -q '\"name\":\"default_tcp 6 203.0.113.11 22\",\"count\":2'"
check "the flood of ports overflowed into one line" bash -c \
	"grep -c '\"event\":\"conn_reject_overflow\"' '$LOG' | grep -qx 1"

# The table was kept: it logs to the group as soon as a new egressd binds
# it, before the new one has read its ACKs. A start under a flood of
# refusals (bounded: 30000 datagrams) still comes up, and records.
ws "$PY" -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(30000):
    try:
        s.sendto(b"x", ("203.0.113.20", 30000 + i % 1000))
    except OSError:
        pass' &
FLOOD=$!
PIDS+=($FLOOD)
ns_egressd OPENSANDBOX_EGRESS_RULES="$(cat "$TMP/policy.json")"
ok "egressd starts while the kept table floods its group"
wait "$FLOOD"
refute "  it refuses" wconnect 203.0.113.20 443
metric_ge1() { api GET /metrics | grep -Eq "^egressd_conn_reject_$1_total [1-9]"; }
wait_metric() { local i; for i in $(seq 1 50); do metric_ge1 "$1" && return 0; sleep 0.1; done; return 1; }
check "  and reads the records (not_allowed, udp_not_allowed counted)" \
	bash -c "$(declare -f api metric_ge1 wait_metric); TOKEN=$TOKEN SBX=$SBX; wait_metric not_allowed && wait_metric udp_not_allowed"
ns_finish
