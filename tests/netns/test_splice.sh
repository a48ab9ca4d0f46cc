#!/bin/bash
# The raw passthrough relay (issue 19 item 2): once a passed-through TLS
# connection has nothing left to parse, its bytes are written as soon as
# they are read, with no FIONREAD before a read and no epoll_ctl per write
# (counted with strace on the intercept child over 200 round trips); bulk
# transfers meet full sockets both ways and arrive intact; a TCP half-close
# passes on after the bytes before it, and the server's answer after it
# still arrives, then its EOF; a connection both sides closed is released
# whichever closed first, and so is one reset behind bytes.
. "$(dirname "$0")/nslib.sh"
FIX="$(dirname "$0")/splice_fixture.py"
ns_up
ns_dns --address=/api.allowed.test/203.0.113.10
mkdir -p "$TMP/pki" "$TMP/st" "$TMP/gate"
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
    "$TMP/pki/key.pem" "$TMP/gate" >"$TMP/server.out" 2>&1 &
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
check "strace is attached to the intercept child" \
    ns_trace "$ICPT" "$TMP/strace.out" epoll_ctl,ioctl,recvfrom,sendto,read,write,readv,writev
touch "$TMP/st/go"
wait "$CPID"
ns_trace_end
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
# Connections where the workload half-closes first and the server then
# answers and closes (its FIN arriving on a socket shut for writing is a
# hang-up): every one is released, both descriptors.
nfds() { find "/proc/$ICPT/fd" -mindepth 1 -maxdepth 1 | wc -l; }
base=$(nfds)
client many 200 >"$TMP/many.out" 2>&1
check "200 half-closed connections through the passthrough are answered" grep -q '^ok 200' "$TMP/many.out"
for _ in $(seq 1 50); do [ "$(nfds)" -le "$base" ] && break; sleep 0.1; done
echo "# intercept descriptors: $base before, $(nfds) after"
check "and all of them are released (descriptors back to $base)" test "$(nfds)" -le "$base"
# The same, with the server's answer and FIN both in before the intercept
# looks (it is stopped meanwhile): one hang-up event, the answer and the
# EOF behind it read together, and the connection released.
base=$(nfds)
client gated >"$TMP/gated.out" 2>&1 &
GPID=$!
for _ in $(seq 1 100); do [ -e "$TMP/gate/eof" ] && break; sleep 0.1; done
check "the server saw the workload's half-close" test -e "$TMP/gate/eof"
kill -STOP "$ICPT"
touch "$TMP/gate/answer"
for _ in $(seq 1 100); do [ -e "$TMP/gate/sent" ] && break; sleep 0.1; done
sleep 0.2 # ordering only: the server's FIN on the wire before the intercept runs again
kill -CONT "$ICPT"
wait "$GPID"
check "the answer and EOF that came together while the intercept was stopped arrive" \
    grep -q '^ok' "$TMP/gated.out"
for _ in $(seq 1 50); do [ "$(nfds)" -le "$base" ] && break; sleep 0.1; done
check "and that connection is released too" test "$(nfds)" -le "$base"
# The server answers and closes first (the workload's socket is then shut
# for writing); then bytes and a reset from the workload both come in
# before the intercept looks: the bytes are read, then the reset behind
# them, and the connection is released (no edge comes after).
base=$(nfds)
mkdir -p "$TMP/rst"
chmod 0777 "$TMP/rst"
client reset "$TMP/rst" >"$TMP/reset.out" 2>&1 &
RPID=$!
for _ in $(seq 1 100); do grep -q eof "$TMP/rst/state" 2>/dev/null && break; sleep 0.1; done
check "the server's answer and EOF reached the workload" grep -q eof "$TMP/rst/state"
kill -STOP "$ICPT"
touch "$TMP/rst/go"
wait "$RPID"
sleep 0.2 # ordering only: the reset on the wire before the intercept runs again
kill -CONT "$ICPT"
for _ in $(seq 1 50); do [ "$(nfds)" -le "$base" ] && break; sleep 0.1; done
check "a reset that came behind bytes releases the connection" test "$(nfds)" -le "$base"
check "the connections ended as finished splices" grep -q '"reason":"splice_done"' "$TMP/egressd.log"
check "the reset one as an error, the only one" test "$(grep -c '"reason":"splice_error"' "$TMP/egressd.log")" = 1
ns_finish
