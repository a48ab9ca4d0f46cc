# shellcheck shell=bash
# tests/exfil/tools/x_tls_lib.sh: helpers for the TLS cases' harness actions
# (EX-095, EX-098, EX-100, EX-101, EX-102). Sourced in case.sh's shell, so it
# uses the fixture's variables and functions; no variable named i, no exit.
#
# xtls_restart_trusting_x: make the XTestCA variants (servers/x_tls_certs.py)
#   in $FX_DIR/xcerts and restart egressd, as case.sh started it, trusting
#   the PublicTestCA and XTestCA upstream, then load the case's vault again.
#   Prints the vault's status code.
# xtls_up NAME IP ARGS...: serve servers/x_tls_upstream.py on IP:443 in wan
#   (the address is added to wan's lo) for at most 60 s; log $FX_DIR/NAME.log.

xtls_restart_trusting_x() {
	mkdir -p "$FX_DIR/xcerts" && chmod 755 "$FX_DIR/xcerts"
	"$FX_PY" "$FX_SERVERS/x_tls_certs.py" "$FX_DIR/xcerts" || return 1
	cat "$FX_CERTS/ca.pem" "$FX_DIR/xcerts/trust.pem" >"$FX_DIR/xcerts/upstream-trust.pem"
	chmod 644 "$FX_DIR/xcerts/upstream-trust.pem"
	fx_egressd_stop
	fx_egressd_start "$POLICY" OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true \
	    EGRESSD_CA_EXPORT="$FX_DIR/sandbox/ca.pem" \
	    EGRESSD_UPSTREAM_CA="$FX_DIR/xcerts/upstream-trust.pem" || return 1
	fx_api POST /credential-vault -H 'Content-Type: application/json' \
	    --data-binary @"$FX_DIR/private/vault.json" -o /dev/null -w '%{http_code}\n'
}

xtls_up() {
	local n=$1 ip=$2 _w
	shift 2
	ip netns exec "$FX_WAN" ip addr add "$ip/32" dev lo 2>/dev/null
	ip netns exec "$FX_WAN" setsid -f timeout 60 "$FX_PY" "$FX_SERVERS/x_tls_upstream.py" \
	    "$ip" "$FX_CERTS" "$FX_DIR" "$n" "$@" >>"$FX_DIR/xtls-servers.err" 2>&1
	for _w in $(seq 50); do
		[ -e "$FX_DIR/$n.ready" ] && return 0
		sleep 0.1
	done
	echo "xtls_up: $n did not start" >&2
	return 1
}
