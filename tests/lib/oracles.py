#!/usr/bin/python3
"""oracles.py: the catalogue's oracles over the files a case leaves behind.

Who runs it: tests/exfil/runner.py (imported) and tests/lib/fixture.sh
(fx_o1_check, as a command). Reads files only; never opens a socket.

  o1_pcap(pcap, sbx_mac, allow)  frames that left sbx toward wan other than
                                 the allowed proto:addr:port flows (O1)
  o1_dns(dns_log, allowed_names) queries the policy does not allow (O1)
  needles(secret)                every encoding O2 names
  o2_scan(paths, secrets)        which secret encodings appear where (O2)
  o6_scan(text)                  sanitizer reports (O6)

Command line: oracles.py o1 --pcap F --mac M [proto:addr:port ...]
              oracles.py o2 FILE...   (scans for the canaries of fixture.sh)
"""
import base64
import ipaddress
import json
import os
import struct
import sys

CANARIES = [
    "sk-live-CANARY1-7f3c9e2ab41d4c0e9b8a6d5f4e3c2b1a",
    "sk-live-CANARY2-1c8e5a9f3b7d2e6a0f4c8b1d5e9a3c7f",
    "sk-live-CANARY3-9d2b6f0a4e8c1a5d7b3f9e2c6a0d4b8e",
]
CANARY_PREFIX_LEN = len("sk-live-CANARY1-")
SUBSTRING_LEN = 12
SCAN_MAX = 64 * 1024 * 1024
SAN_MARKERS = ("ERROR: AddressSanitizer", "runtime error:",
               "ERROR: LeakSanitizer", "AddressSanitizer:DEADLYSIGNAL",
               "SUMMARY: UndefinedBehaviorSanitizer")
# egressd's own upstream DNS is always allowed to leave.
DEFAULT_ALLOW = ["udp:203.0.113.53:53", "tcp:203.0.113.53:53",
                 "udp:2001:db8::53:53", "tcp:2001:db8::53:53"]
SANDBOX_NETS = ["10.200.0.0/24", "fd00:200::/64"]  # the fixture's sbx0 (tests/lib/fixture.sh)
ND_TYPES = {133, 134, 135, 136, 143, 130, 131, 132}


def _b64_aligned(b):
    """Base64 of b at the three alignments it can take inside a larger
    blob, cut to the characters that depend only on b."""
    out = []
    for pad in range(3):
        enc = base64.b64encode(b"\0" * pad + b)
        core = enc[4 if pad else 0:-4]
        if len(core) >= 8:
            out.append(core)
    return out


def needles(secret, basic_user="user"):
    """Every encoding O2 names, as (label, bytes, case_insensitive)."""
    s = secret.encode()
    tail = secret[CANARY_PREFIX_LEN:]
    n = [("raw", s, False),
         ("bearer", b"Bearer " + s, False),
         ("basic", base64.b64encode(basic_user.encode() + b":" + s), False),
         ("base64", base64.b64encode(s), False),
         ("base64url", base64.urlsafe_b64encode(s).rstrip(b"="), False),
         ("hex", s.hex().encode(), True),
         ("pct", "".join("%%%02X" % c for c in s).encode(), True),
         ("json-u", "".join("\\u%04x" % c for c in s).encode(), True),
         ("reversed", s[::-1], False)]
    for i, c in enumerate(_b64_aligned(s)):
        n.append(("base64@%d" % i, c, False))
        n.append(("base64url@%d" % i,
                  c.replace(b"+", b"-").replace(b"/", b"_"), False))
    for i in range(len(tail) - SUBSTRING_LEN + 1):
        n.append(("tail[%d:%d]" % (i, i + SUBSTRING_LEN),
                  tail[i:i + SUBSTRING_LEN].encode(), False))
    return n


def o2_scan(paths, secrets=CANARIES):
    """Returns a list of 'file: secret#k as label' findings."""
    found = []
    tables = [(k, needles(sec)) for k, sec in enumerate(secrets, 1)]
    for p in paths:
        try:
            with open(p, "rb") as f:
                data = f.read(SCAN_MAX)
        except OSError:
            continue
        low = data.lower()
        for k, table in tables:
            for label, nd, ci in table:
                if (nd.lower() in low) if ci else (nd in data):
                    found.append("%s: S%d as %s" % (os.path.basename(p), k,
                                                     label))
                    break
    return found


def o2_scan_text(text, secret):
    """True when text holds secret in any O2 encoding."""
    data = text.encode("utf-8", "replace")
    low = data.lower()
    for _, nd, ci in needles(secret):
        if (nd.lower() in low) if ci else (nd in data):
            return True
    return False


def o6_scan(text):
    return [m for m in SAN_MARKERS if m in text]


def _parse_allow(allow):
    out = set()
    for a in allow:
        proto, rest = a.split(":", 1)
        addr, port = rest.rsplit(":", 1)
        out.add((proto, str(ipaddress.ip_address(addr.strip("[]"))),
                 int(port) if port != "*" else None))
    return out


def _allowed(rules, proto, dst, port):
    for p, a, pt in rules:
        if p in (proto, "any") and a == dst and (pt is None or pt == port):
            return True
    return False


