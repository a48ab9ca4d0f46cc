#!/bin/bash
# A chained upstream proxy (issue 17 item 3): OPENSANDBOX_EGRESS_UPSTREAM_PROXY
# and _UPSTREAM_PROXY_AUTH, against a real forward proxy (Debian's
# tinyproxy, run in the fake internet at 198.51.100.90), given by address
# or by name (resolved by the dns process, pinned by the parent, followed
# when it changes, refused dials while it does not resolve). Every connection
# the sidecar makes for the workload, passed through or terminated for the
# vault, leaves as CONNECT to the proxy's address for the destination the
# policy allowed; a denied one is refused before any CONNECT; with the
# proxy down nothing leaves direct; the workload cannot reach the proxy,
# nor leave past the intercept (UDP, other ports of an IP-allowed address);
# a wrong Proxy-Authorization fails, the right one works and is never
# logged; bad settings refuse the start.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/fixture.sh
source "$HERE/../lib/fixture.sh"

PASS=0
FAIL=0
ok() { PASS=$((PASS + 1)); echo "ok   - $*"; }
not_ok() { FAIL=$((FAIL + 1)); echo "FAIL - $*"; }
check() { local d=$1; shift; if "$@" >/dev/null 2>&1; then ok "$d"; else not_ok "$d"; fi; }
refute() { local d=$1; shift; if "$@" >/dev/null 2>&1; then not_ok "$d"; else ok "$d"; fi; }

TP=$(command -v tinyproxy || echo /usr/bin/tinyproxy)
[ -x "$TP" ] || { echo "tinyproxy is missing: run scripts/deps.sh"; exit 1; }

fx_init "uprx$$"
cleanup() {
	fx_down
	if [ "${KEEP_TMP:-0}" = 1 ]; then echo "kept $FX_DIR"; else rm -rf "$FX_DIR"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fx_up || exit 2
fx_safety || exit 2
# The proxy by name: proxy.corp.test (the proxy certificate's name),
# moving.corp.test (each answer the other of two proxies, TTL 1: the
# sidecar follows the change), and no answer for nope.corp.test.
cat >"$FX_DIR/dns.json" <<'J'
{"records":[{"name":"proxy.corp.test","type":"A","data":["198.51.100.90"],"ttl":60},
 {"name":"moving.corp.test","type":"A","data":["198.51.100.90","198.51.100.92"],"ttl":1,"rotate":true},
 {"name":"v1.via.test","type":"A","data":["203.0.113.11"],"ttl":60},
 {"name":"v2.via.test","type":"A","data":["203.0.113.11"],"ttl":60},
 {"name":"v3.via.test","type":"A","data":["203.0.113.11"],"ttl":60},
 {"name":"v4.via.test","type":"A","data":["203.0.113.11"],"ttl":60},
 {"name":"v5.via.test","type":"A","data":["203.0.113.11"],"ttl":60}]}
J
fx_servers_start || exit 2
ip -n "$FX_WAN" addr add 198.51.100.90/32 dev lo || exit 2
ip -n "$FX_WAN" addr add 198.51.100.92/32 dev lo || exit 2
# An IP-allowed host (the fake internet sinks 203.0.113.20; this one is plain).
ip -n "$FX_WAN" addr add 198.51.100.91/32 dev lo || exit 2
P=$FX_DIR/proxy
mkdir -p "$P" "$FX_DIR/out"
chmod 0777 "$P"
SECRET_PASS=pr0xy-Pa55-$$-$RANDOM
# proxy_start NAME PORT [BasicAuth user pass]: tinyproxy in the foreground, in wan.
declare -A PROXY_PID
proxy_start() {
	local name=$1 port=$2
	shift 2
	{
		echo "User nobody"
		echo "Group nogroup"
		echo "Port $port"
		echo "Listen ${PROXY_ADDR:-198.51.100.90}"
		echo "Timeout 10"
		echo "LogFile \"$P/$name.log\""
		echo "LogLevel Connect"
		echo "MaxClients 20"
		echo "ConnectPort 443"
		echo "ConnectPort 80"
		echo "ConnectPort 8080"
		echo "ConnectPort 2222"
		echo "ConnectPort 53"
		[ $# -gt 0 ] && echo "BasicAuth $1 $2"
	} >"$P/$name.conf"
	: >"$P/$name.log"
	chmod 0666 "$P/$name.log"
	ip netns exec "$FX_WAN" "$TP" -d -c "$P/$name.conf" >"$P/$name.out" 2>&1 &
	PROXY_PID[$name]=$!
	fx_track $!
	local i
	for i in $(seq 1 50); do
		ip netns exec "$FX_WAN" bash -c "exec 3<>/dev/tcp/${PROXY_ADDR:-198.51.100.90}/$port" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "tinyproxy $name did not start"
	cat "$P/$name.out"
	exit 2
}
proxy_stop() { fx_stop_pid "${PROXY_PID[$1]}" TERM; }
connects() { grep -c "CONNECT" "$P/$1.log" 2>/dev/null; }

POLICY='{"defaultAction":"deny","egress":[{"action":"allow","target":"api.allowed.test"},
 {"action":"allow","target":"front.allowed.test"},{"action":"allow","target":"*.via.test"},
 {"action":"allow","target":"198.51.100.91"}]}'
