"""A small asyncio Kubernetes API client: raw dicts, orjson bodies, over two transports
(extender.kube.transport: our kept-alive HTTP/1.1 pool for requests, aiohttp for watches).

Credentials come from extender.kube.credentials, and from the `kubernetes` package only for a kubeconfig
user with an exec plugin or an auth-provider; its typed models are far too slow for slices and claims
(see the library measurements), and importing it costs about 40 MB of memory.
"""

from __future__ import annotations

import asyncio
import builtins
import os
import re
import ssl
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any

import orjson
from yarl import URL

from common.objects import list_metadata_of
from extender.kube import credentials
from extender.kube.transport import MAX_HEADER_SETS, AiohttpStreams, PooledRequests, Requests, Streams

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
# A watch silent for this long is presumed dead (no RST after a NAT or load-balancer drop) and ends with
# an error; resuming from the last resourceVersion is cheap. The API server sends a bookmark about every
# minute to watchers that allow them, so a healthy stream is never silent this long.
WATCH_INACTIVITY_S = 180.0
USER_AGENT = "dra-extender"
# Longest wait for one request's answer (None: no limit, as kubectl's --request-timeout=0).
DEFAULT_REQUEST_TIMEOUT_S = 30.0
# A path of only these characters needs no percent-encoding: object names are DNS labels and subdomains.
_PLAIN_PATH = re.compile(r"/[A-Za-z0-9._~/-]*").fullmatch


class KubeConfigError(Exception):
    """No usable credentials: neither an in-cluster service account nor the kubeconfig asked for."""


