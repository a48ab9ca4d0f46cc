#!/usr/bin/python3
"""Canary leak test helper for the control API (issue 5).

  api_canary.py make SECRETS                 write fresh canary values (JSON)
  api_canary.py drive SECRETS OUT HOST:PORT TOKEN
        create a vault holding the canaries and exercise every endpoint,
        error paths included; OUT gets every response (status line,
        headers, body) and never a request body. Prints ok/FAIL lines for
        the statuses the scenario relies on.
  api_canary.py scan SECRETS FILE...         fail if any form of a canary
        (raw, base64 at every alignment, base64url, URL-encoded, JSON
        \\u-escaped, hex, reversed, any 12-char piece of its random tail)
        appears in a file.
  api_canary.py selftest SECRETS             the scanner finds planted forms.
"""
import base64
import http.client
import io
import json
import os
import re
import sys
import urllib.parse

failures = 0


def report(good, what):
    global failures
    if good:
        print("ok   - " + what)
    else:
        failures += 1
        print("FAIL - " + what)


def make(path):
    def tail():
        return os.urandom(16).hex()

    t1, t2, t3, t4 = tail(), tail(), tail(), tail()
    user_pass = "canary-user:CANARY2-" + t2
    s = {
        "bearer": "sk-live-CANARY1-" + t1,
        "basic": base64.b64encode(user_pass.encode()).decode(),
        "basic_plain": user_pass,
        "apikey": "ak-CANARY3-" + t3,
        "rotated": "sk-live-CANARY4-" + t4,
        "tails": [t1, t2, t3, t4],
    }
    with open(path, "w") as f:
        json.dump(s, f)


def needles(s):
    """(label, needle, case_insensitive) for every form of every canary."""
    out = []
    values = [s["bearer"], s["basic"], s["basic_plain"], s["apikey"], s["rotated"],
              "CANARY2-" + s["tails"][1]]
    for v in values:
        b = v.encode()
        out.append(("raw", v, False))
        out.append(("reversed", v[::-1], False))
        out.append(("url-encoded", urllib.parse.quote(v, safe=""), True))
        out.append(("url-encoded+", urllib.parse.quote_plus(v), True))
        out.append(("json-u-escaped", "".join("\\u%04x" % ord(c) for c in v), True))
        out.append(("hex", b.hex(), True))
        for shift in range(3):
            for name, enc in (("base64", base64.b64encode), ("base64url", base64.urlsafe_b64encode)):
                e = enc(b"\0" * shift + b).decode().rstrip("=")
                # drop the characters that depend on neighbouring bytes
                head = 4 if shift else 0
                core = e[head:len(e) - 3]
                if len(core) >= 12:
                    out.append(("%s@%d" % (name, shift), core, False))
    for t in s["tails"]:
        for i in range(len(t) - 11):
            out.append(("tail-piece", t[i:i + 12], True))
    return out


def scan_text(s, text):
    hits = []
    low = text.lower()
    for label, n, ci in needles(s):
        if (n.lower() in low) if ci else (n in text):
            hits.append((label, n))
    return hits


def scan(spath, files):
    s = json.load(open(spath))
    for f in files:
        try:
            text = open(f, "rb").read().decode("latin-1")
        except OSError as e:
            report(False, "%s: cannot read (%s)" % (f, e))
            continue
        hits = scan_text(s, text)
        # Name the record (response or log line) of each leak.
        records = re.split(r"\n(?=### )", text) if "### " in text else text.split("\n")
        shown = 0
        for rec in records:
            rh = scan_text(s, rec)
            if rh and shown < 20:
                shown += 1
                label, n = rh[0]
                i = rec.lower().find(n.lower())
                print("  leak (%s) in %s, record: %s\n    ...%s..." % (
                    ",".join(sorted(set(x[0] for x in rh))), os.path.basename(f),
                    rec.split("\n", 1)[0][:120],
                    rec[max(0, i - 60):i + len(n) + 30].replace("\n", "\\n")))
        report(not hits, "no canary form in %s (%d bytes)" % (os.path.basename(f), len(text)))


