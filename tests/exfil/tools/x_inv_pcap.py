#!/usr/bin/python3
"""x_inv_pcap.py: read fields of the frames the sandbox sent, from wan.pcap.

Who runs it: exfil cases (harness actions) of the x-inv batch, after the
traffic they look at. Stdlib only; reads at most 64 MiB of the capture.

  x_inv_pcap.py PCAP MAC fields DST PORT   one line per IPv4/IPv6 TCP or UDP
      frame from MAC to DST:PORT: "tos=0x.. ttl=N mss=N|- syn=0|1"
  x_inv_pcap.py PCAP MAC grep STRING       "frames=N": frames from MAC whose
      bytes contain STRING
  x_inv_pcap.py PCAP MAC qtypes DST        "qtypes=1,28": the query types of
      the UDP DNS queries from MAC to DST:53
  x_inv_pcap.py PCAP MAC icmp6 TYPE [DST]  "frames=N": ICMPv6 frames of TYPE
      (to DST only, if given)
"""
import ipaddress
import struct
import sys

MAX = 64 << 20


def frames(path, mac):
    with open(path, "rb") as f:
        data = f.read(MAX)
    if len(data) < 24:
        return
    e = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    want = bytes.fromhex(mac.replace(":", ""))
    off = 24
    while off + 16 <= len(data):
        incl = struct.unpack(e + "I", data[off + 8:off + 12])[0]
        fr = data[off + 16:off + 16 + incl]
        off += 16 + incl
        if len(fr) >= 14 and fr[6:12] == want:
            yield fr


def ip_of(fr):
    """(version, tos/tclass, ttl/hlim, proto, dst, l4) or None."""
    et = struct.unpack("!H", fr[12:14])[0]
    p = fr[14:]
    if et == 0x0800 and len(p) >= 20:
        ihl = (p[0] & 15) * 4
        return 4, p[1], p[8], p[9], str(ipaddress.ip_address(p[16:20])), p[ihl:]
    if et == 0x86DD and len(p) >= 40:
        tc = ((p[0] & 15) << 4) | (p[1] >> 4)
        return 6, tc, p[7], p[6], str(ipaddress.ip_address(p[24:40])), p[40:]
    return None


def mss_of(l4):
    if len(l4) < 20:
        return None
    doff = (l4[12] >> 4) * 4
    opts = l4[20:doff]
    k = 0
    while k < len(opts):
        kind = opts[k]
        if kind == 0:
            break
        if kind == 1:
            k += 1
            continue
        if k + 1 >= len(opts):
            break
        ln = opts[k + 1]
        if kind == 2 and ln == 4 and k + 4 <= len(opts):
            return struct.unpack("!H", opts[k + 2:k + 4])[0]
        k += max(ln, 2)
    return None


def main():
    pcap, mac, cmd = sys.argv[1:4]
    if cmd == "fields":
        dst = str(ipaddress.ip_address(sys.argv[4]))
        port = int(sys.argv[5])
        for fr in frames(pcap, mac):
            ip = ip_of(fr)
            if not ip or ip[3] not in (6, 17) or ip[4] != dst:
                continue
            l4 = ip[5]
            if len(l4) < 4 or struct.unpack("!H", l4[2:4])[0] != port:
                continue
            syn = ip[3] == 6 and len(l4) >= 14 and bool(l4[13] & 2)
            mss = mss_of(l4) if syn else None
            print("tos=0x%02x ttl=%d mss=%s syn=%d" % (
                ip[1], ip[2], "-" if mss is None else mss, syn))
    elif cmd == "grep":
        s = sys.argv[4].encode()
        print("frames=%d" % sum(1 for fr in frames(pcap, mac) if s in fr))
    elif cmd == "qtypes":
        dst = str(ipaddress.ip_address(sys.argv[4]))
        seen = set()
        for fr in frames(pcap, mac):
            ip = ip_of(fr)
            if not ip or ip[3] != 17 or ip[4] != dst or len(ip[5]) < 20:
                continue
            if struct.unpack("!H", ip[5][2:4])[0] != 53:
                continue
            m = ip[5][8:]
            k = 12
            while k < len(m) and m[k] != 0 and m[k] < 64:
                k += 1 + m[k]
            if k + 3 <= len(m):
                qtype = struct.unpack("!H", m[k + 1:k + 3])[0]
                # egressd's own upstream health probe (the root, type NS)
                # is a fixed question the workload cannot shape.
                if k == 12 and qtype == 2:
                    continue
                seen.add(qtype)
        print("qtypes=" + ",".join(str(t) for t in sorted(seen)))
    elif cmd == "icmp6":
        t = int(sys.argv[4])
        dst = str(ipaddress.ip_address(sys.argv[5])) if len(sys.argv) > 5 else None
        n = 0
        for fr in frames(pcap, mac):
            ip = ip_of(fr)
            if ip and ip[0] == 6 and ip[3] == 58 and ip[5][:1] == bytes([t]) \
                    and dst in (None, ip[4]):
                n += 1
        print("frames=%d" % n)
    else:
        sys.exit("unknown command %s" % cmd)


if __name__ == "__main__":
    main()
