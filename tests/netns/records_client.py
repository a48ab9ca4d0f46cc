#!/usr/bin/env python3
"""The workload's side of test_records.sh: one keep-alive HTTPS connection;
one request, then "ready" in DIR/state, waits for DIR/go (bounded), then N
requests, each answer checked, then "done".
usage: records_client.py CA DIR N"""
import http.client
import os
import ssl
import sys
import time

ca, state, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
ctx = ssl.create_default_context(cafile=ca)
c = http.client.HTTPSConnection("api.allowed.test", 443, context=ctx, timeout=10)


def one():
    c.request("GET", "/length")
    r = c.getresponse()
    return r.status == 200 and r.read() == b"hello world!"


if not one():
    print("bad first request")
    sys.exit(1)
with open(os.path.join(state, "state"), "w") as f:
    f.write("ready\n")
for _ in range(600):
    if os.path.exists(os.path.join(state, "go")):
        break
    time.sleep(0.1)
else:
    print("bad no go")
    sys.exit(1)
for i in range(n):
    if not one():
        print("bad request %d" % i)
        sys.exit(1)
print("ok %d requests" % n)
