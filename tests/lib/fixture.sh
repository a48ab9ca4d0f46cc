# shellcheck shell=bash disable=SC2034,SC2054
# tests/lib/fixture.sh: the network-namespace fixture F0 of
# shared/exfil/catalog.md section 1, as sourceable bash.
#
# Who runs it: the exfil suite (tests/exfil/case.sh) and tests/netns/*.sh, as
# root. It builds two namespaces, sbx-$ID (workload + egressd) and wan-$ID
# (the fake internet, no uplink), joined by one veth pair, starts the fake
# servers and a packet capture in wan, and runs the workload with the P0/P1/P2
# privilege profiles.
#
# What it must never do: touch a namespace, process or nft table it did not
# create; send traffic anywhere but the two namespaces it made; wait without a
# bound. Every process it starts is recorded in $FX_DIR/pids and ended by PID.
#
# Usage:
#   source tests/lib/fixture.sh
#   fx_init [ID] [DIR]; trap fx_down EXIT INT TERM; fx_up; fx_safety || exit 99
#   fx_servers_start; fx_pcap_start; fx_egressd_start POLICY_JSON
#   fx_ws curl ...; fx_pcap_stop; fx_o1_check [tcp:IP:PORT ...]; fx_down

FX_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FX_SRC=${EGRESSD_SRC:-$(cd "$FX_LIB_DIR/../.." && pwd)}
FX_SERVERS=$FX_SRC/tests/exfil/servers
FX_PY=/usr/bin/python3
FX_PATH=/usr/local/sbin:/usr/sbin:/sbin:/usr/bin:/bin
FX_WS_UID=1000
FX_WORKER=999

# Addresses of the fake internet (documentation ranges and decoys only).
FX_WAN_V4="203.0.113.10 203.0.113.11 203.0.113.12 203.0.113.20 203.0.113.21 203.0.113.53 203.0.113.66"
FX_WAN_V6="2001:db8::10 2001:db8::11 2001:db8::12 2001:db8::20 2001:db8::53 2001:db8::66"
FX_DECOY_V4="169.254.169.254 100.100.100.200 10.0.0.5 10.96.0.1"
FX_DECOY_V6="fd00:ec2::254"
FX_POOL_V4="198.51.100.0/24"

# Canary secrets (catalogue 1.2) and the fake key the workload holds.
FX_S1=sk-live-CANARY1-7f3c9e2ab41d4c0e9b8a6d5f4e3c2b1a
FX_S2=sk-live-CANARY2-1c8e5a9f3b7d2e6a0f4c8b1d5e9a3c7f
FX_S3=sk-live-CANARY3-9d2b6f0a4e8c1a5d7b3f9e2c6a0d4b8e
FX_FAKE_KEY=sk-fake-0000000000000000000000000000

fx_log() { printf 'fixture[%s]: %s\n' "${FX_ID:-?}" "$*" >&2; }

