#!/bin/bash
# tests/exfil/case.sh DIR: run one exfil case whose plan the runner wrote in
# DIR/plan (env, action.N.{cmd,as,timeout}). Who runs it: tests/exfil/runner.py,
# as root. It brings the fixture up, checks the safety precondition, starts
# the fake internet, the capture and egressd, runs the actions and leaves every
# output in DIR for the runner's oracles. It must never leave a namespace or a
# process behind: fx_down runs on every exit path.
#
# Exit status: 0 ran (verdict is the runner's), 98 fixture error, 99 safety
# precondition violated (the runner aborts the whole run).

set -u
DIR=$1
# shellcheck source=../lib/fixture.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/fixture.sh"
# shellcheck disable=SC1091
source "$DIR/plan/env"

fx_init "$CASE_NS_ID" "$DIR"
trap 'fx_down' EXIT
trap 'exit 130' INT TERM HUP

fx_up || exit 98
fx_safety || exit 99
fx_servers_start || exit 98
fx_pcap_start || exit 98

# --audit (runner.py O7): an independent record of every packet the kernel
# refuses: nftrace on every output packet and `nft -a monitor`, read after
# the case against egressd's conn_reject records.
if [ "${AUDIT:-0}" = 1 ]; then
	ip netns exec "$FX_SBX" nft -f - <<'N' || exit 98
table inet exfil_audit {
	chain out {
		type filter hook output priority -300;
		meta nftrace set 1
	}
}
N
	# Every event with handles: the rules egressd adds (each install and
	# policy update), then the traces that name them by handle.
	ip netns exec "$FX_SBX" stdbuf -oL nft -a monitor >"$FX_DIR/trace.txt" 2>&1 &
	FX_TRACE_PID=$!
	fx_track "$FX_TRACE_PID"
	# Subscribed once a probe datagram (to loopback, before any table of
	# egressd's) shows in the trace: bounded, 5 s.
	for _ in $(seq 1 50); do
		ip netns exec "$FX_SBX" bash -c 'echo probe >/dev/udp/127.0.0.1/9' 2>/dev/null
		grep -q 'daddr 127.0.0.1' "$FX_DIR/trace.txt" 2>/dev/null && break
		sleep 0.1
	done
fi

egressd_env=()
if [ "$INTERCEPT" = 1 ]; then
	egressd_env+=(OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true
	    EGRESSD_CA_EXPORT="$FX_DIR/sandbox/ca.pem")
fi
if [ -n "${EGRESSD_EXTRA_ENV:-}" ]; then
	while IFS= read -r kv; do
		[ -n "$kv" ] && egressd_env+=("$kv")
	done <<<"$EGRESSD_EXTRA_ENV"
fi

if [ "$START_EGRESSD" = 1 ]; then
	fx_egressd_start "$POLICY" "${egressd_env[@]}"
	echo $? >"$FX_DIR/egressd.start_rc"
	if [ "$VAULT" = 1 ]; then
		fx_api POST /credential-vault -H 'Content-Type: application/json' \
		    --data-binary @"$FX_DIR/private/vault.json" \
		    -o "$FX_DIR/out/vault-setup.body" -w '%{http_code}' \
		    >"$FX_DIR/out/vault-setup.code" 2>"$FX_DIR/out/vault-setup.err"
	fi
fi

# What the workload trusts: the "public" CA of the fake internet (hosts that
# are passed through) and egressd's per-sandbox CA (hosts it terminates).
cat "$FX_CERTS/ca.pem" "$FX_DIR/sandbox/ca.pem" >"$FX_DIR/sandbox/trust.pem" 2>/dev/null
chmod 644 "$FX_DIR/sandbox/trust.pem"

i=0
while [ "$i" -lt "$NACTIONS" ]; do
	cmd=$(cat "$DIR/plan/action.$i.cmd")
	as=$(cat "$DIR/plan/action.$i.as")
	t=$(cat "$DIR/plan/action.$i.timeout")
	o=$FX_DIR/out/action.$i
	case $as in
	ws) fx_as_ws P0 timeout -k 2 "$t" sh -c "$cmd" ;;
	raw) fx_as_ws P1 timeout -k 2 "$t" sh -c "$cmd" ;;
	admin) fx_as_ws P2 timeout -k 2 "$t" sh -c "$cmd" ;;
	root) ip netns exec "$FX_SBX" timeout -k 2 "$t" sh -c "$cmd" ;;
	wan) ip netns exec "$FX_WAN" timeout -k 2 "$t" sh -c "$cmd" ;;
	harness) eval "$cmd" ;; # in this shell: it may restart egressd
	*) echo "unknown actor $as" >&2; false ;;
	esac </dev/null >"$o.stdout" 2>"$o.stderr"
	echo $? >"$o.rc"
	i=$((i + 1))
done

# Post-case facts for the oracles.
if [ -n "$FX_EGRESSD_PID" ]; then
	if kill -0 "$FX_EGRESSD_PID" 2>/dev/null; then
		echo alive >"$FX_DIR/egressd.alive"
	else
		echo dead >"$FX_DIR/egressd.alive"
	fi
	if [ "$HEALTHZ" = 1 ]; then
		ip netns exec "$FX_SBX" curl -s -m 3 -o /dev/null -w '%{http_code}' \
		    http://127.0.0.1:18080/healthz >"$FX_DIR/healthz.code" 2>/dev/null
	fi
fi
ip netns exec "$FX_SBX" nft list ruleset >"$FX_DIR/nft-ruleset.txt" 2>&1
# O7 audits what egressd refused while it served: the monitor stops first
# (what egressd's own stop sends is not traced), then the records of the
# last refusals get the kernel's NFLOG batching time (0.1 s) to arrive.
if [ -n "${FX_TRACE_PID:-}" ]; then
	kill "$FX_TRACE_PID" 2>/dev/null
	wait "$FX_TRACE_PID" 2>/dev/null
	date -u +%Y-%m-%dT%H:%M:%S.%3NZ >"$FX_DIR/trace.end" # records after it: untraced
	sleep 0.3
fi
fx_pcap_stop
fx_egressd_stop
exit 0
