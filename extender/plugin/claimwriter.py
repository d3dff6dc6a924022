"""Bind: the API writes kube-scheduler's DynamicResources plugin makes in PreBind, then the Binding.

Per claim not yet reserved for the pod: add the `resource.kubernetes.io/delete-protection` finalizer
with an update of the main resource (finalizers cannot change through /status), then one status
update carrying the resourceVersion that sets status.allocation (when we allocated) and appends the
pod to status.reservedFor. A 409 Conflict re-reads the claim and tries again (5 attempts, as
client-go's DefaultRetry); a claim that got allocated elsewhere or is being deleted ends the bind.
Then the pod's Binding is created. Any failure after a write undoes what this bind wrote.

A pod's special claim for extended resources backed by DRA (extender/plugin/extendedresources.py) is first
created, owned by the pod, then goes through the same steps, and the pod's
status.extendedResourceClaimStatus is written before the Binding (upstream's PreBind). Undo deletes it.

With DRANodeAllocatableResources, the pod's status.nodeAllocatableResourceClaimStatuses (what its
claims' devices add to its cpu, memory or hugepages: extender/plugin/nodeallocatable.py) is written with a
merge patch just before the Binding, as upstream's PreBind does; undo clears it with an empty list,
as upstream's Unreserve does.

In snapshot mode (no client) the same steps run against the cache's objects, with the API server's
rules that matter here (resourceVersion checks, status separation, reservedFor limit, binding once).
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import logging
import secrets
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import aiohttp

from allocator import ResourceClaim
from common.objects import metadata_of
from common.rules import RESERVED_FOR_MAX
from extender.kube.client import ApiError, KubeClient
from extender.plugin.extendedresources import Variant, creation_body
from extender.plugin.nodeallocatable import STATUS_FIELD
from extender.state.cache import ClusterCache

log = logging.getLogger(__name__)

FINALIZER = "resource.kubernetes.io/delete-protection"
MAX_ATTEMPTS = 5
CLAIMS_PATH = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"
CLAIMS_COLLECTION = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
POD_STATUS_PATH = "/api/v1/namespaces/{namespace}/pods/{name}/status"


class BindError(Exception):
    """The bind did not happen; the message says why (and what could not be undone, if anything).

    `unsettled`: UIDs of claims whose allocation written by this bind may still be stored by the API
    server (the write's answer was lost or the undo failed), so their devices must stay counted.
    """

    def __init__(self, message: str, *, unsettled: frozenset[str] = frozenset()) -> None:
        super().__init__(message)
        self.unsettled = unsettled


class _Store(Protocol):
    async def get_claim(self, namespace: str, name: str) -> dict: ...
    async def update_claim(self, claim: dict) -> dict: ...
    async def update_claim_status(self, claim: dict) -> dict: ...
    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None: ...
    async def get_pod(self, namespace: str, name: str) -> dict: ...
    async def create_claim(self, claim: dict) -> dict: ...
    async def delete_claim(self, namespace: str, name: str, uid: str) -> None: ...
    async def patch_pod_status(self, namespace: str, name: str, status: dict) -> None: ...


class _ApiStore:
    def __init__(self, client: KubeClient, cache: ClusterCache) -> None:
        self.client = client
        self.cache = cache

    async def get_claim(self, namespace: str, name: str) -> dict:
        fresh = await self.client.get(CLAIMS_PATH.format(namespace=namespace, name=name))
        # A claim allocated by someone else (or by an earlier write of ours whose answer was lost)
        # must count as soon as we know it, not only once the watch delivers it.
        self._remember(fresh)
        return fresh

    async def update_claim(self, claim: dict) -> dict:
        meta = claim["metadata"]
        written = await self.client.update(CLAIMS_PATH.format(**meta), claim)
        self._remember(written)
        return written

    async def update_claim_status(self, claim: dict) -> dict:
        meta = claim["metadata"]
        written = await self.client.update(CLAIMS_PATH.format(**meta) + "/status", claim)
        self._remember(written)
        return written

    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        await self.client.create(f"/api/v1/namespaces/{namespace}/pods/{name}/binding", binding)

    async def get_pod(self, namespace: str, name: str) -> dict:
        return await self.client.get(f"/api/v1/namespaces/{namespace}/pods/{name}")

    async def create_claim(self, claim: dict) -> dict:
        created = await self.client.create(CLAIMS_COLLECTION.format(**claim["metadata"]), claim)
        self._remember(created)
        return created

    async def delete_claim(self, namespace: str, name: str, uid: str) -> None:
        answer = await self.client.delete(CLAIMS_PATH.format(namespace=namespace, name=name),
                                          preconditions={"uid": uid})
        if answer.get("kind") == "ResourceClaim" and metadata_of(answer).get("finalizers"):
            self._remember(answer)  # someone else's finalizer holds it: still there, still allocated
        else:
            # Gone now (the answer is the last state, or a Status): the next filter must not wait for
            # the watch to see the devices free and the pod without a stale claim.
            last = self.cache.raw("ResourceClaim", f"{namespace}/{name}")
            if last is not None and metadata_of(last).get("uid") == uid:
                self.cache.apply("ResourceClaim", "DELETED", last)

    async def patch_pod_status(self, namespace: str, name: str, status: dict) -> None:
        await self.client.patch(POD_STATUS_PATH.format(namespace=namespace, name=name), {"status": status})

    def _remember(self, written: dict) -> None:
        # The next scheduling cycle must see this write before the watch delivers it; the cache
        # ignores the watch's older versions, so this cannot be rolled back by a late event.
        self.cache.apply("ResourceClaim", "DELETED" if _gone(written) else "MODIFIED", written)


def _gone(obj: dict) -> bool:
    meta = metadata_of(obj)
    return bool(meta.get("deletionTimestamp")) and not meta.get("finalizers")


class _MemoryStore:
    """The API server's write rules, applied to the cache's objects (snapshot mode)."""

    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache

    def _current(self, kind: str, namespace: str, name: str) -> dict:
        current = self.cache.raw(kind, f"{namespace}/{name}")
        if current is None:
            resource = "resourceclaims.resource.k8s.io" if kind == "ResourceClaim" else "pods"
            raise ApiError(404, "NotFound", f'{resource} "{name}" not found')
        return current

    def _check_version(self, current: dict, wanted: dict) -> None:
        version = wanted["metadata"].get("resourceVersion")
        if version and version != current["metadata"].get("resourceVersion"):
            name = current["metadata"]["name"]
            message = (f'Operation cannot be fulfilled on resourceclaims.resource.k8s.io "{name}": the '
                       "object has been modified; please apply your changes to the latest version and try "
                       "again")
            raise ApiError(409, "Conflict", message)

    @staticmethod
    def _next_version(current: dict) -> str:
        try:
            return str(int(current["metadata"].get("resourceVersion") or 0) + 1)
        except ValueError:
            return "1"

    async def get_claim(self, namespace: str, name: str) -> dict:
        return copy.deepcopy(self._current("ResourceClaim", namespace, name))

    async def update_claim(self, claim: dict) -> dict:
        current = self._current("ResourceClaim", claim["metadata"]["namespace"], claim["metadata"]["name"])
        self._check_version(current, claim)
        written = copy.deepcopy(claim)
        written["metadata"]["resourceVersion"] = self._next_version(current)
        written.pop("status", None)
        if "status" in current:
            written["status"] = copy.deepcopy(current["status"])
        self.cache.apply("ResourceClaim", "DELETED" if _gone(written) else "MODIFIED", written)
        return copy.deepcopy(written)

    async def update_claim_status(self, claim: dict) -> dict:
        current = self._current("ResourceClaim", claim["metadata"]["namespace"], claim["metadata"]["name"])
        self._check_version(current, claim)
        reserved = (claim.get("status") or {}).get("reservedFor") or []
        if len(reserved) > RESERVED_FOR_MAX:
            name = claim["metadata"]["name"]
            message = (f'ResourceClaim.resource.k8s.io "{name}" is invalid: status.reservedFor: Too many: '
                       f"{len(reserved)}: must have at most {RESERVED_FOR_MAX} items")
            raise ApiError(422, "Invalid", message)
        written = copy.deepcopy(current)
        written["status"] = copy.deepcopy(claim.get("status") or {})
        written["metadata"]["resourceVersion"] = self._next_version(current)
        self.cache.apply("ResourceClaim", "MODIFIED", written)
        return copy.deepcopy(written)

    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        current = self._current("Pod", namespace, name)
        if uid and current["metadata"].get("uid") != uid:
            raise ApiError(409, "Conflict", f"Precondition failed: UID in precondition: {uid}, "
                                            f"UID in object meta: {current['metadata'].get('uid')}")
        assigned = (current.get("spec") or {}).get("nodeName")
        if assigned:
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on pods/binding "{name}": '
                                            f'pod {name} is already assigned to node "{assigned}"')
        written = copy.deepcopy(current)
        written.setdefault("spec", {})["nodeName"] = node
        written["metadata"]["resourceVersion"] = self._next_version(current)
        self.cache.apply("Pod", "MODIFIED", written)

    async def get_pod(self, namespace: str, name: str) -> dict:
        return copy.deepcopy(self._current("Pod", namespace, name))

    async def create_claim(self, claim: dict) -> dict:
        meta = claim["metadata"]
        suffix = "".join(secrets.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
        created = copy.deepcopy(claim)
        created["metadata"] = {
            **created["metadata"],
            "name": meta.get("name") or meta["generateName"][:58] + suffix,
            "uid": str(uuid.uuid4()),
            "resourceVersion": "1",
            "creationTimestamp": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        self.cache.apply("ResourceClaim", "ADDED", created)
        return copy.deepcopy(created)

    async def delete_claim(self, namespace: str, name: str, uid: str) -> None:
        current = self._current("ResourceClaim", namespace, name)
        if current["metadata"].get("uid") != uid:
            raise ApiError(409, "Conflict", f"Precondition failed: UID in precondition: {uid}")
        if current["metadata"].get("finalizers"):
            deleting = copy.deepcopy(current)
            deleting["metadata"]["deletionTimestamp"] = datetime.datetime.now(datetime.UTC).strftime(
                "%Y-%m-%dT%H:%M:%SZ")
            deleting["metadata"]["resourceVersion"] = self._next_version(current)
            self.cache.apply("ResourceClaim", "MODIFIED", deleting)
        else:
            self.cache.apply("ResourceClaim", "DELETED", current)

    async def patch_pod_status(self, namespace: str, name: str, status: dict) -> None:
        written = copy.deepcopy(self._current("Pod", namespace, name))
        written["status"] = {**(written.get("status") or {}), **copy.deepcopy(status)}
        written["metadata"]["resourceVersion"] = self._next_version(written)
        self.cache.apply("Pod", "MODIFIED", written)


@dataclass
class _Written:
    """What one bind may have changed on one claim (marked before each write), so it can be undone.

    Undo compares against the current object, so marking a write that did not happen is harmless.
    """
    namespace: str
    name: str
    uid: str
    allocation: dict | None = None     # the allocation this bind wrote
    finalizer_added: bool = False
    reserved: bool = False
    # resourceVersion precondition of a status write whose outcome is unknown (timed out, connection
    # lost, 5xx): the API server may still apply it for as long as the claim keeps that version.
    pending_write_rv: str | None = None
    # The reservedFor entry this bind adds when it is not the pod (a PodGroup, extender.plugin.podgroups).
    consumer: dict | None = None
    # The in-memory special claim's UID when this bind created the claim (undo deletes it).
    created_from: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def anything(self) -> bool:
        return (self.allocation is not None or self.finalizer_added or self.reserved
                or self.created_from is not None)


# Failures of a single API call; anything else is a bug and propagates.
_CALL_ERRORS = (ApiError, aiohttp.ClientError, TimeoutError, OSError)


class ClaimWriter:
    def __init__(self, client: KubeClient | None, cache: ClusterCache, *,
                 retry_delay_s: float = 0.01) -> None:
        self.cache = cache
        self._store: _Store = _ApiStore(client, cache) if client is not None else _MemoryStore(cache)
        self._retry_delay = retry_delay_s
        self.conflicts = 0     # 409s answered by a fresh read (for metrics)
        self.undone = 0        # binds whose partial writes were rolled back

    async def bind(self, pod: dict, node: str, claims: list[tuple[ResourceClaim, dict | None]],
                   consumers: Mapping[str, dict] | None = None, *, extended: Variant | None = None,
                   node_allocatable: Sequence[dict] = ()) -> None:
        """Write allocations and reservations for `pod`'s claims, then bind it to `node`.

        `claims`: each claim with the allocation to write, or None when it is already allocated and
        only needs the reservation. `consumers`: by claim UID, the reservedFor entry to add instead of
        the pod (a PodGroup's). `extended`: the pod's special claim variant; its in-memory claim, one of
        `claims`, is created first. `node_allocatable`: the pod's nodeAllocatableResourceClaimStatuses to
        write before the Binding. Raises BindError; on error nothing this call wrote remains, except a
        PodGroup's reservation on a claim this bind did not allocate (other pods of the group may
        already count on it, as upstream's Unreserve keeps it too).
        """
        meta = metadata_of(pod)
        namespace, name, uid = meta.get("namespace"), meta.get("name"), meta.get("uid")
        if not (isinstance(namespace, str) and isinstance(name, str) and isinstance(uid, str)):
            raise BindError("pod is missing metadata.namespace, metadata.name or metadata.uid")
        written: list[_Written] = []
        status_written = False
        try:
            created_name = None
            for claim, allocation in claims:
                record = _Written(claim.namespace, claim.name, claim.uid,
                                  consumer=(consumers or {}).get(claim.uid))
                written.append(record)
                if extended is not None and claim is extended.claim:
                    claim = await self._create(claim, record)
                    created_name = claim.name
                await self._reserve(claim, allocation, record, pod_name=name, pod_uid=uid)
            if extended is not None and created_name is not None:
                await self._write_extended_status(namespace, name, extended, created_name)
            if node_allocatable:
                status_written = True  # before the call: an answer lost in transit must still be undone
                await self._write_pod_status(namespace, name, STATUS_FIELD, list(node_allocatable))
            await self._bind_pod(namespace, name, uid=uid, node=node)
        except asyncio.CancelledError:
            await asyncio.shield(self._undo(written, pod_uid=uid, namespace=namespace, name=name,
                                            status_written=status_written))
            raise
        except (BindError, *_CALL_ERRORS) as err:
            message = str(err) if isinstance(err, BindError) else _describe(err)
            problems, unsettled = await self._undo(written, pod_uid=uid, namespace=namespace, name=name,
                                                   status_written=status_written)
            if problems:
                message += "; undo incomplete: " + "; ".join(problems)
            raise BindError(f"binding pod {namespace}/{name} to node {node}: {message}",
                            unsettled=unsettled) from err

    # ---- forward --------------------------------------------------------------------------------

    async def _create(self, claim: ResourceClaim, record: _Written) -> ResourceClaim:
        record.created_from = claim.uid
        try:
            created = await self._store.create_claim(creation_body(claim, FINALIZER))
        except _CALL_ERRORS as err:
            # An answer lost in transit leaves a claim we cannot name: the next filter finds it
            # through its owner and removes it (as upstream's PostFilter does).
            raise BindError(f"creating the extended resource claim: {_describe(err)}") from err
        record.name, record.uid = created["metadata"]["name"], created["metadata"]["uid"]
        return ResourceClaim.from_api(created)

    async def _write_extended_status(self, namespace: str, name: str, extended: Variant,
                                     claim_name: str) -> None:
        """pod.status.extendedResourceClaimStatus: kubelet reads which devices each container gets
        from it, and the resourceclaim controller finds the claim to clean up through it."""
        await self._write_pod_status(namespace, name, "extendedResourceClaimStatus",
                                     extended.extended_status(claim_name))

    async def _write_pod_status(self, namespace: str, name: str, field: str, value: object) -> None:
        try:
            await self._store.patch_pod_status(namespace, name, {field: value})
        except _CALL_ERRORS as err:
            raise BindError(f"writing the pod's {field}: {_describe(err)}") from err

    async def remove_claim(self, namespace: str, name: str, uid: str) -> None:
        """Delete a special claim (ours): its delete-protection finalizer first, as upstream does, so it
        goes at once. Raises BindError."""
        record = _Written(namespace, name, uid, created_from=uid)
        try:
            await self._delete_created(record)
        except _CALL_ERRORS as err:
            raise BindError(f"ResourceClaim {record.key}: {_describe(err)}") from err

    async def _reserve(self, claim: ResourceClaim, allocation: dict | None, record: _Written, *,
                       pod_name: str, pod_uid: str) -> None:
        obj = claim.raw
        for attempt in range(MAX_ATTEMPTS):
            if attempt:
                await asyncio.sleep(self._retry_delay)
                obj = await self._fresh_claim(record)
            meta = metadata_of(obj)
            status = obj.get("status") or {}
            if meta.get("deletionTimestamp"):
                raise BindError(f"ResourceClaim {record.key} got deleted in the meantime")
            reserved = list(status.get("reservedFor") or [])
            consumer = record.consumer or {"resource": "pods", "name": pod_name, "uid": pod_uid}
            already_reserved = any(entry.get("uid") == consumer["uid"] for entry in reserved)
            new_status = dict(status)
            if allocation is not None:
                if status.get("allocation") is not None:
                    raise BindError(f"ResourceClaim {record.key} got allocated elsewhere in the meantime")
                if FINALIZER not in (meta.get("finalizers") or []):
                    # Recorded before the call: an answer lost in transit must still be undone.
                    record.finalizer_added = True
                    try:
                        obj = await self._store.update_claim(_with_finalizer(obj))
                    except ApiError as err:
                        if err.conflict:
                            self.conflicts += 1
                            continue
                        problem = f"ResourceClaim {record.key}: adding finalizer: {_describe(err)}"
                        raise BindError(problem) from err
                new_status["allocation"] = record.allocation = self._stamped(allocation)
            elif status.get("allocation") is None:
                raise BindError(f"ResourceClaim {record.key} is not allocated any more")
            elif already_reserved:
                return
            if not already_reserved:
                new_status["reservedFor"] = [*reserved, consumer]
            record.reserved = True
            base_rv = metadata_of(obj).get("resourceVersion")
            try:
                await self._store.update_claim_status({**obj, "status": new_status})
            except ApiError as err:
                if err.conflict:
                    self.conflicts += 1
                    continue
                if err.status >= 500:
                    record.pending_write_rv = base_rv
                raise BindError(f"ResourceClaim {record.key}: updating status: {_describe(err)}") from err
            except (aiohttp.ClientError, TimeoutError, OSError):
                record.pending_write_rv = base_rv
                raise
            return
        raise BindError(f"ResourceClaim {record.key}: still conflicting after {MAX_ATTEMPTS} attempts")

    async def _fresh_claim(self, record: _Written) -> dict:
        try:
            obj = await self._store.get_claim(record.namespace, record.name)
        except ApiError as err:
            if err.not_found:
                raise BindError(f"ResourceClaim {record.key} got deleted in the meantime") from err
            raise
        if metadata_of(obj).get("uid") != record.uid:
            raise BindError(f"ResourceClaim {record.key} got deleted in the meantime (replaced by a new one)")
        return obj

    def _stamped(self, allocation: dict) -> dict:
        features = self.cache.features
        binding_conditions = (features.enabled("DRADeviceBindingConditions")
                              and features.enabled("DRAResourceClaimDeviceStatus"))
        if binding_conditions and not allocation.get("allocationTimestamp"):
            now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            return {**allocation, "allocationTimestamp": now}
        return allocation

    async def _bind_pod(self, namespace: str, name: str, *, uid: str, node: str) -> None:
        try:
            await self._store.bind_pod(namespace, name, uid, node)
        except (ApiError, aiohttp.ClientError, TimeoutError, OSError) as err:
            # A conflict may be a retried bind whose first answer was lost; a timeout or 5xx may
            # have bound the pod all the same. Either way, if the pod is where we want it, the bind
            # succeeded, and undoing the claims would leave a bound pod without its devices.
            unknown = not isinstance(err, ApiError) or err.conflict or err.status >= 500
            if unknown and await self._pod_is_on(namespace, name, uid=uid, node=node):
                return
            if isinstance(err, ApiError):
                raise BindError(f"creating the Binding: {_describe(err)}") from err
            raise

    async def _pod_is_on(self, namespace: str, name: str, *, uid: str, node: str) -> bool:
        try:
            pod = await self._store.get_pod(namespace, name)
        except _CALL_ERRORS:
            return False
        return pod["metadata"].get("uid") == uid and (pod.get("spec") or {}).get("nodeName") == node

    # ---- undo -----------------------------------------------------------------------------------

    async def _undo(self, written: list[_Written], *, pod_uid: str, namespace: str, name: str,
                    status_written: bool) -> tuple[list[str], frozenset[str]]:
        """Remove this bind's reservations, allocations and finalizers, and the pod's
        nodeAllocatableResourceClaimStatuses when it wrote them (`status_written`).

        Returns what could not be undone, and the UIDs of claims that may still hold an allocation
        this bind wrote.

        Deliberately more than upstream: kube-scheduler's Unreserve only drops the pod from reservedFor
        and leaves an allocation it wrote for the resourceclaim controller or a later PostFilter to
        clear; here an allocation no other pod uses yet is cleared at once so its devices are free for
        the retry that follows.
        """
        problems = []
        unsettled = set()
        if status_written:
            try:
                await self._write_pod_status(namespace, name, STATUS_FIELD, [])
            except BindError as err:
                problems.append(str(err))
                log.error("could not clear %s of pod %s/%s: %s", STATUS_FIELD, namespace, name, err)
        touched = [record for record in written if record.anything]
        for record in reversed(touched):
            try:
                settled = await self._undo_claim(record, pod_uid)
            except (BindError, *_CALL_ERRORS) as err:
                problems.append(f"ResourceClaim {record.key}: {_describe(err)}")
                log.error("could not undo bind writes on ResourceClaim %s: %s", record.key, err)
                settled = False
            if not settled and record.allocation is not None:
                unsettled.add(record.uid)
                if record.created_from is not None:
                    unsettled.add(record.created_from)  # what the scheduler knows the claim by
        if touched or status_written:
            self.undone += 1
        return problems, frozenset(unsettled)

    async def _delete_created(self, record: _Written) -> None:
        """Delete a special claim, retrying on conflicts (the claim changed between read and write)."""
        for _ in range(MAX_ATTEMPTS):
            try:
                return await self._delete_once(record)
            except ApiError as err:
                if not err.conflict:
                    raise
            await asyncio.sleep(self._retry_delay)
        raise BindError(f"still conflicting after {MAX_ATTEMPTS} attempts")

    async def _delete_once(self, record: _Written) -> None:
        try:
            obj = await self._fresh_claim(record)
        except BindError:
            return  # already gone
        if FINALIZER in (metadata_of(obj).get("finalizers") or []):
            await self._store.update_claim(_without_finalizer(obj))
        try:
            await self._store.delete_claim(record.namespace, record.name, record.uid)
        except ApiError as err:
            if not err.not_found:
                raise

    async def _undo_claim(self, record: _Written, pod_uid: str) -> bool:
        """Undo one claim; False when a status write of unknown outcome may still be applied."""
        if record.created_from is not None:
            if record.uid == record.created_from:
                return True  # the create failed: there is nothing to delete
            await self._delete_created(record)
            return True
        for attempt in range(MAX_ATTEMPTS):
            if attempt:
                await asyncio.sleep(self._retry_delay)
            try:
                obj = await self._fresh_claim(record)
            except BindError:
                return True   # deleted: nothing left to undo
            status = obj.get("status") or {}
            if (record.pending_write_rv is not None and status.get("allocation") != record.allocation
                    and metadata_of(obj).get("resourceVersion") == record.pending_write_rv):
                # Unchanged since our write was sent: it may still land (the API server applies a
                # request whose client gave up). Keep everything as is and let the watch tell.
                return False
            reserved = list(status.get("reservedFor") or [])
            remaining = [entry for entry in reserved if entry.get("uid") != _undone_consumer(record, pod_uid)]
            new_status = dict(status)
            if remaining:
                new_status["reservedFor"] = remaining
            else:
                new_status.pop("reservedFor", None)
            # Only an allocation this bind made, and only if no other pod started using it meanwhile.
            clear = (record.allocation is not None and not remaining
                     and status.get("allocation") == record.allocation)
            if clear:
                new_status.pop("allocation", None)
                new_status.pop("devices", None)
            try:
                if clear or len(remaining) != len(reserved):
                    obj = await self._store.update_claim_status({**obj, "status": new_status})
                finalizers = metadata_of(obj).get("finalizers") or []
                if record.finalizer_added and FINALIZER in finalizers and not (obj.get("status") or {}).get(
                        "allocation"):
                    await self._store.update_claim(_without_finalizer(obj))
            except ApiError as err:
                if err.conflict:
                    continue
                raise
            return True
        raise BindError(f"still conflicting after {MAX_ATTEMPTS} attempts")


def _undone_consumer(record: _Written, pod_uid: str) -> str | None:
    """The reservedFor UID undo removes: the pod's, or a PodGroup's only together with the allocation
    this bind wrote for it (no other pod of the group can be using that one yet)."""
    if record.consumer is None:
        return pod_uid
    return str(record.consumer.get("uid")) if record.allocation is not None else None


def _with_finalizer(obj: dict) -> dict:
    meta = dict(obj["metadata"])
    meta["finalizers"] = [*(meta.get("finalizers") or []), FINALIZER]
    return {**obj, "metadata": meta}


def _without_finalizer(obj: dict) -> dict:
    meta = dict(obj["metadata"])
    meta["finalizers"] = [f for f in meta.get("finalizers") or [] if f != FINALIZER]
    return {**obj, "metadata": meta}


def _describe(err: BaseException) -> str:
    if isinstance(err, ApiError):
        return f"{err.status} {err.reason}: {err.message}" if err.reason else f"{err.status}: {err.message}"
    return str(err) or type(err).__name__
