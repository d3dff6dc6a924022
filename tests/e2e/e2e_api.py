"""A small synchronous Kubernetes REST client for the end-to-end tests: raw dicts, orjson, mTLS."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar
from urllib.parse import urlencode

import orjson
import urllib3

T = TypeVar("T")

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"


class ApiStatusError(RuntimeError):
    def __init__(self, method: str, path: str, status: int, body: dict[str, Any]) -> None:
        self.status = status
        self.body = body
        self.message = str(body.get("message", body))
        super().__init__(f"{method} {path}: HTTP {status}: {self.message}")


class Api:
    def __init__(self, server: str, ca_file: str, cert_file: str, key_file: str) -> None:
        self.server = server.rstrip("/")
        self._http = urllib3.PoolManager(
            maxsize=8,
            cert_reqs="CERT_REQUIRED",
            ca_certs=ca_file,
            cert_file=cert_file,
            key_file=key_file,
            timeout=urllib3.Timeout(connect=5, read=60),
            retries=False,
        )

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        url = self.server + path + (f"?{urlencode(query)}" if query else "")
        headers = {"Accept": "application/json"}
        payload = None
        if body is not None:
            payload = orjson.dumps(body)
            headers["Content-Type"] = content_type
        response = self._http.request(method, url, body=payload, headers=headers)
        data: dict[str, Any] = {}
        if response.data:
            try:
                data = orjson.loads(response.data)
            except orjson.JSONDecodeError:  # health endpoints answer in plain text
                data = {"message": response.data.decode(errors="replace")}
        if response.status >= 300:
            raise ApiStatusError(method, path, response.status, data)
        return data

    def get(self, path: str) -> dict[str, Any]:
        return self.request("GET", path)

    def get_or_none(self, path: str) -> dict[str, Any] | None:
        try:
            return self.get(path)
        except ApiStatusError as err:
            if err.status == 404:
                return None
            raise

    def items(self, path: str, **query: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.request("GET", path, query=query or None).get("items") or []
        return items

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", path, body)

    def update(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("PUT", path, body)

    def patch(self, path: str, body: Any, content_type: str = MERGE_PATCH) -> dict[str, Any]:
        return self.request("PATCH", path, body, content_type=content_type)

    def delete(self, path: str, grace_period_seconds: int | None = None) -> None:
        body = None if grace_period_seconds is None else {"gracePeriodSeconds": grace_period_seconds}
        try:
            self.request("DELETE", path, body)
        except ApiStatusError as err:
            if err.status != 404:
                raise

    def stream(self, path: str) -> urllib3.BaseHTTPResponse:
        """A GET whose body is read incrementally (watches); the caller releases the connection."""
        return self._http.request(
            "GET", self.server + path, preload_content=False, timeout=urllib3.Timeout(connect=5, read=120)
        )

    def close(self) -> None:
        self._http.clear()


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float = 60.0, interval_s: float = 0.2) -> T:
    """Poll `probe` until it returns something truthy; fail naming `what` and the last value seen."""
    deadline = time.monotonic() + timeout_s
    last: T | None = None
    while True:
        last = probe()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what} (last: {last!r})")
        time.sleep(interval_s)


@contextlib.contextmanager
def temporary_namespace(api: Api, prefix: str = "e2e") -> Iterator[str]:
    """A namespace of the caller's own; its pods are force-deleted afterwards (no kubelet confirms)."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    api.create("/api/v1/namespaces", {"metadata": {"name": name}})
    try:
        yield name
    finally:
        for pod in api.items(f"/api/v1/namespaces/{name}/pods"):
            api.delete(f"/api/v1/namespaces/{name}/pods/{pod['metadata']['name']}", grace_period_seconds=0)
        api.delete(f"/api/v1/namespaces/{name}")
