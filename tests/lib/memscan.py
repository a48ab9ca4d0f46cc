#!/usr/bin/env python3
"""memscan PID HEX [--sanitizer-env NAME]: exit 0 if the bytes HEX
(big-endian, as openssl prints a key) or their reverse (a little-endian
BIGNUM, as OpenSSL keeps one in memory) occur anywhere in the readable
memory of process PID, 1 if not, 2 on error. Reads /proc/PID/maps and
/proc/PID/mem (as root: the sidecar's processes are not dumpable).

--sanitizer-env NAME (only for an ASan build): a sanitizer runtime reads
the whole initial environment into an anonymous mapping of its own before
main() runs, which the program cannot know of; an occurrence that is the
value of NAME=... in such a copy (preceded by NUL NAME=, outside [stack])
is not counted. The environment on the stack, which the program wipes,
is always counted."""
import re
import sys


def counted(data, needle, envkey, stack):
    """Whether needle occurs in data other than as a sanitizer's env copy."""
    i = data.find(needle)
    while i >= 0:
        if envkey is None or stack or data[max(0, i - len(envkey)):i] != envkey:
            return True
        i = data.find(needle, i + 1)
    return False


def main():
    pid, needle = int(sys.argv[1]), bytes.fromhex(sys.argv[2])
    envkey = None
    if len(sys.argv) == 5 and sys.argv[3] == "--sanitizer-env":
        envkey = b"\0" + sys.argv[4].encode() + b"="
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
                if needle[::-1] in data or counted(data, needle, envkey, "[stack]" in line):
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
