#!/usr/bin/python3
"""Lint of the Kubernetes manifests in packaging/k8s.

Checks what the security of a sandbox pod rests on: the egressd sidecar
gets exactly NET_ADMIN and runs as its non-root user with its file
capability usable; the workload gets no capability at all (NET_RAW named),
runs as non-root without privilege escalation and sees neither the API
token nor the credentials; the image is the one packaging/Dockerfile
builds; readiness and the native sidecar's startup gate probe /healthz;
the token comes from a Secret, the policy from a ConfigMap, the CA through
an emptyDir. Prints one line per problem and exits 1 if there is any.

usage: lint-manifests.py K8S_DIR IMAGE
"""
import os
import sys

import yaml

SIDECAR = "egress"
SIDECAR_UID = 65533
API_PORTS = (18080, "egress-api")


class Lint:
    def __init__(self):
        self.problems = []

    def fail(self, where, msg):
        self.problems.append(f"{where}: {msg}")

    def expect(self, cond, where, msg):
        if not cond:
            self.fail(where, msg)
        return cond


def load_all(k8s_dir, lint):
    docs = {}
    names = sorted(n for n in os.listdir(k8s_dir) if n.endswith((".yaml", ".yml")))
    for name in names:
        path = os.path.join(k8s_dir, name)
        try:
            with open(path) as f:
                items = [d for d in yaml.safe_load_all(f) if d is not None]
        except yaml.YAMLError as e:
            lint.fail(name, f"does not parse as YAML: {e}")
            continue
        for d in items:
            if not isinstance(d, dict) or not all(k in d for k in ("apiVersion", "kind", "metadata")):
                lint.fail(name, "a document without apiVersion, kind and metadata")
                continue
            docs.setdefault(name, []).append(d)
    return docs


def by_kind(docs, kind):
    return [(n, d) for n, ds in docs.items() for d in ds if d["kind"] == kind]


def sc(c):
    return c.get("securityContext") or {}


def caps(c):
    cap = sc(c).get("capabilities") or {}
    return list(cap.get("drop") or []), list(cap.get("add") or [])


def env_map(c):
    return {e.get("name"): e for e in c.get("env") or []}


def mount_for(c, volume):
    for m in c.get("volumeMounts") or []:
        if m.get("name") == volume:
            return m
    return None


def probe_ok(p):
    http = (p or {}).get("httpGet") or {}
    return http.get("path") == "/healthz" and http.get("port") in API_PORTS


def lint_sidecar(lint, where, c, image, volumes):
    w = f"{where}: container {SIDECAR}"
    lint.expect(c.get("image") == image, w, f"image is {c.get('image')!r}, the build makes {image!r}")
    drop, add = caps(c)
    lint.expect(drop == ["ALL"], w, f"capabilities.drop must be exactly [ALL], is {drop}")
    lint.expect(add == ["NET_ADMIN"], w, f"capabilities.add must be exactly [NET_ADMIN], is {add}")
    s = sc(c)
    lint.expect(s.get("runAsNonRoot") is True, w, "runAsNonRoot must be true")
    lint.expect(s.get("runAsUser") == SIDECAR_UID, w, f"runAsUser must be {SIDECAR_UID} (the image's user)")
    lint.expect(s.get("privileged") is not True, w, "must not be privileged")
    # Under no_new_privs a file capability only keeps what the runtime
    # already put in the permitted set: portable manifests do not rely on it.
    lint.expect(s.get("allowPrivilegeEscalation") is not False, w,
                "allowPrivilegeEscalation: false would make the file capability cap_net_admin+ep runtime-dependent")
    lint.expect(probe_ok(c.get("readinessProbe")), w, "readinessProbe must be httpGet /healthz on the API port")
    env = env_map(c)
    tok = env.get("OPENSANDBOX_EGRESS_TOKEN") or {}
    ref = ((tok.get("valueFrom") or {}).get("secretKeyRef")) or {}
    lint.expect("value" not in tok and ref.get("name") and ref.get("key"), w,
                "OPENSANDBOX_EGRESS_TOKEN must come from a Secret (valueFrom.secretKeyRef)")
    # The policy: a ConfigMap volume, and EGRESSD_POLICY inside its mount.
    pol = env.get("EGRESSD_POLICY", {}).get("value", "")
    cm_mounts = [m for m in c.get("volumeMounts") or [] if "configMap" in volumes.get(m.get("name"), {})]
    lint.expect(any(pol.startswith(m["mountPath"].rstrip("/") + "/") for m in cm_mounts), w,
                "EGRESSD_POLICY must name a file in a mounted ConfigMap")
    sec_mounts = [m for m in c.get("volumeMounts") or [] if "secret" in volumes.get(m.get("name"), {})]
    lint.expect(sec_mounts and all(m.get("readOnly") is True for m in sec_mounts), w,
                "credentials must come from a read-only Secret volume")
    ca = env.get("EGRESSD_CA_EXPORT", {}).get("value", "")
    ed_mounts = [m for m in c.get("volumeMounts") or [] if "emptyDir" in volumes.get(m.get("name"), {})]
    ok = [m for m in ed_mounts if ca.startswith(m["mountPath"].rstrip("/") + "/") and not m.get("readOnly")]
    lint.expect(ok, w, "EGRESSD_CA_EXPORT must point into a writable emptyDir mount")
    return ok[0]["name"] if ok else None, ref.get("name"), [m["name"] for m in sec_mounts]


