#!/bin/bash
# One TLS record per response where it fits (issue 19 item 3): a response
# egressd reads whole from upstream reaches a terminated workload as one
# application-data record, whether its body has a length or is re-framed
# chunk by chunk (before, the head, every chunk's size line, its bytes and
# its CRLF were each a record). Counted with openssl s_client -msg. And the
# sockets under the TLS legs are written in the turn that filled them: 200
# keep-alive requests on one terminated connection, traced with strace on
# the intercept child, change no epoll interest (before, every write added
# and dropped it: about 4 epoll_ctl per request).
. "$(dirname "$0")/nslib.sh"
ns_up
ns_dns --address=/api.allowed.test/203.0.113.10
mkdir -p "$TMP/pki" "$TMP/ca"
chown 999:999 "$TMP/ca"
ns_pki "$TMP/pki" api.allowed.test RecordsCA || exit 1
cp "$(dirname "$0")/records_server.py" "$TMP/srv.py"
ip netns exec "$WAN" "$PY" "$TMP/srv.py" 203.0.113.10 443 "$TMP/pki/srv.pem" "$TMP/pki/srv.key" \
    >"$TMP/srv.out" 2>&1 &
PIDS+=($!)
ns_wait_listen "$WAN" '203.0.113.10:443' || { cat "$TMP/srv.out"; exit 1; }
ns_egressd OPENSANDBOX_EGRESS_RULES='{"defaultAction":"deny","egress":[{"action":"allow","target":"api.allowed.test"}]}' \
    OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true EGRESSD_CA_EXPORT="$TMP/ca/ca.pem" \
    EGRESSD_UPSTREAM_CA="$TMP/pki/ca.pem"
vault='{"credentials":[{"name":"k","source":{"type":"inline","value":"sk-records-0123456789abcdef"}}],
 "bindings":[{"name":"b","match":{"hosts":["api.allowed.test"],"paths":["/chunked","/length","/empty"],"methods":["GET"]},
 "auth":{"type":"bearer","credential":"k"}}]}'
code=$(api POST /credential-vault "$vault" | tail -1)
check "the binding is accepted" test "$code" = 200 -o "$code" = 201

# records PATH: application-data records the workload received for one
# request (TLS 1.3: inner content type 0x17), and the response in OUT.
records() {
	printf 'GET %s HTTP/1.1\r\nHost: api.allowed.test\r\nConnection: close\r\n\r\n' "$1" |
	    ws timeout 10 openssl s_client -connect api.allowed.test:443 -servername api.allowed.test \
	    -CAfile "$TMP/ca/ca.pem" -tls1_3 -msg -ign_eof >"$TMP/msg$2" 2>&1
	awk '/^<<< .*InnerContent/ {getline; if ($1 == "17") n++} END {print n + 0}' "$TMP/msg$2"
}
n=$(records /chunked 1)
check "a chunked response reached the workload" grep -q "hello" "$TMP/msg1"
# The body as the workload decodes it (whatever chunks the redactor made).
dechunk() {
	"$PY" - "$1" <<'P'
import sys
t = open(sys.argv[1], "rb").read()
# the head ends at the first blank line after the framing header
body = t.split(b"Transfer-Encoding: chunked\r\n", 1)[1].split(b"\r\n\r\n", 1)[1]
out = b""
while True:
    size, body = body.split(b"\r\n", 1)
    n = int(size, 16)
    if n == 0:
        break
    out, body = out + body[:n], body[n + 2:]
print(out.decode())
P
}
check "re-chunked, intact" test "$(dechunk "$TMP/msg1")" = "hello world!"
check "a chunked response read whole is one record (got $n)" test "$n" = 1
n=$(records /length 2)
check "a Content-Length response reached the workload" grep -q "hello world!" "$TMP/msg2"
check "a Content-Length response read whole is one record (got $n)" test "$n" = 1
n=$(records /empty 3)
check "a 204 reached the workload" grep -q "204 No Content" "$TMP/msg3"
check "a response without a body is one record (got $n)" test "$n" = 1
# 200 keep-alive requests, the intercept child traced meanwhile.
ICPT=$(ns_child_listening tcp 15443)
mkdir -p "$TMP/st"
chmod 0777 "$TMP/st"
cp "$(dirname "$0")/records_client.py" "$TMP/cli.py"
chmod 644 "$TMP/cli.py"
ws "$PY" "$TMP/cli.py" "$TMP/ca/ca.pem" "$TMP/st" 200 >"$TMP/cli.out" 2>&1 &
CPID=$!
for _ in $(seq 1 300); do grep -q ready "$TMP/st/state" 2>/dev/null && break; sleep 0.1; done
check "the first keep-alive request was answered" grep -q ready "$TMP/st/state"
check "strace is attached to the intercept child" \
    ns_trace "$ICPT" "$TMP/strace.out" epoll_ctl,epoll_wait,writev,write,sendmsg,sendto
touch "$TMP/st/go"
wait "$CPID"
ns_trace_end
check "200 keep-alive requests through the terminated path are answered" grep -q '^ok 200' "$TMP/cli.out"
ctl=$(grep -cE '^[0-9]+ +epoll_ctl\(' "$TMP/strace.out")
wr=$(grep -cE '^[0-9]+ +(writev|write|sendmsg|sendto)\(' "$TMP/strace.out")
echo "# traced: $wr socket writes, $ctl epoll_ctl for 200 requests"
check "both legs were written (a write each way per request at least)" test "$wr" -ge 400
check "no epoll interest changed per request: at most 4 epoll_ctl for 200" test "$ctl" -le 4
ns_finish