PUBCA=$FX_CERTS/ca.pem
SBXCA=$FX_DIR/sandbox/ca.pem
LOG=$FX_DIR/egressd.log
FN=$FX_DIR/fakenet
C=(curl -sS -m 8)
chown "$FX_WORKER:$FX_WORKER" "$FX_DIR/sandbox"
start() {
	fx_egressd_start "$POLICY" OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true \
	    EGRESSD_CA_EXPORT="$SBXCA" EGRESSD_UPSTREAM_CA="$PUBCA" "$@" || { cat "$LOG"; exit 1; }
}
# peers_since N: the peers the api server saw after its first N records.
api_peers_since() { tail -n +"$(($1 + 1))" "$FN/api.log" 2>/dev/null | "$FX_PY" -c '
import json, sys
print(" ".join(sorted({json.loads(l)["peer"] for l in sys.stdin if l.strip()})))'; }
api_lines() { wc -l <"$FN/api.log" 2>/dev/null || echo 0; }

proxy_start open 3128
start OPENSANDBOX_EGRESS_UPSTREAM_PROXY=http://198.51.100.90:3128
check "the intercept logs the proxy (without credentials)" \
    grep -q '"event":"upstream_proxy".*198.51.100.90 port 3128"' "$LOG"

# ---- passthrough (no binding): through CONNECT to the learned address.
n0=$(api_lines)
fx_ws "${C[@]}" --cacert "$PUBCA" https://api.allowed.test/through1 >"$FX_DIR/out/pass" 2>&1
check "a passthrough HTTPS request works through the proxy" grep -q '"path": "/through1"' "$FX_DIR/out/pass"
check "  the proxy carried a CONNECT to the destination address" \
    grep -q "CONNECT 203.0.113.10:443" "$P/open.log"
peers=$(api_peers_since "$n0")
check "  the server saw the proxy, never the sandbox ($peers)" test -n "$peers" -a "${peers#*10.200.0.2}" = "$peers"

# ---- other ports of a learned address (the peek listener), through the proxy too.
fx_ws dig +short front.allowed.test A >/dev/null 2>&1
fx_ws "${C[@]}" http://front.allowed.test:8080/peek1 >"$FX_DIR/out/peek" 2>&1
check "plain HTTP on another port of a learned address works through the proxy" \
    grep -q '"path": "/peek1"' "$FX_DIR/out/peek"
check "  by a CONNECT to that address and port" grep -q "CONNECT 203.0.113.12:8080" "$P/open.log"
fx_ws bash -c "exec 3<>/dev/tcp/203.0.113.12/2222 && timeout 8 head -c 15 <&3" >"$FX_DIR/out/banner" 2>&1
check "a server-first protocol (a banner) arrives through the proxy" grep -q "SSH-2.0-fakenet" "$FX_DIR/out/banner"
check "  by a CONNECT to port 2222" grep -q "CONNECT 203.0.113.12:2222" "$P/open.log"

# ---- terminated for the vault: the credential goes through the tunnel.
cat >"$FX_DIR/private/vault.json" <<J
{"credentials":[{"name":"c1","source":{"type":"inline","value":"$FX_S1"}}],
 "bindings":[{"name":"b1","match":{"hosts":["api.allowed.test"],"paths":["/v1/*"],"methods":["GET"]},
   "auth":{"type":"bearer","credential":"c1"}}]}
J
code=$(fx_api POST /credential-vault -H 'Content-Type: application/json' \
    --data-binary @"$FX_DIR/private/vault.json" -o /dev/null -w '%{http_code}')
check "the vault is accepted" test "$code" = 200 -o "$code" = 201
n0=$(api_lines)
c0=$(connects open)
fx_ws "${C[@]}" --cacert "$SBXCA" -H "Authorization: Bearer $FX_FAKE_KEY" \
    https://api.allowed.test/v1/vaulted >"$FX_DIR/out/vault" 2>&1
check "a terminated request works through the proxy" grep -q '"path": "/v1/vaulted"' "$FX_DIR/out/vault"
check "  upstream got the real credential" bash -c "tail -n +$((n0 + 1)) '$FN/api.log' | grep -q '$FX_S1'"
refute "  the workload did not" grep -q "$FX_S1" "$FX_DIR/out/vault"
check "  through a new CONNECT" test "$(connects open)" -gt "$c0"
peers=$(api_peers_since "$n0")
check "  the server saw the proxy, never the sandbox ($peers)" test -n "$peers" -a "${peers#*10.200.0.2}" = "$peers"

# ---- a denied destination is refused before any CONNECT.
c0=$(connects open)
refute "a denied SNI on the allowed address is refused" fx_ws "${C[@]}" --cacert "$PUBCA" \
    --resolve evil.example.test:443:203.0.113.10 https://evil.example.test/denied
check "  and the proxy saw no CONNECT for it" test "$(connects open)" = "$c0"

# ---- the workload gets no path past the intercept.
refute "the workload cannot connect to the proxy" \
    fx_ws "${C[@]}" -x http://198.51.100.90:3128 http://api.allowed.test/
ip netns exec "$FX_WAN" socat -T2 TCP-LISTEN:2222,bind=198.51.100.91,reuseaddr,fork SYSTEM:'echo direct' >/dev/null 2>&1 &
fx_track $!
cat >"$FX_DIR/udpecho.py" <<'PY'
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("198.51.100.91", 5000))
for _ in range(100):
    _, peer = s.recvfrom(512)
    s.sendto(b"direct\n", peer)