def lint_workload(lint, where, c, ca_volume, token_secret, secret_volumes):
    w = f"{where}: container {c.get('name')}"
    drop, add = caps(c)
    lint.expect("ALL" in drop and "NET_RAW" in drop, w, f"capabilities.drop must name ALL and NET_RAW, is {drop}")
    lint.expect(not add, w, f"must add no capability, adds {add}")
    s = sc(c)
    lint.expect(s.get("runAsNonRoot") is True, w, "runAsNonRoot must be true")
    lint.expect(s.get("runAsUser", 1) != 0, w, "runAsUser must not be 0")
    lint.expect(s.get("allowPrivilegeEscalation") is False, w, "allowPrivilegeEscalation must be false")
    lint.expect(s.get("privileged") is not True, w, "must not be privileged")
    m = mount_for(c, ca_volume) if ca_volume else None
    lint.expect(m is not None and m.get("readOnly") is True, w, "must mount the CA emptyDir read-only")
    for v in secret_volumes:
        lint.expect(mount_for(c, v) is None, w, f"must not mount the credentials volume {v}")
    for e in c.get("env") or []:
        ref = ((e.get("valueFrom") or {}).get("secretKeyRef")) or {}
        lint.expect(ref.get("name") != token_secret, w, "must not get the API token")
    for e in c.get("envFrom") or []:
        lint.expect(((e.get("secretRef") or {}).get("name")) != token_secret, w, "must not get the API token")


def lint_pod(lint, name, pod, image, native):
    spec = pod.get("spec") or {}
    where = name
    lint.expect(spec.get("hostNetwork") is not True, where, "hostNetwork would put the host under the pod's nft rules")
    lint.expect(spec.get("shareProcessNamespace") is not True, where,
                "shareProcessNamespace would show egressd's processes to the workload")
    volumes = {v.get("name"): v for v in spec.get("volumes") or []}
    inits = spec.get("initContainers") or []
    mains = spec.get("containers") or []
    side_init = [c for c in inits if c.get("name") == SIDECAR]
    side_main = [c for c in mains if c.get("name") == SIDECAR]
    if native:
        if not lint.expect(len(side_init) == 1 and not side_main, where,
                           f"native variant: {SIDECAR} must be an init container"):
            return
        side = side_init[0]
        lint.expect(side.get("restartPolicy") == "Always", where,
                    f"native variant: init container {SIDECAR} needs restartPolicy: Always")
        lint.expect(probe_ok(side.get("startupProbe")), where,
                    "native variant: a startupProbe on /healthz must gate the workload's start")
    else:
        if not lint.expect(len(side_main) == 1 and not side_init, where,
                           f"plain variant: {SIDECAR} must be in containers"):
            return
        side = side_main[0]
    ca_volume, token_secret, secret_volumes = lint_sidecar(lint, where, side, image, volumes)
    if ca_volume:
        lint.expect("emptyDir" in volumes.get(ca_volume, {}), where, "the CA volume must be an emptyDir")
    workloads = [c for c in mains if c.get("name") != SIDECAR]
    lint.expect(workloads, where, "no workload container")
    for c in workloads:
        lint_workload(lint, where, c, ca_volume, token_secret, secret_volumes)
    for c in inits:
        if c.get("name") != SIDECAR:
            lint_workload(lint, where, c, ca_volume, token_secret, secret_volumes)
    return volumes


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    k8s_dir, image = sys.argv[1], sys.argv[2]
    lint = Lint()
    docs = load_all(k8s_dir, lint)
    pods = dict((n, d) for n, d in by_kind(docs, "Pod"))
    for name, native in (("pod.yaml", False), ("pod-native-sidecar.yaml", True)):
        if lint.expect(name in pods, name, "missing (or holds no Pod)"):
            lint_pod(lint, name, pods[name], image, native)
    cms = {d["metadata"].get("name"): d for _, d in by_kind(docs, "ConfigMap")}
    secrets = {d["metadata"].get("name"): d for _, d in by_kind(docs, "Secret")}
    for name, pod in pods.items():
        spec = pod.get("spec") or {}
        for v in spec.get("volumes") or []:
            if "configMap" in v:
                cm = cms.get(v["configMap"].get("name"))
                if lint.expect(cm is not None, name, f"ConfigMap {v['configMap'].get('name')} is not defined"):
                    for key, text in (cm.get("data") or {}).items():
                        try:
                            pol = yaml.safe_load(text)
                        except yaml.YAMLError as e:
                            lint.fail(name, f"ConfigMap key {key} is not YAML: {e}")
                            continue
                        lint.expect(isinstance(pol, dict) and isinstance(pol.get("egress"), list), name,
                                    f"ConfigMap key {key} is not a policy with egress rules")
            if "secret" in v:
                lint.expect(v["secret"].get("secretName") in secrets, name,
                            f"Secret {v['secret'].get('secretName')} is not defined")
        for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
            for e in c.get("env") or []:
                ref = ((e.get("valueFrom") or {}).get("secretKeyRef")) or {}
                if ref:
                    s = secrets.get(ref.get("name")) or {}
                    keys = set((s.get("data") or {})) | set((s.get("stringData") or {}))
                    lint.expect(ref.get("key") in keys, name, f"Secret {ref.get('name')} has no key {ref.get('key')}")
    for p in lint.problems:
        print(p)
    if lint.problems:
        print(f"{len(lint.problems)} problem(s)")
        return 1
    print("manifests ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