def selftest(spath):
    s = json.load(open(spath))
    v = s["bearer"]
    plants = {
        "raw": "x" + v + "y",
        "base64 shifted": base64.b64encode(b"ab" + v.encode() + b"cd").decode(),
        "base64url": base64.urlsafe_b64encode(b"Bearer " + s["basic_plain"].encode()).decode(),
        "url-encoded": urllib.parse.quote("k=" + s["basic"]),
        "json-u": json.dumps(v, ensure_ascii=False).replace("s", "\\u0073"),
        "hex upper": v.encode().hex().upper(),
        "reversed": v[::-1],
        "tail piece": "...%s..." % s["tails"][2][10:22],
    }
    for name, text in plants.items():
        if name == "json-u":
            text = "".join("\\u%04X" % ord(c) for c in v)
        report(bool(scan_text(s, text)), "scanner finds a planted %s canary" % name)
    report(not scan_text(s, "sk-live-CANARY1-\nrevision 12 ok " + "0" * 40),
           "scanner ignores text without a canary")


class Client:
    def __init__(self, addr, token, out):
        self.host, self.port = addr.rsplit(":", 1)
        self.token = token
        self.out = out
        self.n = 0

    def req(self, method, path, body=None, token=True, tok=None, headers=None, label=""):
        self.n += 1
        c = http.client.HTTPConnection(self.host, int(self.port), timeout=20)
        h = {"Content-Type": "application/json"}
        if token:
            h["OPENSANDBOX-EGRESS-AUTH"] = tok if tok is not None else self.token
        h.update(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            data = r.read()
            status = r.status
            # The request line is not recorded: paths may hold a canary.
            self.out.write("### #%d %s -> %d %s [%s]\n" % (self.n, method, status, r.reason, label))
            for k, v in r.getheaders():
                self.out.write("%s: %s\n" % (k, v))
            self.out.write("\n")
            self.out.write(data.decode("latin-1"))
            self.out.write("\n")
        except Exception as e:  # e.g. the server closed on an oversized body
            status = 0
            data = b""
            self.out.write("### #%d %s -> error %s [%s]\n" % (self.n, method, type(e).__name__, label))
        finally:
            c.close()
        self.out.flush()
        return status, data


def drive(spath, outpath, addr, token):
    s = json.load(open(spath))
    out = open(outpath, "w")
    cl = Client(addr, token, out)
    B, BA, K, R = s["bearer"], s["basic"], s["apikey"], s["rotated"]

    def cred(n, v):
        return {"name": n, "source": {"type": "inline", "value": v}}

    def m(host, paths=None):
        d = {"hosts": [host]}
        if paths:
            d["paths"] = paths
        return d

    creds = [cred("bearer-cred", B), cred("basic-cred", BA), cred("apikey-cred", K)]
    binds = [
        {"name": "bearer-b", "match": m("api.canary.test", ["/v1/*"]), "auth": {"type": "bearer", "credential": "bearer-cred"}},
        {"name": "basic-b", "match": m("basic.canary.test", ["/b/*"]), "auth": {"type": "basic", "credential": "basic-cred"}},
        {"name": "apikey-b", "match": m("key.canary.test", ["/k/*"]), "auth": {"type": "apiKey", "name": "X-Api-Key", "credential": "apikey-cred"}},
        {"name": "custom-b", "match": m("api.canary.test", ["/v2/*"]),
         "auth": {"type": "customHeaders", "headers": [{"name": "X-Id", "credential": "apikey-cred"},
                                                        {"name": "X-Secret", "credential": "bearer-cred"}]}},
    ]

    def expect(what, got, *want):
        report(got in want, "%s: %s (got %d)" % (what, "/".join(map(str, want)), got))

    st, _ = cl.req("POST", "/credential-vault", {"credentials": creds, "bindings": binds})
    expect("create the vault holding the canaries", st, 201)
    rev = 1

    def state():
        st, d = cl.req("GET", "/credential-vault")
        return st, d

    # Every read endpoint.
    for p in ("/credential-vault", "/credential-vault/credentials", "/credential-vault/bindings",
              "/credential-vault/credentials/bearer-cred", "/credential-vault/credentials/basic-cred",
              "/credential-vault/credentials/apikey-cred", "/credential-vault/bindings/bearer-b",
              "/credential-vault/bindings/basic-b", "/credential-vault/bindings/apikey-b",
              "/credential-vault/bindings/custom-b"):
        st, _ = cl.req("GET", p)
        expect("GET " + p, st, 200)
    for p in ("/credential-vault/credentials/nope", "/credential-vault/bindings/nope", "/credential-vault/xyz"):
        st, _ = cl.req("GET", p)
        expect("GET " + p, st, 404)
    st, _ = cl.req("GET", "/credential-vault/_active", token=False)
    expect("GET _active without auth", st, 403)
    st, _ = cl.req("GET", "/credential-vault/_active")
    expect("GET _active with auth", st, 403)
    for p in ("/policy", "/metrics", "/healthz"):
        st, _ = cl.req("GET", p)
        expect("GET " + p, st, 200)
    st, _ = cl.req("POST", "/credential-vault/credentials", {"credentials": creds})
    expect("POST to a subresource with the canaries", st, 405)
    # Canaries in paths, query strings and request headers are not echoed either.
    q = urllib.parse.quote
    for p, want in (("/credential-vault/credentials/" + B, 404), ("/credential-vault/bindings/" + q(K, safe=""), 404),
                    ("/credential-vault/" + B, 404), ("/" + B, 404), ("/policy?token=" + q(BA, safe=""), 200)):
        st, _ = cl.req("GET", p, label="canary in the path")
        expect("GET with a canary in the path or query", st, want)
    st, _ = cl.req("GET", "/policy", headers={"User-Agent": B, "X-Api-Key": K, "Authorization": "Basic " + BA},
                   label="canary in request headers")
    expect("GET /policy with canaries in request headers", st, 200)
    st, _ = cl.req("GET", "/" + K, tok=B, label="canary as token and path")
    expect("unknown path with a canary as the token", st, 401, 404)

    # Create again, with the canaries.
    st, _ = cl.req("POST", "/credential-vault", {"credentials": creds, "bindings": binds})
    expect("create again", st, 409)

    # PATCH error paths; none may change the vault.
    bad = [
        ("truncated JSON inside the canary", '{"credentials":{"add":[{"name":"t","source":{"type":"inline","value":"%s' % B[:30], (400,)),
        ("unterminated string holding the canary", '{"credentials":{"add":[{"name":"t","source":{"type":"inline","value":"%s}]}}' % B, (400,)),
        ("invalid escape after the canary", '{"credentials":{"add":[{"name":"t","source":{"type":"inline","value":"%s\\x"}}]}}' % B, (400,)),
        ("control character after the canary", '{"credentials":{"add":[{"name":"t","source":{"type":"inline","value":"%s\x01"}}]}}' % B, (400,)),
        ("invalid UTF-8 after the canary", b'{"credentials":{"add":[{"name":"t","source":{"type":"inline","value":"' + B.encode() + b'\xff\xfe"}}]}}', (400,)),
        ("the canary as a bare token", '{"credentials":%s}' % B, (400,)),
        ("the canary as an object key", '{"%s":1}' % B, (400,)),
        ("the canary as an operation name", '{"credentials":{"%s":[]}}' % K, (400,)),
        ("unknown field next to the canary", {"credentials": {"add": [dict(cred("t", B), extra=True)]}}, (400,)),
        ("unknown source field holding the canary", {"credentials": {"add": [{"name": "t", "source": {"type": "inline", "value": B, "note": K}}]}}, (400,)),
        ("the canary as the source type", {"credentials": {"add": [{"name": "t", "source": {"type": B, "value": K}}]}}, (400,)),
        ("the canary as a delete name", {"credentials": {"delete": [B]}}, (400,)),
        ("duplicate value keys", '{"credentials":{"add":[{"name":"t","source":{"type":"inline","value":"%s","value":"%s"}}]}}' % (B, K), (400,)),
        ("duplicate add names", {"credentials": {"add": [cred("d", B), cred("d", K)]}}, (400, 409)),
        ("adding an existing name", {"credentials": {"add": [cred("bearer-cred", R)]}}, (400, 409)),
        ("replacing a missing credential", {"credentials": {"replace": [cred("ghost", R)]}}, (400,)),
        ("a too-short raw value", {"credentials": {"add": [cred("short", "abc")]}}, (400,)),
        ("a value over the length limit", {"credentials": {"add": [cred("long", (B + "-") * 3000)]}}, (400, 413)),
        ("a non-string value", {"credentials": {"add": [{"name": "t", "source": {"type": "inline", "value": [B]}}]}}, (400,)),
        ("a binding to an unknown credential", {"credentials": {"add": [cred("n1", R)]}, "bindings": {"add": [{"name": "x", "match": m("api.canary.test", ["/v9/x"]), "auth": {"type": "bearer", "credential": "nope"}}]}}, (400,)),
        ("a binding to an uncovered host", {"credentials": {"add": [cred("n2", R)]}, "bindings": {"add": [{"name": "y", "match": m("evil.example.net", ["/y"]), "auth": {"type": "bearer", "credential": "n2"}}]}}, (400,)),
        ("an ambiguous binding", {"credentials": {"add": [cred("n3", R)]}, "bindings": {"add": [{"name": "z", "match": m("api.canary.test", ["/v1/x"]), "auth": {"type": "bearer", "credential": "n3"}}]}}, (400,)),
        ("the canary as a header name", {"credentials": {"add": [cred("n4", R)]}, "bindings": {"add": [{"name": "h", "match": m("key.canary.test", ["/h"]), "auth": {"type": "apiKey", "name": B + ":", "credential": "n4"}}]}}, (400,)),
        ("deleting a credential in use", {"credentials": {"delete": ["bearer-cred"]}}, (400,)),
        ("a stale expectedRevision", {"expectedRevision": 99, "credentials": {"replace": [cred("bearer-cred", R)]}}, (409,)),
        ("the canary as expectedRevision", {"expectedRevision": B, "credentials": {"replace": [cred("bearer-cred", R)]}}, (400,)),
    ]
    for what, body, want in bad:
        st, _ = cl.req("PATCH", "/credential-vault", body, label="PATCH with " + what)
        expect("PATCH with " + what, st, *want)
    big = json.dumps({"credentials": {"add": [cred("big%d" % i, B) for i in range(20000)]}})
    st, _ = cl.req("PATCH", "/credential-vault", big)
    expect("PATCH over 1 MiB full of canaries", st, 400, 413, 0)
    st, d = state()
    report(st == 200 and json.loads(d)["revision"] == rev, "refused PATCHes left the revision at %d" % rev)

    # Policy changes that fail because of the bindings, and invalid policies holding a canary.
    st, _ = cl.req("DELETE", "/policy", ["api.canary.test"])
    expect("DELETE /policy of a covering rule", st, 400)
    st, _ = cl.req("POST", "/policy", "")
    expect("policy reset while bindings exist", st, 400)
    st, _ = cl.req("PATCH", "/policy", [{"action": "deny", "target": "key.canary.test"}])
    expect("PATCH /policy denying a bound host", st, 400)
    st, _ = cl.req("POST", "/policy", '{"defaultAction":"deny","egress":[{"action":"allow","target":"%s' % B)
    expect("POST /policy truncated inside a canary", st, 400)
    st, _ = cl.req("PATCH", "/policy", '[{"action":"allow","target":"x.canary.test","%s":1}' % K)
    expect("PATCH /policy with the canary as a key", st, 400)

    # Auth failures with a canary as the token.
    st, _ = cl.req("GET", "/credential-vault", tok=B)
    expect("a canary as the token", st, 401)
    st, _ = cl.req("PATCH", "/credential-vault", {"credentials": {"replace": [cred("bearer-cred", R)]}}, tok=K)
    expect("a PATCH holding a canary with a wrong token", st, 401)

    # A good rotation, then reads again.
    st, _ = cl.req("PATCH", "/credential-vault", {"expectedRevision": rev, "credentials": {"replace": [cred("bearer-cred", R)]}})
    expect("rotate the bearer credential", st, 200)
    for p in ("/credential-vault", "/credential-vault/credentials", "/credential-vault/bindings",
              "/credential-vault/credentials/bearer-cred", "/metrics"):
        st, _ = cl.req("GET", p)
        expect("GET " + p + " after rotation", st, 200)

    # Delete, then create error paths while no vault exists.
    st, _ = cl.req("DELETE", "/credential-vault")
    expect("DELETE the vault", st, 204)
    post_bad = [
        ("truncated JSON inside the canary", '{"credentials":[{"name":"t","source":{"type":"inline","value":"%s' % B[:30]),
        ("the canary as an unknown top field", '{"credentials":[],"bindings":[],"%s":1}' % B),
        ("unknown field next to the canary", {"credentials": [dict(cred("t", B), extra=1)], "bindings": []}),
        ("duplicate names", {"credentials": [cred("d", B), cred("d", K)], "bindings": []}),
        ("a too-short raw value beside the canary", {"credentials": [cred("b", "abc"), cred("c", B)], "bindings": []}),
        ("an empty value beside the canary", {"credentials": [cred("e", ""), cred("c", B)], "bindings": []}),
        ("an uncovered binding", {"credentials": [cred("c", B)], "bindings": [{"name": "u", "match": m("evil.example.net", ["/u"]), "auth": {"type": "bearer", "credential": "c"}}]}),
    ]
    for what, body in post_bad:
        st, _ = cl.req("POST", "/credential-vault", body, label="POST with " + what)
        expect("POST with " + what, st, 400)
    st, _ = cl.req("GET", "/credential-vault")
    expect("no vault after refused creates", st, 404)
    st, _ = cl.req("POST", "/credential-vault", {"credentials": creds, "bindings": binds})
    expect("create the vault again", st, 201)
    st, _ = cl.req("GET", "/credential-vault")
    expect("GET the new vault", st, 200)
    every_field(cl, s, outpath, {"credentials": creds, "bindings": binds}, expect)
    out.close()


# ---- issue 15 item 8: a canary in every field of every JSON shape ----

def leaves(o, path=()):
    """(path, kind) of every string leaf ("value"), every key ("key") and
    every object ("obj", where an unknown key is added)."""
    if isinstance(o, dict):
        yield path, "obj"
        for k, v in o.items():
            yield path + (k,), "key"
            yield from leaves(v, path + (k,))
    elif isinstance(o, list):
        for i, v in enumerate(o):
            yield from leaves(v, path + (i,))
    elif o is not None:
        yield path, "value"  # strings, numbers and booleans alike


def mutate(doc, path, kind, val):
    d = json.loads(json.dumps(doc))
    if kind == "obj":
        t = d
        for p in path:
            t = t[p]
        t[val] = val
        return d
    t = d
    for p in path[:-1]:
        t = t[p]
    if kind == "key":
        t[val] = t.pop(path[-1])
    else:
        t[path[-1]] = val
    return d


def shaped(s, path):
    """Canary values shaped to pass the first check of the field they go in."""
    B, tail = s["bearer"], s["tails"][0]
    last = [p for p in path if isinstance(p, str)][-1] if path else ""
    out = [B, B + "\r\nX-Injected: 1", " " + B + "\t"]
    if "hosts" in path:
        out += ["c" + tail + ".uncovered.test", "*.c" + tail + ".uncovered.test", "c" + tail]
    elif "paths" in path:
        out += ["/" + B, "/" + B + "*", "/*" + B]
    elif last == "path":
        out += ["/run/" + B]
    elif last == "name" and "source" in path:
        out += ["CANARY_" + tail]
    elif last == "name" or "methods" in path:
        out += ["X-" + B, B.upper()]
    elif last == "target":
        out += ["c" + tail + ".uncovered.test", "*.c" + tail + ".test", "c" + tail + ".test:443"]
    elif "ports" in path:
        out += [tail, "1-" + tail]
    return out


def every_field(cl, s, outpath, base, expect):
    """Put canaries in every field and key of the vault create, vault PATCH
    and policy bodies, alone and followed by a poison that fails later
    (at parse, at the coverage check, at the secret load), and record
    every answer. A write that is accepted (a canary can be a valid name)
    is recorded apart, because its State lawfully shows the names, and
    undone; every other answer is scanned."""
    acc = open(outpath + ".accepted", "w")
    B, K = s["bearer"], s["apikey"]

    def cred(n, v):
        return {"name": n, "source": {"type": "inline", "value": v}}

    create = {
        "credentials": [cred("fc-inline", K), {"name": "fc-file", "source": {"type": "file", "path": "/run/fc"}},
                        {"name": "fc-env", "source": {"type": "env", "name": "FC_ENV"}}],
        "bindings": [
            {"name": "fb-bearer", "match": {"schemes": ["https"], "ports": [443], "hosts": ["api.canary.test"],
                                            "methods": ["GET"], "paths": ["/f/*"]},
             "auth": {"type": "bearer", "credential": "fc-inline"}},
            {"name": "fb-key", "allowBroad": True, "match": {"hosts": ["key.canary.test"], "paths": ["/*"]},
             "auth": {"type": "apiKey", "name": "X-Key", "credential": "fc-inline"}},
            {"name": "fb-custom", "match": {"hosts": ["basic.canary.test"], "paths": ["/c"]},
             "auth": {"type": "customHeaders", "headers": [{"name": "X-Id", "credential": "fc-inline"}]}},
        ]}
    poisons = {
        "alone": None,
        "then an unknown credential": {"name": "zz-p1", "match": {"hosts": ["api.canary.test"], "paths": ["/zz1"]},
                                       "auth": {"type": "bearer", "credential": "zz-missing"}},
        "then an uncovered host": {"name": "zz-p2", "match": {"hosts": ["zz.uncovered.test"], "paths": ["/zz2"]},
                                   "auth": {"type": "bearer", "credential": "fc-inline"}},
    }
    n = refused = 0

    def send(method, path, body, label, vault_write):
        nonlocal n, refused
        n += 1
        saved, cl.out = cl.out, io.StringIO()
        st, _ = cl.req(method, path, body, label=label)
        buf, cl.out = cl.out.getvalue(), saved
        if 200 <= st < 300 and vault_write:
            # Accepted: the State holds the names it was given; kept apart.
            acc.write(buf)
            return st
        refused += 1
        cl.out.write(buf)
        cl.out.flush()
        return st

    cl.req("DELETE", "/credential-vault")
    docs = []  # (method, path, body, label, vault_write, undo)
    for path, kind in list(leaves(create)):
        vals = [B] if kind != "value" else shaped(s, path)
        for v in vals:
            for pn, poison in poisons.items():
                d = mutate(create, path, kind, v)
                if poison is not None:
                    d.setdefault("bindings", []).append(poison)
                docs.append(("POST", "/credential-vault", d, "create: %s %s %s" % (kind, ".".join(map(str, path)), pn)))
    # The file and env sources fail at load: their canaries must not come back either.
    for v in ("/run/" + B, "/" + B):
        d = json.loads(json.dumps(create))
        d["credentials"][1]["source"]["path"] = v
        docs.append(("POST", "/credential-vault", d, "create: a file path that cannot be read"))
    d = json.loads(json.dumps(create))
    d["credentials"][2]["source"]["name"] = "CANARY_" + s["tails"][0]
    docs.append(("POST", "/credential-vault", d, "create: an env name that is not set"))
    for method, path, body, label in docs:
        st = send(method, path, body, label, True)
        if 200 <= st < 300:
            cl.out, saved = acc, cl.out
            cl.req("DELETE", "/credential-vault", label="undo")
            cl.out = saved
    # The create template loads only with its file and env sources removed.
    base_ok = json.loads(json.dumps(create))
    base_ok["credentials"] = base_ok["credentials"][:1]
    st, _ = cl.req("POST", "/credential-vault", base_ok, label="create the fields base")
    expect("create the fields base", st, 201)

    # PATCH: add, replace and delete, with every field and key a canary.
    patch = {"expectedRevision": 1,
             "credentials": {"add": [cred("pc-add", K)], "replace": [cred("fc-inline", K)], "delete": []},
             "bindings": {"add": [{"name": "pb-add", "match": {"hosts": ["api.canary.test"], "methods": ["POST"],
                                                                 "paths": ["/p"]},
                                   "auth": {"type": "bearer", "credential": "pc-add"}}],
                          "replace": [create["bindings"][2]], "delete": ["fb-key"]}}
    pdocs = []
    for path, kind in list(leaves(patch)):
        vals = [B] if kind != "value" else shaped(s, path)
        for v in vals:
            for pn, poison in poisons.items():
                d = mutate(patch, path, kind, v)
                if poison is not None and isinstance(d.get("bindings"), dict) and isinstance(d["bindings"].get("add"), list):
                    d["bindings"]["add"].append(poison)
                pdocs.append(d)
                d2 = json.loads(json.dumps(d))
                d2.pop("expectedRevision", None)
                pdocs.append(d2)
    for d in pdocs:
        st = send("PATCH", "/credential-vault", d, "patch with a canary", True)
        if 200 <= st < 300:
            cl.out, saved = acc, cl.out
            cl.req("DELETE", "/credential-vault", label="undo")
            cl.req("POST", "/credential-vault", base_ok, label="undo")
            cl.out = saved
    for what in ("delete", "replace"):
        for v in (B, " " + B):
            body = {"credentials": {what: [v] if what == "delete" else [cred(v, K)]}}
            send("PATCH", "/credential-vault", body, "patch %s of a missing canary name" % what, True)

    # Policy: every string field and key, for POST, PUT, PATCH and DELETE.
    policy = {"defaultAction": "deny", "egress": [
        {"action": "allow", "target": "api.canary.test", "ports": [443, "8000-8100"]},
        {"action": "allow", "target": "basic.canary.test"}, {"action": "allow", "target": "key.canary.test"},
        {"action": "deny", "target": "x.canary.test"}]}
    for path, kind in list(leaves(policy)):
        vals = [B] if kind != "value" else shaped(s, path)
        for v in vals:
            for poison in (None, {"action": "allow", "target": ""}):
                d = mutate(policy, path, kind, v)
                if poison is not None and isinstance(d.get("egress"), list):
                    d["egress"].append(poison)
                for method in ("POST", "PUT"):
                    send(method, "/policy", d, "policy with a canary", False)
                if isinstance(d.get("egress"), list):
                    send("PATCH", "/policy", d["egress"], "policy patch with a canary", False)
    for v in (B, [B], [B, 1], [{"target": B}], {"target": B}):
        send("DELETE", "/policy", v, "policy delete of a canary", False)
    st, _ = cl.req("POST", "/policy", policy, label="restore the policy")
    expect("restore the policy", st, 200)
    acc.close()
    report(n > 500 and refused > n // 2, "every field phase done: %d requests, %d recorded for the scan" % (n, refused))


def main():
    cmd = sys.argv[1]
    if cmd == "make":
        make(sys.argv[2])
    elif cmd == "drive":
        drive(*sys.argv[2:6])
    elif cmd == "scan":
        scan(sys.argv[2], sys.argv[3:])
    elif cmd == "selftest":
        selftest(sys.argv[2])
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
