# Shared fixture of the ports of upstream's smoke tests
# (tests/netns/test_upstream_smoke_*.sh), sourced after nslib.sh. Upstream
# runs its sidecar in Docker against the real internet and probes it with
# curlimages/curl; here the wan namespace plays the internet:
#
#   upstream target          here (served by the wan dnsmasq / wan lo)
#   google.com               google.com         -> 203.0.113.10
#   api.github.com           api.github.com     -> 203.0.113.11
#   www.mozilla.org          www.mozilla.org    -> 203.0.113.20
#   www.cloudflare.com       www.cloudflare.com -> 198.51.100.20
#   1.1.1.1 (443, 853, 80)   198.51.100.7
#   10.0.0.0/8, 10.0.0.1     192.0.2.0/24, 192.0.2.1 (port 80)
#   8.8.8.8,8.8.4.4 (DNS)    203.0.113.53 (the fixture's one resolver)
#
# The names stay upstream's own (only the fake DNS knows them, and wan has
# no route out); the addresses are documentation ones. 10.0.0.0/8 is not
# kept because the fixture's veth (10.200.0.0/24) lies inside it, so a
# "blocked" there would prove nothing. Every HTTPS server presents one
# certificate from a CA made here for those names and 198.51.100.7;
# curl trusts it with --cacert where upstream's image trusts the public CAs.

US_CA="$TMP/us-certs/ca.pem"

# The certificates and the fake internet's servers: HTTPS on 443 for each
# name's address and for 198.51.100.7, TLS on 198.51.100.7:853 (DoT
# stand-in), plain HTTP on 198.51.100.7:80 and 192.0.2.1:80. Each answers
# HEAD and GET with 200.
us_servers() {
	local d="$TMP/us-certs" a
	mkdir -p "$d"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
		-subj /CN=upstream-smoke-ca -keyout "$d/ca.key" -out "$d/ca.pem" >/dev/null 2>&1
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=google.com \
		-keyout "$d/srv.key" -out "$d/srv.csr" >/dev/null 2>&1
	printf 'subjectAltName=DNS:google.com,DNS:api.github.com,DNS:www.mozilla.org,DNS:www.cloudflare.com,IP:198.51.100.7\n' \
		>"$d/ext"
	openssl x509 -req -in "$d/srv.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
		-days 2 -extfile "$d/ext" -out "$d/srv.pem" >/dev/null 2>&1
	chmod 644 "$d"/*.pem
	for a in 198.51.100.20 192.0.2.1; do
		ip -n "$WAN" addr add "$a/32" dev lo
	done
	cat >"$d/srv.py" <<'P'
import http.server, ssl, sys, threading
class H(http.server.BaseHTTPRequestHandler):
    def do_HEAD(self):
        self.send_response(200)
        self.send_header("Content-Length", "3")
        self.end_headers()
    def do_GET(self):
        self.do_HEAD()
        self.wfile.write(b"ok\n")
    def log_message(self, *a):
        pass
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
srvs = []
for spec in sys.argv[3:]:
    addr, port, tls = spec.split(":")
    s = http.server.ThreadingHTTPServer((addr, int(port)), H)
    if tls == "tls":
        s.socket = ctx.wrap_socket(s.socket, server_side=True)
    srvs.append(s)
for s in srvs[1:]:
    threading.Thread(target=s.serve_forever, daemon=True).start()
srvs[0].serve_forever()
P
	ip netns exec "$WAN" "$PY" "$d/srv.py" "$d/srv.pem" "$d/srv.key" \
		203.0.113.10:443:tls 203.0.113.11:443:tls 203.0.113.20:443:tls \
		198.51.100.20:443:tls 198.51.100.7:443:tls 198.51.100.7:853:tls \
		198.51.100.7:80:plain 192.0.2.1:80:plain >"$TMP/us-srv.log" 2>&1 &
	PIDS+=($!)
	ns_wait_listen "$WAN" '192.0.2.1:80' || { echo "smoke servers did not start" >&2; cat "$TMP/us-srv.log" >&2; exit 2; }
}

# The fake DNS for upstream's names (nonexistent.com is deliberately absent).
us_dns() {
	ns_dns --address=/google.com/203.0.113.10 --address=/api.github.com/203.0.113.11 \
		--address=/www.mozilla.org/203.0.113.20 --address=/www.cloudflare.com/198.51.100.20 "$@"
}

# Upstream's "Waiting for policy server...": /healthz without a token,
# 50 tries 0.5 s apart. Succeeds once it answered 200.
us_wait_healthz() {
	local i
	for i in $(seq 1 50); do
		ip netns exec "$SBX" curl -sf -m2 http://127.0.0.1:18080/healthz >/dev/null 2>&1 && return 0
		sleep 0.5
	done
	return 1
}

# upstream's run_in_app: curl as the workload (uid 1000, no capabilities),
# with upstream's arguments, trusting the smoke CA. Succeeds when curl does.
run_in_app() {
	ws curl -s -o /dev/null --cacert "$US_CA" "$@"
}

# upstream's control calls, `curl -sS -X METHOD http://127.0.0.1:18080/policy -d BODY`
# (so with curl's -d and its form content type, as upstream sends them),
# plus the token header when the fixture has one. Prints the body, a
# newline and the status code.
us_api() { # METHOD BODY
	local auth=()
	[ -n "${US_NO_TOKEN:-}" ] || auth=(-H "OPENSANDBOX-EGRESS-AUTH: $TOKEN")
	ip netns exec "$SBX" curl -sS -m10 -X "$1" "${auth[@]}" -w '\n%{http_code}' \
		-d "$2" http://127.0.0.1:18080/policy
}

# us_api, and a check that it answered 200 (upstream's curl -f aborts the
# script on anything else).
us_push() { # description METHOD BODY
	local out
	out=$(us_api "$2" "$3")
	if [ "$(tail -n1 <<<"$out")" = 200 ]; then ok "$1"; else not_ok "$1 (got: $(tr '\n' ' ' <<<"$out"))"; fi
}
