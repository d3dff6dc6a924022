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
    assert main(args) == 2
    assert "pass --force" in capsys.readouterr().err
    assert (tmp_path / certs.CERT_FILE).read_bytes() == first
    assert main([*args, "--force"]) == 0
    assert (tmp_path / certs.CERT_FILE).read_bytes() != first


def test_certs_command_reports_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["certs", "--service", "s", "--namespace", "n", "--out", str(tmp_path), "--ip", "300.1.1.1"]
    assert main(args) == 2
    assert "invalid IP address" in capsys.readouterr().err
    assert main(["certs", "--service", "s", "--namespace", "n", "--out", str(tmp_path), "--days", "0"]) == 2
    assert main(["certs", "--service", "s", "--out", str(tmp_path)]) == 2
    assert "--service and --namespace" in capsys.readouterr().err
    assert main(["certs", "--client", "--service", "s", "--out", str(tmp_path)]) == 2
    assert "do not apply" in capsys.readouterr().err


def test_client_certificate_refuses_a_ca_it_cannot_sign_with(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An encrypted CA key, or a ca.key that is not ca.crt's, is a clear error (exit 2), not a traceback
    or a client certificate that no server accepts."""
    from cryptography.hazmat.primitives import serialization

    ca = certs.generate_ca()
    (tmp_path / certs.CA_CERT_FILE).write_bytes(ca.certificate_pem())
    (tmp_path / certs.CA_KEY_FILE).write_bytes(ca.key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret")))
    assert main(["certs", "--client", "--out", str(tmp_path)]) == 2
    assert "encrypted" in capsys.readouterr().err
    (tmp_path / certs.CA_KEY_FILE).write_bytes(certs.generate_ca().key_pem())
    assert main(["certs", "--client", "--out", str(tmp_path)]) == 2
    assert "does not belong to" in capsys.readouterr().err
    assert not (tmp_path / "client.crt").exists()


def test_certs_command_prints_json_and_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import orjson
    import yaml

    assert main(["certs", "--service", "s", "-n", "n", "--out", str(tmp_path / "a"), "-o", "json"]) == 0
    document = orjson.loads(capsys.readouterr().out)
    assert base64.b64decode(document["caBundle"]) == (tmp_path / "a" / certs.CA_CERT_FILE).read_bytes()
    assert str(tmp_path / "a" / certs.CERT_FILE) in document["files"]
    assert main(["certs", "--client", "--out", str(tmp_path / "a"), "--format", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["caBundle"] == document["caBundle"]


async def test_client_certificate_passes_the_extenders_mutual_tls(tmp_path: Path) -> None:
    """The operations.md mTLS set-up: the extender's server context (built as `serve` builds it, with
    --extender-client-ca-file) accepts `certs --client`'s certificate and refuses a serving one."""
    import asyncio

    from common.tls import build_context

    out = tmp_path / "tls"
    assert main(["certs", "--service", "dra-extender", "-n", "dra-extender", "--out", str(out), "--ip",
                 "127.0.0.1"]) == 0
    ca_before = (out / certs.CA_CERT_FILE).read_bytes()
    assert main(["certs", "--client", "--name", "kube-scheduler", "--out", str(out)]) == 0
    assert (out / certs.CA_CERT_FILE).read_bytes() == ca_before  # the existing CA signs it
    client = load(out / "client.crt")
    client.verify_directly_issued_by(load(out / certs.CA_CERT_FILE))
    usage = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert (out / "client.key").stat().st_mode & 0o777 == 0o600

    server_context = build_context(str(out / certs.CERT_FILE), str(out / certs.KEY_FILE),
                                   client_ca_file=str(out / certs.CA_CERT_FILE))

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hello")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=server_context)
    port = server.sockets[0].getsockname()[1]

    async def connect(cert: str, key: str) -> bytes:
        context = ssl.create_default_context(cafile=str(out / certs.CA_CERT_FILE))
        context.load_cert_chain(out / cert, out / key)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
            try:
                return await reader.read()
            finally:
                writer.close()
        except (ssl.SSLError, ConnectionError):  # TLS 1.3: the refusal may come after the client's handshake
            return b"refused"

    async with server:
        assert await connect("client.crt", "client.key") == b"hello"
        # The serving certificate is serverAuth only: a server that checks client usage refuses it.
        assert await connect(certs.CERT_FILE, certs.KEY_FILE) in (b"", b"refused")


def test_serving_cert_with_ip_address() -> None:
    ca = certs.generate_ca()
    serving = certs.generate_serving_cert(ca, [], ["127.0.0.1", "::1"]).certificate
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1", "::1"]
    with pytest.raises(ValueError, match="at least one"):
        certs.generate_serving_cert(ca, [])


async def test_serving_contexts_send_no_session_tickets(tmp_path: Path) -> None:
    """Our clients never resume sessions (Go without a session cache): a ticket would be CPU for nothing."""
    import asyncio

    from common.tls import build_context

    out = tmp_path / "tls"
    assert main(["certs", "--service", "dra-extender", "-n", "dra-extender", "--out", str(out), "--ip",
                 "127.0.0.1"]) == 0

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hello")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=build_context(
        str(out / certs.CERT_FILE), str(out / certs.KEY_FILE)))
    async with server:
        context = ssl.create_default_context(cafile=str(out / certs.CA_CERT_FILE))
        reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1],
                                                       ssl=context)
        assert await reader.read() == b"hello"  # any ticket arrives before the data
        tls = writer.get_extra_info("ssl_object")
        version, session = tls.version(), tls.session
        writer.close()
    assert version == "TLSv1.3"
    assert session is None or not session.has_ticket
