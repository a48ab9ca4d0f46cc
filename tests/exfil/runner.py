#!/usr/bin/python3
"""runner.py: the exfiltration suite's runner (tests/exfil/run wraps it).

Who runs it: ctest (label exfil) and developers, as root. It loads the
declarative cases of tests/exfil/cases/*.yaml, runs each one with
tests/exfil/case.sh in its own pair of namespaces, applies the oracles of
catalogue 1.4 (O1 capture + resolver log, O2 canaries, O3 canaries only to
the bound host, O5 liveness, O6 sanitizer reports; with --audit O7, one
aggregated conn_reject record per kernel refusal) and the case's own
expectations, prints one line per case and writes exfil-report.json.

It must never leave a namespace, a process or an nft table behind, even when
interrupted, and never end a process it did not start: every case's
processes live in namespaces this run created, and are ended by PID.

Exit status: 0 when every case that is not pending passed; 1 when one that is
not pending failed; 2 on a harness error (missing tools, safety precondition).
"""
import argparse
import concurrent.futures
import datetime
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "lib"))
sys.dont_write_bytecode = True  # never leave __pycache__ in the source tree
import oracles  # noqa: E402

try:
    import yaml
except ImportError:  # deps.txt lists python3-yaml
    yaml = None

FEATURE_ISSUE = {"dns": 4, "nft": 4, "policy": 3, "api": 5, "intercept": 6,
                 "vault": 7}
DEFAULT_TIMEOUT = 15
CASE_SLACK = 60
ECHO_MARKERS = ('"server": "fakenet-echo"', "FAKENET-DECOY")
BASELINE_POLICY = {  # catalogue 1.2, with its port scopes
    "defaultAction": "deny",
    "egress": [
        {"action": "allow", "target": "api.allowed.test", "ports": [443, 80]},
        {"action": "allow", "target": "other.allowed.test", "ports": [443]},
        {"action": "allow", "target": "front.allowed.test", "ports": [443]},
        {"action": "allow", "target": "*.wild.allowed.test", "ports": [443]},
        {"action": "allow", "target": "badtls.allowed.test",
         "ports": [443, 4431, 4432, 4433, 4434, 4435]},
    ],
}
S = oracles.CANARIES
BASELINE_VAULT = {
    "credentials": [
        {"name": "s1", "source": {"type": "inline", "value": S[0]}},
        {"name": "s2", "source": {"type": "inline", "value": S[1]}},
        {"name": "s3", "source": {"type": "inline", "value": S[2]}},
    ],
    "bindings": [
        {"name": "b1", "match": {"schemes": ["https"], "ports": [443],
                                 "hosts": ["api.allowed.test"],
                                 "methods": ["GET"], "paths": ["/v1/*"]},
         "auth": {"type": "bearer", "credential": "s1"}},
        {"name": "b2", "match": {"schemes": ["https"], "ports": [443],
                                 "hosts": ["other.allowed.test"],
                                 "methods": ["POST"], "paths": ["/v2/items"]},
         "auth": {"type": "apiKey", "name": "X-Api-Key", "credential": "s2"}},
        # B3 is the catalogue's all-paths binding: an explicit allowBroad.
        {"name": "b3", "allowBroad": True, "match": {"schemes": ["https"], "ports": [443],
                                 "hosts": ["badtls.allowed.test"],
                                 "methods": ["GET"], "paths": ["/*"]},
         "auth": {"type": "bearer", "credential": "s3"}},
    ],
}
# Where each canary may legitimately arrive (O3): log, TLS, listen suffix.
BOUND = {0: ("api.log", ":443"), 1: ("other.log", ":443"),
         2: ("badtls.log", ":4435")}
UPSTREAM_LOGS = ("api.log", "other.log", "cdn.log", "badtls.log", "wild.log",
                 "doh.log", "sink.log", "decoy.log", "dns.log")

# Catalogue cases (EX-NNN, with a letter for variants) and the invariant
# cases of catalogue section 11 (INV-NN).
ID_RE = re.compile(r"^(EX-\d{3}[a-z]?|INV-\d{2})$")
SLOWEST = 10

STOP = threading.Event()
ACTIVE = {}
AUDIT = [False]  # --audit: the O7 oracle (set once in main)
ACTIVE_LOCK = threading.Lock()


