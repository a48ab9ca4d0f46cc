# Shared helpers of the netns tests (sourced). Each test gets its own pair
# of namespaces, sbx (workload + egressd) and wan (the fake internet, no
# uplink, documentation addresses only), removed on exit. Assertions count
# passes and failures; the test ends with "N passed, N failed".

set -u
NS_ID="${NS_ID:-$$}"
SBX="egsbx$NS_ID"
WAN="egwan$NS_ID"
TMP="$(mktemp -d /tmp/egressd-netns.XXXXXX)"
chmod 755 "$TMP"
PASS=0
FAIL=0
PIDS=()
EGRESSD_PID=""
TOKEN="test-token-$NS_ID"
PY=/usr/bin/python3

ns_cleanup() {
	local p
	# Servers that fork per connection (socat ...,fork) leave children: end them too.
	for p in "${PIDS[@]}"; do
		pkill -P "$p" 2>/dev/null
		kill "$p" 2>/dev/null
	done
	if [ -n "$EGRESSD_PID" ]; then
		kill "$EGRESSD_PID" 2>/dev/null
		wait "$EGRESSD_PID" 2>/dev/null
	fi
	for p in "${PIDS[@]}"; do
		wait "$p" 2>/dev/null
	done
	ip netns del "$SBX" 2>/dev/null
	ip netns del "$WAN" 2>/dev/null
	rm -rf "/etc/netns/$SBX"
	if [ "${KEEP_TMP:-0}" = 1 ]; then
		echo "logs kept in $TMP"
	else
		rm -rf "$TMP"
	fi
}
trap ns_cleanup EXIT
trap 'exit 130' INT TERM

ok() {
	PASS=$((PASS + 1))
	echo "ok   - $*"
}

not_ok() {
	FAIL=$((FAIL + 1))
	echo "FAIL - $*"
}

# check "description" command...: passes when the command succeeds.
check() {
	local d="$1"
	shift
	if "$@" >/dev/null 2>&1; then ok "$d"; else not_ok "$d"; fi
}

# refute "description" command...: passes when the command fails.
refute() {
	local d="$1"
	shift
	if "$@" >/dev/null 2>&1; then not_ok "$d"; else ok "$d"; fi
}

ns_finish() {
	if [ -n "$EGRESSD_PID" ] && grep -q -E 'AddressSanitizer|runtime error:|LeakSanitizer' "$TMP/egressd.log" 2>/dev/null; then
		not_ok "sanitizer report in egressd log"
		grep -E -A20 'AddressSanitizer|runtime error:|LeakSanitizer' "$TMP/egressd.log" | head -40
	fi
	echo "$PASS passed, $FAIL failed"
	if [ "$FAIL" -ne 0 ]; then
		echo "--- egressd log ---"
		tail -n 40 "$TMP/egressd.log" 2>/dev/null
		exit 1
	fi
	exit 0
}

# Build the two namespaces. The wan side carries every "public" address
# on its lo; sbx routes everything through the veth.
ns_up() {
	ip netns add "$SBX"
	ip netns add "$WAN"
	ip link add "s$NS_ID" type veth peer name "w$NS_ID"
	ip link set "s$NS_ID" netns "$SBX"
	ip link set "w$NS_ID" netns "$WAN"
	ip -n "$SBX" link set lo up
	ip -n "$WAN" link set lo up
	ip -n "$SBX" addr add 10.200.0.2/24 dev "s$NS_ID"
	ip -n "$WAN" addr add 10.200.0.1/24 dev "w$NS_ID"
	ip -n "$SBX" addr add fd00:200::2/64 dev "s$NS_ID" nodad
	ip -n "$WAN" addr add fd00:200::1/64 dev "w$NS_ID" nodad
	ip -n "$SBX" link set "s$NS_ID" up
	ip -n "$WAN" link set "w$NS_ID" up
	ip -n "$SBX" route add default via 10.200.0.1
	ip -n "$SBX" -6 route add default via fd00:200::1
	local a
	for a in 203.0.113.10 203.0.113.11 203.0.113.20 203.0.113.53 198.51.100.7; do
		ip -n "$WAN" addr add "$a/32" dev lo
	done
	for a in 2001:db8::10 2001:db8::20 2001:db8::53; do
		ip -n "$WAN" addr add "$a/128" dev lo nodad
	done
	ip netns exec "$WAN" sysctl -qw net.ipv4.ip_forward=0
	mkdir -p "/etc/netns/$SBX"
	echo "nameserver 203.0.113.53" >"/etc/netns/$SBX/resolv.conf"
	ns_safety
}

# Abort unless wan has no route out and sbx reaches "public" hosts via the veth.
ns_safety() {
	if ip -n "$WAN" route show default | grep -q . || ip -n "$WAN" -6 route show default | grep -q .; then
		echo "SAFETY: wan namespace has a default route; aborting" >&2
		exit 2
	fi
	if ! ip -n "$SBX" route get 203.0.113.20 | grep -q "s$NS_ID"; then
		echo "SAFETY: sbx does not route the fake internet through the veth; aborting" >&2
		exit 2
	fi
}

# dnsmasq in wan, authoritative for the test names; every query is logged.
# Extra --address/--host-record arguments come from the caller.
ns_dns() {
	ip netns exec "$WAN" dnsmasq --no-daemon --no-resolv --no-hosts --bind-interfaces \
		--listen-address=203.0.113.53 --listen-address=2001:db8::53 --port=53 \
		--log-queries --log-facility="$TMP/dns.log" --pid-file="$TMP/dnsmasq.pid" \
		--local-ttl=300 --user=root "$@" >"$TMP/dnsmasq.out" 2>&1 &
	PIDS+=($!)
	local i
	for i in $(seq 1 50); do
		ip netns exec "$WAN" ss -lun | grep -q '203.0.113.53:53' && return 0
		sleep 0.1
	done
	echo "dnsmasq did not start" >&2
	cat "$TMP/dnsmasq.out" >&2
	exit 2
}

