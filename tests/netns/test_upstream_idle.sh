#!/bin/bash
# Idle upstream legs (issue 19 item 5): a keep-alive workload connection
# between requests keeps its upstream connection only while it is among
# EGRESSD_UPSTREAM_IDLE_MAX (2 here) most recently idle: past
# that, the leg idle longest is closed (close_notify: its session stays
# resumable) and its workload connection reconnects at its next request,
# the credential injected as before. And an upstream that closes a
# keep-alive connection between requests ends that leg only: the
# workload's connection stays and its next request goes on a new one; and
# one that closes under a request, before a byte of the answer, has a safe
# bodiless request sent again on a new connection, never a POST.
# Connections quiet for a second give their TLS buffers back (trimmed) and
# still carry a MiB each way after. The server (upidle_server.py) numbers
# its connections and says whether each resumed and whether the
# credential came.
. "$(dirname "$0")/nslib.sh"
ns_up
ns_dns --address=/api.allowed.test/203.0.113.10 --address=/api2.allowed.test/203.0.113.10
mkdir -p "$TMP/pki" "$TMP/ca" "$TMP/srv" "$TMP/st"
chown 999:999 "$TMP/ca"
chmod 0777 "$TMP/st"
ns_pki "$TMP/pki" api.allowed.test,api2.allowed.test UpIdleCA || exit 1
SECRET=sk-upidle-0123456789abcdef
cp "$(dirname "$0")/upidle_server.py" "$TMP/srv.py"
ip netns exec "$WAN" "$PY" "$TMP/srv.py" 203.0.113.10 443 "$TMP/pki/srv.pem" "$TMP/pki/srv.key" \
    "$SECRET" "$TMP/srv" >"$TMP/srv.out" 2>&1 &
PIDS+=($!)
ns_wait_listen "$WAN" '203.0.113.10:443' || { cat "$TMP/srv.out"; exit 1; }
ns_egressd OPENSANDBOX_EGRESS_RULES='{"defaultAction":"deny","egress":[{"action":"allow","target":"api.allowed.test"},{"action":"allow","target":"api2.allowed.test"}]}' \
    OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true EGRESSD_CA_EXPORT="$TMP/ca/ca.pem" \
    EGRESSD_UPSTREAM_CA="$TMP/pki/ca.pem" EGRESSD_UPSTREAM_IDLE_MAX=2
vault='{"credentials":[{"name":"k","source":{"type":"inline","value":"'$SECRET'"}}],
 "bindings":[{"name":"b","match":{"hosts":["api.allowed.test","api2.allowed.test"],"paths":["/who","/bye"],"methods":["GET"]},
 "auth":{"type":"bearer","credential":"k"}}]}'
code=$(api POST /credential-vault "$vault" | tail -1)
check "the binding is accepted" test "$code" = 200 -o "$code" = 201
cp "$(dirname "$0")/upidle_client.py" "$TMP/cli.py"
chmod 644 "$TMP/cli.py"
lines() { [ -f "$1" ] && wc -l <"$1" || echo 0; }
answer() { sed -n "s/^$2: //p" "$1" | sed -n "${3:-1}p"; } # out index [nth]
field() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p"; }

# 1. Five idle keep-alive connections, at most two upstream legs kept.
ws "$PY" "$TMP/cli.py" "$TMP/ca/ca.pem" "$TMP/st" 5 >"$TMP/cli.out" 2>&1 &
CPID=$!
for _ in $(seq 1 300); do grep -q ready "$TMP/st/state" 2>/dev/null && break; sleep 0.1; done
check "five keep-alive connections were each answered" grep -q ready "$TMP/st/state"
for _ in $(seq 1 100); do [ "$(lines "$TMP/srv/closed")" -ge 3 ] && break; sleep 0.1; done
check "five upstream connections were opened, one per workload connection" \
    test "$(lines "$TMP/srv/conns")" = 5
check "the three idle longest were closed upstream (got: $(tr '\n' ' ' <"$TMP/srv/closed" 2>/dev/null))" \
    test "$(sort -n "$TMP/srv/closed" 2>/dev/null | tr '\n' ' ')" = "1 2 3 "
