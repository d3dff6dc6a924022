"""Fixtures for the cluster side of the extender: a fake API server on loopback and a client for it."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from extender.kubeapi import KubeClient


def _load_fakeapi() -> object:
    # tests/ is not a package and must not go on sys.path (its allocator/ folder would shadow the real
    # package), so the fake API server is loaded from its file and registered as module "fakeapi".
    if "fakeapi" not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "fakeapi.py"
        spec = importlib.util.spec_from_file_location("fakeapi", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["fakeapi"] = module
        spec.loader.exec_module(module)
    return sys.modules["fakeapi"]


FakeApiServer = _load_fakeapi().FakeApiServer  # type: ignore[attr-defined]


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
