#!/bin/bash
# OpenTelemetry metrics (issue 17 item 5): OTEL_EXPORTER_OTLP_ENDPOINT over
# OTLP/HTTP to a receiver in the fake internet (tests/otlp/receiver.js at
# 198.51.100.81:4318, an address no policy here allows) that decodes every
# request with the OpenTelemetry project's own generated protobuf code and
# refuses anything that is not an exact ExportMetricsServiceRequest. The
# export carries the same series as GET /metrics, with SANDBOX_ID and
# METRICS_EXTRA_ATTRS as resource attributes; headers are sent; delta
# temporality is honoured; OTEL_SDK_DISABLED and OTEL_METRICS_EXPORTER=none
# start no exporter; the workload cannot reach the collector; bad settings
# refuse the start.
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

RECV=$HERE/../otlp/receiver.js
if [ ! -d "$HERE/../otlp/node_modules/@opentelemetry/otlp-transformer" ]; then
	echo "tests/otlp/node_modules is missing: run scripts/deps.sh"
	exit 1
fi
NODE=$(command -v node) || { echo "node is missing: run scripts/deps.sh"; exit 1; }

fx_init "otlp$$"
cleanup() {
	fx_down
	if [ "${KEEP_TMP:-0}" = 1 ]; then echo "kept $FX_DIR"; else rm -rf "$FX_DIR"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fx_up || exit 2
fx_safety || exit 2
fx_servers_start || exit 2
ip -n "$FX_WAN" addr add 198.51.100.81/32 dev lo || exit 2
O=$FX_DIR/otlp
mkdir -p "$O" "$FX_DIR/out"
# recv_start OUT [HEADER=VALUE]: a receiver writing OUT, requiring the header.
RECV_PID=
recv_start() {
	rm -f "$1" "$1.ready"
	ip netns exec "$FX_WAN" "$NODE" "$RECV" 198.51.100.81 4318 "$@" >"$1.stdout" 2>&1 &
	RECV_PID=$!
	fx_track "$RECV_PID"
	fx_wait_file "$1.ready" 100 "$RECV_PID" || { echo "OTLP receiver did not start"; cat "$1.stdout"; exit 2; }
}
recv_stop() { fx_stop_pid "$RECV_PID" TERM; RECV_PID=; }
# wait_records OUT N: until OUT holds N lines (bounded, 15 s).
wait_records() {
	local i
	for i in $(seq 1 150); do
		[ "$(wc -l <"$1" 2>/dev/null || echo 0)" -ge "$2" ] && return 0
		sleep 0.1
	done
	return 1
}
# records_are OUT PYTHON-EXPR: the expression holds (recs: the records,
# ok: the decoded requests, res(r): resource attributes of request r as a
# dict, names(r): metric names, points(r, name): its data points).
records_are() {
	"$FX_PY" - "$1" "$2" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
ok = [r["request"] for r in recs if "request" in r]
def val(v):
    return v.get("stringValue", v.get("intValue", v.get("boolValue")))
def res(r):
    return {a["key"]: val(a["value"]) for a in r["resourceMetrics"][0]["resource"]["attributes"]}
def metrics(r):
    return [m for rm in r["resourceMetrics"] for sm in rm["scopeMetrics"] for m in sm["metrics"]]
def names(r):
    return sorted(m["name"] for m in metrics(r))
def metric(r, name):
    return next(m for m in metrics(r) if m["name"] == name)
sys.exit(0 if eval(sys.argv[2]) else 1)
PY
}
POLICY='{"defaultAction":"deny","egress":[{"action":"allow","target":"api.allowed.test"}]}'
LOG=$FX_DIR/egressd.log
OTLP_ENV=(OTEL_EXPORTER_OTLP_ENDPOINT=http://198.51.100.81:4318 OTEL_METRIC_EXPORT_INTERVAL=1000
    OPENSANDBOX_EGRESS_SANDBOX_ID=sbx-otlp-1 OPENSANDBOX_EGRESS_METRICS_EXTRA_ATTRS=team=blue,env=ci
    OTEL_EXPORTER_OTLP_HEADERS=x-tenant=t1 OTEL_SERVICE_NAME=egress-under-test)

# ---- cumulative export, with headers and resource attributes.
recv_start "$O/cum.jsonl" x-tenant=t1
fx_egressd_start "$POLICY" "${OTLP_ENV[@]}" || { cat "$LOG"; exit 1; }
check "the report process runs" grep -q '"event":"worker_start","role":"report"' "$LOG"
check "and logs the collector it exports to" \
    grep -q '"event":"report_start".*"otlp":"198.51.100.81:4318"' "$LOG"
fx_ws dig +time=3 +tries=1 denied.example.test A >/dev/null 2>&1
fx_ws dig +time=3 +tries=1 api.allowed.test A >/dev/null 2>&1
# A connection the nft table refuses: its counter by reason is exported too (docs/nflog.md).
fx_ws nc -z -w2 203.0.113.20 22 >/dev/null 2>&1
check "the collector receives exports every interval" wait_records "$O/cum.jsonl" 3
check "every export decodes exactly (the header was sent; no error record)" \
    records_are "$O/cum.jsonl" 'len(ok) == len(recs) and len(ok) >= 3'
check "resource: service.name from OTEL_SERVICE_NAME" \
    records_are "$O/cum.jsonl" 'res(ok[-1])["service.name"] == "egress-under-test"'
check "resource: sandbox_id from OPENSANDBOX_EGRESS_SANDBOX_ID" \
    records_are "$O/cum.jsonl" 'res(ok[-1])["sandbox_id"] == "sbx-otlp-1"'
check "resource: METRICS_EXTRA_ATTRS" \
    records_are "$O/cum.jsonl" 'res(ok[-1])["team"] == "blue" and res(ok[-1])["env"] == "ci"'
fx_api GET /metrics -o "$FX_DIR/out/metrics" 2>/dev/null
awk '$1 == "#" && $2 == "TYPE" {print $3}' "$FX_DIR/out/metrics" | sort >"$FX_DIR/out/prom-names"
check "/metrics has series" test -s "$FX_DIR/out/prom-names"
check "the export carries exactly the /metrics series" records_are "$O/cum.jsonl" \
    "names(ok[-1]) == open('$FX_DIR/out/prom-names').read().split()"
check "counters are monotonic cumulative sums" records_are "$O/cum.jsonl" \
    'all(m["sum"]["isMonotonic"] and m["sum"]["aggregationTemporality"] == "AGGREGATION_TEMPORALITY_CUMULATIVE" for m in [x for x in [metric(ok[-1], n) for n in names(ok[-1])] if "sum" in x])'
check "the table's refusals are exported by reason (egressd_conn_reject_not_allowed_total)" \
    records_are "$O/cum.jsonl" 'int(metric(ok[-1], "egressd_conn_reject_not_allowed_total")["sum"]["dataPoints"][0].get("asInt", 0)) >= 1'
check "histograms are exported with buckets" records_are "$O/cum.jsonl" \
    'any("histogram" in metric(ok[-1], n) and len(metric(ok[-1], n)["histogram"]["dataPoints"][0]["bucketCounts"]) > 1 for n in names(ok[-1]))'
prom_exports=$(awk '$1 == "egressd_otlp_exports_total" {print $2}' "$FX_DIR/out/metrics")
check "exports are counted in /metrics ($prom_exports)" test "${prom_exports:-0}" -ge 1

# ---- the collector is the sidecar's only: the workload cannot reach it.
n=$(wc -l <"$O/cum.jsonl")
refute "the workload cannot connect to the collector" fx_ws curl -sS -m 5 -o /dev/null \
    -H 'Content-Type: application/x-protobuf' --data-binary x http://198.51.100.81:4318/v1/metrics
check "and no request of its reached the collector" \
    records_are "$O/cum.jsonl" 'all("request" in r for r in recs)'
fx_egressd_stop
recv_stop

# ---- delta temporality; a collector that refuses the header is counted as a failure.
recv_start "$O/delta.jsonl"
fx_egressd_start "$POLICY" OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=http://198.51.100.81:4318/v1/metrics \
    OTEL_METRIC_EXPORT_INTERVAL=1000 OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE=delta \
    || { cat "$LOG"; exit 1; }
check "a metrics endpoint is used as given" wait_records "$O/delta.jsonl" 2
check "delta temporality is honoured" records_are "$O/delta.jsonl" \
    'all(m["sum"]["aggregationTemporality"] == "AGGREGATION_TEMPORALITY_DELTA" for m in [metric(ok[-1], n) for n in names(ok[-1])] if "sum" in m)'
check "the default service.name is egressd" records_are "$O/delta.jsonl" \
    'res(ok[-1])["service.name"] == "egressd"'
fx_egressd_stop
recv_stop

recv_start "$O/refused.jsonl" x-tenant=t1
fx_egressd_start "$POLICY" OTEL_EXPORTER_OTLP_ENDPOINT=http://198.51.100.81:4318 \
    OTEL_METRIC_EXPORT_INTERVAL=1000 || { cat "$LOG"; exit 1; }
check "a collector that refuses the export (400) is reached" wait_records "$O/refused.jsonl" 2
failures=0
for i in $(seq 1 50); do
	failures=$(fx_api GET /metrics -o - 2>/dev/null | awk '$1 == "egressd_otlp_export_failures_total" {print $2}')
	[ "${failures:-0}" -ge 1 ] && break
	sleep 0.1
done
check "and its refusals are counted as failures ($failures)" test "${failures:-0}" -ge 1
check "and warned about" grep -q '"event":"otlp_export_failed"' "$LOG"
fx_egressd_stop
recv_stop

# ---- OTEL_SDK_DISABLED and OTEL_METRICS_EXPORTER=none start no exporter.
for off in OTEL_SDK_DISABLED=true OTEL_METRICS_EXPORTER=none; do
	fx_egressd_start "$POLICY" "${OTLP_ENV[@]}" "$off" || { cat "$LOG"; exit 1; }
	refute "$off: no report process" grep -q '"role":"report"' "$LOG"
	check "$off: says that nothing is exported" grep -q '"event":"otlp_disabled"' "$LOG"
	fx_egressd_stop
done

# ---- bad settings refuse the start (exit 2), naming the variable, never a header value.
bad_start() { # VAR=VALUE: exit 2, names VAR
	local rc=0
	ip netns exec "$FX_SBX" env -i PATH="$FX_PATH" OPENSANDBOX_EGRESS_TOKEN=t "$@" \
	    timeout 10 "$EGRESSD_BIN" >"$FX_DIR/out/bad" 2>&1 || rc=$?
	test "$rc" = 2 && grep -q "${1%%=*}" "$FX_DIR/out/bad"
}
E=OTEL_EXPORTER_OTLP_ENDPOINT=http://198.51.100.81:4318
check "grpc is refused (OTEL_EXPORTER_OTLP_PROTOCOL)" bad_start OTEL_EXPORTER_OTLP_PROTOCOL=grpc "$E"
check "https is refused" bad_start OTEL_EXPORTER_OTLP_ENDPOINT=https://198.51.100.81:4318
check "a name is refused (not resolved)" bad_start OTEL_EXPORTER_OTLP_ENDPOINT=http://collector.test:4318
check "another exporter is refused" bad_start OTEL_METRICS_EXPORTER=prometheus "$E"
check "an interval under 1 s is refused" bad_start OTEL_METRIC_EXPORT_INTERVAL=10 "$E"
check "a bad extra attribute is refused" bad_start OPENSANDBOX_EGRESS_METRICS_EXTRA_ATTRS=novalue "$E"
check "a bad header is refused" bad_start OTEL_EXPORTER_OTLP_HEADERS=Authorization-Bearer-hunter2 "$E"
refute "  without printing its value" grep -q hunter2 "$FX_DIR/out/bad"

echo "$PASS passed, $FAIL failed"
if [ "$FAIL" -ne 0 ]; then
	tail -n 40 "$LOG"
	for f in "$O"/*.jsonl; do echo "$f: $(wc -l <"$f") records"; grep -h error "$f" | head -n 3; done
fi
[ "$FAIL" -eq 0 ]