first=$(answer "$TMP/cli.out" 0)
check "every first request carried the credential" \
    test "$(grep -c 'auth=ok' "$TMP/cli.out")" = 5
# Quiet a second, each connection gives its TLS buffers back.
trimmed() { api GET /metrics | sed -n 's/^egressd_intercept_conns_trimmed_total //p'; }
for _ in $(seq 1 100); do [ "$(trimmed)" -ge 5 ] && break; sleep 0.1; done
check "the five quiet connections were trimmed ($(trimmed))" test "$(trimmed)" -ge 5
touch "$TMP/st/go"
wait "$CPID"
rc=$?
check "a second request on each workload connection was answered on it (rc $rc: $(tail -1 "$TMP/cli.out"))" \
    test "$rc" = 0
check "every second request carried the credential" \
    test "$(grep -c '^[0-9]: .*auth=ok' "$TMP/cli.out")" = 10
big=$(sed -n 's/^big: //p' "$TMP/cli.out")
up=$(sed -n 's/^upload: //p' "$TMP/cli.out")
check "after the trim, a MiB came back whole ($big)" grep -q '^big: .* 1048576$' "$TMP/cli.out"
check "on the kept (and trimmed) upstream leg of the newest connection" \
    test "$(field "$big" conn)" = 5
check "and 300,000 bytes went up whole ($up)" grep -q '^upload: .*len=300000$' "$TMP/cli.out"
check "on the kept upstream leg of the one before" test "$(field "$up" conn)" = 4
again=$(answer "$TMP/cli.out" 0 2)
check "a closed leg was reopened: a new upstream connection ($first, then $again)" \
    test "$(field "$again" conn)" -gt 5
check "and it resumed the session the closed leg kept ($again)" test "$(field "$again" reused)" = 1
for _ in $(seq 1 100); do
	[ $(($(lines "$TMP/srv/conns") - $(lines "$TMP/srv/closed"))) -le 2 ] && break
	sleep 0.1
done
check "after the second round, still no more than two upstream legs open" \
    test $(($(lines "$TMP/srv/conns") - $(lines "$TMP/srv/closed"))) -le 2

# 2. The upstream closes a keep-alive connection between requests.
base=$(lines "$TMP/srv/conns")
ws "$PY" "$TMP/cli.py" "$TMP/ca/ca.pem" "$TMP/st" bye >"$TMP/bye.out" 2>&1
rc=$?
check "after the upstream closed its side, the workload's connection served the next request (rc $rc: $(tail -1 "$TMP/bye.out"))" \
    test "$rc" = 0
a=$(answer "$TMP/bye.out" 0)
b=$(answer "$TMP/bye.out" 1)
check "the next request went on another upstream connection ($a, then $b)" \
    test "$(field "$b" conn)" != "$(field "$a" conn)"
check "which resumed the session ($b)" test "$(field "$b" reused)" = 1
check "both carried the credential" test "$(grep -c 'auth=ok' "$TMP/bye.out")" = 2

# 3. The upstream closes just as a request is on its way (it reads the
# request and does not answer): a GET goes once more, on a new connection;
# a POST is never sent twice, it gets 502.
retried() { api GET /metrics | sed -n 's/^egressd_intercept_requests_retried_total //p'; }
reqs() { grep -c " $1 /who\$" "$TMP/srv/reqs" 2>/dev/null || echo 0; }
r0=$(retried)
g0=$(reqs GET)
p0=$(reqs POST)
ws "$PY" "$TMP/cli.py" "$TMP/ca/ca.pem" "$TMP/st" drop >"$TMP/drop.out" 2>&1
a=$(answer "$TMP/drop.out" 0)
b=$(answer "$TMP/drop.out" 1)
check "a GET dropped unanswered by a kept leg is answered ($b)" grep -q '^1: status 200 ' "$TMP/drop.out"
check "on another upstream connection ($a, then $b)" \
    test "$(field "$b" conn)" != "$(field "$a" conn)"