# fx_init [ID] [DIR]: choose the names and the per-case directory.
fx_init() {
	FX_ID=${1:-$$}
	FX_SBX=sbx-$FX_ID
	FX_WAN=wan-$FX_ID
	if [ -n "${2:-}" ]; then
		FX_DIR=$2
		mkdir -p "$FX_DIR"
	else
		FX_DIR=$(mktemp -d "/tmp/exfil-$FX_ID.XXXXXX")
	fi
	chmod 755 "$FX_DIR"
	mkdir -p "$FX_DIR/out" "$FX_DIR/ws" "$FX_DIR/private" "$FX_DIR/fakenet" \
	    "$FX_DIR/egressd" "$FX_DIR/sandbox"
	chmod 700 "$FX_DIR/private"
	chmod 755 "$FX_DIR/out" "$FX_DIR/fakenet"
	chown "$FX_WS_UID:$FX_WS_UID" "$FX_DIR/ws"
	chmod 700 "$FX_DIR/ws"
	chown "$FX_WORKER:$FX_WORKER" "$FX_DIR/egressd" "$FX_DIR/sandbox"
	chmod 700 "$FX_DIR/egressd"
	chmod 755 "$FX_DIR/sandbox"
	: >"$FX_DIR/pids"
	# The workload's tools, where uid $FX_WS_UID can read them whatever the
	# checkout's own directories allow (a clone under /root is 0700).
	rm -rf "$FX_DIR/tools"
	cp -r "$FX_SRC/tests/exfil/tools" "$FX_DIR/tools"
	chmod -R a+rX "$FX_DIR/tools"
	TOOLS=$FX_DIR/tools
	FX_CERTS=${FX_CERTS:-$FX_DIR/certs}
	FX_TOKEN=${FX_TOKEN:-$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')}
	printf '%s\n' "$FX_TOKEN" >"$FX_DIR/private/token"
	FX_EGRESSD_PID=
	FX_PCAP_PID=
	FX_SERVERS_PID=
	export FX_ID FX_SBX FX_WAN FX_DIR FX_CERTS FX_TOKEN TOOLS
}

fx_track() { printf '%s\n' "$1" >>"$FX_DIR/pids"; }

# fx_wait_file FILE TENTHS [PID]: wait until FILE exists, at most TENTHS/10 s,
# giving up early if PID dies.
fx_wait_file() {
	local f=$1 n=$2 pid=${3:-} i=0
	while [ "$i" -lt "$n" ]; do
		[ -e "$f" ] && return 0
		if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
			return 1
		fi
		sleep 0.1
		i=$((i + 1))
	done
	[ -e "$f" ]
}

# fx_up: build sbx-$ID and wan-$ID joined by the veth sbx0/wan0.
fx_up() {
	local a s
	ip netns add "$FX_SBX" || return 1
	ip netns add "$FX_WAN" || return 1
	for s in "$FX_SBX" "$FX_WAN"; do
		ip netns exec "$s" sysctl -qw net.ipv6.conf.all.accept_dad=0 \
		    net.ipv6.conf.default.accept_dad=0 net.ipv4.ip_forward=0 \
		    net.ipv6.conf.all.forwarding=0 >/dev/null || return 1
	done
	ip link add sbx0 netns "$FX_SBX" type veth peer name wan0 \
	    netns "$FX_WAN" || return 1

	ip -n "$FX_WAN" link set lo up
	ip -n "$FX_WAN" link set wan0 up
	ip -n "$FX_WAN" addr add 10.200.0.1/24 dev wan0
	ip -n "$FX_WAN" addr add fd00:200::1/64 dev wan0 nodad
	for a in $FX_WAN_V4 $FX_DECOY_V4; do
		ip -n "$FX_WAN" addr add "$a/32" dev lo || return 1
	done
	ip -n "$FX_WAN" addr add "$FX_POOL_V4" dev lo || return 1
	for a in $FX_WAN_V6 $FX_DECOY_V6; do
		ip -n "$FX_WAN" addr add "$a/128" dev lo nodad || return 1
	done

	ip -n "$FX_SBX" link set lo up
	ip -n "$FX_SBX" link set sbx0 up
	ip -n "$FX_SBX" addr add 10.200.0.2/24 dev sbx0
	ip -n "$FX_SBX" addr add fd00:200::2/64 dev sbx0 nodad
	ip -n "$FX_SBX" route add default via 10.200.0.1 dev sbx0 || return 1
	ip -n "$FX_SBX" -6 route add default via fd00:200::1 dev sbx0 || return 1
	FX_SBX_MAC=$(ip netns exec "$FX_SBX" cat /sys/class/net/sbx0/address)
	printf '%s\n' "$FX_SBX_MAC" >"$FX_DIR/sbx0.mac"
	export FX_SBX_MAC

	# Catch-all for the sink and the decoys: every TCP/UDP port of them
	# lands on one logging listener (sink :7000/udp :7001, wild :9443/:9080).
	ip netns exec "$FX_WAN" nft -f - <<EOF || return 1
table inet fakenet {
	chain pre {
		type nat hook prerouting priority -100; policy accept;
		ip daddr { 203.0.113.20, 203.0.113.21, 169.254.169.254, 100.100.100.200, 10.0.0.5, 10.96.0.1 } meta l4proto tcp redirect to :7000
		ip daddr { 203.0.113.20, 203.0.113.21, 169.254.169.254, 100.100.100.200, 10.0.0.5, 10.96.0.1 } meta l4proto udp redirect to :7001
		ip daddr 10.200.0.1 tcp dport 10250 redirect to :7000
		ip6 daddr { 2001:db8::20, fd00:ec2::254 } meta l4proto tcp redirect to :7000
		ip6 daddr { 2001:db8::20, fd00:ec2::254 } meta l4proto udp redirect to :7001
		ip daddr $FX_POOL_V4 tcp dport 443 redirect to :9443
		ip daddr $FX_POOL_V4 tcp dport 80 redirect to :9080
	}
}
EOF
	# The workload's resolver is the fake public one: without egressd every
	# lookup would leave, which is what the DNS oracle must catch.
	mkdir -p "/etc/netns/$FX_SBX"
	printf 'nameserver 203.0.113.53\noptions timeout:2 attempts:1\n' \
	    >"/etc/netns/$FX_SBX/resolv.conf"
	printf '127.0.0.1 localhost\n::1 localhost\n' >"/etc/netns/$FX_SBX/hosts"
	return 0
}

# fx_safety: the catalogue's 1.1a precondition. Prints the violation and
# returns 1; callers abort the whole run.
fx_safety() {
	local bad=0 l r a
	for l in $(ip -n "$FX_WAN" -o link show | awk -F': ' '{print $2}' | cut -d@ -f1); do
		case $l in lo | wan0) ;; *) fx_log "SAFETY: wan has interface $l"; bad=1 ;; esac
	done
	for l in $(ip -n "$FX_SBX" -o link show | awk -F': ' '{print $2}' | cut -d@ -f1); do
		case $l in lo | sbx0) ;; *) fx_log "SAFETY: sbx has interface $l"; bad=1 ;; esac
	done
	if ! ip -n "$FX_WAN" -o link show wan0 | grep -q "link-netns $FX_SBX"; then
		fx_log "SAFETY: wan0's peer is not in $FX_SBX"
		bad=1
	fi
	for r in "" "-6"; do
		if ip -n "$FX_WAN" $r route show table all | grep -Eq '^(default|0\.0\.0\.0/0|::/0)'; then
			fx_log "SAFETY: wan has a default route ($r)"
			bad=1
		fi
	done
	for a in 169.254.169.254 203.0.113.20 203.0.113.53; do
		if ! ip -n "$FX_SBX" route get "$a" | grep -q 'dev sbx0'; then
			fx_log "SAFETY: sbx route to $a is not via sbx0"
			bad=1
		fi
	done
	if ! ip -n "$FX_SBX" -6 route get 2001:db8::20 | grep -q 'dev sbx0'; then
		fx_log "SAFETY: sbx v6 route is not via sbx0"
		bad=1
	fi
	for a in $FX_DECOY_V4 $FX_DECOY_V6; do
		if ! ip -n "$FX_WAN" addr show dev lo | grep -q "inet6\? $a/"; then
			fx_log "SAFETY: decoy $a is not on wan's lo"
			bad=1
		fi
	done
	[ "$(ip netns exec "$FX_WAN" cat /proc/sys/net/ipv4/ip_forward)" = 0 ] ||
	    { fx_log "SAFETY: wan forwards"; bad=1; }
	[ "$bad" = 0 ]
}