PY
ip netns exec "$FX_WAN" "$FX_PY" "$FX_DIR/udpecho.py" >/dev/null 2>&1 &
fx_track $!
cat >"$FX_DIR/ws/udpprobe.py" <<'PY'
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(3)
try:
    s.sendto(b"x", ("198.51.100.91", 5000))
    sys.exit(0 if s.recv(64).startswith(b"direct") else 1)
except OSError:
    sys.exit(1)
PY
for i in $(seq 1 50); do
	ip netns exec "$FX_WAN" ss -ltn | grep -q '198.51.100.91:2222' && break
	sleep 0.1
done
refute "nor connect to an IP-allowed address on another TCP port (a direct dial)" \
    fx_ws timeout 5 bash -c "exec 3<>/dev/tcp/198.51.100.91/2222"
refute "nor exchange UDP with it" fx_ws python3 "$FX_DIR/ws/udpprobe.py"

# ---- the intercept's mark reaches the proxy and nothing else (a child taken
# over through a bug dials no more directly than the code does).
cat >"$FX_DIR/marked.py" <<'PY'
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, 36, 0x1)  # SO_MARK, the intercept's
s.settimeout(3)
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
except OSError:
    sys.exit(1)
PY
marked() { ip netns exec "$FX_SBX" "$FX_PY" "$FX_DIR/marked.py" "$@"; }
check "the intercept's mark reaches the proxy" marked 198.51.100.90 3128
refute "  but not the learned, allowed address directly" marked 203.0.113.10 443
refute "  nor the IP-allowed one" marked 198.51.100.91 2222

# ---- the proxy down: no direct fallback.
proxy_stop open
n0=$(api_lines)
refute "with the proxy down, a passthrough request fails" \
    fx_ws "${C[@]}" --cacert "$PUBCA" https://api.allowed.test/direct1
refute "  and a terminated one too" fx_ws "${C[@]}" -f --cacert "$SBXCA" \
    -H "Authorization: Bearer $FX_FAKE_KEY" https://api.allowed.test/v1/direct2
check "  the server saw no direct connection" test "$(api_lines)" = "$n0"
check "  the refusal is logged" grep -q '"event":"upstream_proxy_refused"' "$LOG"
fx_egressd_stop

