#!/usr/bin/python3
"""x_tls_certs.py DIR: the "XTestCA" and the upstream certificate variants
of the TLS cases EX-098, EX-100 and EX-101 (catalogue 4), which the run's
PublicTestCA cannot make (its key is not kept).

Who runs it: an exfil case's harness action, as root, into a directory of
the case. The case restarts egressd trusting PublicTestCA + XTestCA, so a
variant fails only for the defect it carries: the positive control `good`
(XTestCA -> XInter -> leaf, chain sent) verifies. Keys are P-256 (RSA-1024
for `rsa1024`) and live only in DIR.

Each variant is DIR/<name>.pem (leaf first, then what the server sends as
chain) and DIR/<name>.key; DIR/trust.pem is XTestCA; DIR/ready is last.
"""
import datetime
import warnings
import ipaddress
import os
import sys

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

NOW = datetime.datetime.now(datetime.timezone.utc)
DAY = datetime.timedelta(days=1)
HOST = "badtls.allowed.test"


def name(cn):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def cert(subject, key, issuer, ikey, ca=False, sans=None, before=None,
         after=None, alg=None, constraints=None):
    b = (x509.CertificateBuilder().subject_name(name(subject))
         .issuer_name(name(issuer)).public_key(key.public_key())
         .serial_number(x509.random_serial_number())
         .not_valid_before(before or NOW - DAY)
         .not_valid_after(after or NOW + 30 * DAY)
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None),
                        critical=True))
    if ca:
        b = b.add_extension(x509.KeyUsage(False, False, False, False, False,
                                          True, True, False, False),
                            critical=True)
    else:
        b = b.add_extension(x509.ExtendedKeyUsage(
            [ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    if constraints:
        b = b.add_extension(x509.NameConstraints(
            permitted_subtrees=[x509.DNSName(c) for c in constraints],
            excluded_subtrees=None), critical=True)
    return b.sign(ikey, alg or hashes.SHA256())


def pem(*certs):
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


def write(d, base, key, chain):
    with open(os.path.join(d, base + ".pem"), "wb") as f:
        f.write(pem(*chain))
    p = os.path.join(d, base + ".key")
    with open(p, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    os.chmod(p, 0o600)


def main():
    warnings.simplefilter("ignore")  # SHA-1 is the point of one variant
    d = sys.argv[1]
    os.makedirs(d, exist_ok=True)
    k = lambda: ec.generate_private_key(ec.SECP256R1())  # noqa: E731
    root_k = k()
    root = cert("XTestCA", root_k, "XTestCA", root_k, ca=True)
    int_k = k()
    inter = cert("XInter", int_k, "XTestCA", root_k, ca=True)
    nc_k = k()
    nc_inter = cert("XInterConstrained", nc_k, "XTestCA", root_k, ca=True,
                    constraints=["example.test"])
    dns = [x509.DNSName(HOST)]
    v = {}
    lk = k()
    v["good"] = (lk, [cert(HOST, lk, "XInter", int_k, sans=dns), inter])
    lk = k()
    v["noint"] = (lk, [cert(HOST, lk, "XInter", int_k, sans=dns)])
    lk = k()
    v["notyet"] = (lk, [cert(HOST, lk, "XInter", int_k, sans=dns,
                             before=NOW + 2 * DAY, after=NOW + 30 * DAY),
                        inter])
    lk = k()
    v["cnonly"] = (lk, [cert(HOST, lk, "XInter", int_k), inter])
    lk = k()
    v["wild2"] = (lk, [cert("*.allowed.test", lk, "XInter", int_k,
                            sans=[x509.DNSName("*.allowed.test")]), inter])
    lk = k()
    v["partial"] = (lk, [cert("bad*.allowed.test", lk, "XInter", int_k,
                              sans=[x509.DNSName("bad*.allowed.test")]),
                         inter])
    lk = k()
    v["iponly"] = (lk, [cert(HOST, lk, "XInter", int_k, sans=[
        x509.IPAddress(ipaddress.ip_address("203.0.113.46"))]), inter])
    lk = k()
    v["nameconstr"] = (lk, [cert(HOST, lk, "XInterConstrained", nc_k,
                                 sans=dns), nc_inter])
    lk = k()
    v["leafca"] = (lk, [cert(HOST, lk, "XInter", int_k, ca=True, sans=dns),
                        inter])
    lk = k()
    v["sha1"] = (lk, [cert(HOST, lk, "XInter", int_k, sans=dns,
                           alg=hashes.SHA1()), inter])
    lk = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    v["rsa1024"] = (lk, [cert(HOST, lk, "XInter", int_k, sans=dns), inter])
    for base, (key, chain) in v.items():
        write(d, base, key, chain)
    with open(os.path.join(d, "trust.pem"), "wb") as f:
        f.write(pem(root))
    with open(os.path.join(d, "ready"), "w") as f:
        f.write("ok\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
