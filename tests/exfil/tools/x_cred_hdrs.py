#!/usr/bin/python3
"""x_cred_hdrs.py LOG [WORD]: what a fakenet upstream (or
servers/x_cred_upstream.py, whose log has no method/path/body) received, for the
credential cases (EX-136, EX-137, EX-144, EX-159..EX-171). One line per
logged request whose request line contains WORD:

  <method> <path> auth=<A> n=<N> key=<K> nk=<M> conn=<C> host=<H> tr=<T> body=<B>

A is the value of the only Authorization field (or "-"; "*" joins several),
N the number of Authorization fields (any case), K/M the same for X-Api-Key,
C the Connection field, H the Host field(s), T the trailer fields
(x_cred_upstream.py logs them), B the body. The
canaries S1-S3 are printed as <S1>..<S3>, so the output never holds a
secret. Who runs it: a harness action, reading <case>/fakenet/*.log.
"""
import json
import sys

CANARIES = ["sk-live-CANARY1-7f3c9e2ab41d4c0e9b8a6d5f4e3c2b1a",
            "sk-live-CANARY2-1c8e5a9f3b7d2e6a0f4c8b1d5e9a3c7f",
            "sk-live-CANARY3-9d2b6f0a4e8c1a5d7b3f9e2c6a0d4b8e"]


def tag(s):
    for k, c in enumerate(CANARIES, 1):
        s = s.replace(c, "<S%d>" % k)
    return s


def main():
    word = sys.argv[2] if len(sys.argv) > 2 else ""
    try:
        f = open(sys.argv[1], encoding="utf-8", errors="replace")
    except OSError:
        return 0
    for line in f:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        rl = rec.get("requestline", "")
        if word not in rl:
            continue
        hs = rec.get("headers", [])
        auth = [v for k, v in hs if k.lower() == "authorization"]
        key = [v for k, v in hs if k.lower() == "x-api-key"]
        conn = [v for k, v in hs if k.lower() == "connection"]
        words = rl.split(" ")
        tr = ",".join("%s:%s" % (k, v) for k, v in rec.get("trailers", []))
        host = [v for k, v in hs if k.lower() == "host"]
        print(tag("%s %s auth=%s n=%d key=%s nk=%d conn=%s host=%s tr=%s body=%s" % (
            rec.get("method", words[0]),
            rec.get("path", words[1] if len(words) > 1 else "?"),
            "*".join(auth) or "-", len(auth), "*".join(key) or "-",
            len(key), ",".join(conn) or "-", "*".join(host) or "-", tr or "-",
            rec.get("body", "")[:200].replace("\n", "\\n") or "-")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
