#!/bin/bash
# egressd starts cleanly whatever an earlier run or the operator left
# (issue 12): a runtime directory owned by another uid holding stale files
# and a stale socket, a previous run with another worker uid, and upstream
# trust and CA files readable only by root (0700 directories, 0600 files).
# The parent reads what the worker needs before the privilege drop; what
# the worker re-reads later is checked at start with the worker's rights.
# Where egressd cannot start, exactly one error line names what to change.
# Each state is set up on disk, egressd started with interception on, and
# READY, GET /healthz and a terminated HTTPS request (which needs the
# upstream trust) are asserted. Namespaces from tests/lib/fixture.sh (the
# fake internet with its public test CA), removed on exit.
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

fx_init "stst$$"
cleanup() {
	fx_down
	if [ "${KEEP_TMP:-0}" = 1 ]; then echo "kept $FX_DIR"; else rm -rf "$FX_DIR"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fx_up || exit 2
fx_safety || exit 2
fx_servers_start || exit 2

LOG=$FX_DIR/egressd.log
P=$FX_DIR/private # 0700 root, like a root-only Secret mount
OTHER=4243        # the worker uid of "an earlier run"
POLICY='{"defaultAction":"deny","egress":[{"action":"allow","target":"api.allowed.test"}]}'
VAULT='{"credentials":[{"name":"c1","source":{"type":"inline","value":"sk-startup-state-0001"}}],
 "bindings":[{"name":"b1","match":{"hosts":["api.allowed.test"],"paths":["/v1/*"],"methods":["GET"]},
  "auth":{"type":"bearer","credential":"c1"}}]}'