# fx_certs: make the throw-away PublicTestCA and the servers' certificates
# (once; FX_CERTS may be shared by every case of a run).
fx_certs() {
	[ -e "$FX_CERTS/ready" ] && return 0
	mkdir -p "$FX_CERTS"
	"$FX_PY" "$FX_SERVERS/mkcerts.py" "$FX_CERTS"
}

# fx_servers_start: the fake internet in wan (DNS, echo, co-tenant, bad
# TLS, sink, decoys). Waits for its ready file (at most 15 s).
fx_servers_start() {
	fx_certs || return 1
	[ -e "$FX_DIR/dns.json" ] || printf '{}\n' >"$FX_DIR/dns.json"
	rm -f "$FX_DIR/fakenet/ready"
	ip netns exec "$FX_WAN" "$FX_PY" "$FX_SERVERS/fakenet.py" \
	    --dir "$FX_DIR/fakenet" --certs "$FX_CERTS" \
	    --dns-config "$FX_DIR/dns.json" >"$FX_DIR/fakenet/stdout.log" \
	    2>"$FX_DIR/fakenet/stderr.log" &
	FX_SERVERS_PID=$!
	fx_track "$FX_SERVERS_PID"
	if ! fx_wait_file "$FX_DIR/fakenet/ready" 150 "$FX_SERVERS_PID"; then
		fx_log "fake servers did not become ready"
		cat "$FX_DIR/fakenet/stderr.log" >&2
		return 1
	fi
}

