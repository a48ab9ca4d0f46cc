#!/bin/bash
# Lint of the packaging: the Kubernetes manifests (packaging/k8s) parse and
# keep the sidecar to exactly NET_ADMIN, the workload to nothing, the image
# to the one the build makes; the Dockerfile and the e2e use that same tag;
# the example policy passes `egressd check`. Each rule of the linter is also
# shown to fire on a manifest broken on purpose. Needs python3-yaml only
# (no root, no podman, no network).
set -u
SRC="${EGRESSD_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}"
PY=/usr/bin/python3
LINT="$SRC/packaging/lint-manifests.py"
TMP="$(mktemp -d /tmp/egressd-pkglint.XXXXXX)"
trap 'rm -rf "$TMP"' EXIT
PASS=0
FAIL=0

ok() { PASS=$((PASS + 1)); echo "ok   - $*"; }
not_ok() { FAIL=$((FAIL + 1)); echo "FAIL - $*"; }
check() { local d="$1"; shift; if "$@" >"$TMP/out" 2>&1; then ok "$d"; else not_ok "$d"; cat "$TMP/out"; fi; }

if ! $PY -c 'import yaml' 2>/dev/null; then
	echo "python3-yaml is missing (apt-get install python3-yaml)" >&2
	exit 1
fi
VERSION="$(sed -n 's/^project(egressd VERSION \([0-9.]*\).*/\1/p' "$SRC/CMakeLists.txt")"
IMAGE="localhost/egressd:$VERSION"
check "version found in CMakeLists.txt ($VERSION)" test -n "$VERSION"

# --- the real manifests ------------------------------------------------------
check "manifests pass the lint with image $IMAGE" $PY "$LINT" "$SRC/packaging/k8s" "$IMAGE"
check "podman-e2e builds and runs the same tag" grep -q '^IMG="localhost/egressd:\$VERSION"$' "$SRC/packaging/podman-e2e"
check "podman-e2e plays the plain-sidecar manifest" grep -q '"pod.yaml"' "$SRC/packaging/podman-e2e"
DF="$SRC/packaging/Dockerfile"
check "Dockerfile builds on debian:bookworm-slim" grep -q '^ARG DEBIAN_IMAGE=debian:bookworm-slim$' "$DF"
check "Dockerfile runs as the worker user 65533" grep -q '^USER 65533:65533$' "$DF"
check "Dockerfile entrypoint is egressd" grep -q '^ENTRYPOINT \["/usr/sbin/egressd"\]$' "$DF"
check "Dockerfile sets the file capability in the build stage" grep -q 'setcap cap_net_admin+ep' "$DF"
# Everything after the last FROM is the runtime stage.
awk '/^FROM /{buf=""} {buf=buf $0 "\n"} END{printf "%s", buf}' "$DF" >"$TMP/runtime-stage"
check "runtime stage installs no compiler, -dev or libcap tools" \
	bash -c "! grep -E -q '(^|[[:space:]])(gcc|make|cmake|libcap2-bin|[a-z0-9.-]+-dev)([[:space:]]|$)' '$TMP/runtime-stage'"
check "runtime stage copies egressd from the build stage" grep -q '^COPY --from=build /out/usr/sbin/egressd /usr/sbin/egressd$' "$TMP/runtime-stage"

# The example policy must be one egressd accepts.
$PY - "$SRC/packaging/k8s/configmap.yaml" "$TMP/policy.yaml" <<'PY'
import sys, yaml
cm = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d.get("kind") == "ConfigMap"][0]
open(sys.argv[2], "w").write(cm["data"]["policy.yaml"])
PY
if [ -n "${EGRESSD_BIN:-}" ] && [ -x "$EGRESSD_BIN" ]; then
	check "the ConfigMap's policy passes egressd check" "$EGRESSD_BIN" check "$TMP/policy.yaml"
else
	echo "# EGRESSD_BIN not set: egressd check of the ConfigMap's policy skipped"
fi

# systemd unit: the capability set and the user.
UNIT="$SRC/packaging/egressd.service"
check "egressd.service bounds capabilities to NET_ADMIN, SETUID, SETGID" \
	grep -q '^CapabilityBoundingSet=CAP_NET_ADMIN CAP_SETUID CAP_SETGID$' "$UNIT"