healthz() { [ "$(ip netns exec "$FX_SBX" curl -s -m 5 -o /dev/null -w '%{http_code}' http://127.0.0.1:18080/healthz)" = 200 ]; }
ca_served_is() { ip netns exec "$FX_SBX" curl -sS -m 5 http://127.0.0.1:18080/ca.pem | cmp -s - "$1"; }
# A bound host is terminated: the request reaches the upstream only if
# egressd verified the upstream's certificate with the configured trust.
terminated_get() { # sandbox-ca-file path
	local code
	code=$(fx_api POST /credential-vault -H 'Content-Type: application/json' \
	    --data-binary "$VAULT" -o /dev/null -w '%{http_code}')
	[ "$code" = 200 ] || [ "$code" = 201 ] || return 1
	cp "$1" "$FX_DIR/sandbox/trust.pem" && chmod 644 "$FX_DIR/sandbox/trust.pem"
	fx_ws curl -sS -m 8 --cacert "$FX_DIR/sandbox/trust.pem" "https://api.allowed.test$2" |
	    grep -q "\"path\": \"$2\""
}
errors() { grep -c '"level":"error"' "$LOG"; }
# start NAME [env...]: egressd with interception, its CA exported to $CAX.
start() {
	CUR=$1
	shift
	fx_egressd_start "$POLICY" OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true \
	    EGRESSD_CA_EXPORT="$CAX" "$@"
}
# stop: end egressd, keep its log as out/NAME.log.
stop() {
	fx_egressd_stop
	cp "$LOG" "$FX_DIR/out/$CUR.log" 2>/dev/null
}
# refused NAME PATTERN [env...]: egressd exits without running, and says
# why in exactly one error line matching PATTERN.
refused() {
	local name=$1 pat=$2 i
	shift 2
	start "$name" "$@" && { not_ok "$name: egressd refuses to start"; stop; return; }
	for i in $(seq 50); do kill -0 "$FX_EGRESSD_PID" 2>/dev/null || break; sleep 0.1; done
	refute "$name: egressd exits (no restart loop)" kill -0 "$FX_EGRESSD_PID"
	stop
	check "$name: exactly one error line" test "$(errors)" = 1
	check "$name: it names $pat" grep -q "\"level\":\"error\".*$pat" "$LOG"
	refute "$name: no worker was started" grep -q '"event":"worker_start"' "$LOG"
}

# ---- 1. a runtime directory left by another uid, with stale files.
RUN=$FX_DIR/run/egressd
mkdir -p "$RUN"
echo "stale" >"$RUN/ca.pem"
echo "half-written" >"$RUN/ca.pem.tmpAbC123"
echo 999999 >"$RUN/egressd.pid"
"$FX_PY" -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$RUN/egressd.sock"
chown -R "$OTHER:$OTHER" "$RUN"
chmod 0600 "$RUN"/ca.pem*
chmod 0700 "$RUN"
CAX=$RUN/ca.pem
if start stale; then
	ok "stale runtime dir (uid $OTHER, 0700, stale CA, temp file, socket): READY"
	check "stale runtime dir: GET /healthz is 200" healthz
	check "stale runtime dir: the exported CA is the one served" ca_served_is "$CAX"
	refute "stale runtime dir: no error logged" grep -q '"level":"error"' "$LOG"
	stop
else
	not_ok "stale runtime dir (uid $OTHER, 0700, stale CA, temp file, socket): READY"
	stop
fi

# ---- 2. a previous run with another worker uid, then ours, same directories.
RUN2=$FX_DIR/run2/egressd
mkdir -p "$FX_DIR/run2" # /run exists; egressd makes /run/egressd
CAX=$RUN2/ca.pem
if start other_uid EGRESSD_WORKER_USER="$OTHER:$OTHER"; then
	ok "first run with worker uid $OTHER: READY"
	cp "$CAX" "$FX_DIR/out/ca.first"
	stop
	if start our_uid; then
		ok "second run with worker uid $FX_WORKER in the same directories: READY"
		check "second run: GET /healthz is 200" healthz
		check "second run: the export holds the new CA" ca_served_is "$CAX"
		refute "second run: not the first run's CA" cmp -s "$CAX" "$FX_DIR/out/ca.first"
		stop
	else
		not_ok "second run with worker uid $FX_WORKER in the same directories: READY"
		stop
	fi
else
	not_ok "first run with worker uid $OTHER: READY"
	stop
fi
CAX=$FX_DIR/sandbox/ca.pem

# ---- 3. upstream trust readable only by root: a 0700 directory of 0600 files.
TD=$P/trust.d
mkdir -p "$TD"
cp "$FX_CERTS/ca.pem" "$TD/$(openssl x509 -hash -noout -in "$FX_CERTS/ca.pem").0"
chmod 0600 "$TD"/*
chmod 0700 "$TD"
check "the trust dir is root-only and the worker cannot read it" \
    bash -c "! setpriv --reuid $FX_WORKER --regid $FX_WORKER --clear-groups cat '$TD'/*.0"
if start trust_dir EGRESSD_UPSTREAM_CA="$TD"; then
	ok "root-only upstream trust directory: READY"
	check "root-only trust dir: GET /healthz is 200" healthz
	check "root-only trust dir: a terminated request verifies the upstream and arrives" \
	    terminated_get "$CAX" /v1/trustdir
	stop
else
	not_ok "root-only upstream trust directory: READY"
	stop
fi

# ---- 4. the same as one 0600 PEM file.
cp "$FX_CERTS/ca.pem" "$P/upstream.pem"
chmod 0600 "$P/upstream.pem"
if start trust_file EGRESSD_UPSTREAM_CA="$P/upstream.pem"; then
	ok "root-only upstream trust file: READY"
	check "root-only trust file: a terminated request verifies the upstream and arrives" \
	    terminated_get "$CAX" /v1/trustfile
	stop
else
	not_ok "root-only upstream trust file: READY"
	stop
fi
# The trust really is what is configured: one without the upstream's CA fails.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=other-ca \
    -days 2 -keyout "$P/other.key" -out "$P/other.pem" 2>/dev/null
chmod 0600 "$P/other.pem" "$P/other.key"
if start trust_other EGRESSD_UPSTREAM_CA="$P/other.pem"; then
	refute "a trust file without the upstream's CA: the request does not arrive" \
	    terminated_get "$CAX" /v1/othertrust
	refute "the upstream never saw it" grep -q othertrust "$FX_DIR/fakenet/api.log"
	stop
else
	not_ok "a trust file without the upstream's CA: READY"
	stop
fi

# ---- 5. the operator's CA files readable only by root.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=operator-ca \
    -days 30 -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
    -keyout "$P/op.key" -out "$P/op.pem" 2>/dev/null
chmod 0600 "$P/op.key" "$P/op.pem"
if start op_ca EGRESSD_CA_CERT="$P/op.pem" EGRESSD_CA_KEY="$P/op.key" EGRESSD_UPSTREAM_CA="$TD"; then
	ok "root-only operator CA cert and key: READY"
	check "operator CA: the exported CA is the operator's" \
	    test "$(openssl x509 -noout -fingerprint -sha256 -in "$CAX")" = "$(openssl x509 -noout -fingerprint -sha256 -in "$P/op.pem")"
	check "operator CA: a terminated request works" terminated_get "$P/op.pem" /v1/opca
	stop
else
	not_ok "root-only operator CA cert and key: READY"
	stop
fi

# ---- 6. what the worker re-reads: a credential file it cannot read is named at start.
printf 'sk-file-0002\n' >"$P/registry-key"
chmod 0600 "$P/registry-key"
cat >"$FX_DIR/policy.yaml" <<YAML
version: 1
defaultAction: deny
egress:
  - action: allow
    target: api.allowed.test
credentials:
  - name: k
    source: {type: file, path: $P/registry-key}
bindings:
  - name: b
    match: {hosts: [api.allowed.test], paths: ["/v1/*"]}
    auth: {type: bearer, credential: k}
YAML
chmod 0644 "$FX_DIR/policy.yaml"
if start cred_file EGRESSD_POLICY="$FX_DIR/policy.yaml"; then
	ok "a credential file the worker cannot read: egressd still starts"
	check "the start-up check logs one line for it" \
	    test "$(grep -c '"event":"worker_access"' "$LOG")" = 1
	check "that line names the uid and the path" \
	    grep -q "\"event\":\"worker_access\".*uid $FX_WORKER.*$P/registry-key.*rotation" "$LOG"
	stop
else
	not_ok "a credential file the worker cannot read: egressd still starts"
	stop
fi

# ---- 7. where egressd cannot start: one line says what to change.
chmod 0600 "$FX_DIR/policy.yaml"
refused "policy file unreadable by the worker" "uid $FX_WORKER.*policy.yaml.*mode 0600" \
    EGRESSD_POLICY="$FX_DIR/policy.yaml"
refused "missing upstream trust" "$P/nonexistent.pem.*uid 0" \
    EGRESSD_UPSTREAM_CA="$P/nonexistent.pem"
: >"$FX_DIR/notadir"
CAX=$FX_DIR/notadir/ca.pem
refused "CA export under a regular file" "$FX_DIR/notadir.*uid 0.*EGRESSD_CA_EXPORT"
CAX=$FX_DIR/sandbox/ca.pem

CUR=end
stop
if grep -q -E 'ERROR: AddressSanitizer|runtime error:' "$FX_DIR"/out/*.log 2>/dev/null; then
	not_ok "sanitizer report in an egressd log"
	grep -h -E -A30 'AddressSanitizer|runtime error:' "$FX_DIR"/out/*.log | head -60
fi
echo "$PASS passed, $FAIL failed"
if [ "$FAIL" -ne 0 ]; then
	for f in "$FX_DIR"/out/*.log; do
		echo "--- $(basename "$f") (tail) ---"
		tail -n 8 "$f"
	done
fi
[ "$FAIL" -eq 0 ]
