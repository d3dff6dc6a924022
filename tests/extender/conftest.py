"""Fixtures for the cluster side of the extender: a fake API server on loopback and a client for it, and
the example cluster served on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from fakeapi import FakeApiServer

from extender.http.server import ExtenderServer
from extender.kube.client import KubeClient


@pytest.fixture
async def fake_api() -> AsyncIterator[FakeApiServer]:
    server = FakeApiServer(bookmark_interval_s=0.2)
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def kube(fake_api: FakeApiServer) -> AsyncIterator[KubeClient]:
    client = KubeClient.for_url(fake_api.url)
    yield client
    await client.close()


@pytest.fixture
async def example() -> AsyncIterator[ExtenderServer]:
    """The bundled example cluster, served on ephemeral loopback ports."""
    from test_server import EXAMPLES, build_server

    from extender.kube.objects_io import load_objects

    server = build_server(load_objects([EXAMPLES]))
    await server.start("127.0.0.1", 0, 0)
    yield server
    await server.stop()
