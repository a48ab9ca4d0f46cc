#!/usr/bin/python3
"""x_framing_log.py LOG...: summarise what an upstream parsed, for the
request-parsing exfil cases (catalogue EX-111..134).

Who runs it: an exfil case's harness action (root, case shell), on
fakenet's echo logs (api.log, ...) or on servers/x_framing_upstream.py's
x_framing.log. One line per request the upstream parsed:

  REQ <request line> host=[...] cl=[...] te=[...] auth=yes|no body=<repr>

host/cl/te list every Host, Content-Length and Transfer-Encoding value the
upstream received; auth says whether an Authorization header arrived (its
value is never printed: action outputs are scanned for the canaries); body
is the request body (repr, at most 80 characters; non-printables escaped).
With --raw STR (on x_framing_raw.log), one line per connection instead:

  RAW conn=N bytes=B has=yes|no

saying whether the bytes that connection received contain STR.
Exit status 0.
"""
import json
import sys


def summary(r):
    if "headers" in r:  # fakenet echo
        hs = r["headers"]
        body = r.get("body", "")
    elif "header_names" in r:  # x_framing_upstream
        hs = [[k, ""] for k in r["header_names"]]
        body = bytes.fromhex(r.get("body_hex", "")).decode("latin-1")
        for k, v in (("host", r.get("host", [])),
                     ("content-length", r["content_length"]),
                     ("transfer-encoding", r["transfer_encoding"])):
            hs = [h for h in hs if h[0].strip().lower() != k] + \
                 [[k, x] for x in v]
    else:
        return None

    def vals(name):
        return [v for k, v in hs if k.strip().lower() == name]
    auth = "yes" if vals("authorization") or r.get("authorization") else "no"
    return "REQ %s host=%s cl=%s te=%s auth=%s body=%s" % (
        r.get("requestline", "").encode("unicode_escape").decode(),
        vals("host"), vals("content-length"), vals("transfer-encoding"),
        auth, ascii(body[:80]))


def main():
    args = sys.argv[1:]
    raw = None
    if args[:1] == ["--raw"]:
        raw, args = args[1].encode("latin-1"), args[2:]
    for p in args:
        try:
            f = open(p, encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in f:
            try:
                if raw is not None:
                    r = json.loads(line)
                    b = bytes.fromhex(r.get("raw_hex", ""))
                    print("RAW conn=%s bytes=%d has=%s" % (
                        r.get("conn"), len(b), "yes" if raw in b else "no"))
                    continue
                s = summary(json.loads(line))
            except ValueError:
                continue
            if s:
                print(s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