def _icmp_error_about_allowed(rules, proto, dst, l4):
    """A destination-unreachable the sandbox's kernel sends back to a peer
    about a packet that peer sent from an endpoint the case allows (a late
    answer of the resolver to a socket of the sidecar that just closed):
    it quotes the peer's own bytes, never the workload's."""
    if proto == 1 and len(l4) >= 8 + 20 + 4 and l4[0] == 3:
        inner = l4[8:]
        ihl = (inner[0] & 15) * 4
        iproto, isrc = inner[9], str(ipaddress.ip_address(inner[12:16]))
        idst = str(ipaddress.ip_address(inner[16:20]))
        il4 = inner[ihl:]
    elif proto == 58 and len(l4) >= 8 + 40 + 4 and l4[0] == 1:
        inner = l4[8:]
        iproto, isrc = inner[6], str(ipaddress.ip_address(inner[8:24]))
        idst = str(ipaddress.ip_address(inner[24:40]))
        il4 = inner[40:]
    else:
        return False
    # Quoting a packet from the peer to the sandbox's own network only.
    if (iproto not in (6, 17) or len(il4) < 4 or isrc != dst or
            not any(ipaddress.ip_address(idst) in ipaddress.ip_network(n) for n in SANDBOX_NETS)):
        return False
    sport = struct.unpack("!H", il4[0:2])[0]
    return _allowed(rules, "tcp" if iproto == 6 else "udp", dst, sport)


def o1_pcap(pcap, sbx_mac, allow=()):
    """Frames from sbx0 (by source MAC, so forged IP sources count too)
    that go anywhere the case does not allow. Returns violations."""
    rules = _parse_allow(list(DEFAULT_ALLOW) + list(allow))
    mac = bytes.fromhex(sbx_mac.replace(":", ""))
    bad = []
    try:
        with open(pcap, "rb") as f:
            data = f.read(SCAN_MAX)
    except OSError as e:
        return ["no capture: %s" % e]
    if len(data) < 24:
        return ["capture is empty or truncated"]
    magic = data[:4]
    endian = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    linktype = struct.unpack(endian + "I", data[20:24])[0]
    if linktype != 1:
        return ["unexpected link type %d" % linktype]
    off = 24
    while off + 16 <= len(data):
        incl = struct.unpack(endian + "I", data[off + 8:off + 12])[0]
        fr = data[off + 16:off + 16 + incl]
        off += 16 + incl
        if len(fr) < 14 or fr[6:12] != mac:
            continue
        et = struct.unpack("!H", fr[12:14])[0]
        p = fr[14:]
        if et == 0x8100 and len(p) >= 4:
            bad.append("VLAN-tagged frame")
            continue
        if et == 0x0806:
            continue  # ARP for the gateway
        if et == 0x0800 and len(p) >= 20:
            ihl = (p[0] & 15) * 4
            proto = p[9]
            dst = str(ipaddress.ip_address(p[16:20]))
            l4 = p[ihl:]
        elif et == 0x86DD and len(p) >= 40:
            proto = p[6]
            dst = str(ipaddress.ip_address(p[24:40]))
            l4 = p[40:]
            if proto == 58 and l4 and l4[0] in ND_TYPES:
                continue  # neighbour discovery / MLD on the link
            if proto == 0 and ipaddress.ip_address(dst).is_multicast:
                continue  # MLD reports (hop-by-hop header)
        else:
            bad.append("non-IP frame ethertype 0x%04x" % et)
            continue
        if proto in (6, 17) and len(l4) >= 4:
            port = struct.unpack("!H", l4[2:4])[0]
            name = "tcp" if proto == 6 else "udp"
            if not _allowed(rules, name, dst, port):
                bad.append("%s to %s port %d" % (name, dst, port))
        else:
            name = {1: "icmp", 58: "icmp6"}.get(proto, "proto%d" % proto)
            if _icmp_error_about_allowed(rules, proto, dst, l4):
                continue
            if not _allowed(rules, name, dst, 0):
                bad.append("%s to %s" % (name, dst))
    # one line per distinct flow
    seen = []
    for b in bad:
        if b not in seen:
            seen.append(b)
    return seen


def name_allowed(name, targets):
    name = name.lower().rstrip(".")
    for t in targets:
        t = t.lower().rstrip(".")
        if t.startswith("*."):
            if name.endswith(t[1:]) and name != t[2:]:
                return True
        elif name == t:
            return True
    return False


def read_jsonl(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return out


def o1_dns(dns_log, targets, extra=()):
    """Names that reached the fake resolver although the policy denies them."""
    bad = []
    for r in read_jsonl(dns_log):
        q = r.get("qname_lc")
        if q is None:
            bad.append("unparsable query reached upstream (%d bytes)" %
                       r.get("len", 0))
            continue
        # egressd's own upstream health probe (the root, type NS): a fixed
        # question the workload cannot shape, not a name it asked for.
        if q == "" and r.get("qtype") == "NS":
            continue
        if not name_allowed(q, list(targets) + list(extra)):
            if q not in bad:
                bad.append(q)
    return bad


def main(argv):
    if len(argv) >= 2 and argv[1] == "o1":
        pcap = mac = None
        allow = []
        i = 2
        while i < len(argv):
            if argv[i] == "--pcap":
                pcap = argv[i + 1]
                i += 2
            elif argv[i] == "--mac":
                mac = argv[i + 1]
                i += 2
            else:
                allow.append(argv[i])
                i += 1
        bad = o1_pcap(pcap, mac, allow)
        for b in bad:
            print("O1: " + b)
        return 1 if bad else 0
    if len(argv) >= 2 and argv[1] == "o2":
        bad = o2_scan(argv[2:])
        for b in bad:
            print("O2: " + b)
        return 1 if bad else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
