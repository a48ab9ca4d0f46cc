#!/usr/bin/env python3
"""keyfind PID CERT: find the private scalar of CERT's P-256 key in the
writable memory of process PID and print it as 64 hex digits (big-endian,
as memscan.py takes it); exit 0 if found, 1 if not, 2 on error.

For a generated sandbox CA, whose key nobody outside egressd knows: the
test finds it where it must be (the parent), then looks for it with
memscan.py where it must not be. OpenSSL keeps a BIGNUM as 64-bit words,
least significant first, 8-byte aligned: each aligned 32-byte window of
the writable mappings whose four words all look like parts of a random
number (at least 2^48: no pointer, length or small integer) is tried as
d, and d*G compared with the certificate's public key. Reads
/proc/PID/maps and /proc/PID/mem as root."""
import re
import sys

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
LOW = 1 << 48
CHUNK = 64 << 20


def scan(data, want, tried):
    """The d of an aligned 32-byte window of data with d*G == want, or None."""
    words = memoryview(data[: len(data) // 8 * 8]).cast("Q")
    for i in range(len(words) - 3):
        if words[i] < LOW or words[i + 1] < LOW or words[i + 2] < LOW or words[i + 3] < LOW:
            continue
        d = words[i] | words[i + 1] << 64 | words[i + 2] << 128 | words[i + 3] << 192
        if d >= ORDER or d in tried:
            continue
        tried.add(d)
        got = ec.derive_private_key(d, ec.SECP256R1()).public_key().public_numbers()
        if got.x == want.x and got.y == want.y:
            return d
    return None


def main():
    pid, cert_path = int(sys.argv[1]), sys.argv[2]
    with open(cert_path, "rb") as f:
        pub = x509.load_pem_x509_certificate(f.read()).public_key()
    if not isinstance(pub, ec.EllipticCurvePublicKey) or pub.curve.name != "secp256r1":
        print("keyfind: not a P-256 certificate", file=sys.stderr)
        return 2
    want = pub.public_numbers()
    tried = set()
    regions = 0
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            m = re.match(r"([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ (\d+)\s*(.*)", line)
            if not m or not m.group(3).startswith("rw"):
                continue
            lo, hi = int(m.group(1), 16), int(m.group(2), 16)
            if hi - lo > (4 << 30):
                continue  # a sanitizer's shadow, never a heap
            regions += 1
            tail = b""
            for at in range(lo, hi, CHUNK):
                try:
                    mem.seek(at)
                    data = tail + mem.read(min(CHUNK, hi - at))
                except OSError:
                    tail = b""
                    continue
                d = scan(data, want, tried)
                if d is not None:
                    print("%064x" % d)
                    return 0
                tail = data[-24:]  # a window across the chunk's end; still 8-aligned
    if regions == 0:
        print("keyfind: no readable region", file=sys.stderr)
        return 2
    return 1


if __name__ == "__main__":
    sys.exit(main())
