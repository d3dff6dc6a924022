"""The webhook over real HTTPS on loopback: routing, status codes, certificate rotation under traffic."""

from __future__ import annotations

import argparse
import asyncio
import logging
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import orjson
import pytest
from webhook_fixtures import (
    allocation,
    claim,
    exact_request,
    result,
    status_update,
    with_status,
)

from allocator import FeatureGates
from common.tls import CertificateLoadError
from extender.flags import add_webhook_arguments, webhook_options
from extender.options import OptionsError
from extender.wiring import build_webhook
from webhook import certs
from webhook.lookup import StaticClusterLookup
from webhook.server import WebhookServer

TOLERATIONS = [{"key": "maintenance", "operator": "Exists", "effect": "NoExecute"}]


def issue(ca: certs.KeyPair, out: Path) -> certs.KeyPair:
    serving = certs.generate_serving_cert(ca, ["localhost"], ["127.0.0.1"])
    certs.write_serving_files(out, ca, serving)
    return serving


@pytest.fixture
def ca() -> certs.KeyPair:
    return certs.generate_ca()


@pytest.fixture
async def server(tmp_path: Path, ca: certs.KeyPair) -> AsyncIterator[WebhookServer]:
    issue(ca, tmp_path)
    webhook = WebhookServer(
        StaticClusterLookup(),
        cert_file=str(tmp_path / certs.CERT_FILE),
        key_file=str(tmp_path / certs.KEY_FILE),
        host="127.0.0.1",
        port=0,
        features=FeatureGates(),
        cert_poll_interval_s=0.05,
    )
    await webhook.start()
    yield webhook
    await webhook.stop()


def client_context(ca: certs.KeyPair) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=ca.certificate_pem().decode())
    return context


def allocation_review() -> dict:
    c = claim("c", exact_request("gpu", tolerations=TOLERATIONS))
    return status_update(c, with_status(c, allocation=allocation(result("gpu"))))


async def post(session: aiohttp.ClientSession, url: str, body: bytes) -> tuple[int, dict]:
    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as response:
        return response.status, orjson.loads(await response.read())


async def test_mutate_and_validate_over_https(server: WebhookServer, ca: certs.KeyPair) -> None:
    base = f"https://localhost:{server.port}"
    review = allocation_review()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_context(ca))) as session:
        status, answer = await post(session, f"{base}/webhook/mutate", orjson.dumps(review))
        assert status == 200
        assert answer["response"]["uid"] == review["request"]["uid"]
        assert answer["response"]["patchType"] == "JSONPatch"
        status, answer = await post(session, f"{base}/webhook/validate", orjson.dumps(review))
        assert status == 200 and answer["response"]["allowed"] is True
        status, answer = await post(session, f"{base}/webhook/validate", b'{"kind": "AdmissionReview"}')
        assert status == 400 and "apiVersion/kind" in answer["error"]
        async with session.get(f"{base}/webhook/validate") as response:
            assert response.status == 405
        async with session.get(f"{base}/metrics") as response:
            exposition = await response.text()
        assert (
            'dra_extender_webhook_decisions_total{operation="UPDATE",outcome="patched",'
            'resource="resourceclaims/status",webhook="mutate"}' in exposition
        )
        assert 'dra_extender_webhook_decisions_total{operation="",outcome="malformed"' in exposition
        assert (
            'dra_extender_webhook_review_duration_seconds_bucket{le="0.005",webhook="validate"}' in exposition
        )


async def test_plain_http_is_refused(server: WebhookServer) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"POST /webhook/validate HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
    await writer.drain()
    data = await reader.read(1024)
    writer.close()
    assert not data.startswith(b"HTTP/1.1 200")


async def test_missing_certificate_fails_clearly(tmp_path: Path) -> None:
    webhook = WebhookServer(
        StaticClusterLookup(),
        cert_file=str(tmp_path / "nope.crt"),
        key_file=str(tmp_path / "nope.key"),
        host="127.0.0.1",
        port=0,
        features=FeatureGates(),
    )
    with pytest.raises(CertificateLoadError, match=r"nope\.crt"):
        await webhook.start()