def load_cases(d):
    cases = []
    for fn in sorted(os.listdir(d)):
        if not fn.endswith((".yaml", ".yml", ".json")):
            continue
        with open(os.path.join(d, fn)) as f:
            c = json.load(f) if fn.endswith(".json") else yaml.safe_load(f)
        c["_file"] = fn
        for k in ("id", "title", "prio", "profile", "needs", "actions"):
            if k not in c:
                raise SystemExit("%s: missing field %s" % (fn, k))
        if not ID_RE.match(c["id"]):
            raise SystemExit("%s: bad id %s" % (fn, c["id"]))
        if os.path.splitext(fn)[0] != c["id"]:
            raise SystemExit("%s: file name is not its id %s" % (fn, c["id"]))
        cases.append(c)
    ids = [c["id"] for c in cases]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise SystemExit("duplicate case ids: %s" % sorted(dup))
    return cases


def features_of(binary):
    if not binary or not os.access(binary, os.X_OK):
        return [], "EGRESSD_BIN not executable: %r" % binary
    try:
        r = subprocess.run([binary, "--features"], capture_output=True,
                           text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return [], "egressd --features failed: %s" % e
    if r.returncode != 0:
        return [], "egressd --features exited %d" % r.returncode
    return r.stdout.split(), ""


def policy_of(c):
    p = c.get("policy", "baseline")
    if p == "baseline":
        return BASELINE_POLICY
    if isinstance(p, dict) and p.get("extends") == "baseline":
        q = json.loads(json.dumps(BASELINE_POLICY))
        q["egress"] = p.get("prepend", []) + q["egress"] + p.get("append", [])
        if "defaultAction" in p:
            q["defaultAction"] = p["defaultAction"]
        return q
    return p


def allowed_targets(policy):
    return [r["target"] for r in policy.get("egress", [])
            if r.get("action") == "allow"]


def write_plan(c, d, ns_id, features):
    plan = os.path.join(d, "plan")
    os.makedirs(plan, exist_ok=True)
    os.chmod(plan, 0o700)  # the workload must not read the case's script
    os.makedirs(os.path.join(d, "private"), exist_ok=True)
    os.chmod(os.path.join(d, "private"), 0o700)
    needs = c.get("needs", [])
    env = {
        "CASE_NS_ID": ns_id,
        "POLICY": json.dumps(policy_of(c), separators=(",", ":")),
        "START_EGRESSD": "1" if c.get("start_egressd", True) and features
        else "0",
        "INTERCEPT": "1" if c.get("intercept", "intercept" in needs or "vault" in needs)
        and "intercept" in features else "0",
        "VAULT": "1" if c.get("vault") and "vault" in features else "0",
        "HEALTHZ": "1" if "api" in features else "0",
        "NACTIONS": str(len(c["actions"])),
        "EGRESSD_EXTRA_ENV": "\n".join("%s=%s" % kv for kv in
                                       c.get("egressd_env", {}).items()),
        "AUDIT": "1" if AUDIT[0] else "0",
    }
    with open(os.path.join(plan, "env"), "w") as f:
        for k, v in env.items():
            f.write("%s=%s\n" % (k, shlex.quote(v)))
    for i, a in enumerate(c["actions"]):
        for k, v in (("cmd", a["run"]), ("as", a.get("as", "ws")),
                     ("timeout", str(a.get("timeout", DEFAULT_TIMEOUT)))):
            with open(os.path.join(plan, "action.%d.%s" % (i, k)), "w") as f:
                f.write(v)
    with open(os.path.join(d, "dns.json"), "w") as f:
        json.dump(c.get("dns", {}), f)
    vault = c.get("vault")
    if vault:
        v = BASELINE_VAULT if vault in (True, "baseline") else vault
        p = os.path.join(d, "private", "vault.json")
        with open(p, "w") as f:
            json.dump(v, f)
        os.chmod(p, 0o600)


def read(p, limit=1 << 20):
    try:
        with open(p, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def dig_status(text):
    m = re.search(r"status: ([A-Z]+)", text)
    return m.group(1) if m else None


def check_action(i, a, d):
    o = os.path.join(d, "out", "action.%d" % i)
    try:
        rc = int(read(o + ".rc").strip() or "-1")
    except ValueError:
        rc = -1
    out, err = read(o + ".stdout"), read(o + ".stderr")
    both = out + err
    label = a.get("name", "action %d" % i)
    exp = a.get("expect", "any")
    r = []
    reached = any(m in out for m in ECHO_MARKERS)
    if exp == "blocked":
        if rc == 0 or reached:
            r.append("%s: not blocked (rc %d)" % (label, rc))
    elif exp == "denied":
        if reached:
            r.append("%s: reached an upstream server" % label)
        elif rc == 0 and not re.search(r"egress_denied|\b(403|421|400)\b",
                                       both):
            r.append("%s: not denied (rc 0)" % label)
    elif exp == "ok":
        if rc != 0:
            r.append("%s: failed (rc %d): %s" % (label, rc,
                                                 err.strip()[-160:]))
    elif exp == "nxdomain":
        st = dig_status(out)
        if st != "NXDOMAIN":
            r.append("%s: DNS status %s, want NXDOMAIN" % (label, st))
    elif exp == "no_answer":
        st = dig_status(out)
        if st == "NOERROR" and not re.search(r"ANSWER: 0\b", out):
            r.append("%s: answered NOERROR with records" % label)
    elif exp == "answer":
        st = dig_status(out)
        if st != "NOERROR" or re.search(r"ANSWER: 0\b", out):
            r.append("%s: no answer (status %s)" % (label, st))
    elif exp != "any":
        r.append("%s: unknown expectation %s" % (label, exp))
    if "rc" in a and rc != a["rc"]:
        r.append("%s: rc %d, want %d" % (label, rc, a["rc"]))
    for s in a.get("stdout_has", []):
        if s not in out:
            r.append("%s: output lacks %r" % (label, s))
    for s in a.get("output_lacks", []):
        if s in both:
            r.append("%s: output has %r" % (label, s))
    for s in a.get("stdout_re", []):
        if not re.search(s, out, re.M):
            r.append("%s: output does not match %r" % (label, s))
    for s in a.get("stdout_not_re", []):
        if re.search(s, out, re.M):
            r.append("%s: output matches %r" % (label, s))
    return r


def o3_check(fakenet):
    """Canaries reach wan only in the bound host's log, over TLS on the
    port whose certificate verifies; never anywhere else."""
    r = []
    for name in UPSTREAM_LOGS:
        p = os.path.join(fakenet, name)
        bound = [k for k, (log, _) in BOUND.items() if log == name]
        others = [S[k] for k in range(len(S)) if k not in bound]
        hits = oracles.o2_scan([p], others)
        r += ["O3: %s" % h for h in hits]
        for k in bound:
            for rec in oracles.read_jsonl(p):
                line = json.dumps(rec)
                if oracles.o2_scan_text(line, S[k]) and not (
                        rec.get("tls") and
                        rec.get("listen", "").endswith(BOUND[k][1])):
                    r.append("O3: S%d reached %s outside TLS to the bound "
                             "port" % (k + 1, name))
                    break
    return r


def evaluate(c, d, features, token):
    r = []
    needs = c.get("needs", [])
    policy = policy_of(c)
    fakenet = os.path.join(d, "fakenet")
    started = c.get("start_egressd", True) and features
    if started:
        src = read(os.path.join(d, "egressd.start_rc")).strip()
        if src != "0":
            r.append("egressd did not become ready")
    for i, a in enumerate(c["actions"]):
        r += check_action(i, a, d)
    # O1: capture and resolver log.
    mac = read(os.path.join(d, "sbx0.mac")).strip()
    r += ["O1: " + b for b in oracles.o1_pcap(os.path.join(d, "wan.pcap"),
                                               mac, c.get("o1_allow", []))]
    dns_log = os.path.join(fakenet, "dns.log")
    r += ["O1: upstream query for denied name %s" % n
          for n in oracles.o1_dns(dns_log, allowed_targets(policy),
                                  c.get("dns_log_allow", []))]
    logged = oracles.read_jsonl(dns_log)
    names = {q.get("qname_lc") for q in logged}
    for n in c.get("dns_absent", []):
        if n.lower() in names:
            r.append("upstream saw a query for %s" % n)
    if "dns_qtypes" in c:
        # egressd's own upstream health probe (the root, type NS) is not
        # the workload's: a fixed question it cannot shape.
        bad = sorted({q.get("qtype") for q in logged
                      if not (q.get("qname_lc") == "" and q.get("qtype") == "NS")}
                     - set(c["dns_qtypes"]))
        if bad:
            r.append("upstream saw qtypes %s" % ",".join(map(str, bad)))
    for h in c.get("dns_no_hex", []):
        for q in logged:
            if h.lower() in q.get("hex", ""):
                r.append("workload-chosen bytes %s reached upstream" % h)
                break
    for rx in c.get("dns_hex_not_re", []):
        for q in logged:
            if re.search(rx, q.get("hex", "")):
                r.append("upstream query matches %s" % rx)
                break
    if not c.get("sink_ok") and oracles.read_jsonl(
            os.path.join(fakenet, "sink.log")):
        r.append("attacker sink received traffic")
    if not c.get("decoy_ok") and oracles.read_jsonl(
            os.path.join(fakenet, "decoy.log")):
        r.append("a metadata/internal decoy received traffic")
    for log, words in c.get("upstream_lacks", {}).items():
        text = read(os.path.join(fakenet, log), 8 << 20)
        for w in words:
            if w in text:
                r.append("%s received %r" % (log, w))
    for log, k in c.get("upstream_has_secret", {}).items():
        if not oracles.o2_scan([os.path.join(fakenet, log)], [S[k - 1]]):
            r.append("S%d was not injected toward %s" % (k, log))
    for log in c.get("upstream_empty", []):
        if oracles.read_jsonl(os.path.join(fakenet, log)):
            r.append("%s received a request" % log)
    # O2: everything the workload received or can read, and egressd's logs.
    scan = []
    for sub in ("out", "ws"):
        for root, _, files in os.walk(os.path.join(d, sub)):
            scan += [os.path.join(root, f) for f in files]
    scan += [os.path.join(d, "egressd.log"), os.path.join(d, "egressd.out")]
    r += ["O2: " + h for h in oracles.o2_scan(scan)]
    # The control-plane token never reaches the workload (invariant 17).
    for i, a in enumerate(c["actions"]):
        if a.get("as", "ws") in ("ws", "raw", "admin"):
            o = os.path.join(d, "out", "action.%d" % i)
            if token and token in read(o + ".stdout") + read(o + ".stderr"):
                r.append("API token visible to the workload")
    for f in ("egressd.log", "egressd.out"):
        if token and token in read(os.path.join(d, f), 8 << 20):
            r.append("API token written to %s" % f)
    # O3
    if c.get("vault"):
        r += o3_check(fakenet)
    # O5 / O6
    elog = read(os.path.join(d, "egressd.log"), 8 << 20)
    r += ["O6: egressd stderr has %r" % m for m in oracles.o6_scan(elog)]
    if started and read(os.path.join(d, "egressd.start_rc")).strip() == "0":
        if read(os.path.join(d, "egressd.alive")).strip() != "alive" and \
                not c.get("egressd_may_exit"):
            r.append("O5: egressd exited during the case")
        hz = read(os.path.join(d, "healthz.code")).strip()
        if "api" in features and hz != "200" and \
                not c.get("egressd_may_exit"):
            r.append("O5: /healthz answered %r" % hz)
    missing = [f for f in needs if f not in features]
    return r, missing


TRACE_RULE = re.compile(r'^trace id (\S+) inet egressd filter rule .*log prefix '
                        r'"egressd:([a-z_]+)".*\(verdict drop\)')
TRACE_HANDLE = re.compile(r'^trace id (\S+) inet egressd filter unknown rule handle (\d+) '
                          r'\(verdict drop\)')
ADD_RULE = re.compile(r'^add rule inet egressd filter (.*) # handle (\d+)$')
NEW_GEN = re.compile(r'^# new generation \d+ by process (\d+) \((.*)\)')
LOG_PREFIX = re.compile(r'log prefix "egressd:([a-z_]+)"')
TRACE_PKT = re.compile(r'^trace id (\S+) inet egressd filter packet: (.*)$')


ICMP_TYPES = {
    "icmp": {"echo-reply": 0, "destination-unreachable": 3, "source-quench": 4,
             "redirect": 5, "echo-request": 8, "router-advertisement": 9,
             "router-solicitation": 10, "time-exceeded": 11, "parameter-problem": 12,
             "timestamp-request": 13, "timestamp-reply": 14, "info-request": 15,
             "info-reply": 16, "address-mask-request": 17, "address-mask-reply": 18},
    "icmpv6": {"destination-unreachable": 1, "packet-too-big": 2, "time-exceeded": 3,
               "parameter-problem": 4, "echo-request": 128, "echo-reply": 129,
               "mld-listener-query": 130, "mld-listener-report": 131,
               "mld-listener-done": 132, "mld-listener-reduction": 132,
               "nd-router-solicit": 133, "nd-router-advert": 134,
               "nd-neighbor-solicit": 135, "nd-neighbor-advert": 136, "nd-redirect": 137,
               "router-renumbering": 138, "ind-neighbor-solicit": 141,
               "ind-neighbor-advert": 142, "mld2-listener-report": 143},
}


def trace_key(rule, pkt):
    """(rule, proto, daddr, dport) of a traced packet, as egressd keys it."""
    f = pkt.split()
    daddr = None
    for i in range(len(f) - 2):
        if f[i] in ("ip", "ip6") and f[i + 1] == "daddr":
            daddr = f[i + 2]
    proto, port = None, None
    for l4 in ("tcp", "udp", "udplite", "sctp"):
        for i in range(len(f) - 2):
            if f[i] == l4 and f[i + 1] == "dport":
                proto, port = l4, f[i + 2]
    # Without ports the trace's protocol field may be an extension header
    # (MLD: hop-by-hop) where egressd names the transport: keyed without it,
    # by the ICMP type when the trace names one (egressd keys ICMP by type).
    if proto is None:
        for fam, names in ICMP_TYPES.items():
            for i in range(len(f) - 2):
                if f[i] == fam and f[i + 1] == "type":
                    t = f[i + 2]
                    port = "t%s" % (names.get(t, t if t.isdigit() else None),)
    return (rule, proto, daddr, port)


def o7_check(d, c, duration):
    """
    O7 (--audit): every packet the table refused (nft monitor trace) has
    exactly one conn_reject record per rule, protocol and destination
    (per 60 s window), and no record stands for a refusal that did not
    happen. Keys past the aggregation table are covered by its overflow
    line, and losses by the drop warnings.
    """
    r = []
    pkts, refused, handles, earlier = {}, {}, {}, {}
    # The kernel sends a commit's notifications after the new rules are
    # live: a packet refused in between is traced by a handle whose rule
    # is printed after it. Such traces wait for the rule.
    unknown = {}
    pid = None
    trace = read(os.path.join(d, "trace.txt"), 64 << 20)
    # A monitor that could not keep up (a flood case) saw only some packets.
    partial = "lost some netlink events" in trace
    for line in trace.splitlines():
        # Refusing rules of the workload's traffic: a reject not on a sidecar
        # mark, named by its log prefix ("?" without one: no record can
        # follow). Added rules come before the traces that use them; a
        # table installed again reuses handles, so the latest one counts.
        # A restarted egressd (a new process writes the table) starts a new
        # log: only the refusals of the last incarnation can be in it.
        m = NEW_GEN.match(line)
        if m and m.group(2) != "egressd":
            # Someone else changed the ruleset (a workload with NET_ADMIN may
            # flush it, the audit table with it): the trace may stop here.
            partial = True
            continue
        if m:
            if pid is not None and m.group(1) != pid:
                # The new one binds the group before it writes its table, so
                # refusals just before may be in its log: they excuse a
                # record, they do not demand one.
                earlier.update(refused)
                refused = {}
            pid = m.group(1)
            continue
        m = ADD_RULE.match(line.strip())
        if m:
            text, h = re.sub(r"^handle \d+ ", "", m.group(1)), m.group(2)
            if " reject" in text and not text.startswith("meta mark"):
                p = LOG_PREFIX.search(text)
                handles[h] = p.group(1) if p else "?"
            else:
                handles.pop(h, None)
            for tid in unknown.pop(h, []):
                if h in handles:
                    refused[tid] = handles[h]
            continue
        m = TRACE_PKT.match(line)
        if m:
            pkts.setdefault(m.group(1), m.group(2))
            continue
        m = TRACE_RULE.match(line)
        if m:
            refused[m.group(1)] = m.group(2)
            continue
        m = TRACE_HANDLE.match(line)
        if m and m.group(2) in handles:
            refused[m.group(1)] = handles[m.group(2)]
        elif m:
            unknown.setdefault(m.group(2), []).append(m.group(1))
    traced, excuse = {}, set()
    for tid, rule in refused.items():
        k = trace_key(rule, pkts.get(tid, ""))
        traced[k] = traced.get(k, 0) + 1
    for tid, rule in earlier.items():
        excuse.add(trace_key(rule, pkts.get(tid, "")))
    records, late = {}, set()
    overflow = lost = False
    end = read(os.path.join(d, "trace.end")).strip()
    if end:
        # The monitor is stopped by a signal: what the kernel handed it in
        # its last moments may never be written. A record from the last
        # 0.2 s before the stop is excused when untraced, never demanded.
        t = datetime.datetime.strptime(end, "%Y-%m-%dT%H:%M:%S.%fZ") - \
            datetime.timedelta(milliseconds=200)
        end = t.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (t.microsecond // 1000)
    for e in oracles.read_jsonl(os.path.join(d, "egressd.log")):
        ev = e.get("event")
        if e.get("module") != "nft":
            continue  # the intercept's own conn_reject lines are not the kernel's
        if ev == "conn_reject":
            dport = e.get("dport")
            if dport is None:
                # Without ports egressd keys by ICMP type, or by protocol.
                dport = "t%d" % e["icmp_type"] if e.get("icmp_type") is not None \
                    else "p%s" % e.get("proto")
            k = (e.get("rule"), e.get("proto") if e.get("sport") is not None else None,
                 e.get("dst"), None if dport is None else str(dport))
            records[k] = records.get(k, 0) + 1
            if end and str(e.get("ts", "")) > end:
                late.add(k)  # refused as the trace stopped, or after (egressd's own stop)
        elif ev == "conn_reject_overflow":
            overflow = True
        elif ev in ("conn_reject_dropped", "conn_reject_lost"):
            lost = True
    windows = 1 + int(duration) // 60
    def matching(k):
        # A traced packet whose ICMP type the trace did not name (MLD behind a
        # hop-by-hop header) matches its destination's record of any type.
        if k[3] is None:
            return sum(v for rk, v in records.items() if rk[0] == k[0] and rk[2] == k[2]
                       and rk[1] is None)
        return records.get(k, 0)

    for k, n in sorted(traced.items(), key=str):
        got = matching(k)
        # A refusal while egressd was down (a case that stops it) has no reader.
        if got == 0 and not (overflow or lost or c.get("egressd_may_exit")):
            r.append("O7: refusal %s (%d packets) has no conn_reject record" % (
                "/".join(map(str, k)), n))
        elif got > windows and k[3] is not None:
            r.append("O7: refusal %s has %d records" % ("/".join(map(str, k)), got))
    for k in records:
        if k not in traced and k not in excuse and k not in late and not partial and not (
                k[1] is None and ((k[0], None, k[2], None) in traced or
                                  (k[0], None, k[2], None) in excuse)):
            r.append("O7: conn_reject %s matches no refusal" % "/".join(map(str, k)))
    return r


def sweep(ns_id, d):
    """Ends what a case left (by PID, only inside its own namespaces)."""
    pids = []
    try:
        with open(os.path.join(d, "pids")) as f:
            pids = [int(x) for x in f.read().split() if x.isdigit()]
    except OSError:
        pass
    for ns in ("sbx-" + ns_id, "wan-" + ns_id):
        if os.path.exists("/run/netns/" + ns):
            out = subprocess.run(["ip", "netns", "pids", ns],
                                 capture_output=True, text=True).stdout
            pids += [int(x) for x in out.split() if x.isdigit()]
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    for ns in ("sbx-" + ns_id, "wan-" + ns_id):
        if os.path.exists("/run/netns/" + ns):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    shutil.rmtree("/etc/netns/sbx-" + ns_id, ignore_errors=True)


def run_case(c, idx, args, features, run_dir, certs):
    d = os.path.join(run_dir, c["id"])
    os.makedirs(d, exist_ok=True)
    ns_id = "%d-%d" % (os.getpid() % 100000, idx)
    write_plan(c, d, ns_id, features)
    t0 = time.time()
    limit = sum(a.get("timeout", DEFAULT_TIMEOUT) + 3
                for a in c["actions"]) + CASE_SLACK
    env = dict(os.environ, FX_CERTS=certs, EGRESSD_SRC=SRC)
    rc = None
    reasons = []
    if STOP.is_set():
        return None
    with open(os.path.join(d, "case.log"), "w") as log:
        p = subprocess.Popen(["bash", os.path.join(HERE, "case.sh"), d],
                             stdout=log, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)
        with ACTIVE_LOCK:
            ACTIVE[p.pid] = (p, ns_id, d)
        try:
            rc = p.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGTERM)
            try:
                rc = p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                rc = p.wait()
            reasons.append("case timed out after %d s" % limit)
        finally:
            with ACTIVE_LOCK:
                ACTIVE.pop(p.pid, None)
            sweep(ns_id, d)
    token = read(os.path.join(d, "private", "token")).strip()
    if rc == 99:
        reasons.append("SAFETY PRECONDITION VIOLATED")
        missing = []
    elif rc == 98:
        reasons.append("fixture error, see %s/case.log" % d)
        missing = [f for f in c.get("needs", []) if f not in features]
    elif STOP.is_set():
        return None
    else:
        more, missing = evaluate(c, d, features, token)
        reasons += more
        if AUDIT[0] and features and c.get("start_egressd", True):
            reasons += o7_check(d, c, time.time() - t0)
    res = {"id": c["id"], "title": c["title"], "prio": c["prio"],
           "profile": c["profile"], "class": c.get("class", ""),
           "needs": c.get("needs", []), "missing": missing,
           "duration_s": round(time.time() - t0, 2), "dir": d,
           "safety_violation": rc == 99}
    if missing:
        issues = sorted({c.get("issue") or FEATURE_ISSUE.get(f, 8)
                         for f in missing})
        res["status"] = "FAIL"
        res["pending"] = True
        res["issues"] = issues
        res["reasons"] = ["pending (issue %s)" % ", ".join(map(str, issues))]
        res["observed"] = reasons
    else:
        res["status"] = "FAIL" if reasons else "PASS"
        res["pending"] = False
        res["reasons"] = reasons
    return res


def preflight():
    missing = [t for t in ("ip", "nft", "tcpdump", "dig", "curl", "nc",
                           "setpriv", "timeout", "socat")
               if not shutil.which(t, path="/usr/sbin:/usr/bin:/sbin:/bin")]
    try:
        subprocess.run(["/usr/bin/python3", "-c",
                        "import dnslib, cryptography, yaml"], check=True,
                       capture_output=True)
    except (subprocess.CalledProcessError, OSError):
        missing.append("python3-dnslib/python3-cryptography/python3-yaml")
    if os.geteuid() != 0:
        missing.append("root")
    return missing


def class_counts(results):
    """passed/failed/pending per catalogue class (a pending case is also
    counted as failed, as in the totals)."""
    per = {}
    for r in results:
        k = per.setdefault(r.get("class") or "-",
                           {"passed": 0, "failed": 0, "pending": 0})
        k["passed" if r["status"] == "PASS" else "failed"] += 1
        if r["pending"]:
            k["pending"] += 1
    return dict(sorted(per.items()))


def slowest(results, n=SLOWEST):
    return sorted(results, key=lambda r: -r["duration_s"])[:n]


def main():
    ap = argparse.ArgumentParser(description="egressd exfiltration suite")
    ap.add_argument("--report", default="exfil-report.json")
    ap.add_argument("--only", action="append", default=[],
                    help="run only these ids (repeatable, comma-separated)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--keep", action="store_true",
                    help="keep the per-case directories")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--audit", action="store_true",
                    help="also check O7: every kernel refusal has exactly one "
                    "aggregated conn_reject record (nft monitor trace)")
    args = ap.parse_args()
    AUDIT[0] = args.audit
    if yaml is None:
        print("python3-yaml is missing (tests/exfil/deps.txt)")
        return 2
    cases = load_cases(os.path.join(HERE, "cases"))
    if args.list:
        for c in cases:
            print("%s %-4s %s %-12s %s" % (c["id"], c["prio"], c["profile"],
                                           c.get("class", ""), c["title"]))
        return 0
    only = {x for o in args.only for x in o.split(",") if x}
    if only:
        unknown = only - {c["id"] for c in cases}
        if unknown:
            print("unknown case ids: %s" % ", ".join(sorted(unknown)))
            return 2
        cases = [c for c in cases if c["id"] in only]
    miss = preflight()
    if miss:
        print("exfil: missing prerequisites: %s (apt-get install "
              "$(cat tests/exfil/deps.txt))" % ", ".join(miss))
        return 2
    binary = os.environ.get("EGRESSD_BIN", "")
    features, why = features_of(binary)
    print("exfil: egressd=%s features=[%s]%s" % (
        binary or "-", " ".join(features), (" (" + why + ")") if why else ""))
    run_dir = "/tmp/exfil-run-%d" % os.getpid()
    os.makedirs(run_dir, exist_ok=True)
    os.chmod(run_dir, 0o755)
    certs = os.path.join(run_dir, "certs")
    subprocess.run(["/usr/bin/python3",
                    os.path.join(HERE, "servers", "mkcerts.py"), certs],
                   check=True)

    def on_signal(signum, _frame):
        STOP.set()
        with ACTIVE_LOCK:
            for p, _, _ in ACTIVE.values():
                try:
                    p.send_signal(signal.SIGTERM)
                except OSError:
                    pass
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    results = []
    aborted = False
    t0 = time.time()
    try:
        with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as ex:
            futs = [ex.submit(run_case, c, i, args, features, run_dir, certs)
                    for i, c in enumerate(cases)]
            for f in concurrent.futures.as_completed(futs):
                res = f.result()
                if res is None:
                    continue
                results.append(res)
                why = "" if res["status"] == "PASS" else \
                    ": " + "; ".join(res["reasons"])[:600]
                print("%s %s %s%s" % (res["status"], res["id"], res["title"],
                                      why), flush=True)
                if res["safety_violation"]:
                    aborted = True
                    STOP.set()
    finally:
        with ACTIVE_LOCK:
            left = list(ACTIVE.values())
        for p, ns_id, d in left:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
            sweep(ns_id, d)
        for i, c in enumerate(cases):
            sweep("%d-%d" % (os.getpid() % 100000, i),
                  os.path.join(run_dir, c["id"]))
    results.sort(key=lambda r: r["id"])
    passed = sum(1 for r in results if r["status"] == "PASS")
    failed = len(results) - passed
    pending = [r for r in results if r["pending"]]
    hard = [r for r in results if r["status"] == "FAIL" and not r["pending"]]
    report = {"egressd": binary, "features": features,
              "duration_s": round(time.time() - t0, 1),
              "passed": passed, "failed": failed, "pending": len(pending),
              "failed_not_pending": len(hard), "interrupted": STOP.is_set(),
              "safety_abort": aborted, "classes": class_counts(results),
              "slowest": [{"id": r["id"], "duration_s": r["duration_s"]}
                          for r in slowest(results)],
              "cases": results}
    with open(args.report, "w") as f:
        json.dump(report, f, indent=1)
    if not args.keep and not hard and not STOP.is_set():
        shutil.rmtree(run_dir, ignore_errors=True)
    else:
        print("exfil: case directories kept in %s" % run_dir)
    if results:
        print("slowest: " + ", ".join("%s %.1fs" % (r["id"], r["duration_s"])
                                      for r in slowest(results)))
    if pending:
        byissue = {}
        for r in pending:
            for i in r["issues"]:
                byissue.setdefault(i, []).append(r["id"])
        print("pending: " + "; ".join(
            "issue %d: %s" % (i, " ".join(ids))
            for i, ids in sorted(byissue.items())))
    if aborted:
        print("exfil: ABORTED, the safety precondition failed")
    elif STOP.is_set():
        print("exfil: INTERRUPTED, cases not run: %d" % (len(cases) -
                                                        len(results)))
    for k, v in report["classes"].items():
        print("class %s: %d passed, %d failed (%d pending)" % (
            k, v["passed"], v["failed"], v["pending"]))
    print("%d passed, %d failed" % (passed, failed))
    if aborted or STOP.is_set():
        return 2
    return 1 if hard else 0


if __name__ == "__main__":
    sys.exit(main())
