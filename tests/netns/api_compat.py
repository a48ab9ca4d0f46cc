#!/usr/bin/python3
"""Replay an OpenSandbox SDK request sequence against egressd and check the
answers field by field (names, types, order, status, content type, exact
error text). Run inside the sandbox namespace:

    api_compat.py SEQUENCE.json HOST:PORT TOKEN

Each step of the sequence is an object:
  name, method, path            the request
  json | raw                    body: a JSON value (sent compact, as httpx
                                does) or a raw string; none means no body
  headers                       extra request headers
  noauth                        send no OPENSANDBOX-EGRESS-AUTH header
  status                        expected status code
  ctype                         expected Content-Type prefix
  json_exact                    expected JSON body, key order included
  keys                          expected top-level key order
  text                          expected exact body text
  text_prefix                   expected body prefix (text/plain errors)
  text_contains                 expected substring of a one-line text body
  header                        {name: value} expected response headers
  absent                        strings that must not appear in the answer
Prints one "ok   - ..." or "FAIL - ..." line per check; exits 1 on failure.
"""
import http.client
import json
import sys
from collections import OrderedDict

failures = 0


def report(good, what):
    global failures
    if good:
        print("ok   - " + what)
    else:
        failures += 1
        print("FAIL - " + what)


def same(a, b, path="$"):
    """Strict equality: types, key order, values. Returns a difference or None."""
    if type(a) is not type(b):
        return "%s: type %s != %s" % (path, type(a).__name__, type(b).__name__)
    if isinstance(a, OrderedDict):
        if list(a) != list(b):
            return "%s: keys %s != %s" % (path, list(a), list(b))
        for k in a:
            d = same(a[k], b[k], path + "." + k)
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return "%s: length %d != %d" % (path, len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b)):
            d = same(x, y, "%s[%d]" % (path, i))
            if d:
                return d
        return None
    return None if a == b else "%s: %r != %r" % (path, a, b)


class Client:
    """One persistent HTTP/1.1 connection, like the SDK's httpx client."""

    def __init__(self, addr, token):
        self.addr = addr
        self.token = token
        self.conn = None

    def request(self, method, path, body, headers, noauth):
        h = OrderedDict()
        h["Accept"] = "*/*"
        h["Accept-Encoding"] = "identity"
        h["Connection"] = "keep-alive"
        h["User-Agent"] = "python-httpx/0.28.1"
        if not noauth:
            h["OPENSANDBOX-EGRESS-AUTH"] = self.token
        if body is not None:
            h["Content-Type"] = "application/json"
        h.update(headers)
        for attempt in (0, 1):
            if self.conn is None:
                host, port = self.addr.rsplit(":", 1)
                self.conn = http.client.HTTPConnection(host, int(port), timeout=20)
            try:
                self.conn.request(method, path, body=body, headers=h)
                r = self.conn.getresponse()
                data = r.read()
                if (r.getheader("Connection") or "").lower() == "close":
                    self.conn.close()
                    self.conn = None
                return r.status, r.getheaders(), data
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.conn.close()
                self.conn = None
                if attempt == 1:
                    raise
                report(False, "%s %s: the server dropped a keep-alive connection" % (method, path))
        raise RuntimeError("unreachable")


def main():
    seq = json.load(open(sys.argv[1]), object_pairs_hook=OrderedDict)
    cli = Client(sys.argv[2], sys.argv[3])
    for st in seq["steps"]:
        name = st.get("name", st["method"] + " " + st["path"])
        if "json" in st:
            body = json.dumps(st["json"], ensure_ascii=False, separators=(",", ":")).encode()
        elif "raw" in st:
            body = st["raw"].encode()
        else:
            body = None
        try:
            status, headers, data = cli.request(
                st["method"], st["path"], body, st.get("headers", {}), st.get("noauth", False))
        except Exception as e:  # the answer never came
            report(False, "%s: request failed: %s" % (name, e))
            continue
        hmap = {}
        for k, v in headers:
            hmap[k.lower()] = v
        text = data.decode("utf-8", "replace")
        if "status" in st:
            report(status == st["status"], "%s: status %d (got %d)" % (name, st["status"], status))
        if "ctype" in st:
            ct = hmap.get("content-type", "")
            report(ct.startswith(st["ctype"]), "%s: Content-Type %s (got %r)" % (name, st["ctype"], ct))
        for k, v in st.get("header", {}).items():
            got = hmap.get(k.lower())
            report(got == v, "%s: header %s: %s (got %r)" % (name, k, v, got))
        parsed = None
        if "json_exact" in st or "keys" in st:
            try:
                parsed = json.loads(text, object_pairs_hook=OrderedDict)
            except ValueError:
                report(False, "%s: body is JSON (got %r)" % (name, text[:200]))
        if parsed is not None and "json_exact" in st:
            d = same(st["json_exact"], parsed)
            report(d is None, "%s: body field by field%s" % (name, "" if d is None else " (" + d + ")"))
        if parsed is not None and "keys" in st:
            got = list(parsed) if isinstance(parsed, OrderedDict) else None
            report(got == list(st["keys"]), "%s: keys %s (got %s)" % (name, list(st["keys"]), got))
        if "text" in st:
            report(text == st["text"], "%s: body %r (got %r)" % (name, st["text"], text[:200]))
        if "text_prefix" in st:
            report(text.startswith(st["text_prefix"]) and text.endswith("\n") and text.count("\n") == 1,
                   "%s: one-line text %r... (got %r)" % (name, st["text_prefix"], text[:200]))
        if "text_contains" in st:
            report(st["text_contains"] in text and text.endswith("\n") and text.count("\n") == 1,
                   "%s: one-line text containing %r (got %r)" % (name, st["text_contains"], text[:200]))
        for s in st.get("absent", []):
            blob = text + "".join("%s: %s\n" % kv for kv in headers)
            report(s not in blob, "%s: answer does not contain %r" % (name, s))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