async def peer_serial(port: int, ca: certs.KeyPair) -> int:
    _, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=client_context(ca), server_hostname="localhost"
    )
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    from cryptography import x509

    return x509.load_der_x509_certificate(der).serial_number


async def test_certificate_rotation_during_traffic_fails_no_request(
    server: WebhookServer, ca: certs.KeyPair, tmp_path: Path
) -> None:
    base = f"https://localhost:{server.port}"
    body = orjson.dumps(allocation_review())
    first = x509_serial(tmp_path)
    assert await peer_serial(server.port, ca) == first
    statuses: list[int] = []
    stop = asyncio.Event()

    async def traffic(force_close: bool) -> None:
        connector = aiohttp.TCPConnector(ssl=client_context(ca), force_close=force_close, limit=2)
        async with aiohttp.ClientSession(connector=connector) as session:
            while not stop.is_set():
                status, _ = await post(session, f"{base}/webhook/mutate", body)
                statuses.append(status)

    # Kept-alive connections must survive the rotation, new connections must get the new certificate.
    workers = [asyncio.create_task(traffic(force_close)) for force_close in (False, False, True)]
    await asyncio.sleep(0.2)
    rotated = issue(ca, tmp_path)
    for _ in range(100):
        await asyncio.sleep(0.02)
        if await peer_serial(server.port, ca) == rotated.certificate.serial_number:
            break
    else:
        pytest.fail("the rotated certificate was never served")
    await asyncio.sleep(0.2)
    stop.set()
    await asyncio.gather(*workers)
    assert len(statuses) > 20
    assert set(statuses) == {200}


async def test_half_written_rotation_keeps_serving_the_old_pair(
    server: WebhookServer, ca: certs.KeyPair, tmp_path: Path
) -> None:
    first = x509_serial(tmp_path)
    other = certs.generate_serving_cert(ca, ["localhost"])
    # New certificate, old key: unusable until the key follows.
    certs.write_pem(tmp_path / certs.CERT_FILE, other.certificate_pem())
    assert server.tls is not None
    assert server.tls.reload_if_changed() is False
    assert await peer_serial(server.port, ca) == first
    certs.write_pem(tmp_path / certs.KEY_FILE, other.key_pem(), private=True)
    assert server.tls.reload_if_changed() is True
    assert await peer_serial(server.port, ca) == other.certificate.serial_number


def x509_serial(directory: Path) -> int:
    from cryptography import x509

    return x509.load_pem_x509_certificate((directory / certs.CERT_FILE).read_bytes()).serial_number


async def test_an_oversized_review_announced_with_expect_100_continue_gets_413(
    server: WebhookServer, ca: certs.KeyPair
) -> None:
    reader, writer = await asyncio.open_connection("localhost", server.port, ssl=client_context(ca))
    writer.write(b"POST /webhook/validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 10000000000\r\nExpect: 100-continue\r\n\r\n")
    await writer.drain()
    line = await asyncio.wait_for(reader.readline(), 5)
    writer.close()
    assert line.startswith(b"HTTP/1.1 413")


def test_serve_flags(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    parser = argparse.ArgumentParser()
    add_webhook_arguments(parser)
    assert parser.parse_args([]).reserved_for_limit == 256
    with pytest.raises(SystemExit):
        parser.parse_args(["--reserved-for-limit", "257"])
    with pytest.raises(OptionsError, match="go together"):  # half a TLS set-up refuses to start
        webhook_options(parser.parse_args(["--tls-cert-file", "c.pem"]))
    with caplog.at_level(logging.WARNING):
        disabled = build_webhook(
            webhook_options(parser.parse_args([])),
            StaticClusterLookup(),
            features=FeatureGates(),
            host="127.0.0.1",
        )
    assert disabled is None and "webhook disabled" in caplog.text
    args = parser.parse_args(
        ["--tls-cert-file", "c.pem", "--tls-private-key-file", "k.pem", "--reserved-for-limit", "64"]
    )
    enabled = build_webhook(
        webhook_options(args), StaticClusterLookup(), features=FeatureGates(), host="127.0.0.1"
    )
    assert enabled is not None and (enabled.cert_file, enabled.key_file, enabled.port) == (
        "c.pem",
        "k.pem",
        8443,
    )