check "egressd.service reads /etc/egressd/env" grep -q '^EnvironmentFile=/etc/egressd/env$' "$UNIT"
check "egressd.service runs /usr/sbin/egressd" grep -q '^ExecStart=/usr/sbin/egressd$' "$UNIT"

# --- each rule fires on a broken copy --------------------------------------
# mutate NAME FILE PYTHON-STATEMENT: copy k8s/, apply the statement to the
# documents of FILE (list `docs`; helpers side(), work(), pod()), lint it.
mutate() {
	local name="$1" file="$2" stmt="$3" dir
	dir="$TMP/m-$name"
	rm -rf "$dir"
	cp -r "$SRC/packaging/k8s" "$dir"
	$PY - "$dir/$file" "$stmt" <<'PY'
import sys, yaml
path, stmt = sys.argv[1], sys.argv[2]
docs = [d for d in yaml.safe_load_all(open(path)) if d is not None]
def pod():
    return [d for d in docs if d["kind"] == "Pod"][0]["spec"]
def side():
    s = pod()
    return [c for c in (s.get("containers") or []) + (s.get("initContainers") or []) if c["name"] == "egress"][0]
def work():
    return [c for c in pod()["containers"] if c["name"] != "egress"][0]
exec(stmt)
yaml.safe_dump_all(docs, open(path, "w"), sort_keys=False)
PY
}

# expect_fail DESCRIPTION MESSAGE-REGEX NAME FILE STATEMENT [IMAGE]
expect_fail() {
	local d="$1" re="$2" name="$3" file="$4" stmt="$5" img
	img="${6:-$IMAGE}"
	mutate "$name" "$file" "$stmt"
	if $PY "$LINT" "$TMP/m-$name" "$img" >"$TMP/out" 2>&1; then
		not_ok "lint catches: $d (it passed)"
	elif grep -E -q "$re" "$TMP/out"; then
		ok "lint catches: $d"
	else
		not_ok "lint catches: $d (wrong reason)"
		cat "$TMP/out"
	fi
}

expect_fail "sidecar adds a second capability" "capabilities.add must be exactly" \
	addcap pod.yaml 'side()["securityContext"]["capabilities"]["add"].append("SYS_ADMIN")'
expect_fail "sidecar does not drop ALL" "capabilities.drop must be exactly" \
	nodrop pod.yaml 'side()["securityContext"]["capabilities"]["drop"] = []'
expect_fail "sidecar runs as root" "runAsNonRoot must be true" \
	sideroot pod.yaml 'side()["securityContext"]["runAsNonRoot"] = False'
expect_fail "sidecar is privileged" "must not be privileged" \
	sidepriv pod.yaml 'side()["securityContext"]["privileged"] = True'
expect_fail "sidecar with no_new_privs (file capability void)" "would make the file capability cap_net_admin.ep runtime-dependent" \
	sidennp pod.yaml 'side()["securityContext"]["allowPrivilegeEscalation"] = False'
expect_fail "sidecar image is not the build's tag" "the build makes" \
	image pod.yaml 'side()["image"] = "localhost/egressd:0.0.9"'
expect_fail "native sidecar image is not the build's tag" "the build makes" \
	nimage pod-native-sidecar.yaml 'side()["image"] = "egressd:latest"'
expect_fail "readiness probe on another path" "readinessProbe must be httpGet /healthz" \
	probe pod.yaml 'side()["readinessProbe"]["httpGet"]["path"] = "/metrics"'
expect_fail "no readiness probe" "readinessProbe must be httpGet /healthz" \
	noprobe pod.yaml 'del side()["readinessProbe"]'
expect_fail "token as a literal value" "must come from a Secret" \
	tokenval pod.yaml '[e for e in side()["env"] if e["name"] == "OPENSANDBOX_EGRESS_TOKEN"][0].update({"value": "x"}); [e for e in side()["env"] if e["name"] == "OPENSANDBOX_EGRESS_TOKEN"][0].pop("valueFrom")'