# fx_pcap_start: capture everything on wan0 into $FX_DIR/wan.pcap.
fx_pcap_start() {
	ip netns exec "$FX_WAN" tcpdump -i wan0 -n -U --immediate-mode -Z root -s 0 \
	    -w "$FX_DIR/wan.pcap" 2>"$FX_DIR/tcpdump.log" &
	FX_PCAP_PID=$!
	fx_track "$FX_PCAP_PID"
	local i=0
	while [ "$i" -lt 100 ]; do
		grep -q 'listening on' "$FX_DIR/tcpdump.log" 2>/dev/null && return 0
		kill -0 "$FX_PCAP_PID" 2>/dev/null || break
		sleep 0.1
		i=$((i + 1))
	done
	fx_log "tcpdump did not start"
	return 1
}

# fx_pcap_stop: flush and end the capture.
fx_pcap_stop() {
	[ -n "$FX_PCAP_PID" ] || return 0
	sleep 0.3 # let the last frames of the case reach the file
	fx_stop_pid "$FX_PCAP_PID" INT
	FX_PCAP_PID=
}

# fx_o1_check [proto:addr:port ...]: O1 on the capture; the listed flows
# (and egressd's upstream DNS) are the only ones allowed to leave sbx.
fx_o1_check() {
	"$FX_PY" -B "$FX_LIB_DIR/oracles.py" o1 --pcap "$FX_DIR/wan.pcap" \
	    --mac "$(cat "$FX_DIR/sbx0.mac")" "$@"
}

# fx_stop_pid PID [SIG]: end one process we started, bounded (5 s, then KILL).
fx_stop_pid() {
	local pid=$1 sig=${2:-TERM} i=0
	kill -0 "$pid" 2>/dev/null || return 0
	kill -"$sig" "$pid" 2>/dev/null
	while [ "$i" -lt 50 ] && kill -0 "$pid" 2>/dev/null; do
		sleep 0.1
		i=$((i + 1))
	done
	kill -KILL "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	return 0
}

# fx_egressd_start POLICY_JSON [VAR=VALUE ...]: run $EGRESSD_BIN as root in
# sbx and wait (at most 10 s) for its ready file.
fx_egressd_start() {
	local policy=$1
	shift
	if [ -z "${EGRESSD_BIN:-}" ] || [ ! -x "$EGRESSD_BIN" ]; then
		fx_log "EGRESSD_BIN is not executable: ${EGRESSD_BIN:-unset}"
		return 1
	fi
	rm -f "$FX_DIR/egressd/ready"
	ip netns exec "$FX_SBX" env -i PATH="$FX_PATH" \
	    OPENSANDBOX_EGRESS_RULES="$policy" \
	    OPENSANDBOX_EGRESS_DNS_UPSTREAM=203.0.113.53 \
	    OPENSANDBOX_EGRESS_TOKEN="$FX_TOKEN" \
	    OPENSANDBOX_EGRESS_HTTP_ADDR=127.0.0.1:18080 \
	    EGRESSD_READY_FILE="$FX_DIR/egressd/ready" \
	    EGRESSD_WORKER_USER="$FX_WORKER:$FX_WORKER" \
	    EGRESSD_UPSTREAM_CA="$FX_CERTS/ca.pem" SSL_CERT_FILE="$FX_CERTS/ca.pem" \
	    ASAN_OPTIONS=abort_on_error=0:detect_leaks=1 \
	    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=0 \
	    "$@" "$EGRESSD_BIN" >"$FX_DIR/egressd.out" 2>"$FX_DIR/egressd.log" &
	FX_EGRESSD_PID=$!
	fx_track "$FX_EGRESSD_PID"
	printf '%s\n' "$FX_EGRESSD_PID" >"$FX_DIR/egressd.pid"
	if ! fx_wait_file "$FX_DIR/egressd/ready" 100 "$FX_EGRESSD_PID"; then
		fx_log "egressd did not become ready"
		return 1
	fi
}

