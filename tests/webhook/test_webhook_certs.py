"""`dra-extender certs` and webhook.certs: a CA and a serving certificate the API server accepts."""

from __future__ import annotations

import base64
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from extender.cli import main
from webhook import certs


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_certs_command_writes_a_chain_for_the_service(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "tls"
    assert main(["certs", "--service", "dra-extender", "--namespace", "kube-system", "--out", str(out)]) == 0
    ca, serving = load(out / certs.CA_CERT_FILE), load(out / certs.CERT_FILE)
    serving.verify_directly_issued_by(ca)
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "dra-extender.kube-system.svc" in names.get_values_for_type(x509.DNSName)
    usage = serving.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usage
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    # stdout is the caBundle for the webhook configurations
    assert base64.b64decode(capsys.readouterr().out.strip()) == (out / certs.CA_CERT_FILE).read_bytes()
    assert (out / certs.KEY_FILE).stat().st_mode & 0o777 == 0o600
    # The key matches the certificate: an SSL context accepts the pair.
    ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(out / certs.CERT_FILE, out / certs.KEY_FILE)


def test_certs_command_refuses_to_overwrite_without_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["certs", "--service", "s", "--namespace", "n", "--out", str(tmp_path)]
    assert main(args) == 0
    first = (tmp_path / certs.CERT_FILE).read_bytes()
    assert main(args) == 1
    assert "pass --force" in capsys.readouterr().err
    assert (tmp_path / certs.CERT_FILE).read_bytes() == first
    assert main([*args, "--force"]) == 0
    assert (tmp_path / certs.CERT_FILE).read_bytes() != first


def test_certs_command_reports_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["certs", "--service", "s", "--namespace", "n", "--out", str(tmp_path), "--ip", "300.1.1.1"]
    assert main(args) == 1
    assert "invalid IP address" in capsys.readouterr().err
    assert main(["certs", "--service", "s", "--namespace", "n", "--out", str(tmp_path), "--days", "0"]) == 1


def test_serving_cert_with_ip_address() -> None:
    ca = certs.generate_ca()
    serving = certs.generate_serving_cert(ca, [], ["127.0.0.1", "::1"]).certificate
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1", "::1"]
    with pytest.raises(ValueError, match="at least one"):
        certs.generate_serving_cert(ca, [])
