#!/usr/bin/env python3
"""memscan PID HEX: exit 0 if the bytes HEX (big-endian, as openssl prints
a key) or their reverse (a little-endian BIGNUM, as OpenSSL keeps one in
memory) occur anywhere in the readable memory of process PID, 1 if not, 2
on error. Reads /proc/PID/maps and
/proc/PID/mem (as root: the sidecar's processes are not dumpable)."""
import re
import sys


def main():
    pid, needle = int(sys.argv[1]), bytes.fromhex(sys.argv[2])
    if len(needle) < 8:
        print("memscan: needle too short", file=sys.stderr)
        return 2
    found = False
    regions = 0
    chunk = 64 << 20
    keep = len(needle) - 1
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            m = re.match(r"([0-9a-f]+)-([0-9a-f]+) (\S+)", line)
            if not m or m.group(3)[0] != "r" or "[vvar]" in line or "[vsyscall]" in line:
                continue
            lo, hi = int(m.group(1), 16), int(m.group(2), 16)
            # A sanitizer's shadow (terabytes reserved, never a heap) is skipped.
            if hi - lo > (4 << 30):
                continue
            regions += 1
            tail = b""
            for at in range(lo, hi, chunk):
                try:
                    mem.seek(at)
                    data = tail + mem.read(min(chunk, hi - at))
                except OSError:
                    tail = b""
                    continue
                if needle in data or needle[::-1] in data:
                    found = True
                    break
                tail = data[-keep:]
            if found:
                break
    if regions == 0:
        print("memscan: no readable region", file=sys.stderr)
        return 2
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())
