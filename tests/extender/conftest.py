"""Fixtures for the cluster side of the extender: a fake API server on loopback and a client for it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from fakeapi import FakeApiServer

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
