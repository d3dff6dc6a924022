"""An in-process fake Kubernetes API server (aiohttp) for the extender's tests and benchmark.

Faithful where our code depends on it: resourceVersions from one global counter, 409 on a stale
resourceVersion, status subresources (the main resource ignores status, /status ignores the rest),
finalizers and deletionTimestamp, pods/binding, ResourceClaim status validation (reservedFor limit,
immutable allocation, status.devices only of allocated devices, dropped with their allocation), list +
watch with ADDED/MODIFIED/DELETED/BOOKMARK and 410 Gone for versions
older than the kept history, and metav1.Status error bodies. Not implemented: label/field selectors,
pagination, strategic-merge patch semantics (treated as JSON merge patch), admission, RBAC.

Failure injection: `fail_next` (refused: not applied), `lose_answers` (applied, then the answer is an
error or the connection is cut), `close_watches`, `expire_history`, and `intercept` (run a callback
before a request is handled, e.g. to change an object between a client's read and its write; an async
one that waits makes a write land late, after its client gave up: aiohttp does not cancel the handler).

Stored objects are never changed in place (every write stores new top-level and metadata dicts and
shares untouched subtrees), so the HTTP path serializes them without copying; the direct-access
methods hand out clones.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import inspect
import itertools
import random
import ssl
import string
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

RESERVED_FOR_MAX = 256
JSON = "application/json"


@dataclass(frozen=True)
class Resource:
    group_version: str
    plural: str
    kind: str
    namespaced: bool
    has_status: bool = False

    @property
    def group(self) -> str:
        return self.group_version.rpartition("/")[0]

    @property
    def qualified(self) -> str:   # "resourceclaims.resource.k8s.io", as apiserver messages name it
        return f"{self.plural}.{self.group}" if self.group else self.plural


RESOURCES = (
    Resource("v1", "nodes", "Node", False, True),
    Resource("v1", "pods", "Pod", True, True),
    Resource("v1", "events", "Event", True),
    Resource("resource.k8s.io/v1", "deviceclasses", "DeviceClass", False),
    Resource("resource.k8s.io/v1", "resourceslices", "ResourceSlice", False),
    Resource("resource.k8s.io/v1", "resourceclaims", "ResourceClaim", True, True),
    Resource("resource.k8s.io/v1", "resourceclaimtemplates", "ResourceClaimTemplate", True),
    Resource("resource.k8s.io/v1", "devicetaintrules", "DeviceTaintRule", False, True),
    Resource("coordination.k8s.io/v1", "leases", "Lease", True),
    Resource("scheduling.k8s.io/v1beta1", "podgroups", "PodGroup", True, True),
    Resource("events.k8s.io/v1", "events", "Event", True),
)
BY_PATH = {(r.group_version, r.plural): r for r in RESOURCES}
BY_KIND = {(r.group_version, r.kind): r for r in RESOURCES}
REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
           409: "Conflict", 410: "Expired", 415: "UnsupportedMediaType", 422: "Invalid",
           429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout"}


class StatusError(Exception):
    def __init__(self, code: int, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason or REASONS.get(code, "Unknown")
        self.message = message

    def body(self) -> dict:
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.code}


@dataclass
class _Fault:
    verb: str
    plural: str
    subresource: str | None
    remaining: int
    status: int
    message: str


@dataclass
class _Watch:
    resource: Resource
    namespace: str | None
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)


@dataclass(frozen=True)
class ApiRequest:
    """What `intercept` callbacks receive."""
    verb: str            # get, list, watch, create, update, patch, delete
    resource: Resource
    namespace: str | None
    name: str | None
    subresource: str | None
    body: Any


_DROP = object()     # end the stream abruptly
_FINISH = object()   # end the stream cleanly


def _clone(obj: Any) -> Any:
    return orjson.loads(orjson.dumps(obj))


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _conflict(resource: Resource, name: str) -> StatusError:
    return StatusError(409, f'Operation cannot be fulfilled on {resource.qualified} "{name}": the object has '
                            "been modified; please apply your changes to the latest version and try again")


def _uid_mismatch(wanted: str, current: dict) -> StatusError:
    return StatusError(409, f"Precondition failed: UID in precondition: {wanted}, "
                            f"UID in object meta: {current['metadata']['uid']}")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class FakeApiServer:
    def __init__(self, *, history_size: int = 10_000, bookmark_interval_s: float = 1.0,
                 token: str | None = None) -> None:
        """`token`: when set, requests must carry "Authorization: Bearer <token>" (else 401)."""
        self._objects: dict[Resource, dict[tuple[str, str], dict]] = {r: {} for r in RESOURCES}
        self._rv = 0
        self._history: deque[tuple[int, Resource, str | None, bytes]] = deque(maxlen=history_size)
        self._history_floor = 0   # events with a version above this are all in _history
        self._watches: list[_Watch] = []
        self._faults: list[_Fault] = []
        self._lost: list[_Fault] = []
        self._interceptors: list[Callable[[ApiRequest], Any]] = []
        self._bookmark_interval = bookmark_interval_s
        self._runner: web.AppRunner | None = None
        self.url = ""
        self.requests: dict[str, int] = {}   # "verb plural[/subresource]" -> count
        self._token = token

    # ---- lifecycle ----------------------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0, *,
                    ssl_context: ssl.SSLContext | None = None) -> str:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=ssl_context)
        await site.start()
        bound = self._runner.addresses[0]
        self.url = f"{'https' if ssl_context else 'http'}://{host}:{bound[1]}"
        return self.url

    async def stop(self) -> None:
        self.close_watches(abrupt=False)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ---- direct access (tests and bench seeding; same semantics as the HTTP verbs) ------------

    @property
    def resource_version(self) -> int:
        return self._rv

    def seed(self, objects: Iterable[dict]) -> None:
        for obj in objects:
            resource = self._resource_of(obj)
            self._create(resource, obj["metadata"].get("namespace"), _clone(obj), keep_identity=True)

    def get_object(self, kind: str, name: str, namespace: str | None = None) -> dict | None:
        resource = self._resource_by_kind(kind)
        obj = self._objects[resource].get((namespace or "", name))
        return _clone(obj) if obj is not None else None

    def objects(self, kind: str) -> list[dict]:
        return [_clone(o) for o in self._objects[self._resource_by_kind(kind)].values()]

    def put_object(self, obj: dict) -> dict:
        """Create or replace an object server-side (no resourceVersion check), emitting the watch event."""
        resource = self._resource_of(obj)
        meta = obj["metadata"]
        key = (meta.get("namespace") or "", meta["name"])
        body = _clone(obj)
        if key not in self._objects[resource]:
            return _clone(self._create(resource, meta.get("namespace"), body, keep_identity=True))
        body["metadata"].pop("resourceVersion", None)
        return _clone(self._store_update(resource, key, body, keep_status=False))

    def remove_object(self, kind: str, name: str, namespace: str | None = None) -> None:
        """Delete immediately, ignoring finalizers."""
        resource = self._resource_by_kind(kind)
        key = (namespace or "", name)
        obj = self._objects[resource].pop(key)
        self._emit(resource, "DELETED", self._bump({**obj, "metadata": dict(obj["metadata"])}))

    # ---- failure injection --------------------------------------------------------------------

    def fail_next(self, verb: str, plural: str, *, subresource: str | None = None, count: int = 1,
                  status: int = 500, message: str = "injected failure") -> None:
        """Answer the next `count` matching requests with `status` instead of handling them."""
        self._faults.append(_Fault(verb, plural, subresource, count, status, message))

    def lose_answers(self, verb: str, plural: str, *, subresource: str | None = None, count: int = 1,
                     status: int = 504, message: str = "the answer was lost", drop: bool = False) -> None:
        """Handle the next `count` matching requests (the write is applied), then answer `status`
        instead of the result, or with `drop` close the connection without an answer."""
        self._lost.append(_Fault(verb, plural, subresource, count, 0 if drop else status, message))

    def intercept(self, callback: Callable[[ApiRequest], Any]) -> Callable[[], None]:
        """Call `callback(request)` (sync or async) before each request is handled; returns a remover."""
        self._interceptors.append(callback)
        return lambda: self._interceptors.remove(callback)

    def close_watches(self, plural: str | None = None, *, abrupt: bool = True) -> int:
        """End open watch streams (all, or those of one resource); abrupt = drop the connection."""
        closed = 0
        for watch in list(self._watches):
            if plural is None or watch.resource.plural == plural:
                watch.queue.put_nowait(_DROP if abrupt else _FINISH)
                closed += 1
        return closed

    def expire_history(self) -> None:
        """Forget all past events, as etcd compaction does: older resourceVersions now get 410 Gone."""
        self._history.clear()
        self._history_floor = self._rv

    def force_relist(self) -> None:
        """Make every watcher list again: end the watches and forget the history past the last version
        any of them can have seen, so that each resumes with a 410 Gone (a compaction during a dropped
        connection)."""
        self.close_watches()
        self._rv += 1
        self.expire_history()

    def send_bookmarks(self) -> None:
        for watch in self._watches:
            watch.queue.put_nowait(self._bookmark_line(watch.resource))

    @property
    def open_watches(self) -> int:
        return len(self._watches)

    # ---- HTTP ---------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        try:
            if self._token is not None:
                scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
                if scheme.lower() != "bearer" or presented != self._token:
                    raise StatusError(401, "Unauthorized", "Unauthorized")
            resource, namespace, name, subresource = self._parse_path(request.path)
            verb = self._verb(request.method, request.query, name, subresource)
            body = await self._read_body(request) if request.method != "GET" else None
            label = f"{verb} {resource.plural}" + (f"/{subresource}" if subresource else "")
            self.requests[label] = self.requests.get(label, 0) + 1
            for callback in list(self._interceptors):
                result = callback(ApiRequest(verb, resource, namespace, name, subresource, body))
                if inspect.isawaitable(result):
                    await result
            self._maybe_fault(verb, resource.plural, subresource)
            if verb == "watch":
                return await self._watch(request, resource, namespace)
            result, code = self._dispatch(verb, resource, namespace, name, subresource, body, request)
            lost = self._take(self._lost, verb, resource.plural, subresource)
            if lost is not None and lost.status == 0:
                if request.transport is not None:
                    request.transport.close()
                return web.Response(status=500)  # never reaches the client
            if lost is not None:
                raise StatusError(lost.status, lost.message)
            return web.Response(body=orjson.dumps(result), status=code, content_type=JSON)
        except StatusError as err:
            return web.Response(body=orjson.dumps(err.body()), status=err.code, content_type=JSON)

    def _parse_path(self, path: str) -> tuple[Resource, str | None, str | None, str | None]:
        parts = [p for p in path.split("/") if p]
        if len(parts) >= 2 and parts[0] == "api":
            group_version, rest = parts[1], parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group_version, rest = f"{parts[1]}/{parts[2]}", parts[3:]
        else:
            raise StatusError(404, f"the server could not find the requested resource ({path})")
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise StatusError(404, f"the server could not find the requested resource ({path})")
        resource = BY_PATH.get((group_version, rest[0]))
        if resource is None or (namespace is not None and not resource.namespaced):
            raise StatusError(404, f"the server could not find the requested resource ({path})")
        name = rest[1] if len(rest) > 1 else None
        subresource = rest[2] if len(rest) > 2 else None
        if subresource is not None and not (
                (subresource == "status" and resource.has_status)
                or (subresource == "binding" and resource.plural == "pods")):
            raise StatusError(404, f"the server could not find the requested resource ({path})")
        if resource.namespaced and name is not None and namespace is None:
            raise StatusError(404, f"the server could not find the requested resource ({path})")
        return resource, namespace, name, subresource

    @staticmethod
    def _verb(method: str, query: Any, name: str | None, subresource: str | None) -> str:
        if method == "GET":
            if name is None:
                return "watch" if query.get("watch") in ("true", "1") else "list"
            return "get"
        if method == "POST" and (name is None or subresource == "binding"):
            return "create"
        verb = {"PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method)
        if verb is None or name is None:
            raise StatusError(405, f"the server does not allow {method} on the requested resource")
        return verb

    @staticmethod
    async def _read_body(request: web.Request) -> Any:
        data = await request.read()
        if not data:
            return None
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as err:
            raise StatusError(400, f"the body of the request was in an unknown format: {err}") from err

    def _maybe_fault(self, verb: str, plural: str, subresource: str | None) -> None:
        fault = self._take(self._faults, verb, plural, subresource)
        if fault is not None:
            raise StatusError(fault.status, fault.message)

    @staticmethod
    def _take(faults: list[_Fault], verb: str, plural: str, subresource: str | None) -> _Fault | None:
        for fault in faults:
            if (fault.verb, fault.plural, fault.subresource) == (verb, plural, subresource):
                fault.remaining -= 1
                if fault.remaining == 0:
                    faults.remove(fault)
                return fault
        return None

    def _dispatch(self, verb: str, resource: Resource, namespace: str | None, name: str | None,
                  subresource: str | None, body: Any, request: web.Request) -> tuple[dict, int]:
        if verb == "list":
            return self._list(resource, namespace, request.query), 200
        key = (namespace or "", name or "")
        if verb == "get":
            return self._existing(resource, key), 200
        if verb == "create" and subresource == "binding":
            return self._bind(key, self._require_object(body)), 201
        if verb == "create":
            return self._create(resource, namespace, self._require_object(body)), 201
        if verb == "update":
            return self._update(resource, key, self._require_object(body), subresource), 200
        if verb == "patch":
            content_type = request.headers.get("Content-Type", "")
            if content_type.split(";")[0].strip() not in (
                    "application/merge-patch+json", "application/strategic-merge-patch+json"):
                raise StatusError(415, f"unsupported patch type {content_type!r}; accepted media types "
                                       "include: application/merge-patch+json")
            current = self._existing(resource, key)
            patched = merge_patch(current, self._require_object(body))
            patched.setdefault("metadata", {})
            return self._update(resource, key, patched, subresource), 200
        if verb == "delete":
            return self._delete(resource, key, body), 200
        raise StatusError(405, f"unsupported verb {verb}")

    @staticmethod
    def _require_object(body: Any) -> dict:
        if not isinstance(body, dict) or not isinstance(body.get("metadata", {}), dict):
            raise StatusError(400, "the body of the request must be a JSON object with object metadata")
        return body

    # ---- storage semantics --------------------------------------------------------------------

    def _resource_of(self, obj: dict) -> Resource:
        resource = BY_KIND.get((obj.get("apiVersion", ""), obj.get("kind", "")))
        if resource is None:
            raise ValueError(f"fake API server does not serve {obj.get('apiVersion')}/{obj.get('kind')}")
        return resource

    @staticmethod
    def _resource_by_kind(kind: str) -> Resource:
        for resource in RESOURCES:
            if resource.kind == kind:
                return resource
        raise ValueError(f"fake API server does not serve kind {kind}")

    def _existing(self, resource: Resource, key: tuple[str, str]) -> dict:
        obj = self._objects[resource].get(key)
        if obj is None:
            raise StatusError(404, f'{resource.qualified} "{key[1]}" not found')
        return obj

    def _bump(self, obj: dict) -> dict:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        return obj

    def _emit(self, resource: Resource, event_type: str, obj: dict) -> None:
        namespace = obj["metadata"].get("namespace")
        line = orjson.dumps({"type": event_type, "object": obj}) + b"\n"
        if len(self._history) == self._history.maxlen:
            self._history_floor = self._history[0][0]
        self._history.append((self._rv, resource, namespace, line))
        for watch in self._watches:
            if watch.resource is resource and (watch.namespace is None or watch.namespace == namespace):
                watch.queue.put_nowait(line)

    def _list(self, resource: Resource, namespace: str | None, query: Mapping[str, str]) -> dict:
        """All objects, or with `limit` a page of them and a `continue` token for the next (unlike the
        real server, later pages are not a snapshot: objects written meanwhile may show)."""
        try:
            limit = int(query.get("limit") or 0)
            version, _, offset_text = (query.get("continue") or f"{self._rv}:0").partition(":")
            offset = int(offset_text)
        except ValueError as err:
            raise StatusError(400, f"invalid list parameter: {err}") from err
        objects = self._objects[resource]
        # Skipping to a page's offset in C: with a Python test per object, every page of a large
        # cluster-wide list walked all the objects before it (seconds of the fake's CPU for the 80,000 pods
        # of bench/scale_bench.py, where the real server's watch cache takes one step per page).
        matching = iter(objects.values()) if namespace is None else (
            obj for (ns, _), obj in objects.items() if ns == namespace)
        if limit > 0:
            page = list(itertools.islice(matching, offset, offset + limit + 1))
            more = len(page) > limit
            page = page[:limit]
        else:
            page, more = list(matching), False
        items = []
        for obj in page:
            item = dict(obj)
            item.pop("kind", None)        # list items carry no type meta, like the real apiserver
            item.pop("apiVersion", None)
            items.append(item)
        meta = {"resourceVersion": version}
        if more:
            meta["continue"] = f"{version}:{offset + limit}"
        return {"kind": f"{resource.kind}List", "apiVersion": resource.group_version,
                "metadata": meta, "items": items}

    def _create(self, resource: Resource, namespace: str | None, body: dict, *,
                keep_identity: bool = False) -> dict:
        obj = dict(body)
        meta = obj["metadata"] = dict(body.get("metadata") or {})
        if resource.namespaced:
            if namespace is None:
                raise StatusError(404, "the server could not find the requested resource")
            if meta.get("namespace") not in (None, "", namespace):
                raise StatusError(400, "the namespace of the provided object does not match the namespace "
                                       "sent on the request")
            meta["namespace"] = namespace
        if not meta.get("name") and meta.get("generateName"):
            suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=5))
            meta["name"] = meta["generateName"] + suffix
        if not meta.get("name"):
            raise StatusError(422, f"{resource.kind} is invalid: metadata.name: Required value: name or "
                                   "generateName is required")
        key = (namespace or "", meta["name"])
        if key in self._objects[resource]:
            raise StatusError(409, f'{resource.qualified} "{meta["name"]}" already exists', "AlreadyExists")
        if not (keep_identity and meta.get("uid")):
            meta["uid"] = str(uuid.uuid4())
        if not (keep_identity and meta.get("creationTimestamp")):
            meta["creationTimestamp"] = _now()
        meta["generation"] = 1
        meta.pop("deletionTimestamp", None)
        obj["kind"] = resource.kind
        obj["apiVersion"] = resource.group_version
        self._bump(obj)
        self._objects[resource][key] = obj
        self._emit(resource, "ADDED", obj)
        return obj

    def _update(self, resource: Resource, key: tuple[str, str], body: dict, subresource: str | None) -> dict:
        current = self._existing(resource, key)
        meta = body.get("metadata") or {}
        if meta.get("uid") and meta["uid"] != current["metadata"]["uid"]:
            raise _uid_mismatch(meta["uid"], current)
        if subresource == "status":
            updated = {**current, "metadata": dict(current["metadata"]), "status": body.get("status")}
            if updated["status"] is None:
                del updated["status"]
            if meta.get("resourceVersion"):
                updated["metadata"]["resourceVersion"] = meta["resourceVersion"]
            else:
                updated["metadata"].pop("resourceVersion", None)
            if resource.plural == "resourceclaims":
                updated = self._drop_deallocated_devices(current, updated)
                self._validate_claim_status(key[1], current, updated)
            return self._store_update(resource, key, updated, keep_status=False)
        obj = {**body, "metadata": dict(meta)}
        return self._store_update(resource, key, obj, keep_status=resource.has_status)

    def _store_update(self, resource: Resource, key: tuple[str, str], obj: dict, *,
                      keep_status: bool) -> dict:
        current = self._objects[resource][key]
        meta = obj["metadata"]
        wanted_rv = meta.get("resourceVersion")
        if wanted_rv and wanted_rv != current["metadata"]["resourceVersion"]:
            raise _conflict(resource, key[1])
        for immutable in ("uid", "creationTimestamp", "deletionTimestamp", "namespace", "name"):
            if immutable in current["metadata"]:
                meta[immutable] = current["metadata"][immutable]
            else:
                meta.pop(immutable, None)
        if keep_status:
            if "status" in current:
                obj["status"] = current["status"]
            else:
                obj.pop("status", None)
        obj["kind"] = resource.kind
        obj["apiVersion"] = resource.group_version
        generation = current["metadata"].get("generation", 1)
        meta["generation"] = generation + 1 if obj.get("spec") != current.get("spec") else generation
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            del self._objects[resource][key]
            self._emit(resource, "DELETED", self._bump(obj))
            return obj
        meta["resourceVersion"] = current["metadata"]["resourceVersion"]
        if obj == current:
            return current     # no-op updates keep the resourceVersion and emit nothing
        self._bump(obj)
        self._objects[resource][key] = obj
        self._emit(resource, "MODIFIED", obj)
        return obj

    @staticmethod
    def _device_ids(allocation: dict | None) -> set[tuple]:
        results = ((allocation or {}).get("devices") or {}).get("results") or ()
        return {(r.get("driver"), r.get("pool"), r.get("device"), r.get("shareID")) for r in results}

    def _drop_deallocated_devices(self, current: dict, updated: dict) -> dict:
        """The status strategy's dropDeallocatedStatusDevices: status.devices entries of devices the update
        takes out of the allocation are removed."""
        status = updated.get("status") or {}
        gone = (self._device_ids((current.get("status") or {}).get("allocation"))
                - self._device_ids(status.get("allocation")))
        devices = status.get("devices")
        if not gone or not devices:
            return updated
        kept = [d for d in devices
                if (d.get("driver"), d.get("pool"), d.get("device"), d.get("shareID")) not in gone]
        new_status = ({**status, "devices": kept} if kept
                      else {k: v for k, v in status.items() if k != "devices"})
        return {**updated, "status": new_status}

    @staticmethod
    def _validate_claim_status(name: str, current: dict, updated: dict) -> None:
        status = updated.get("status") or {}
        old_allocation = (current.get("status") or {}).get("allocation")
        allocation = status.get("allocation")
        reserved = status.get("reservedFor") or []
        prefix = f'ResourceClaim.resource.k8s.io "{name}" is invalid'
        if not isinstance(reserved, list):
            raise StatusError(422, f"{prefix}: status.reservedFor: Invalid value: must be a list")
        if len(reserved) > RESERVED_FOR_MAX:
            raise StatusError(422, f"{prefix}: status.reservedFor: Too many: {len(reserved)}: "
                                   f"must have at most {RESERVED_FOR_MAX} items")
        if reserved and allocation is None:
            raise StatusError(422, f"{prefix}: status.reservedFor: Forbidden: may not be specified when "
                                   "`allocated` is not set")
        uids = [entry.get("uid") for entry in reserved if isinstance(entry, dict)]
        if len(set(uids)) != len(uids):
            raise StatusError(422, f"{prefix}: status.reservedFor: Duplicate value: uids must be unique")
        if old_allocation is not None and allocation is not None and allocation != old_allocation:
            raise StatusError(422, f"{prefix}: status.allocation: Invalid value: field is immutable")
        allocated = FakeApiServer._device_ids(allocation)
        for index, device in enumerate(status.get("devices") or ()):
            ident = (device.get("driver"), device.get("pool"), device.get("device"), device.get("shareID"))
            if ident not in allocated:
                named = "/".join(str(part) for part in ident[:3])
                raise StatusError(422, f"{prefix}: status.devices[{index}]: Invalid value: \"{named}\": "
                                       "must be an allocated device in the claim")

    def _delete(self, resource: Resource, key: tuple[str, str], options: Any) -> dict:
        current = self._existing(resource, key)
        preconditions = (options or {}).get("preconditions") or {}
        if preconditions.get("uid") and preconditions["uid"] != current["metadata"]["uid"]:
            raise _uid_mismatch(preconditions["uid"], current)
        wanted_rv = preconditions.get("resourceVersion")
        if wanted_rv and wanted_rv != current["metadata"]["resourceVersion"]:
            raise _conflict(resource, key[1])
        if current["metadata"].get("finalizers"):
            if not current["metadata"].get("deletionTimestamp"):
                updated = {**current, "metadata": {**current["metadata"], "deletionTimestamp": _now(),
                                                   "deletionGracePeriodSeconds": 0}}
                self._bump(updated)
                self._objects[resource][key] = updated
                self._emit(resource, "MODIFIED", updated)
            return self._objects[resource][key]
        del self._objects[resource][key]
        deleted = self._bump({**current, "metadata": dict(current["metadata"])})
        self._emit(resource, "DELETED", deleted)
        return deleted

    def _bind(self, key: tuple[str, str], binding: dict) -> dict:
        pods = self._resource_by_kind("Pod")
        pod = self._existing(pods, key)
        target = binding.get("target") or {}
        if not target.get("name"):
            raise StatusError(422, f'Binding "{key[1]}" is invalid: target.name: Required value')
        uid = (binding.get("metadata") or {}).get("uid")
        if uid and uid != pod["metadata"]["uid"]:
            raise _uid_mismatch(uid, pod)
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            raise StatusError(409, f'Operation cannot be fulfilled on pods/binding "{key[1]}": '
                                   f'pod {key[1]} is already assigned to node "{node}"')
        status = dict(pod.get("status") or {})
        status["conditions"] = [c for c in status.get("conditions") or () if c.get("type") != "PodScheduled"]
        status["conditions"].append({"type": "PodScheduled", "status": "True", "lastTransitionTime": _now()})
        updated = {**pod, "metadata": dict(pod["metadata"]), "spec": {**(pod.get("spec") or {}),
                                                                      "nodeName": target["name"]},
                   "status": status}
        self._bump(updated)
        self._objects[pods][key] = updated
        self._emit(pods, "MODIFIED", updated)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    # ---- watch --------------------------------------------------------------------------------

    def _bookmark_line(self, resource: Resource, *, initial_events_end: bool = False) -> bytes:
        meta: dict[str, Any] = {"resourceVersion": str(self._rv)}
        if initial_events_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return orjson.dumps({"type": "BOOKMARK", "object": {
            "kind": resource.kind, "apiVersion": resource.group_version, "metadata": meta}}) + b"\n"

    async def _watch(self, request: web.Request, resource: Resource,
                     namespace: str | None) -> web.StreamResponse:
        query = request.query
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        try:
            timeout = float(query.get("timeoutSeconds", "1800"))
            since = query.get("resourceVersion", "")
            start = int(since) if since not in ("", "0") else None
        except ValueError as err:
            raise StatusError(400, f"invalid watch parameter: {err}") from err
        # WatchList (sendInitialEvents): the current objects, then a bookmark marking their end.
        watch_list = query.get("sendInitialEvents") in ("true", "1")
        if watch_list and (not bookmarks or query.get("resourceVersionMatch") != "NotOlderThan"
                           or start is not None):
            raise StatusError(422, "sendInitialEvents needs allowWatchBookmarks=true, "
                                   "resourceVersionMatch=NotOlderThan and no resourceVersion here", "Invalid")
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        if start is not None and start < self._history_floor:
            gone = StatusError(410, f"too old resource version: {start} ({self._history_floor})", "Expired")
            await response.write(orjson.dumps({"type": "ERROR", "object": gone.body()}) + b"\n")
            return response
        watch = _Watch(resource, namespace)
        # Register and take the backlog in one step (no await in between): nothing is missed or doubled.
        self._watches.append(watch)
        if start is None:
            backlog = [orjson.dumps({"type": "ADDED", "object": obj}) + b"\n"
                       for (ns, _), obj in sorted(self._objects[resource].items(),
                                                  key=lambda kv: int(kv[1]["metadata"]["resourceVersion"]))
                       if namespace is None or ns == namespace]
        else:
            backlog = [line for rv, res, ns, line in self._history
                       if rv > start and res is resource and (namespace is None or ns == namespace)]
        if watch_list:
            backlog.append(self._bookmark_line(resource, initial_events_end=True))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            for line in backlog:
                await response.write(line)
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    if bookmarks:
                        await response.write(self._bookmark_line(resource))
                    break
                try:
                    item = await asyncio.wait_for(watch.queue.get(), min(remaining, self._bookmark_interval))
                except TimeoutError:
                    if bookmarks and watch.queue.empty():
                        await response.write(self._bookmark_line(resource))
                    continue
                if item is _FINISH:
                    break
                if item is _DROP:
                    if request.transport is not None:
                        request.transport.close()
                    break
                if item.startswith(b'{"type":"BOOKMARK"') and not bookmarks:
                    continue
                await response.write(item)
        except ConnectionResetError:
            pass
        finally:
            self._watches.remove(watch)
        return response