# fx_egressd_stop: SIGTERM by PID, bounded.
fx_egressd_stop() {
	[ -n "$FX_EGRESSD_PID" ] || return 0
	fx_stop_pid "$FX_EGRESSD_PID" TERM
	FX_EGRESSD_PID=
}

# fx_api METHOD PATH [curl args...]: call egressd's API with the token, as
# root in sbx (the harness stands for the control plane).
fx_api() {
	local m=$1 p=$2
	shift 2
	ip netns exec "$FX_SBX" curl -sS -m 5 -X "$m" \
	    -H "OPENSANDBOX-EGRESS-AUTH: $FX_TOKEN" "$@" "http://127.0.0.1:18080$p"
}

# fx_as_ws PROFILE CMD...: run CMD as the workload with profile P0, P1
# (+CAP_NET_RAW) or P2 (+CAP_NET_ADMIN), see catalogue 1.3.
fx_as_ws() {
	local prof=$1 caps
	shift
	case $prof in
	P0) caps=(--inh-caps=-all --bounding-set=-all) ;;
	P1) caps=(--inh-caps=-all,+net_raw --ambient-caps=-all,+net_raw --bounding-set=-all,+net_raw) ;;
	P2) caps=(--inh-caps=-all,+net_admin --ambient-caps=-all,+net_admin --bounding-set=-all,+net_admin) ;;
	*) fx_log "unknown profile $prof"; return 2 ;;
	esac
	(cd "$FX_DIR/ws" && ip netns exec "$FX_SBX" setpriv --reuid "$FX_WS_UID" \
	    --regid "$FX_WS_UID" --clear-groups --no-new-privs "${caps[@]}" -- \
	    env -i PATH=/usr/bin:/bin:/usr/sbin:/sbin HOME="$FX_DIR/ws" \
	    SANDBOX_CA="$FX_DIR/sandbox/ca.pem" TRUST="$FX_DIR/sandbox/trust.pem" \
	    WS="$FX_DIR/ws" \
	    FAKE_KEY="$FX_FAKE_KEY" TOOLS="$TOOLS" \
	    LC_ALL=C.UTF-8 "$@")
}

# fx_ws / fx_ws_raw / fx_ws_admin CMD...: the three profiles.
fx_ws() { fx_as_ws P0 "$@"; }
fx_ws_raw() { fx_as_ws P1 "$@"; }
fx_ws_admin() { fx_as_ws P2 "$@"; }

# fx_down: stop everything we started and remove both namespaces. Safe to
# call twice and from a trap.
fx_down() {
	local pid ns
	[ -n "${FX_ID:-}" ] || return 0
	[ -n "${FX_EGRESSD_PID:-}" ] && fx_stop_pid "$FX_EGRESSD_PID" TERM
	[ -n "${FX_PCAP_PID:-}" ] && fx_stop_pid "$FX_PCAP_PID" INT
	if [ -f "${FX_DIR:-/nonexistent}/pids" ]; then
		while read -r pid; do
			[ -n "$pid" ] && fx_stop_pid "$pid" TERM
		done <"$FX_DIR/pids"
	fi
	# Whatever still runs inside our own namespaces was started by us.
	for ns in "$FX_SBX" "$FX_WAN"; do
		[ -e "/run/netns/$ns" ] || continue
		for pid in $(ip netns pids "$ns" 2>/dev/null); do
			fx_stop_pid "$pid" TERM
		done
		ip netns del "$ns" 2>/dev/null
	done
	rm -rf "/etc/netns/$FX_SBX"
	FX_EGRESSD_PID=''
	FX_PCAP_PID=''
	FX_SERVERS_PID=''
	return 0
}

# fx_leftovers ID: prints what of run ID is still there (empty = clean).
fx_leftovers() {
	local id=$1
	ip netns list 2>/dev/null | awk '{print $1}' | grep -Fx -e "sbx-$id" -e "wan-$id"
	[ -e "/etc/netns/sbx-$id" ] && echo "/etc/netns/sbx-$id"
	return 0
}
