#!/usr/bin/python3
"""Rewrite the case table and the counts of tests/exfil/README.md from the
case files (id, prio, profile, class, title), so the README lists exactly
the cases that run. Usage: tests/exfil/tools/readme_table.py [README]"""
import collections
import glob
import os
import re
import sys

import yaml

here = os.path.dirname(os.path.abspath(__file__))
readme = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "README.md")
cases = []
for f in sorted(glob.glob(os.path.join(here, "..", "cases", "*.yaml"))):
    with open(f) as fh:
        c = yaml.safe_load(fh)
    cases.append(c)


def key(c):
    m = re.match(r"^(EX|INV)-(\d+)([a-z]?)$", c["id"])
    return (m.group(1) != "EX", int(m.group(2)), m.group(3))


cases.sort(key=key)
rows = ["| id | prio | profile | class | title |", "| --- | --- | --- | --- | --- |"]
for c in cases:
    rows.append("| %s | %s | %s | %s | %s |" % (c["id"], c.get("prio", ""), c.get("profile", ""),
                                               c.get("class", ""), c["title"].replace("|", "\\|")))
by_class = collections.Counter(c.get("class", "?") for c in cases)
by_prio = collections.Counter(c.get("prio", "?") for c in cases)
ids = {re.sub(r"[a-z]$", "", c["id"]) for c in cases if c["id"].startswith("EX-")}
catalog = os.path.join(here, "..", "..", "..", "..", "shared", "exfil", "catalog.md")
if os.path.exists(catalog):
    ids &= set(re.findall(r"^### (EX-\d{3}) ", open(catalog).read(), re.M))
inv = sum(1 for c in cases if c["id"].startswith("INV-"))
count = "%d cases: %s.\nBy priority: %s. They cover %d of the catalogue's ids and %d of its invariants." % (
    len(cases), ", ".join("%d %s" % (n, k) for k, n in by_class.most_common()),
    ", ".join("%d %s" % (by_prio[k], k) for k in sorted(by_prio)), len(ids), inv)
text = open(readme).read()
text = re.sub(r"^\d+ cases: .*?\nBy priority: [^\n]*", count, text, count=1, flags=re.M | re.S)
start = text.index("| id | prio | profile | class | title |")
end = text.index("\n\n", start)
text = text[:start] + "\n".join(rows) + text[end:]
open(readme, "w").write(text)
print(count)