# ---- control: without a proxy, the same policy lets the direct paths out.
start
check "control: without a proxy, the other TCP port of the IP-allowed address is reached" \
    fx_ws timeout 5 bash -c "exec 3<>/dev/tcp/198.51.100.91/2222"
check "control: without a proxy, the intercept's mark reaches the IP-allowed address" \
    marked 198.51.100.91 2222
check "control: without a proxy, UDP to the IP-allowed address is answered" \
    fx_ws python3 "$FX_DIR/ws/udpprobe.py"
n0=$(api_lines)
fx_ws "${C[@]}" --cacert "$PUBCA" https://api.allowed.test/direct3 >/dev/null 2>&1
peers=$(api_peers_since "$n0")
check "control: without a proxy, the server sees the sandbox ($peers)" test "$peers" = 10.200.0.2
fx_egressd_stop

# ---- Proxy-Authorization: wrong fails, right works, never logged.
proxy_start auth 3129 egress "$SECRET_PASS"
GOOD="Basic $(printf 'egress:%s' "$SECRET_PASS" | base64 -w0)"
BAD="Basic $(printf 'egress:wrong-%s' "$SECRET_PASS" | base64 -w0)"
start OPENSANDBOX_EGRESS_UPSTREAM_PROXY=http://198.51.100.90:3129 \
    OPENSANDBOX_EGRESS_UPSTREAM_PROXY_AUTH="$BAD"
refute "a wrong Proxy-Authorization fails the request" \
    fx_ws "${C[@]}" --cacert "$PUBCA" https://api.allowed.test/badauth
check "  the proxy's refusal (tinyproxy answers CONNECT with 401) is logged" grep -q '"event":"upstream_proxy_refused".*"status":40[17]' "$LOG"
fx_egressd_stop
start OPENSANDBOX_EGRESS_UPSTREAM_PROXY=http://198.51.100.90:3129 \
    OPENSANDBOX_EGRESS_UPSTREAM_PROXY_AUTH="$GOOD"
fx_ws "${C[@]}" --cacert "$PUBCA" https://api.allowed.test/goodauth >"$FX_DIR/out/auth" 2>&1
check "the right Proxy-Authorization works" grep -q '"path": "/goodauth"' "$FX_DIR/out/auth"
check "the log says that there is one" grep -q 'with Proxy-Authorization' "$LOG"
fx_egressd_stop
refute "the value is never logged" grep -q "${GOOD#Basic }\|$SECRET_PASS" "$LOG"

# ---- an https:// proxy: TLS to the proxy (its certificate verified for its
# address against the upstream trust), then CONNECT inside it.
proxy_start open 3128
front() { # PORT CERT: a TLS front of the open proxy, in wan
	ip netns exec "$FX_WAN" socat OPENSSL-LISTEN:"$1",bind=198.51.100.90,reuseaddr,fork,verify=0,cert="$FX_CERTS/$2.pem",key="$FX_CERTS/$2.key" \
	    TCP:198.51.100.90:3128 >/dev/null 2>&1 &
	fx_track $!
	local i
	for i in $(seq 1 50); do
		ip netns exec "$FX_WAN" ss -ltn | grep -q "198.51.100.90:$1 " && return 0
		sleep 0.1
	done
	echo "TLS front $1 did not start"
	exit 2
}
front 3443 proxy
front 3444 api
start OPENSANDBOX_EGRESS_UPSTREAM_PROXY=https://198.51.100.90:3443
check "the start line says TLS" grep -q '"event":"upstream_proxy".*over TLS' "$LOG"
code=$(fx_api POST /credential-vault -H 'Content-Type: application/json' \
    --data-binary @"$FX_DIR/private/vault.json" -o /dev/null -w '%{http_code}')
check "the vault is accepted again" test "$code" = 200 -o "$code" = 201
c0=$(connects open)
fx_ws "${C[@]}" --cacert "$PUBCA" https://front.allowed.test/tls-proxy-pass >"$FX_DIR/out/tlsp" 2>&1
check "passthrough through an https:// proxy works" grep -q '"path": "/tls-proxy-pass"' "$FX_DIR/out/tlsp"
fx_ws "${C[@]}" --cacert "$SBXCA" -H "Authorization: Bearer $FX_FAKE_KEY" \
    https://api.allowed.test/v1/tls-proxy-vault >"$FX_DIR/out/tlsv" 2>&1
check "a terminated request through an https:// proxy works (TLS inside TLS)" \
    grep -q '"path": "/v1/tls-proxy-vault"' "$FX_DIR/out/tlsv"
