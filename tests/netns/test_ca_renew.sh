#!/bin/bash
# The sandbox CA lives as long as the sandbox (issue 18, item 2). With a
# short lifetime (EGRESSD_CA_LIFETIME=60, EGRESSD_CA_RENEW_BEFORE=20) the
# generated CA is renewed 20 s before it expires: a workload client that
# trusts the exported bundle (curl --cacert on the export, read at every
# request) keeps working through a terminated host without a restart of
# egressd, before the renewal, during the overlap (the export and GET
# /ca.pem carry the new CA and the old one) and after the old one expired
# (the new one alone). The leaf it gets after the renewal, for a host whose
# leaf was cached, is signed by the new CA. A control process restarted
# during the overlap serves both CAs (it inherits them) and then takes the
# end of the old one. The CA keys, which no test knows beforehand, are
# found in the parent's memory from their certificates (keyfind.py) and
# looked for in every child (memscan.py): neither the first nor the renewed
# key is in one, and the old key is gone from the parent once renewed. Not a
# timed test: each phase waits, bounded, for what GET /ca.pem shows.
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

fx_init "carn$$"
cleanup() {
	fx_down
	if [ "${KEEP_TMP:-0}" = 1 ]; then echo "kept $FX_DIR"; else rm -rf "$FX_DIR"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fx_up || exit 2
fx_safety || exit 2
fx_servers_start || exit 2

POLICY='{"defaultAction":"deny","terminateAll":true,"egress":[{"action":"allow","target":"api.allowed.test"}]}'
fx_egressd_start "$POLICY" OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true \
    EGRESSD_CA_EXPORT="$FX_DIR/sandbox/ca.pem" EGRESSD_CA_LIFETIME=60 \
    EGRESSD_CA_RENEW_BEFORE=20 || { cat "$FX_DIR/egressd.log"; exit 1; }

EXPORT=$FX_DIR/sandbox/ca.pem
LOG=$FX_DIR/egressd.log
P=$FX_DIR/out
PARENT=$FX_EGRESSD_PID
pid_of() { grep "\"event\":\"worker_start\",\"role\":\"$1\"" "$LOG" | tail -1 | sed 's/.*"pid":\([0-9]*\).*/\1/'; }
ICPT=$(pid_of intercept)
CTRL=$(pid_of control)
DNS=$(pid_of dns)
# The CA key: found in the parent's memory from the certificate (keyfind.py),
# then looked for everywhere else (memscan.py, both byte orders).
keyfind() { "$FX_PY" "$FX_SRC/tests/lib/keyfind.py" "$@"; }
absent() { "$FX_PY" "$FX_SRC/tests/lib/memscan.py" "$1" "$2"; test $? = 1; }

capem() { ip netns exec "$FX_SBX" curl -sS -m 5 http://127.0.0.1:18080/ca.pem; }
ncerts() { grep -c 'BEGIN CERTIFICATE' "$1"; }
# split FILE PREFIX: PREFIX1.pem, PREFIX2.pem, ... one certificate each.
split() { awk -v p="$2" '/BEGIN CERT/ {n++} n {print > (p n ".pem")}' "$1"; }
fp() { openssl x509 -noout -fingerprint -sha256 -in "$1" | sed 's/.*=//'; }
# The workload's request through the terminated host, trusting the export as it is now.
request() { # name
	fx_ws curl -sS -m 8 --cacert "$EXPORT" "https://api.allowed.test/$1" >"$P/$1" 2>&1 &&
	    grep -q "\"path\": \"/$1\"" "$P/$1"
}
# The leaf the workload is served now.
leaf() { # out
	fx_ws openssl s_client -connect api.allowed.test:443 -servername api.allowed.test \
	    -showcerts </dev/null 2>/dev/null | awk '/BEGIN CERT/ {n++} n == 1 {print} /END CERT/ && n == 1 {exit}' >"$1"
	test -s "$1"
}
# The ca_renew line names the new CA and the previous one by their SHA-256.
hexfp() { fp "$1" | tr -d : | tr A-F a-f; }
renew_logged() { # new old
	grep '"event":"ca_renew"' "$LOG" | grep "\"ca\":\"$(hexfp "$1")\"" |
	    grep -q "\"previous\":\"$(hexfp "$2")\""
}
verifies() { openssl verify -purpose sslserver -CAfile "$1" "$2" >/dev/null 2>&1; }
# wait_certs N: poll GET /ca.pem until it holds N certificates (at most 90 s).
wait_certs() {
	local i
	for i in $(seq 1 900); do
		capem >"$P/capem" 2>/dev/null && [ "$(ncerts "$P/capem")" = "$1" ] && return 0
		sleep 0.1
	done
	return 1
}

# ---- before the renewal: one CA, the one the workload trusts.
check "the export holds one CA" test "$(ncerts "$EXPORT")" = 1
capem >"$P/ca0"
check "GET /ca.pem serves the export" cmp -s "$P/ca0" "$EXPORT"
cp "$EXPORT" "$P/old.pem"
check "the generated CA's lifetime is the configured one" \
    grep -q '"event":"ca_generate".*"lifetime_s":60,"renew_before_s":20' "$LOG"
check "a request through the terminated host works" request before1
check "  and again (the leaf is cached)" request before2
check "the workload is served a leaf" leaf "$P/leaf0.pem"
check "  it verifies under the first CA" verifies "$P/old.pem" "$P/leaf0.pem"
kA=$(keyfind "$PARENT" "$P/old.pem")
check "the first CA's private key is in the parent's memory" test ${#kA} = 64
check "  and not in control's" absent "$CTRL" "$kA"
check "  nor the intercept's" absent "$ICPT" "$kA"
check "  nor dns's" absent "$DNS" "$kA"

# ---- the overlap: the new CA and the old one, both exported and served.
check "GET /ca.pem comes to hold two CAs (the renewal)" wait_certs 2
cp "$P/capem" "$P/overlap-api.pem"
cp "$EXPORT" "$P/overlap.pem"
check "request during the overlap, trusting the export" request overlap1
check "the export holds the two CAs too" test "$(ncerts "$P/overlap.pem")" = 2
check "  the same as GET /ca.pem" cmp -s "$P/overlap.pem" "$P/overlap-api.pem"
split "$P/overlap.pem" "$P/ov"
check "  the new CA first, the old one second" test "$(fp "$P/ov2.pem")" = "$(fp "$P/old.pem")"
check "  and the new one is another CA" test "$(fp "$P/ov1.pem")" != "$(fp "$P/old.pem")"
check "the renewal is logged, with both fingerprints" renew_logged "$P/ov1.pem" "$P/old.pem"
leaf "$P/leaf1.pem"
check "the cached leaf was reissued: the leaf now verifies under the new CA" \
    verifies "$P/ov1.pem" "$P/leaf1.pem"
refute "  and not under the old one" verifies "$P/old.pem" "$P/leaf1.pem"
check "  it is another certificate than before" test "$(fp "$P/leaf1.pem")" != "$(fp "$P/leaf0.pem")"
refute "a client that trusts only the old CA does not get through (new leaves: the new CA)" \
    fx_ws curl -sS -m 8 --cacert "$P/old.pem" https://api.allowed.test/oldonly
# The renewed key was made in the parent and stays there (the push carries certificates).
kB=$(keyfind "$PARENT" "$P/ov1.pem")
check "the new CA's private key is in the parent's memory" test ${#kB} = 64
check "  and not in control's, which took the CA push" absent "$CTRL" "$kB"
# A control process started during the overlap inherits both CAs from the parent.
kill -KILL "$CTRL"
for i in $(seq 1 100); do
	[ -n "$(pid_of control)" ] && [ "$(pid_of control)" != "$CTRL" ] && [ -e "$FX_DIR/egressd/ready" ] &&
	    capem >"$P/capem2" 2>/dev/null && break
	sleep 0.1
done
check "a control process restarted during the overlap serves both CAs" cmp -s "$P/capem2" "$P/overlap.pem"
CTRL=$(pid_of control)
check "the new CA's private key is not in the intercept's memory (it took the same push)" absent "$ICPT" "$kB"
check "  nor dns's" absent "$DNS" "$kB"
check "  nor in the control process forked after the renewal" absent "$CTRL" "$kB"
check "  which holds the old one no more" absent "$CTRL" "$kA"
check "the old CA's private key is wiped from the parent" absent "$PARENT" "$kA"

# ---- the old CA expired: the new one alone.
check "GET /ca.pem comes to hold one CA again (the old one expired)" wait_certs 1
cp "$EXPORT" "$P/after.pem"
check "request after the old CA expired, trusting the export" request after1
check "the export holds the new CA alone" test "$(ncerts "$P/after.pem")" = 1 -a \
    "$(fp "$P/after.pem")" = "$(fp "$P/ov1.pem")"
check "  as GET /ca.pem does" test "$(fp "$P/capem")" = "$(fp "$P/ov1.pem")"
check "the old CA's end is logged" grep -q '"event":"ca_previous_expired"' "$LOG"
leaf "$P/leaf2.pem"
check "the leaf verifies under the new CA" verifies "$P/after.pem" "$P/leaf2.pem"

# ---- without a restart: the same parent, control and intercept throughout.
check "egressd never restarted" kill -0 "$PARENT"
check "  nor did its intercept (nor control, but for the kill above)" test \
    "$(grep -c '"event":"worker_start"' "$LOG")" = 4 -a "$(pid_of intercept)" = "$ICPT" -a \
    "$(pid_of control)" = "$CTRL"
refute "no CA error was logged" grep -qE '"event":"(ca_renew_error|ca_export_error|ca_push_error|ca_error|push_refused)"' "$LOG"
refute "no leaf was refused" grep -q '"event":"leaf_refused"' "$LOG"

fx_egressd_stop
if grep -q -E 'ERROR: AddressSanitizer|runtime error:' "$LOG" 2>/dev/null; then
	not_ok "sanitizer report in egressd log"
	grep -E -A30 'AddressSanitizer|runtime error:|LeakSanitizer' "$LOG" | head -60
fi
echo "$PASS passed, $FAIL failed"
if [ "$FAIL" -ne 0 ]; then
	echo "--- egressd log (tail) ---"
	tail -n 60 "$LOG"
	exit 1
fi
exit 0
