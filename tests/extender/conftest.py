"""Fixtures for the cluster side of the extender: a fake API server on loopback and a client for it."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

# The tests folder is not a package; the fake API server lives at its top so the bench can use it too.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fakeapi import FakeApiServer

from extender.kubeapi import KubeClient


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