check "with the credential" grep -q '^1: status 200 .*auth=ok' "$TMP/drop.out"
check "the upstream read that GET twice, once per connection" test "$(reqs GET)" = $((g0 + 2))
check "the retry was counted" test "$(retried)" = $((r0 + 1))
ws "$PY" "$TMP/cli.py" "$TMP/ca/ca.pem" "$TMP/st" droppost >"$TMP/post.out" 2>&1
check "a POST dropped unanswered is not sent again: 502 ($(sed -n 's/^1: //p' "$TMP/post.out"))" \
    grep -q '^1: status 502' "$TMP/post.out"
check "the upstream read that POST once" test "$(reqs POST)" = $((p0 + 1))
check "no retry was counted for it" test "$(retried)" = $((r0 + 1))

# 4. The pool: a workload connection that closes between requests leaves
# its upstream leg to the next connection to exactly the same name,
# address and port; another name on the same address never gets it; a
# vault or policy change closes what is pooled.
gone() { # the intercept holds no workload connection any more
	for _ in $(seq 1 100); do
		[ -z "$(ip netns exec "$SBX" ss -Htn state established '( sport = :15443 )')" ] && return 0
		sleep 0.1
	done
	return 1
}
reused() { api GET /metrics | sed -n 's/^egressd_intercept_upstream_reused_total //p'; }
one() { ws "$PY" "$TMP/cli.py" "$TMP/ca/ca.pem" "$TMP/st" one "$1" | sed -n 's/^0: //p'; }
gone
u0=$(reused)
a=$(one api.allowed.test)
check "a first connection was answered with the credential ($a)" grep -q 'auth=ok' <<<"$a"
check "and closed" gone
b=$(one api.allowed.test)
check "the next connection to the same name took its upstream leg ($a, then $b)" \
    test "$(field "$b" conn)" = "$(field "$a" conn)"
check "with the credential injected on it" grep -q 'auth=ok' <<<"$b"
check "counted as reused" test "$(reused)" = $((u0 + 1))
# A workload that says "Connection: close" ends its own connection only:
# the upstream is not told to close (this server, as nginx does, would
# end the verified leg), the answer says close, egressd ends the
# workload's connection, and the leg serves the next one.
gone
u1=$(reused)
ws "$PY" "$TMP/cli.py" "$TMP/ca/ca.pem" "$TMP/st" close api.allowed.test >"$TMP/close.out" 2>&1
x=$(answer "$TMP/close.out" 0)
check "a request saying Connection: close was answered with the credential ($x)" \
    grep -q 'auth=ok' <<<"$x"
check "on the pooled leg" test "$(field "$x" conn)" = "$(field "$a" conn)"
check "the answer said Connection: close" grep -qx 'close: said' "$TMP/close.out"
check "and egressd ended the connection" grep -qx 'eof' "$TMP/close.out"
check "the workload's connection is gone" gone
y=$(one api.allowed.test)
check "the leg outlived the workload's close: the next connection took it ($x, then $y)" \
    test "$(field "$y" conn)" = "$(field "$a" conn)"
check "counted as reused twice more" test "$(reused)" = $((u1 + 2))
gone
c=$(one api2.allowed.test)
check "another name on the same address dials its own ($b, then $c)" \
    test "$(field "$c" conn)" != "$(field "$a" conn)"
gone
code=$(api DELETE /credential-vault | tail -1)
check "the vault is deleted ($code)" test "$code" = 204
code=$(api POST /credential-vault "$vault" | tail -1)
check "and written again ($code)" test "$code" = 201
for _ in $(seq 1 100); do grep -qx "$(field "$a" conn)" "$TMP/srv/closed" && break; sleep 0.1; done
check "the vault change closed the pooled legs (upstream $(field "$a" conn) closed)" \
    grep -qx "$(field "$a" conn)" "$TMP/srv/closed"
d=$(one api.allowed.test)
check "and the next connection dialled anew ($d)" test "$(field "$d" conn)" -gt "$(field "$c" conn)"
check "the secret was never logged" bash -c "! grep -q '$SECRET' '$TMP/egressd.log'"
ns_finish
