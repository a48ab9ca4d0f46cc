#!/bin/bash
# The raw passthrough relay (issue 19 item 2): once a passed-through TLS
# connection has nothing left to parse, its bytes are written as soon as
# they are read, with no FIONREAD before a read and no epoll_ctl per write
# (counted with strace on the intercept child over 200 round trips); bulk
# transfers meet full sockets both ways and arrive intact; a TCP half-close
# passes on after the bytes before it, and the server's answer after it
# still arrives, then its EOF.
. "$(dirname "$0")/nslib.sh"
FIX="$(dirname "$0")/splice_fixture.py"
ns_up
ns_dns --address=/api.allowed.test/203.0.113.10
mkdir -p "$TMP/pki" "$TMP/st"
chmod 0777 "$TMP/st"
(
	cd "$TMP/pki" || exit 1
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
	    -subj /CN=api.allowed.test -addext subjectAltName=DNS:api.allowed.test \
	    -keyout key.pem -out cert.pem 2>/dev/null
) || exit 1
chmod 644 "$TMP/pki/cert.pem"
cp "$FIX" "$TMP/fix.py"
chmod 644 "$TMP/fix.py"
ip netns exec "$WAN" "$PY" "$TMP/fix.py" server 203.0.113.10 443 "$TMP/pki/cert.pem" \
    "$TMP/pki/key.pem" >"$TMP/server.out" 2>&1 &
PIDS+=($!)
ns_wait_listen "$WAN" '203.0.113.10:443' || { cat "$TMP/server.out"; exit 1; }
ns_egressd OPENSANDBOX_EGRESS_RULES='{"defaultAction":"deny","egress":[{"action":"allow","target":"api.allowed.test"}]}' \
    OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true EGRESSD_CA_EXPORT="$TMP/ca.pem" \
    OPENSANDBOX_EGRESS_LOG_LEVEL=debug
ICPT=$(ns_child_listening tcp 15443)
check "the intercept child is found" test -n "$ICPT"

client() { ws "$PY" "$TMP/fix.py" client api.allowed.test 443 "$TMP/pki/cert.pem" "$@"; }

# 200 round trips on one connection, the intercept child traced meanwhile.
client pingpong 200 "$TMP/st" >"$TMP/pingpong.out" 2>&1 &
CPID=$!
for _ in $(seq 1 300); do grep -q ready "$TMP/st/state" 2>/dev/null && break; sleep 0.1; done
check "the first round trip went through the passthrough" grep -q ready "$TMP/st/state"
strace -f -o "$TMP/strace.out" -e trace=epoll_ctl,ioctl,recvfrom,sendto,read,write,readv,writev \
    -p "$ICPT" 2>"$TMP/strace.err" &
STRACE=$!
# strace says so on its stderr once it is attached.
for _ in $(seq 1 100); do grep -q attached "$TMP/strace.err" && break; sleep 0.1; done
check "strace is attached to the intercept child" grep -q attached "$TMP/strace.err"
touch "$TMP/st/go"
wait "$CPID"
kill -INT "$STRACE" 2>/dev/null
wait "$STRACE" 2>/dev/null
check "200 round trips through the passthrough are intact" grep -q '^ok 200' "$TMP/pingpong.out"
moved=$(grep -cE '^[0-9]+ +(recvfrom|sendto|read|write|readv|writev)\(' "$TMP/strace.out")
ctl=$(grep -cE '^[0-9]+ +epoll_ctl\(' "$TMP/strace.out")
fionread=$(grep -cE '^[0-9]+ +ioctl\([0-9]+, FIONREAD' "$TMP/strace.out")
echo "# traced: $moved reads and writes, $ctl epoll_ctl, $fionread FIONREAD"
check "the bytes were traced (at least a read and a write per round trip each way)" test "$moved" -ge 800
check "no FIONREAD before the reads" test "$fionread" = 0
check "no epoll_ctl per write: at most 4 for 200 round trips" test "$ctl" -le 4

# Bulk both ways with a reader that starts late, then a half-close.
client bulk 16777216 >"$TMP/bulk.out" 2>&1
check "16 MiB echoed through the passthrough arrive intact" grep -q '^ok' "$TMP/bulk.out"
client halfclose 1048576 >"$TMP/half.out" 2>&1
check "a half-close passes on after 1 MiB: the server's answer, then its EOF" grep -q '^ok' "$TMP/half.out"
check "the connections ended as finished splices" grep -q '"reason":"splice_done"' "$TMP/egressd.log"
refute "and none in an error" grep -q '"reason":"splice_error"' "$TMP/egressd.log"
ns_finish