# A TCP server in wan that answers "hello" to every connection.
ns_tcp_server() { # addr port
	ip netns exec "$WAN" socat -T2 "TCP-LISTEN:$2,bind=$1,fork,reuseaddr" SYSTEM:'echo hello' \
		>/dev/null 2>&1 &
	PIDS+=($!)
}

# ns_pki DIR NAME[,NAME...] [CN]: a throwaway CA (DIR/ca.pem, readable by
# all, and DIR/ca.key) and a server certificate for the names signed by it
# (DIR/srv.pem, DIR/srv.key; the first name its CN), all P-256, valid 2 days.
ns_pki() {
	(
		cd "$1" || exit 1
		openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
		    -subj "/CN=${3:-TestCA}" -addext basicConstraints=critical,CA:TRUE \
		    -keyout ca.key -out ca.pem 2>/dev/null &&
		    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		    -subj "/CN=${2%%,*}" -keyout srv.key -out srv.csr 2>/dev/null &&
		    printf 'subjectAltName=DNS:%s\n' "${2//,/,DNS:}" >ext &&
		    openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
		    -extfile ext -out srv.pem 2>/dev/null
	) || return 1
	chmod 644 "$1/ca.pem"
}
ns_wait_listen() { # ns pattern
	local i
	for i in $(seq 1 50); do
		ip netns exec "$1" ss -ltn | grep -q "$2" && return 0
		sleep 0.1
	done
	return 1
}

# Start egressd in sbx with extra env assignments as arguments; waits for
# the ready file (bounded).
ns_egressd() {
	rm -f "$TMP/ready"
	ip netns exec "$SBX" env OPENSANDBOX_EGRESS_TOKEN="$TOKEN" \
		OPENSANDBOX_EGRESS_DNS_UPSTREAM=203.0.113.53 \
		OPENSANDBOX_EGRESS_HTTP_ADDR=127.0.0.1:18080 \
		EGRESSD_READY_FILE="$TMP/ready" EGRESSD_WORKER_USER=999:999 \
		EGRESSD_ALWAYS_DIR="$TMP/always" \
		"$@" "$EGRESSD_BIN" >"$TMP/egressd.log" 2>&1 &
	EGRESSD_PID=$!
	local i
	for i in $(seq 1 100); do
		[ -f "$TMP/ready" ] && return 0
		kill -0 "$EGRESSD_PID" 2>/dev/null || break
		sleep 0.05
	done
	echo "egressd did not become ready" >&2
	cat "$TMP/egressd.log" >&2
	exit 1
}

# The pid of egressd's child of a role (control, dns, intercept), from the
# last worker_start line of that role in $TMP/egressd.log (or the log given).
ns_child() { # role [log]
	grep "\"event\":\"worker_start\",\"role\":\"$1\"" "${2:-$TMP/egressd.log}" | tail -1 |
		sed 's/.*"role":"'"$1"'","pid":\([0-9]*\).*/\1/'
}

# The pid of egressd's child that holds the listening socket on a port
# (tcp or udp) in sbx: the parent binds every listener and keeps it, so of
# the socket's holders this is the one whose parent is $EGRESSD_PID. Needs
# no log line (the benches run at log level warn).
ns_child_listening() { # tcp|udp port
	local opt=-tlnpH p
	[ "$1" = udp ] && opt=-ulnpH
	for p in $(ip netns exec "$SBX" ss "$opt" "sport = :$2" | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u); do
		if [ "$(awk '{print $4}' "/proc/$p/stat" 2>/dev/null)" = "$EGRESSD_PID" ]; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

# ns_trace PID OUT SYSCALLS: strace the process (every thread) into OUT,
# in the background, returning once strace says it is attached (bounded);
# fails if it never does. ns_trace_end stops it and waits for its output.
ns_trace() {
	strace -f -o "$2" -e trace="$3" -p "$1" 2>"$2.err" &
	NS_TRACE=$!
	local i
	for i in $(seq 1 100); do
		grep -q attached "$2.err" && return 0
		sleep 0.1
	done
	return 1
}
ns_trace_end() {
	kill -INT "$NS_TRACE" 2>/dev/null
	wait "$NS_TRACE" 2>/dev/null
}

# Run a command as the unprivileged workload (uid 1000, no capabilities).
ws() {
	ip netns exec "$SBX" setpriv --reuid 1000 --regid 1000 --clear-groups --no-new-privs \
		--inh-caps=-all --bounding-set=-all -- "$@"
}

# Control API call from inside sbx: api METHOD PATH [BODY]
api() {
	local body="${3-}"
	ip netns exec "$SBX" curl -sS -m5 -X "$1" -H "OPENSANDBOX-EGRESS-AUTH: $TOKEN" \
		-w '\n%{http_code}' ${body:+--data-binary "$body"} "http://127.0.0.1:18080$2"
}

# dig as the workload, printing only the answer addresses (or the rcode).
wdig() { # [dig args...]
	ws dig +time=3 +tries=1 +noall +answer +comments "$@" 2>&1
}

# TCP connect as the workload; succeeds when the server said hello.
wconnect() { # addr port
	ws socat -T3 - "TCP:$1:$2,connect-timeout=3" </dev/null 2>/dev/null | grep -q hello
}

nft_has() { # set element
	ip netns exec "$SBX" nft list set inet egressd "$1" 2>/dev/null | grep -q -- "$2"
}
