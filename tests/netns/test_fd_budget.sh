#!/bin/bash
# The intercept's descriptor budget (issue 19 item 5): with its cap set,
# the intercept holds more connections than half its descriptors, because
# a connection between requests holds one (the workload's) once its
# upstream leg is given back past EGRESSD_UPSTREAM_IDLE_MAX. Upstreams
# are opened while descriptors are left, kept legs given back first; past
# the budget a connection is refused at accept, never by EMFILE, and the
# API and DNS keep answering. Here RLIMIT_NOFILE is 400: the default cap
# would be (400 - 64) / 2 = 168 connections, the set one 400 - 64 - 64 =
# 272. 250 keep-alive connections are each answered twice with the
# credential, 60 more cross the cap, and the intercept stays within its
# descriptors; when all close, its upstream descriptors go with them.
. "$(dirname "$0")/nslib.sh"
ns_up
ns_dns --address=/api.allowed.test/203.0.113.10
mkdir -p "$TMP/pki" "$TMP/ca" "$TMP/srv" "$TMP/st"
chown 999:999 "$TMP/ca"
chmod 0777 "$TMP/st"
ns_pki "$TMP/pki" api.allowed.test FdBudgetCA || exit 1
SECRET=sk-fdbudget-0123456789abcdef
cp "$(dirname "$0")/upidle_server.py" "$TMP/srv.py"
ip netns exec "$WAN" "$PY" "$TMP/srv.py" 203.0.113.10 443 "$TMP/pki/srv.pem" "$TMP/pki/srv.key" \
    "$SECRET" "$TMP/srv" >"$TMP/srv.out" 2>&1 &
PIDS+=($!)
ns_wait_listen "$WAN" '203.0.113.10:443' || { cat "$TMP/srv.out"; exit 1; }
ns_egressd OPENSANDBOX_EGRESS_RULES='{"defaultAction":"deny","egress":[{"action":"allow","target":"api.allowed.test"}]}' \
    OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true EGRESSD_CA_EXPORT="$TMP/ca/ca.pem" \
    EGRESSD_UPSTREAM_CA="$TMP/pki/ca.pem" EGRESSD_INTERCEPT_MAX_CONNS=100000 \
    prlimit --nofile=400:400
vault='{"credentials":[{"name":"k","source":{"type":"inline","value":"'$SECRET'"}}],
 "bindings":[{"name":"b","match":{"hosts":["api.allowed.test"],"paths":["/who"],"methods":["GET"]},
 "auth":{"type":"bearer","credential":"k"}}]}'
code=$(api POST /credential-vault "$vault" | tail -1)
check "the binding is accepted" test "$code" = 200 -o "$code" = 201
W=$(ns_child intercept)
check "the intercept child runs with 400 descriptors" \
    grep -q '^Max open files *400 *400' "/proc/$W/limits"
cp "$(dirname "$0")/fdbudget_client.py" "$TMP/cli.py"
chmod 644 "$TMP/cli.py"
nfd() { ls "/proc/$W/fd" 2>/dev/null | wc -l; }

ws "$PY" "$TMP/cli.py" "$TMP/ca/ca.pem" "$TMP/st" 250 60 >"$TMP/cli.out" 2>&1 &
CPID=$!
PIDS+=($CPID)
for _ in $(seq 1 600); do grep -q ready "$TMP/st/state" 2>/dev/null && break; sleep 0.1; done
check "250 keep-alive connections were each answered with the credential ($(head -1 "$TMP/cli.out"))" \
    grep -qx 'round1 ok=250 of 250' "$TMP/cli.out"
held=$(nfd)
check "holding them, the intercept stays within its descriptors ($held of 400)" test "$held" -lt 400
check "and past half of them (250 workload sockets)" test "$held" -gt 250
touch "$TMP/st/go"
for _ in $(seq 1 600); do grep -q done "$TMP/st/state" 2>/dev/null && break; sleep 0.1; done
check "a second request on each was answered with the credential ($(sed -n 2p "$TMP/cli.out"))" \
    grep -qx 'round2 ok=250 of 250' "$TMP/cli.out"
ex=$(sed -n 's/^extra //p' "$TMP/cli.out")
ans=$(sed -n 's/.*answered=\([0-9]*\).*/\1/p' <<<"$ex")
ref=$(sed -n 's/.*refused=\([0-9]*\).*/\1/p' <<<"$ex")
check "of 60 more, those within the cap of 272 were answered ($ex)" test "${ans:-0}" -ge 10 -a "${ans:-0}" -le 22
check "and the rest refused" test "${ref:-0}" -ge 38
check "refusals were logged as the cap (conn_limit)" grep -q '"event":"conn_limit"' "$TMP/egressd.log"
peak=$(nfd)
check "at the cap the intercept is within its descriptors ($peak of 400)" test "$peak" -lt 400
check "no descriptor ran out (no EMFILE in the log)" \
    bash -c "! grep -qi 'too many open files\|EMFILE' '$TMP/egressd.log'"
check "the API answers at the cap" \
    bash -c "ip netns exec $SBX curl -sf -m3 http://127.0.0.1:18080/healthz | grep -qx ok"
dns_ok() { ws dig +time=3 +tries=2 +short @203.0.113.53 api.allowed.test | grep -qx 203.0.113.10; }
check "and DNS answers" dns_ok
touch "$TMP/st/end"
wait "$CPID"
for _ in $(seq 1 100); do [ "$(nfd)" -lt 120 ] && break; sleep 0.1; done
after=$(nfd)
check "once all closed, the intercept's descriptors went back ($after)" test "$after" -lt 120
check "egressd still runs" kill -0 "$EGRESSD_PID"
check "the secret was never logged" bash -c "! grep -q '$SECRET' '$TMP/egressd.log'"
ns_finish