fx_ws "${C[@]}" http://front.allowed.test:8080/tls-proxy-peek >"$FX_DIR/out/tlsk" 2>&1
check "another port of a learned address through an https:// proxy works" \
    grep -q '"path": "/tls-proxy-peek"' "$FX_DIR/out/tlsk"
check "  each by a CONNECT inside the TLS" test "$(connects open)" -ge $((c0 + 3))
fx_egressd_stop
start OPENSANDBOX_EGRESS_UPSTREAM_PROXY=https://198.51.100.90:3444
c0=$(connects open)
refute "a proxy whose certificate is not for its address is refused" \
    fx_ws "${C[@]}" --cacert "$PUBCA" https://api.allowed.test/tls-proxy-wrong
check "  logged as proxy_tls_failed" grep -q '"event":"upstream_proxy_refused".*"reason":"proxy_tls_failed"' "$LOG"
check "  and nothing was asked of it" test "$(connects open)" = "$c0"
fx_egressd_stop

# ---- the proxy given by name: the dns process resolves it, the parent pins
# the intercept's mark to what it learned, and the workload gets nothing of it.
start OPENSANDBOX_EGRESS_UPSTREAM_PROXY=http://proxy.corp.test:3128
check "the proxy's name is resolved before ready, and its address pinned" \
    grep -q '"event":"upstream_proxy_addresses".*"name":"proxy.corp.test".*"addrs":"198.51.100.90"' "$LOG"
c0=$(connects open)
n0=$(api_lines)
fx_ws "${C[@]}" --cacert "$PUBCA" https://api.allowed.test/by-name >"$FX_DIR/out/byname" 2>&1
check "a passthrough request works through the proxy given by name" grep -q '"path": "/by-name"' "$FX_DIR/out/byname"
check "  by a CONNECT to the destination address" test "$(connects open)" -gt "$c0"
peers=$(api_peers_since "$n0")
check "  the server saw the proxy, never the sandbox ($peers)" test -n "$peers" -a "${peers#*10.200.0.2}" = "$peers"
check "the intercept's mark reaches the resolved proxy" marked 198.51.100.90 3128
refute "  but not the learned, allowed address directly" marked 203.0.113.10 443
refute "the workload cannot connect to the proxy" \
    fx_ws "${C[@]}" -x http://198.51.100.90:3128 http://api.allowed.test/
a=$(fx_ws dig +short proxy.corp.test A 2>/dev/null)
check "the workload's own query for the proxy's name meets the policy (denied: '$a')" test -z "$a"
refute "  and its address is not learned for the workload" \
    fx_ws timeout 5 bash -c "exec 3<>/dev/tcp/198.51.100.90/3128"
fx_egressd_stop

start OPENSANDBOX_EGRESS_UPSTREAM_PROXY=https://proxy.corp.test:3443
c0=$(connects open)
fx_ws "${C[@]}" --cacert "$PUBCA" https://front.allowed.test/tls-by-name >"$FX_DIR/out/tlsn" 2>&1
check "an https:// proxy by name works (its certificate verified for the name)" \
    grep -q '"path": "/tls-by-name"' "$FX_DIR/out/tlsn"
check "  by a CONNECT inside the TLS" test "$(connects open)" -gt "$c0"
fx_egressd_stop
start OPENSANDBOX_EGRESS_UPSTREAM_PROXY=https://proxy.corp.test:3444
c0=$(connects open)
refute "an https:// proxy by name whose certificate is for another name is refused" \
    fx_ws "${C[@]}" --cacert "$PUBCA" https://api.allowed.test/tls-by-name-wrong
check "  logged as proxy_tls_failed" grep -q '"event":"upstream_proxy_refused".*"reason":"proxy_tls_failed"' "$LOG"
check "  and nothing was asked of it" test "$(connects open)" = "$c0"
fx_egressd_stop

# ---- a name that does not resolve: every dial fails, none goes direct.
start OPENSANDBOX_EGRESS_UPSTREAM_PROXY=http://nope.corp.test:3128
check "an unresolvable proxy name is logged" grep -q '"event":"upstream_proxy_unresolved".*nope.corp.test' "$LOG"
n0=$(api_lines)
refute "  a passthrough request fails" fx_ws "${C[@]}" --cacert "$PUBCA" https://api.allowed.test/unresolved
refute "  and a terminated one too" fx_ws "${C[@]}" -f --cacert "$SBXCA" \
    -H "Authorization: Bearer $FX_FAKE_KEY" https://api.allowed.test/v1/unresolved
