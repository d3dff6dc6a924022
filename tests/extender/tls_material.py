"""A throw-away CA with a loopback serving certificate and a client certificate, written as PEM files."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook.certs import KeyPair, generate_ca, generate_serving_cert


@dataclass(frozen=True)
class TLSFiles:
    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    authority: KeyPair  # to issue more certificates from the same CA (rotation tests)


def _client_cert(ca: KeyPair, common_name: str) -> KeyPair:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    return KeyPair(certificate, key)


def write_ca_and_certs(directory: Path) -> TLSFiles:
    ca = generate_ca("dra-extender-test-ca")
    server = generate_serving_cert(ca, ["localhost"], ["127.0.0.1"])
    client = _client_cert(ca, "kube-scheduler")
    paths = {}
    for name, data in (
        ("ca.crt", ca.certificate_pem()),
        ("server.crt", server.certificate_pem()),
        ("server.key", server.key_pem()),
        ("client.crt", client.certificate_pem()),
        ("client.key", client.key_pem()),
    ):
        path = directory / name
        path.write_bytes(data)
        paths[name] = str(path)
    return TLSFiles(
        paths["ca.crt"],
        paths["server.crt"],
        paths["server.key"],
        paths["client.crt"],
        paths["client.key"],
        ca,
    )
