"""A private CA, serving certificates for the webhook and extender, and client certificates for
kube-scheduler (clusters without cert-manager, and tests).

ECDSA P-256 keys: small, and the TLS handshake is several times cheaper than with RSA-2048.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_CERT_FILE = "ca.crt"
CA_KEY_FILE = "ca.key"
CERT_FILE = "tls.crt"  # the names of a kubernetes.io/tls Secret
KEY_FILE = "tls.key"


@dataclass(frozen=True)
class KeyPair:
    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def certificate_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )


def _validity(days: int) -> tuple[datetime.datetime, datetime.datetime]:
    if days < 1:
        raise ValueError(f"validity must be at least 1 day, got {days}")
    now = datetime.datetime.now(datetime.UTC)
    # Back-dated a little so that clocks slightly behind ours accept the certificate at once.
    return now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)


def generate_ca(common_name: str = "dra-extender-webhook-ca", *, days: int = 3650) -> KeyPair:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    not_before, not_after = _validity(days)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(certificate, key)


def _leaf(ca: KeyPair, common_name: str, usage: x509.ObjectIdentifier, names: list[x509.GeneralName],
          days: int) -> KeyPair:
    key = ec.generate_private_key(ec.SECP256R1())
    not_before, not_after = _validity(days)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    certificate = (
        builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False
        )
        .sign(ca.key, hashes.SHA256())
    )
    return KeyPair(certificate, key)


def generate_serving_cert(
    ca: KeyPair, dns_names: Sequence[str], ip_addresses: Sequence[str] = (), *, days: int = 365
) -> KeyPair:
    if not dns_names and not ip_addresses:
        raise ValueError("a serving certificate needs at least one DNS name or IP address")
    try:
        ips = [ipaddress.ip_address(ip) for ip in ip_addresses]
    except ValueError as err:
        raise ValueError(f"invalid IP address for the serving certificate: {err}") from None
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    names += [x509.IPAddress(ip) for ip in ips]
    common_name = dns_names[0] if dns_names else str(ips[0])
    return _leaf(ca, common_name, ExtendedKeyUsageOID.SERVER_AUTH, names, days)


def generate_client_cert(ca: KeyPair, common_name: str, *, days: int = 365) -> KeyPair:
    """A clientAuth certificate, e.g. for kube-scheduler calling the extender over mutual TLS."""
    if not common_name:
        raise ValueError("a client certificate needs a common name")
    return _leaf(ca, common_name, ExtendedKeyUsageOID.CLIENT_AUTH, [], days)


def load_ca(directory: Path) -> KeyPair:
    """The CA that `write_serving_files` left in `directory` (ca.crt and ca.key)."""
    certificate = x509.load_pem_x509_certificate((directory / CA_CERT_FILE).read_bytes())
    try:
        key = serialization.load_pem_private_key((directory / CA_KEY_FILE).read_bytes(), password=None)
    except TypeError:  # cryptography's word for "encrypted, and no password given"
        raise ValueError(f"{directory / CA_KEY_FILE}: the key is encrypted; give it unencrypted") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{directory / CA_KEY_FILE}: not an ECDSA key")
    if key.public_key() != certificate.public_key():
        raise ValueError(f"{directory / CA_KEY_FILE} does not belong to {directory / CA_CERT_FILE}")
    return KeyPair(certificate, key)


def service_dns_names(service: str, namespace: str) -> list[str]:
    """The names the API server may use to reach a Service (it dials <service>.<namespace>.svc)."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


def write_pem(path: Path, data: bytes, *, private: bool = False) -> None:
    """Write atomically (readers polling the file never see half a PEM); keys readable by the owner only."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.replace(tmp, path)


def write_serving_files(out_dir: Path, ca: KeyPair, serving: KeyPair, *, include_ca_key: bool = True) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    write_pem(out_dir / CA_CERT_FILE, ca.certificate_pem())
    if include_ca_key:
        write_pem(out_dir / CA_KEY_FILE, ca.key_pem(), private=True)
    write_pem(out_dir / KEY_FILE, serving.key_pem(), private=True)
    write_pem(out_dir / CERT_FILE, serving.certificate_pem())
