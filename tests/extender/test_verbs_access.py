"""Who can reach the extender verbs, as `serve` starts them (extender.wiring.App): only loopback by default
(the second-scheduler mode's kube-scheduler is in the same pod), only clients with a certificate of the
client CA on any other address, and anyone only with --extender-allow-unauthenticated, which says so."""

from __future__ import annotations

import asyncio
import logging
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from network_probe import own_address, port_of
from test_server import EXAMPLES, JSON, PAYLOADS, get, post
from tls_material import TLSFiles, write_ca_and_certs

from extender.options import NetworkOptions, ServeOptions, SourceOptions
from extender.wiring import App

BIND = (PAYLOADS / "bind.json").read_bytes()  # ExtenderBindingArgs for the example's pod "inference"


def serve_options(**network: Any) -> ServeOptions:
    return ServeOptions(source=SourceOptions(snapshot=str(EXAMPLES)),
                        network=NetworkOptions(extender_port=0, debug_port=0, **network))


def mutual_tls(files: TLSFiles) -> dict[str, object]:
    return {"extender_tls_cert_file": files.server_cert, "extender_tls_private_key_file": files.server_key,
            "extender_client_ca_file": files.ca}


def client_context(ca: str, cert: tuple[str, str] | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca)
    if cert is not None:
        context.load_cert_chain(*cert)
    return context


def nothing_bound(app: App) -> bool:
    claim = app.cluster.cache.claim("default", "single-gpu")
    pod = app.cluster.cache.pod("default", "inference")
    return (claim is not None and claim.allocation is None and pod is not None
            and not pod["spec"].get("nodeName") and app.scheduler.bind_attempts == 0)


async def test_mutual_tls_verbs_refuse_a_client_without_the_cas_certificate(tmp_path: Path) -> None:
    (tmp_path / "ours").mkdir()
    (tmp_path / "foreign").mkdir()
    files = write_ca_and_certs(tmp_path / "ours")
    foreign = write_ca_and_certs(tmp_path / "foreign")
    async with App(serve_options(extender_bind_address="0.0.0.0", **mutual_tls(files))) as app:
        assert not app.options.network.verbs_unauthenticated
        url = app.server.urls["extender"] + "/bind"
        assert url.startswith("https://127.0.0.1:")  # the wildcard address, reached on loopback
        async with aiohttp.ClientSession() as session:
            for context in (client_context(files.ca),
                            client_context(files.ca, (foreign.client_cert, foreign.client_key))):
                # The handshake fails (with TLS 1.3 the server's alert arrives on the first read):
                # no HTTP answer at all, so certainly no bind.
                with pytest.raises(aiohttp.ClientError):
                    async with session.post(url, data=BIND, ssl=context, headers=JSON) as response:
                        await response.read()
                assert nothing_bound(app)
            trusted = client_context(files.ca, (files.client_cert, files.client_key))
            async with session.post(url, data=BIND, ssl=trusted, headers=JSON) as response:
                assert (response.status, orjson.loads(await response.read())) == (200, {"Error": ""})
        pod = app.cluster.cache.pod("default", "inference")
        assert pod is not None and pod["spec"]["nodeName"] == "node-1"


async def test_by_default_the_verbs_listen_on_loopback_while_debug_and_webhook_listen_everywhere() -> None:
    async with App(serve_options(bind_address="0.0.0.0")) as app:
        assert app.server.addresses["extender"] == ["127.0.0.1"]
        assert app.server.addresses["debug"] == ["0.0.0.0"]
        assert (await post(app.server.urls["extender"] + "/bind", BIND))[1] == {"Error": ""}
        outside = own_address()
        if outside is None:
            return  # the listening addresses above already say it
        extender_port, debug_port = port_of(app.server.urls["extender"]), port_of(app.server.urls["debug"])
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection(outside, extender_port)
        assert (await get(f"http://{outside}:{debug_port}/healthz"))[0] == 200
        assert (await get(f"http://{outside}:{debug_port}/debug/state"))[0] == 403  # not from loopback


async def test_the_explicit_flag_opens_the_verbs_with_a_warning_and_a_metric(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="extender.wiring"):
        async with App(serve_options(extender_bind_address="0.0.0.0",
                                     extender_allow_unauthenticated=True)) as app:
            assert app.server.addresses["extender"] == ["0.0.0.0"]
            metrics = (await get(app.server.urls["debug"] + "/metrics"))[1]
    assert "dra_extender_verbs_unauthenticated 1.0" in metrics
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
                 and "--extender-allow-unauthenticated" in r.getMessage()]
    assert "can bind any pending pod to any node" in warning


async def test_without_the_flag_the_verbs_are_closed_and_the_metric_says_so() -> None:
    async with App(serve_options()) as app:
        metrics = (await get(app.server.urls["debug"] + "/metrics"))[1]
    assert "dra_extender_verbs_unauthenticated 0.0" in metrics