expect_fail "token from a Secret key that does not exist" "has no key" \
	tokenkey pod.yaml '[e for e in side()["env"] if e["name"] == "OPENSANDBOX_EGRESS_TOKEN"][0]["valueFrom"]["secretKeyRef"]["key"] = "nope"'
expect_fail "policy not from the ConfigMap" "EGRESSD_POLICY must name a file in a mounted ConfigMap" \
	policy pod.yaml '[e for e in side()["env"] if e["name"] == "EGRESSD_POLICY"][0]["value"] = "/etc/policy.yaml"'
expect_fail "ConfigMap missing" "ConfigMap egressd-policy is not defined" \
	nocm configmap.yaml 'docs[0]["metadata"]["name"] = "other"'
expect_fail "credentials not from a Secret volume" "read-only Secret volume" \
	nosecret pod.yaml 'side()["volumeMounts"] = [m for m in side()["volumeMounts"] if m["name"] != "credentials"]'
expect_fail "CA volume is a hostPath" "CA emptyDir|must point into a writable emptyDir" \
	cahost pod.yaml '[v for v in pod()["volumes"] if v["name"] == "egressd-ca"][0].update({"hostPath": {"path": "/tmp"}}); [v for v in pod()["volumes"] if v["name"] == "egressd-ca"][0].pop("emptyDir")'
expect_fail "workload keeps NET_RAW" "must name ALL and NET_RAW" \
	netraw pod.yaml 'work()["securityContext"]["capabilities"]["drop"] = ["NET_ADMIN"]'
expect_fail "workload does not name NET_RAW" "must name ALL and NET_RAW" \
	netraw2 pod.yaml 'work()["securityContext"]["capabilities"]["drop"] = ["ALL"]'
expect_fail "workload adds a capability" "must add no capability" \
	workadd pod-native-sidecar.yaml 'work()["securityContext"]["capabilities"]["add"] = ["NET_RAW"]'
expect_fail "workload may escalate" "allowPrivilegeEscalation must be false" \
	workesc pod.yaml 'work()["securityContext"]["allowPrivilegeEscalation"] = True'
expect_fail "workload without runAsNonRoot" "runAsNonRoot must be true" \
	workroot pod-native-sidecar.yaml 'del work()["securityContext"]["runAsNonRoot"]'
expect_fail "workload runs as uid 0" "runAsUser must not be 0" \
	workuid0 pod.yaml 'work()["securityContext"]["runAsUser"] = 0'
expect_fail "workload gets the token" "must not get the API token" \
	worktok pod.yaml 'work()["env"] = [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "egressd-token", "key": "token"}}}]'
expect_fail "workload mounts the credentials" "must not mount the credentials volume" \
	workcred pod.yaml 'work()["volumeMounts"].append({"name": "credentials", "mountPath": "/s"})'
expect_fail "workload can write the CA" "must mount the CA emptyDir read-only" \
	workca pod.yaml '[m for m in work()["volumeMounts"] if m["name"] == "egressd-ca"][0]["readOnly"] = False'
expect_fail "pod on the host network" "hostNetwork" \
	hostnet pod.yaml 'pod()["hostNetwork"] = True'
expect_fail "native variant without restartPolicy: Always" "needs restartPolicy: Always" \
	norestart pod-native-sidecar.yaml 'del side()["restartPolicy"]'
expect_fail "native variant without a startup gate" "startupProbe on /healthz" \
	nostartup pod-native-sidecar.yaml 'del side()["startupProbe"]'
expect_fail "native variant with the sidecar in containers" "must be an init container" \
	notinit pod-native-sidecar.yaml 's = pod(); s["containers"].append(s["initContainers"].pop(0))'
expect_fail "plain variant with the sidecar as an init container" "must be in containers" \
	plaininit pod.yaml 's = pod(); s["initContainers"] = [s["containers"].pop(0)]'
mutate badyaml pod.yaml 'pass'
printf 'spec: [unclosed\n' >>"$TMP/m-badyaml/pod.yaml"
if $PY "$LINT" "$TMP/m-badyaml" "$IMAGE" 2>&1 | grep -q 'does not parse as YAML'; then
	ok "lint catches: a manifest that is not YAML"
else
	not_ok "lint catches: a manifest that is not YAML"
fi

echo "$PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
