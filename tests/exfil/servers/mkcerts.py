#!/usr/bin/python3
"""mkcerts.py DIR: the throw-away "PublicTestCA" and every certificate the
fake internet serves (catalogue 1.1). Run by tests/lib/fixture.sh (fx_certs)
once per run. Never writes outside DIR; keys are P-256 and live only there.

Files: ca.pem (PublicTestCA, what egressd trusts upstream), <name>.pem and
<name>.key per server, untrusted-ca.pem, ready (written last).
"""
import datetime
import ipaddress
import os
import sys

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

NOW = datetime.datetime.now(datetime.timezone.utc)
DAY = datetime.timedelta(days=1)


def key():
    return ec.generate_private_key(ec.SECP256R1())


def name(cn):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_ca(cn):
    k = key()
    cert = (x509.CertificateBuilder().subject_name(name(cn))
            .issuer_name(name(cn)).public_key(k.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(NOW - DAY).not_valid_after(NOW + 30 * DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None),
                           critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False,
                                         True, True, False, False),
                           critical=True)
            .sign(k, hashes.SHA256()))
    return k, cert


def make_leaf(ca_key, ca_cert, names, before=None, after=None,
              self_signed=False):
    k = key()
    sans = []
    for n in names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            sans.append(x509.DNSName(n))
    subject = name(names[0])
    issuer_key = k if self_signed else ca_key
    issuer = subject if self_signed else ca_cert.subject
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
         .public_key(k.public_key())
         .serial_number(x509.random_serial_number())
         .not_valid_before(before or NOW - DAY)
         .not_valid_after(after or NOW + 30 * DAY)
         .add_extension(x509.SubjectAlternativeName(sans), critical=False)
         .add_extension(x509.BasicConstraints(ca=False, path_length=None),
                        critical=True)
         .add_extension(x509.ExtendedKeyUsage(
             [x509.oid.ExtendedKeyUsageOID.SERVER_AUTH,
              x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
    return k, b.sign(issuer_key, hashes.SHA256())


def write(d, base, k, cert):
    with open(os.path.join(d, base + ".pem"), "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    if k is not None:
        path = os.path.join(d, base + ".key")
        with open(path, "wb") as f:
            f.write(k.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
        os.chmod(path, 0o600)


def main():
    d = sys.argv[1]
    os.makedirs(d, exist_ok=True)
    ca_key, ca = make_ca("PublicTestCA")
    write(d, "ca", None, ca)
    bad_key, bad_ca = make_ca("UntrustedTestCA")
    write(d, "untrusted-ca", None, bad_ca)
    leaves = {
        "api": ["api.allowed.test", "203.0.113.10", "2001:db8::10"],
        "other": ["other.allowed.test", "203.0.113.11", "2001:db8::11"],
        "cdn": ["shared.cdn.test", "203.0.113.12"],
        "front": ["front.allowed.test"],
        "cotenant": ["cotenant.evil.test"],
        "evil": ["evil.test", "*.evil.test", "203.0.113.20"],
        "wild": ["*.wild.allowed.test"],
        "doh": ["doh.evil.test", "203.0.113.53", "2001:db8::53"],
        "badtls-good": ["badtls.allowed.test", "203.0.113.66"],
        "client": ["workload-client.test"],
        "proxy": ["proxy.corp.test", "198.51.100.90"],
    }
    for base, names in leaves.items():
        k, c = make_leaf(ca_key, ca, names)
        write(d, base, k, c)
    k, c = make_leaf(None, None, ["badtls.allowed.test"], self_signed=True)
    write(d, "badtls-selfsigned", k, c)
    k, c = make_leaf(ca_key, ca, ["badtls.allowed.test"],
                     before=NOW - 30 * DAY, after=NOW - 2 * DAY)
    write(d, "badtls-expired", k, c)
    k, c = make_leaf(ca_key, ca, ["wrong.test"])
    write(d, "badtls-wrong", k, c)
    k, c = make_leaf(bad_key, bad_ca, ["badtls.allowed.test"])
    write(d, "badtls-untrusted", k, c)
    with open(os.path.join(d, "ready"), "w") as f:
        f.write("ok\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