check "  the server saw no connection" test "$(api_lines)" = "$n0"
check "  the refusal says why" grep -q '"event":"upstream_proxy_refused".*"reason":"proxy_unresolved"' "$LOG"
refute "  the intercept's mark reaches nothing (not the proxy's usual address)" marked 198.51.100.90 3128
fx_egressd_stop

# ---- DNS through the proxy too (EGRESSD_DNS_VIA_PROXY): DNS over TCP in
# CONNECT to the resolver; the dns mark reaches the proxy and nothing else.
dns_src() { # NAME: "proto src" of each query the resolver saw for it
	"$FX_PY" -c '
import json, sys
for l in open(sys.argv[1]):
    try:
        r = json.loads(l)
    except ValueError:
        continue
    if r.get("qname_lc") == sys.argv[2]:
        print(r.get("proto"), r.get("src"))' "$FN/dns.log" "$1" | sort -u; }
start OPENSANDBOX_EGRESS_UPSTREAM_PROXY=http://198.51.100.90:3128 EGRESSD_DNS_VIA_PROXY=true
a=$(fx_ws dig +short +tries=1 +time=5 v1.via.test A 2>/dev/null)
check "a DNS query is answered through the proxy ($a)" test "$a" = 203.0.113.11
check "  by a CONNECT to the resolver's port 53" grep -q "CONNECT 203.0.113.53:53" "$P/open.log"
src=$(dns_src v1.via.test)
# (tinyproxy shares the fake internet's namespace: it dials from any of its addresses)
check "  the resolver saw it over TCP, from the proxy's side, never the sandbox ($src)" \
    test "${src%% *}" = tcp -a "${src#*10.200.0.2}" = "$src" -a "$(wc -l <<<"$src")" = 1
fx_ws "${C[@]}" http://v1.via.test/dns-via >"$FX_DIR/out/dnsvia" 2>&1
check "  and the name's traffic goes through the proxy too" grep -q '"path": "/dns-via"' "$FX_DIR/out/dnsvia"
check "  by a CONNECT to its address" grep -q "CONNECT 203.0.113.11:80" "$P/open.log"
cat >"$FX_DIR/marked2.py" <<'PY'
import socket, sys
kind = socket.SOCK_DGRAM if sys.argv[3] == "udp" else socket.SOCK_STREAM
s = socket.socket(socket.AF_INET, kind)
s.setsockopt(socket.SOL_SOCKET, 36, 0x2)  # SO_MARK, the dns process's
s.settimeout(3)
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    if kind == socket.SOCK_DGRAM:
        # a query for api.allowed.test A: answered only if it got there
        s.send(bytes.fromhex("abcd0100000100000000000003617069"
                             "07616c6c6f776564047465737400""00010001"))
        s.recv(512)
except OSError:
    sys.exit(1)
PY
dnsmarked() { ip netns exec "$FX_SBX" "$FX_PY" "$FX_DIR/marked2.py" "$@"; }
check "the dns mark reaches the proxy" dnsmarked 198.51.100.90 3128 tcp
refute "  but not the resolver over UDP" dnsmarked 203.0.113.53 53 udp
refute "  nor over TCP" dnsmarked 203.0.113.53 53 tcp
proxy_stop open
b=$(fx_ws dig +short +tries=1 +time=5 v2.via.test A 2>/dev/null)
check "with the proxy down, DNS fails ('$b')" test -z "$b"
check "  and the resolver saw no query for it" test -z "$(dns_src v2.via.test)"
check "  the refusal is logged" grep -q '"event":"dns_proxy_refused"' "$LOG"
fx_egressd_stop
proxy_start open 3128
start OPENSANDBOX_EGRESS_UPSTREAM_PROXY=http://198.51.100.90:3128
fx_ws dig +short v3.via.test A >/dev/null 2>&1
src=$(dns_src v3.via.test)
check "control: without EGRESSD_DNS_VIA_PROXY, DNS goes direct over UDP ($src)" test "$src" = "udp 10.200.0.2"
check "control: the dns mark reaches the resolver" dnsmarked 203.0.113.53 53 udp
fx_egressd_stop
start OPENSANDBOX_EGRESS_UPSTREAM_PROXY=https://198.51.100.90:3443 EGRESSD_DNS_VIA_PROXY=true
a=$(fx_ws dig +short +tries=1 +time=5 v4.via.test A 2>/dev/null)
check "DNS through an https:// proxy (TLS verified for its address) is answered ($a)" \
    test "$a" = 203.0.113.11
fx_egressd_stop
start OPENSANDBOX_EGRESS_UPSTREAM_PROXY=https://198.51.100.90:3444 EGRESSD_DNS_VIA_PROXY=true
b=$(fx_ws dig +short +tries=1 +time=5 v5.via.test A 2>/dev/null)
check "  one whose certificate is not for its address gets nothing ('$b')" test -z "$b"
check "  logged as proxy_tls_failed, the resolver saw nothing" bash -c \
    "grep -q '\"event\":\"dns_proxy_refused\".*proxy_tls_failed' '$LOG' && ! grep -q v5.via.test '$FN/dns.log'"
fx_egressd_stop

# ---- the name's address changes: the sidecar follows it (table and dials).
PROXY_ADDR=198.51.100.92 proxy_start moved 3128
start OPENSANDBOX_EGRESS_UPSTREAM_PROXY=http://moving.corp.test:3128
changed=0
for i in $(seq 1 40); do
	if [ "$(grep -c '"event":"upstream_proxy_addresses".*"name":"moving.corp.test"' "$LOG")" -ge 2 ]; then
		changed=1
		break
	fi
	sleep 0.5
done
check "a new address of the proxy's name is put in force" test "$changed" = 1
check "  both addresses were pinned in turn" bash -c "grep -q '\"addrs\":\"198.51.100.92\"' '$LOG' && grep -q '\"addrs\":\"198.51.100.90\"' '$LOG'"
for i in $(seq 1 30); do
	fx_ws "${C[@]}" --cacert "$PUBCA" https://api.allowed.test/moving$i >/dev/null 2>&1
	[ "$(connects moved)" -gt 0 ] && break
	sleep 0.5
done
check "  requests went through the proxy at the new address" test "$(connects moved)" -gt 0
fx_egressd_stop
proxy_stop moved
proxy_stop open

# ---- bad settings refuse the start (exit 2), naming the variable, never the URL's secrets.
bad_start() {
	local rc=0
	ip netns exec "$FX_SBX" env -i PATH="$FX_PATH" OPENSANDBOX_EGRESS_TOKEN=t \
	    OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true "$@" \
	    timeout 10 "$EGRESSD_BIN" >"$FX_DIR/out/bad" 2>&1 || rc=$?
	test "$rc" = 2 && grep -q OPENSANDBOX_EGRESS_UPSTREAM_PROXY "$FX_DIR/out/bad"
}
U=OPENSANDBOX_EGRESS_UPSTREAM_PROXY
check "userinfo in the URL is refused" bad_start "$U=http://user:hunter2@198.51.100.90:3128"
refute "  without printing it" grep -q hunter2 "$FX_DIR/out/bad"
check "a query is refused" bad_start "$U=http://198.51.100.90:3128/?x=1"
check "a path is refused" bad_start "$U=http://198.51.100.90:3128/proxy"
check "port 0 is refused" bad_start "$U=http://198.51.100.90:0"
check "ftp:// is refused" bad_start "$U=ftp://198.51.100.90:3128"
check "https with a path is refused" bad_start "$U=https://198.51.100.90/x"
check "a name that is no host name is refused" bad_start "$U=http://proxy_1.corp.test:3128"
check "a wildcard is refused" bad_start "$U=http://*.corp.test:3128"
check "AUTH without a proxy is refused" bad_start "${U}_AUTH=Basic eA=="
check "DNS through a proxy given by name is refused" bad_start "$U=http://proxy.corp.test:3128" \
    EGRESSD_DNS_VIA_PROXY=true
check "AUTH with a line break is refused" bad_start "$U=http://198.51.100.90:3128" \
    "${U}_AUTH=$(printf 'Basic x\r\nX-Injected: 1')"
check "a proxy without interception is refused" bad_start OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=false \
    "$U=http://198.51.100.90:3128"

echo "$PASS passed, $FAIL failed"
if [ "$FAIL" -ne 0 ]; then
	tail -n 40 "$LOG"
	tail -n 20 "$P"/*.log
fi
[ "$FAIL" -eq 0 ]