class ApiError(Exception):
    """A non-2xx answer from the API server, with the fields of its metav1.Status body."""

    def __init__(self, status: int, reason: str, message: str, body: dict[str, Any] | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def gone(self) -> bool:
        return self.status == 410

    @classmethod
    def from_status(cls, status_obj: Mapping[str, Any], default_code: int) -> ApiError:
        code = status_obj.get("code")
        return cls(
            code if isinstance(code, int) and code > 0 else default_code,
            str(status_obj.get("reason") or ""),
            str(status_obj.get("message") or ""),
            dict(status_obj),
        )


def _status_body(data: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError:
        return {"message": data[:500].decode("utf-8", "replace")}
    return body if isinstance(body, dict) else {"message": str(body)[:500]}


def _query(params: Mapping[str, Any]) -> dict[str, str]:
    query: dict[str, str] = {}
    for name, value in params.items():
        if value is None:
            continue
        query[name] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return query


class KubeClient:
    def __init__(
        self,
        base_url: str,
        *,
        ssl_context: ssl.SSLContext | bool | None = None,
        auth: Callable[[], str | None] | None = None,
        server_hostname: str | None = None,
        request_timeout_s: float | None = DEFAULT_REQUEST_TIMEOUT_S,
        namespace: str = "default",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        # The namespace of names given alone: the kubeconfig context's, or the pod's own in a cluster.
        self.namespace = namespace
        base = URL(self.base_url)
        # Parsed once: parsing and encoding `base_url + path` with yarl on every request costs more
        # than the rest of building it.
        plain = base.absolute and not base.raw_query_string and not base.raw_fragment
        self._base: URL | None = base if plain else None
        self._base_path = base.raw_path.rstrip("/")
        self._ssl = ssl_context
        self._auth = auth
        self._server_hostname = server_hostname
        self._timeout_s = request_timeout_s
        self._context: ssl.SSLContext | None = None   # built by _tls_context() on first use
        self._requests: Requests | None = None
        self._streams: Streams | None = None
        self._header_sets: dict[tuple[str | None, str | None], Mapping[str, str]] = {}

    # ---- construction -------------------------------------------------------------------------

    @classmethod
    def for_url(cls, base_url: str, *, ssl: ssl.SSLContext | bool | None = None,
                token: str | None = None) -> KubeClient:
        header = f"Bearer {token}" if token else None
        return cls(base_url, ssl_context=ssl, auth=(lambda: header) if header else None)

    @classmethod
    async def connect(cls, *, kubeconfig: str | None = None, context: str | None = None,
                      request_timeout_s: float | None = DEFAULT_REQUEST_TIMEOUT_S) -> KubeClient:
        """A client for the in-cluster service account by default; a kubeconfig (explicit path, or
        $KUBECONFIG / ~/.kube/config when not running in a pod) when `kubeconfig` or `context` is given
        or no service account exists. See extender.kube.credentials; a kubeconfig user with an exec plugin or
        an auth-provider is loaded with the `kubernetes` package instead."""
        in_cluster_problem = None
        if kubeconfig is None and context is None:
            try:
                return cls.from_credentials(credentials.in_cluster(), request_timeout_s)
            except credentials.CredentialsError as err:
                in_cluster_problem = str(err)
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        tried = f"not in a cluster ({in_cluster_problem}); " if in_cluster_problem else ""
        context_text = f", context {context!r}" if context else ""
        try:
            found = await asyncio.to_thread(credentials.from_kubeconfig, kubeconfig, context)
        except credentials.NeedsKubernetesPackage:
            return await cls._connect_with_kubernetes_package(kubeconfig, context, where, request_timeout_s)
        except credentials.CredentialsError as err:
            raise KubeConfigError(f"{tried}kubeconfig {where}{context_text}: {err}") from err
        return cls.from_credentials(found, request_timeout_s)

    @classmethod
    def from_credentials(cls, found: credentials.Credentials,
                         request_timeout_s: float | None = DEFAULT_REQUEST_TIMEOUT_S) -> KubeClient:
        return cls(found.host, ssl_context=found.ssl_context,
                   auth=ReusedAuth(found.authorization) if found.authorization else None,
                   server_hostname=found.server_hostname, request_timeout_s=request_timeout_s,
                   namespace=found.namespace)

    @classmethod
    async def _connect_with_kubernetes_package(cls, kubeconfig: str | None, context: str | None,
                                               where: str, request_timeout_s: float | None) -> KubeClient:
        """A kubeconfig whose user runs an exec plugin or an auth-provider: the `kubernetes` package
        loads it, and its refresh hook runs the plugin again when the credential expires."""
        from kubernetes import client, config

        cfg = client.Configuration()
        try:
            await asyncio.to_thread(config.load_kube_config, config_file=kubeconfig, context=context,
                                    client_configuration=cfg)
        except (config.ConfigException, OSError, ValueError) as err:
            context_text = f", context {context!r}" if context else ""
            raise KubeConfigError(f"kubeconfig {where}{context_text}: {err}") from err
        try:
            contexts, active = await asyncio.to_thread(config.list_kube_config_contexts,
                                                       config_file=kubeconfig)
        except (config.ConfigException, OSError, ValueError):
            contexts, active = [], None
        chosen = active if context is None else next((c for c in contexts if c.get("name") == context), None)
        namespace = ((chosen or {}).get("context") or {}).get("namespace")
        return cls(
            cfg.host,
            ssl_context=ssl_context_from(cfg),
            auth=ReusedAuth(lambda: bearer_header(cfg)),
            server_hostname=getattr(cfg, "tls_server_name", None) or None,
            request_timeout_s=request_timeout_s,
            namespace=namespace if isinstance(namespace, str) and namespace else "default",
        )

    async def close(self) -> None:
        for transport in (self._requests, self._streams):
            if transport is not None:
                await transport.close()
        self._requests = self._streams = None

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ---- requests -----------------------------------------------------------------------------

    async def get(self, path: str) -> dict[str, Any]:
        return await self._request("GET", path)

    async def list(self, path: str, **params: Any) -> dict[str, Any]:
        """GET a collection. Keyword arguments become query parameters (labelSelector=..., limit=...)."""
        return await self._request("GET", path, params=params)

    async def list_all(self, path: str, *, page_size: int = 500,
                       **params: Any) -> builtins.list[dict[str, Any]]:
        """Every item of a collection, read in pages of `page_size` (limit and continue)."""
        items: builtins.list[dict[str, Any]] = []
        async for listing in self.pages(path, limit=page_size, **params):
            items.extend(item for item in listing.get("items") or () if isinstance(item, dict))
        return items

    async def pages(self, path: str, *, limit: int | None, page_bytes: int | None = None,
                    **params: Any) -> AsyncGenerator[dict[str, Any], None]:
        """A collection's list responses: with `limit`, one page after the other (continue), each read
        once the caller is done with the one before; without, the one response. With `page_bytes`,
        a page asks for fewer objects than `limit` when the objects read so far were large, so that
        a page is about that many bytes (it is decoded in one step of the event loop)."""
        token: str | None = None
        size = limit
        while True:
            status, payload = await self._payload("GET", path, {"limit": size, "continue": token, **params})
            listing = self._decoded("GET", path, status, payload)
            token = list_metadata_of(listing).get("continue") or None
            if page_bytes is not None and limit is not None and payload:
                items = listing.get("items")
                if isinstance(items, builtins.list) and items:
                    size = max(1, min(limit, len(items) * page_bytes // len(payload)))
            del payload
            yield listing
            del listing
            if token is None or limit is None:
                return

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._request("POST", path, body=body)

    async def update(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._request("PUT", path, body=body)

    async def patch(self, path: str, body: Any, content_type: str = MERGE_PATCH) -> dict[str, Any]:
        return await self._request("PATCH", path, body=body, content_type=content_type)

    async def delete(self, path: str, *, preconditions: dict[str, Any] | None = None) -> dict[str, Any]:
        body = None
        if preconditions:
            body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": preconditions}
        return await self._request("DELETE", path, body=body)

    async def watch(
        self,
        path: str,
        resource_version: str | None,
        *,
        timeout_seconds: int = 300,
        allow_bookmarks: bool = True,
        inactivity_timeout_s: float = WATCH_INACTIVITY_S,
        **params: Any,
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Stream watch events ({"type", "object"}) of a collection from `resource_version`.

        ERROR events are raised as ApiError (410 Gone when the version is too old). The iterator ends
        when the server closes the stream (after timeoutSeconds); a dropped connection raises
        aiohttp.ClientError, and no data for `inactivity_timeout_s` raises aiohttp.ServerTimeoutError.
        """
        query = _query({
            **params,
            "watch": True,
            "resourceVersion": resource_version or None,
            "allowWatchBookmarks": allow_bookmarks,
            "timeoutSeconds": timeout_seconds,
        })
        stream = self._streams_().open(self._target(path, query), self._headers(),
                                       connect_timeout_s=self._timeout_s,
                                       read_timeout_s=min(timeout_seconds + 30.0, inactivity_timeout_s))
        async with stream as answer:
            if answer.status >= 300:
                if answer.status == 401:
                    self._reread_credentials()  # the informer's retry sends them again
                raise self._error(answer.status, await answer.read())
            # Chunks are joined only once a line is complete: a large slice spans many chunks.
            pending: list[bytes] = []
            async for chunk in answer.chunks:
                pending.append(chunk)
                if b"\n" not in chunk:
                    continue
                *lines, rest = b"".join(pending).split(b"\n")
                pending = [rest] if rest else []
                for line in lines:
                    if line.strip():
                        yield self._watch_event(line)
            rest = b"".join(pending)
            if rest.strip():
                yield self._watch_event(rest)

    # ---- internals ----------------------------------------------------------------------------

    @staticmethod
    def _watch_event(line: bytes) -> dict[str, Any]:
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError as err:
            raise ApiError(500, "InternalError", f"malformed watch event: {err}") from err
        if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
            raise ApiError(500, "InternalError", f"malformed watch event: {line[:200]!r}")
        if event.get("type") == "ERROR":
            raise ApiError.from_status(event["object"], 500)
        return event

    def _headers(self, content_type: str | None = None) -> Mapping[str, str]:
        """The headers of every request and watch, with the credentials read now: the same mapping
        again while the credentials and content type are the same (never change it)."""
        token = self._auth() if self._auth else None
        key = (token, content_type)
        headers = self._header_sets.get(key)
        if headers is None:
            headers = {"User-Agent": USER_AGENT, "Accept": JSON}
            if token:
                if "\r" in token or "\n" in token:
                    raise KubeConfigError("the Authorization header read from the credentials has a line "
                                          "break")
                headers["Authorization"] = token
            if content_type:
                headers["Content-Type"] = content_type
            if len(self._header_sets) >= MAX_HEADER_SETS:
                self._header_sets.clear()
            self._header_sets[key] = headers
        return headers

    def _reread_credentials(self) -> bool:
        """After a 401: whether credentials that may have rotated since they were read will be read again."""
        if isinstance(self._auth, ReusedAuth):
            self._auth.forget()
            return True
        return False

    def _url(self, path: str) -> URL | str:
        """The URL of `path` (below the base URL's own path, if it has one)."""
        if self._base is None or not _PLAIN_PATH(path):
            return self.base_url + path
        return self._base.with_path(self._base_path + path, encoded=True)

    @staticmethod
    def _error(status: int, data: bytes) -> ApiError:
        body = _status_body(data)
        if body.get("kind") == "Status":
            return ApiError.from_status(body, status)
        return ApiError(status, "", str(body.get("message") or ""), body)

    def _tls_context(self) -> ssl.SSLContext | None:
        """The one TLS context of the watches and the other requests; None for an http:// server.
        Without one given, the system's trust store; `ssl_context=False` means: do not verify."""
        if self._context is None and self.base_url.startswith("https:"):
            if isinstance(self._ssl, ssl.SSLContext):
                self._context = self._ssl
            else:
                self._context = ssl.create_default_context()
                if self._ssl is False:
                    self._context.check_hostname = False
                    self._context.verify_mode = ssl.CERT_NONE
        return self._context

    def _requests_(self) -> Requests:
        if self._requests is None:
            base = self._checked_base()
            assert base.host is not None
            context = self._tls_context()
            self._requests = PooledRequests(base.host, base.port or (443 if context else 80),
                                            ssl_context=context, server_hostname=self._server_hostname,
                                            host_header=base.host_port_subcomponent or "")
        return self._requests

    def _streams_(self) -> Streams:
        if self._streams is None:
            origin = str(self._checked_base().origin())
            self._streams = AiohttpStreams(origin, ssl_context=self._tls_context(),
                                           server_hostname=self._server_hostname)
        return self._streams

    def _checked_base(self) -> URL:
        base = URL(self.base_url)
        if base.scheme not in ("http", "https") or not base.host:
            raise KubeConfigError(f"API server address {self.base_url!r} is not an http(s) URL")
        return base

    def _target(self, path: str, params: Mapping[str, Any] | None) -> str:
        """The request line's target: the base URL's path, `path` and the query, percent-encoded."""
        if self._base is not None and not params and _PLAIN_PATH(path):
            return self._base_path + path
        url = URL(self._url(path))
        return (url.with_query(_query(params)) if params else url).raw_path_qs

    async def _request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
                       body: Any = None, content_type: str = JSON) -> dict[str, Any]:
        data = orjson.dumps(body) if body is not None else None
        return self._decoded(method, path, *await self._payload(method, path, params, data, content_type))

    async def _payload(self, method: str, path: str, params: Mapping[str, Any] | None = None,
                       data: bytes | None = None, content_type: str = JSON) -> tuple[int, bytes]:
        """The status and body of a successful answer; an ApiError for any other."""
        target = self._target(path, params)
        requests = self._requests_()
        for attempt in range(2):
            headers = self._headers(content_type if data is not None else None)
            async with asyncio.timeout(self._timeout_s):
                status, payload = await requests.send(method, target, headers, data)
            if status == 401 and attempt == 0 and self._reread_credentials():
                continue
            if status >= 300:
                raise self._error(status, payload)
            break
        return status, payload

    @staticmethod
    def _decoded(method: str, path: str, status: int, payload: bytes) -> dict[str, Any]:
        if not payload:
            return {}
        try:
            result = orjson.loads(payload)
        except orjson.JSONDecodeError as err:
            raise ApiError(status, "InternalError", f"{method} {path}: response is not JSON: {err}") from err
        return result if isinstance(result, dict) else {"items": result}


def ssl_context_from(cfg: Any) -> ssl.SSLContext:
    """An SSL context from a kubernetes.client.Configuration (CA, client certificate, verify flag)."""
    context = ssl.create_default_context(cafile=cfg.ssl_ca_cert or None)
    if cfg.cert_file:
        context.load_cert_chain(cfg.cert_file, cfg.key_file)
    if not cfg.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def bearer_header(cfg: Any) -> str | None:
    """The Authorization header value. get_api_key_with_prefix runs the configuration's
    refresh_api_key_hook first (service-account token rotation, exec plugins): read it through
    ReusedAuth, never once for good."""
    return cfg.get_api_key_with_prefix("BearerToken") or None


class ReusedAuth:
    """An Authorization header source read at most every `reuse_s`, and again after a 401.

    Reading the header runs the kubernetes configuration's refresh hook, which re-parses a kubeconfig:
    too much to do for every request. client-go likewise re-reads a
    projected service-account token about once a minute. A request answered 401 forgets the header and
    is sent once more with a fresh one, so a rotated token costs one extra request, never a failure."""

    def __init__(self, read: Callable[[], str | None], *, reuse_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._read = read
        self._reuse_s = reuse_s
        self._clock = clock
        self._value: str | None = None
        self._read_at: float | None = None

    def __call__(self) -> str | None:
        now = self._clock()
        if self._read_at is None or now - self._read_at >= self._reuse_s:
            self._value = self._read()
            self._read_at = now
        return self._value

    def forget(self) -> None:
        self._read_at = None
