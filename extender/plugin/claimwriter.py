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

What an API write can do: be refused, be applied with its answer lost, or still be in flight (in a
proxy, in a queue of the API server) when we give up on it or crash. So:

- Every claim write carries the resourceVersion it was decided from, and the allocation is only ever
  written at a version that carries our finalizer. A write whose outcome is unknown (5xx, timeout, a
  lost connection) is never read as a failure: the claim is read again, and a new version means that
  copy can never apply any more (the caller decides again from the fresh claim), the same version
  means it has not applied yet, so the same write is sent again (exactly one copy can apply). A
  Binding is checked the same way through the pod and sent again; a lost Binding answer never undoes
  the claims.
- To abandon a write that may still land, its claim is written at the very version the write was sent
  at (our finalizer removed): from then on the write can only fail with a conflict. The start-up and
  new-leader fence (extender/plugin/fence.py) does the same to every claim a previous process may have
  been writing, before the first allocation.
- Just before an allocation is written, its devices are checked once more against the claims the cache
  holds: a device another writer took while our earlier writes were awaited ends the bind.
- A bind belongs to a term of this replica (extender/plugin/authority.py): once the term is over (the
  Lease is lost) it writes nothing more, not even its undo, which is left to the next leader's fence.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import functools
import logging
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import aiohttp

from allocator import ResourceClaim
from common.objects import metadata_of
from common.rules import RESERVED_FOR_MAX
from extender.kube.client import ApiError, KubeClient
from extender.plugin.authority import Authority
from extender.plugin.extendedresources import Variant, creation_body
from extender.plugin.nodeallocatable import STATUS_FIELD
from extender.state.cache import ClusterCache

log = logging.getLogger(__name__)

FINALIZER = "resource.kubernetes.io/delete-protection"
MAX_ATTEMPTS = 5
CLAIMS_PATH = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"
CLAIMS_COLLECTION = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
ALL_CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"
LIST_PAGE = 500
POD_STATUS_PATH = "/api/v1/namespaces/{namespace}/pods/{name}/status"
# How long one write whose answer was lost is worked on (read again, sent again) before the bind gives
# up on it: with the other writes of a bind, within kube-scheduler's bind timeout (10 s in deploy/).
RESOLVE_BUDGET_S = 4.0
RESOLVE_FIRST_DELAY_S = 0.05
RESOLVE_MAX_DELAY_S = 1.0


class BindError(Exception):
    """The bind did not happen, or its outcome is not known yet; the message says which and why.

    `unsettled`: by claim UID, the resourceVersion at which an allocation status write of this bind was
    sent and may still apply (its answer was lost and it could be neither confirmed nor fenced off): the
    devices must stay counted until the claim shows another version. `created`: by the UID of the
    in-memory special claim, the claim this bind created for it (the UID `unsettled` names, and the one
    watch events carry).
    """

    def __init__(self, message: str, *, unsettled: Mapping[str, str] | None = None,
                 created: Mapping[str, ResourceClaim] | None = None, kept: bool = False) -> None:
        super().__init__(message)
        self.unsettled: Mapping[str, str] = unsettled or {}
        self.created: Mapping[str, ResourceClaim] = created or {}
        self.kept = kept  # the bind's before_binding step stopped it (KeepClaims): nothing failed


class KeepClaims(Exception):
    """Raised by a bind's `before_binding` step: the pod is not bound now, and what the bind wrote
    stays (no undo). The message goes to kube-scheduler."""


class ClaimRef(NamedTuple):
    """A claim a bind wrote: its key ("namespace/name") and UID."""

    key: str
    uid: str


class _Moved(Exception):
    """The claim has a new version while a write of unknown outcome was being resolved: that write can
    never apply any more. Carries the fresh claim."""

    def __init__(self, fresh: dict) -> None:
        super().__init__("the claim changed")
        self.fresh = fresh


class _Unsettled(Exception):
    """A write's outcome stayed unknown for the whole resolve budget."""


class _BindingUnknown(Exception):
    """Whether the Binding was applied stayed unknown for the whole resolve budget."""


class _LostAuthority(Exception):
    """This replica's term ended (its Lease is lost): it must write nothing more."""


class _Store(Protocol):
    async def get_claim(self, namespace: str, name: str) -> dict: ...
    async def update_claim(self, claim: dict) -> dict: ...
    async def update_claim_status(self, claim: dict) -> dict: ...
    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None: ...
    async def get_pod(self, namespace: str, name: str) -> dict: ...
    async def create_claim(self, claim: dict) -> dict: ...
    async def delete_claim(self, namespace: str, name: str, uid: str) -> None: ...
    async def patch_pod_status(self, namespace: str, name: str, status: dict) -> None: ...
    def claim_pages(self) -> AsyncIterator[list[dict]]: ...


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

    async def claim_pages(self) -> AsyncIterator[list[dict]]:
        """Every claim, read from the API server a page at a time (a quorum read: the first page has no
        resourceVersion, the next ones continue that same snapshot)."""
        async for page in self.client.pages(ALL_CLAIMS, limit=LIST_PAGE):
            yield page.get("items") or []

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

    async def claim_pages(self) -> AsyncIterator[list[dict]]:
        claims = self.cache.valid_objects("ResourceClaim")
        for first in range(0, len(claims), LIST_PAGE):
            yield [copy.deepcopy(raw) for raw in claims[first:first + LIST_PAGE]]


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
    # resourceVersion precondition of an allocation status write whose outcome is unknown: the API
    # server may still apply it for as long as the claim keeps that version.
    pending_write_rv: str | None = None
    # The reservedFor entry this bind adds when it is not the pod (a PodGroup, extender.plugin.podgroups).
    consumer: dict | None = None
    # The in-memory special claim's UID when this bind created the claim (undo deletes it).
    created_from: str | None = None
    created: ResourceClaim | None = None  # the claim created for it, once the API server answered

    @classmethod
    def of(cls, raw: Mapping) -> _Written:
        """A record of nothing written yet, for the claim `raw`."""
        meta = metadata_of(raw)
        return cls(str(meta.get("namespace") or ""), str(meta.get("name") or ""), str(meta.get("uid") or ""))

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def anything(self) -> bool:
        return (self.allocation is not None or self.finalizer_added or self.reserved
                or self.created_from is not None)


# Failures of a single API call; anything else is a bug and propagates.
_TRANSPORT_ERRORS = (aiohttp.ClientError, TimeoutError, OSError)
_CALL_ERRORS = (ApiError, *_TRANSPORT_ERRORS)


def _unknown(err: BaseException) -> bool:
    """Could the request that failed this way have been applied all the same?

    An error status below 500 is the API server refusing the request (a 429 is refused before it is
    handled); a 5xx may come after the write (a timeout, a proxy that lost the answer), and a transport
    error may hit after the request was sent."""
    if isinstance(err, ApiError):
        return err.status >= 500 or err.status == 408
    return isinstance(err, _TRANSPORT_ERRORS)


def half_written(raw: Mapping) -> bool:
    """A claim with our finalizer but no allocation: an allocation write at this version may be in flight,
    or a bind stopped half-way (nothing reserves an unallocated claim)."""
    meta = metadata_of(raw)
    return FINALIZER in (meta.get("finalizers") or ()) and not (raw.get("status") or {}).get("allocation")


class ClaimWriter:
    def __init__(self, client: KubeClient | None, cache: ClusterCache, *,
                 retry_delay_s: float = 0.01, resolve_budget_s: float = RESOLVE_BUDGET_S,
                 authority: Authority | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.cache = cache
        self._store: _Store = _ApiStore(client, cache) if client is not None else _MemoryStore(cache)
        self._retry_delay = retry_delay_s
        self._resolve_budget = resolve_budget_s
        self._clock = clock
        self.authority = authority if authority is not None else Authority.always()
        self._writing: dict[str, int] = {}  # claim UID -> binds writing it now
        self.conflicts = 0     # 409s answered by a fresh read (for metrics)
        self.undone = 0        # binds whose partial writes were rolled back
        self.unknown_outcomes = 0  # writes whose answer was lost (for metrics)

    def writing(self, claim_uid: str) -> bool:
        """Is a bind writing this claim now? (The fence and the sweeper leave such claims alone.)"""
        return claim_uid in self._writing

    async def bind(self, pod: dict, node: str, claims: list[tuple[ResourceClaim, dict | None]],
                   consumers: Mapping[str, dict] | None = None, *, extended: Variant | None = None,
                   node_allocatable: Sequence[dict] | None = None, term: int | None = None,
                   binding: bool = True, held: Sequence[str] = (),
                   before_binding: Callable[[Sequence[ClaimRef]], Awaitable[None]] | None = None) -> None:
        """Write allocations and reservations for `pod`'s claims, then bind it to `node`.

        `claims`: each claim with the allocation to write, or None when it is already allocated and
        only needs the reservation. `consumers`: by claim UID, the reservedFor entry to add instead of
        the pod (a PodGroup's). `extended`: the pod's special claim variant; its in-memory claim, one of
        `claims`, is created first. `node_allocatable`: the pod's nodeAllocatableResourceClaimStatuses to
        write before the Binding (None: not written). `term`: the term of this replica the bind began in
        (the current one if not given); nothing is written once it is over. `binding=False` writes the
        claims of a pod that is bound already (a repair). `held`: UIDs of the pod's claims this call does
        not write but the Binding rests on (allocated and reserved for the pod by an earlier call): like
        those written, they count as being written for the whole call (`writing`). `before_binding`,
        awaited with the key and UID of each claim written once they and the pod's status are written
        and before the Binding, may raise KeepClaims: then the pod is not bound and nothing is undone
        (the device binding conditions it waits for are not met yet, or it freed the claims itself).
        Raises BindError; on a definite error nothing this call wrote remains, except a PodGroup's
        reservation on a claim this bind did not allocate (other pods of the group may already count on
        it, as upstream's Unreserve keeps it too). When the Binding's outcome stays unknown, the claims
        are kept: a pod bound without its devices never starts.
        """
        meta = metadata_of(pod)
        namespace, name, uid = meta.get("namespace"), meta.get("name"), meta.get("uid")
        if not (isinstance(namespace, str) and isinstance(name, str) and isinstance(uid, str)):
            raise BindError("pod is missing metadata.namespace, metadata.name or metadata.uid")
        if term is None:
            term = self.authority.term
        where = f"binding pod {namespace}/{name} to node {node}"
        written: list[_Written] = []
        status_written = binding_sent = waiting = False
        marked = [*(claim.uid for claim, _ in claims), *held]
        self._mark(marked)
        try:
            created_name = None
            for claim, allocation in claims:
                record = _Written(claim.namespace, claim.name, claim.uid,
                                  consumer=(consumers or {}).get(claim.uid))
                written.append(record)
                if extended is not None and claim is extended.claim:
                    claim = await self._create(claim, record, term)
                    created_name = claim.name
                    marked.append(claim.uid)
                    self._mark([claim.uid])
                await self._reserve(claim, allocation, record, pod_name=name, pod_uid=uid, term=term)
            if extended is not None and created_name is not None:
                await self._write_extended_status(namespace, name, extended, created_name, term)
            if node_allocatable is not None:
                status_written = True  # before the call: an answer lost in transit must still be undone
                await self._write_pod_status(namespace, name, STATUS_FIELD, list(node_allocatable), term)
            if binding and before_binding is not None:
                waiting = True
                await before_binding([ClaimRef(record.key, record.uid) for record in written])
                waiting = False
            if binding:
                binding_sent = True
                await self._bind_pod(namespace, name, uid=uid, node=node, term=term)
        except asyncio.CancelledError:
            # Cancelled while waiting for binding conditions: the claims are complete and stay, as after
            # KeepClaims (the pod's next bind finds them).
            if not binding_sent and not waiting and self.authority.holds(term):
                await asyncio.shield(self._undo(written, pod_uid=uid, namespace=namespace, name=name,
                                                status_written=status_written, term=term))
            raise
        except _LostAuthority:
            log.warning("%s: this replica is no longer the leader; its writes so far are left to the new "
                        "leader's fence", where)
            raise BindError(f"{where}: this replica is no longer the leader",
                            unsettled=_pending(written), created=_created(written)) from None
        except KeepClaims as keep:
            raise BindError(f"{where}: {keep}", kept=True) from None
        except _BindingUnknown as unknown:
            raise BindError(f"{where}: creating the Binding: {unknown}; whether it was applied is not known, "
                            "so the claims stay allocated and reserved for the pod") from None
        except (BindError, *_CALL_ERRORS) as err:
            message = str(err) if isinstance(err, BindError) else _describe(err)
            if not self.authority.holds(term):
                raise BindError(f"{where}: {message}; not undone: this replica is no longer the leader",
                                unsettled=_pending(written), created=_created(written)) from err
            problems, unsettled = await self._undo(written, pod_uid=uid, namespace=namespace, name=name,
                                                   status_written=status_written, term=term)
            if problems:
                message += "; undo incomplete: " + "; ".join(problems)
            raise BindError(f"{where}: {message}", unsettled=unsettled, created=_created(written)) from err
        finally:
            self._unmark(marked)

    def _mark(self, uids: Sequence[str]) -> None:
        for claim_uid in uids:
            self._writing[claim_uid] = self._writing.get(claim_uid, 0) + 1

    def _unmark(self, uids: Sequence[str]) -> None:
        for claim_uid in uids:
            left = self._writing.get(claim_uid, 0) - 1
            if left > 0:
                self._writing[claim_uid] = left
            else:
                self._writing.pop(claim_uid, None)

    def _check_authority(self, term: int | None) -> None:
        if not self.authority.holds(term):
            raise _LostAuthority()

    # ---- forward --------------------------------------------------------------------------------

    async def _create(self, claim: ResourceClaim, record: _Written, term: int | None) -> ResourceClaim:
        record.created_from = claim.uid
        self._check_authority(term)
        try:
            created = await self._store.create_claim(creation_body(claim, FINALIZER))
        except _CALL_ERRORS as err:
            # An answer lost in transit leaves a claim we cannot name: the next filter finds it
            # through its owner and removes it (as upstream's PostFilter does).
            raise BindError(f"creating the extended resource claim: {_describe(err)}") from err
        record.name, record.uid = created["metadata"]["name"], created["metadata"]["uid"]
        record.created = ResourceClaim.from_api(created)
        return record.created

    async def _write_extended_status(self, namespace: str, name: str, extended: Variant,
                                     claim_name: str, term: int | None) -> None:
        """pod.status.extendedResourceClaimStatus: kubelet reads which devices each container gets
        from it, and the resourceclaim controller finds the claim to clean up through it."""
        await self._write_pod_status(namespace, name, "extendedResourceClaimStatus",
                                     extended.extended_status(claim_name), term)

    async def _write_pod_status(self, namespace: str, name: str, field: str, value: object,
                                term: int | None) -> None:
        """A merge patch of the pod's status, sent again while its outcome is unknown (the same patch
        applied twice is applied once)."""
        deadline = self._clock() + self._resolve_budget
        delay = RESOLVE_FIRST_DELAY_S
        while True:
            self._check_authority(term)
            try:
                await self._store.patch_pod_status(namespace, name, {field: value})
                return
            except _CALL_ERRORS as err:
                if not _unknown(err) or self._clock() + delay > deadline:
                    raise BindError(f"writing the pod's {field}: {_describe(err)}") from err
                self.unknown_outcomes += 1
            await asyncio.sleep(delay)
            delay = min(delay * 2, RESOLVE_MAX_DELAY_S)

    async def clear_node_allocatable(self, namespace: str, name: str, *, term: int | None) -> None:
        """Clear the pod's nodeAllocatableResourceClaimStatuses (with an empty list, as upstream's
        Unreserve) once the claims it describes were freed. Raises BindError."""
        try:
            await self._write_pod_status(namespace, name, STATUS_FIELD, [], term)
        except _LostAuthority:
            raise BindError(f"pod {namespace}/{name}: {STATUS_FIELD} not cleared: this replica is no longer "
                            "the leader") from None

    async def remove_claim(self, namespace: str, name: str, uid: str, *, term: int | None) -> None:
        """Delete a special claim (ours): its delete-protection finalizer first, as upstream does, so it
        goes at once. Nothing is written once `term` is over. Raises BindError."""
        record = _Written(namespace, name, uid, created_from=uid)
        try:
            await self._delete_created(record, term)
        except _LostAuthority:
            raise BindError(f"ResourceClaim {record.key}: not deleted: this replica is no longer the "
                            "leader") from None
        except _CALL_ERRORS as err:
            raise BindError(f"ResourceClaim {record.key}: {_describe(err)}") from err

    async def _reserve(self, claim: ResourceClaim, allocation: dict | None, record: _Written, *,
                       pod_name: str, pod_uid: str, term: int | None) -> None:
        obj = claim.raw
        read_again = False
        for _attempt in range(MAX_ATTEMPTS):
            if read_again:
                await asyncio.sleep(self._retry_delay)
                obj = await self._read_back(record)
            read_again = True
            meta = metadata_of(obj)
            status = obj.get("status") or {}
            if meta.get("deletionTimestamp"):
                raise BindError(f"ResourceClaim {record.key} got deleted in the meantime")
            reserved = list(status.get("reservedFor") or [])
            consumer = record.consumer or {"resource": "pods", "name": pod_name, "uid": pod_uid}
            already_reserved = any(entry.get("uid") == consumer["uid"] for entry in reserved)
            current = status.get("allocation")
            new_status = dict(status)
            if allocation is not None:
                if current is not None:
                    if already_reserved and same_devices(current, record.allocation or allocation):
                        record.reserved, record.pending_write_rv = True, None
                        return  # an earlier copy of our write was applied; its answer was lost
                    raise BindError(f"ResourceClaim {record.key} got allocated elsewhere in the meantime")
                if FINALIZER not in (meta.get("finalizers") or []):
                    # Recorded before the call: an answer lost in transit must still be undone.
                    record.finalizer_added = True
                    try:
                        obj = await self._send(record, obj, term, self._store.update_claim,
                                               _with_finalizer(obj))
                    except ApiError as err:
                        if err.conflict:
                            self.conflicts += 1
                            continue
                        problem = f"ResourceClaim {record.key}: adding finalizer: {_describe(err)}"
                        raise BindError(problem) from err
                    except _Moved as moved:
                        obj, read_again = moved.fresh, False
                        continue
                    except _Unsettled as unsettled:
                        problem = f"ResourceClaim {record.key}: adding finalizer: {unsettled}"
                        raise BindError(problem) from None
                new_status["allocation"] = record.allocation = self._stamped(allocation)
            elif current is None:
                raise BindError(f"ResourceClaim {record.key} is not allocated any more")
            elif already_reserved:
                return
            if not already_reserved:
                new_status["reservedFor"] = [*reserved, consumer]
            record.reserved = True
            recheck = None
            if allocation is not None:
                recheck = functools.partial(self._check_devices_free, record, allocation)
                recheck()
                record.pending_write_rv = metadata_of(obj).get("resourceVersion")
            try:
                await self._send(record, obj, term, self._store.update_claim_status,
                                 {**obj, "status": new_status}, recheck=recheck)
            except ApiError as err:
                record.pending_write_rv = None  # refused: it will never apply
                if err.conflict:
                    self.conflicts += 1
                    continue
                raise BindError(f"ResourceClaim {record.key}: updating status: {_describe(err)}") from err
            except _Moved as moved:
                record.pending_write_rv = None  # the claim moved on: that write can never apply
                obj, read_again = moved.fresh, False
                continue
            except _Unsettled as unsettled:
                raise BindError(f"ResourceClaim {record.key}: updating status: {unsettled}") from None
            record.pending_write_rv = None
            return
        raise BindError(f"ResourceClaim {record.key}: still conflicting after {MAX_ATTEMPTS} attempts")

    def _check_devices_free(self, record: _Written, allocation: dict) -> None:
        """The devices must not be another claim's in the cache now: our earlier awaits may have let the
        watch (or another bind's write) deliver an allocation that takes one of them."""
        allocated = self.cache.allocated
        for result in (allocation.get("devices") or {}).get("results") or ():
            if result.get("adminAccess") or result.get("shareID"):
                continue
            owner = allocated.devices.get((result.get("driver"), result.get("pool"), result.get("device")))
            if owner is not None and owner != record.key:
                device = f"{result.get('driver')}/{result.get('pool')}/{result.get('device')}"
                raise BindError(f"ResourceClaim {record.key}: device {device} was allocated to ResourceClaim "
                                f"{owner} in the meantime")

    async def _send(self, record: _Written, base: dict, term: int | None,
                    write: Callable[[dict], Awaitable[dict]], body: dict, *,
                    recheck: Callable[[], None] | None = None) -> dict:
        """`write(body)`, a write conditioned on the resourceVersion of `base`, the claim it was decided
        from. When its outcome is unknown, the claim is read again: a new version raises _Moved (this
        write can never apply now); the same version means it has not applied, so it is sent again,
        after `recheck()` (which raises to stop it: what the write rests on may have changed while its
        outcome was resolved). _Unsettled when that stays unknown for the resolve budget; ApiError for a
        refusal."""
        base_rv = metadata_of(base).get("resourceVersion")
        deadline = self._clock() + self._resolve_budget
        delay = RESOLVE_FIRST_DELAY_S
        resending = False
        while True:
            self._check_authority(term)
            if resending and recheck is not None:
                recheck()
            resending = True
            try:
                return await write(body)
            except _CALL_ERRORS as err:
                if not _unknown(err):
                    raise
                last: BaseException = err
            self.unknown_outcomes += 1
            log.warning("ResourceClaim %s: the answer to a write was lost (%s); reading the claim again",
                        record.key, _describe(last))
            while True:
                if self._clock() + delay > deadline:
                    raise _Unsettled(f"outcome unknown: {_describe(last)}")
                await asyncio.sleep(delay)
                delay = min(delay * 2, RESOLVE_MAX_DELAY_S)
                try:
                    fresh = await self._fresh_claim(record)
                except _CALL_ERRORS as err:
                    last = err  # a failed read (even a refused one, a 429) tells nothing: read again
                    continue
                if metadata_of(fresh).get("resourceVersion") != base_rv:
                    raise _Moved(fresh)
                break

    async def _read_back(self, record: _Written) -> dict:
        """The claim as the API server has it, read again through failed reads (a read that fails, even
        a refused one, tells nothing) for the resolve budget; BindError when it is gone."""
        deadline = self._clock() + self._resolve_budget
        delay = RESOLVE_FIRST_DELAY_S
        while True:
            try:
                return await self._fresh_claim(record)
            except _CALL_ERRORS:
                if self._clock() + delay > deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, RESOLVE_MAX_DELAY_S)

    async def _read_again(self, record: _Written) -> dict | None:
        """After a conflict: a short pause, then the claim as the API server has it; None once it is gone
        (deleted, or replaced by another of the same name)."""
        await asyncio.sleep(self._retry_delay)
        try:
            return await self._fresh_claim(record)
        except BindError:
            return None

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

    async def _bind_pod(self, namespace: str, name: str, *, uid: str, node: str, term: int | None) -> None:
        """Create the Binding. A lost answer (a 5xx, a timeout, a conflict that may be our own earlier
        copy) is settled by the pod: bound to `node`, done; bound elsewhere, replaced or gone, a
        definite failure; not bound yet, the Binding is sent again (a second copy can only conflict).
        _BindingUnknown when the resolve budget passes without an answer."""
        deadline = self._clock() + self._resolve_budget
        delay = RESOLVE_FIRST_DELAY_S
        while True:
            self._check_authority(term)
            try:
                await self._store.bind_pod(namespace, name, uid, node)
                return
            except _CALL_ERRORS as err:
                if not (_unknown(err) or (isinstance(err, ApiError) and err.conflict)):
                    raise BindError(f"creating the Binding: {_describe(err)}") from err
                last: BaseException = err
            if _unknown(last):
                self.unknown_outcomes += 1
            while True:
                try:
                    pod = await self._store.get_pod(namespace, name)
                except _CALL_ERRORS as err:
                    if isinstance(err, ApiError) and err.not_found:
                        raise BindError(f"creating the Binding: {_describe(last)}; the pod is gone") from err
                    # Any other failed read (a 429, a 403 too) tells nothing of the Binding: read again.
                else:
                    if metadata_of(pod).get("uid") != uid:
                        raise BindError(f"creating the Binding: {_describe(last)}; the pod was replaced")
                    bound_to = (pod.get("spec") or {}).get("nodeName")
                    if bound_to == node:
                        return
                    if bound_to or (isinstance(last, ApiError) and last.conflict):
                        raise BindError(f"creating the Binding: {_describe(last)}")
                    break  # not bound (yet): send it again
                if self._clock() + delay > deadline:
                    raise _BindingUnknown(_describe(last))
                await asyncio.sleep(delay)
                delay = min(delay * 2, RESOLVE_MAX_DELAY_S)
            if self._clock() + delay > deadline:
                raise _BindingUnknown(_describe(last))
            await asyncio.sleep(delay)
            delay = min(delay * 2, RESOLVE_MAX_DELAY_S)

    # ---- fencing ----------------------------------------------------------------------------------

    def claim_pages(self) -> AsyncIterator[list[dict]]:
        """Every claim as the API server has it now (a quorum read), a page at a time: at tens of
        thousands of claims, all of them decoded at once would stand beside the whole cache."""
        return self._store.claim_pages()

    async def clear_half_written(self, raw: dict) -> bool:
        """Remove our finalizer from a claim that has it and no allocation, at the version `raw` shows, so
        that an allocation write sent at that version can never apply. True once the claim is settled
        (the finalizer removed, or the claim allocated, changed for good or gone); False when that could
        not be done now (API errors), and it must be tried again."""
        record = _Written.of(raw)
        obj = raw
        for attempt in range(MAX_ATTEMPTS):
            if attempt:
                try:
                    fresh = await self._read_again(record)
                except _CALL_ERRORS as err:
                    log.warning("ResourceClaim %s: reading it to fence it: %s", record.key, _describe(err))
                    return False
                if fresh is None:
                    return True  # gone
                obj = fresh
            if not half_written(obj):
                return True
            try:
                await self._store.update_claim(_without_finalizer(obj))
                log.info("ResourceClaim %s: removed the finalizer of a bind that did not finish (version %s)",
                         record.key, metadata_of(obj).get("resourceVersion"))
                return True
            except ApiError as err:
                if err.not_found:
                    return True
                if not err.conflict:
                    log.warning("ResourceClaim %s: removing a stale finalizer: %s", record.key,
                                _describe(err))
                    if not _unknown(err):
                        return False
            except _TRANSPORT_ERRORS as err:
                log.warning("ResourceClaim %s: removing a stale finalizer: %s", record.key, _describe(err))
        return False

    # ---- deallocation ---------------------------------------------------------------------------

    async def deallocate(self, raw: dict, *, still: Callable[[dict], str | None],
                         term: int | None) -> str | None:
        """Deallocate the claim `raw` as upstream's plugin does to reschedule a pod whose device binding
        failed or timed out: one status write at the version `raw` shows that clears the allocation, the
        reservations and the device statuses, then (as the resourceclaim controller does) our finalizer.

        `still(claim)` says why it must not be done any more (None: go on); it is asked of `raw` and of
        every fresh copy read after a conflict or a lost answer. Returns None once deallocated (also when
        a status write of unknown outcome is followed by a claim without `raw`'s allocation: whether or
        not that write applied, the claim is deallocated), else that reason. Raises BindError when the
        API server refuses or cannot be reached, or this replica's term is over. A finalizer that cannot
        be removed is left to the sweeper of half-written claims (extender/plugin/fence.py)."""
        record = _Written.of(raw)
        obj, read_again = raw, False
        freeing = (raw.get("status") or {}).get("allocation")
        try:
            for _attempt in range(MAX_ATTEMPTS):
                if read_again:
                    fresh = await self._read_again(record)
                    if fresh is None:
                        return "it was deleted"
                    obj = fresh
                read_again = True
                why_not = still(obj)
                if why_not is not None:
                    return why_not
                status = {key: value for key, value in (obj.get("status") or {}).items()
                          if key not in ("allocation", "reservedFor", "devices")}
                try:
                    obj = await self._send(record, obj, term, self._store.update_claim_status,
                                           {**obj, "status": status})
                except ApiError as err:
                    if err.conflict:
                        self.conflicts += 1
                        continue
                    raise BindError(f"ResourceClaim {record.key}: deallocating: {_describe(err)}") from err
                except _Moved as moved:
                    obj, read_again = moved.fresh, False
                    if _allocated_as(obj, freeing):
                        continue
                    # Our write applied, or another writer freed the claim first: deallocated either way.
                except _Unsettled as unsettled:
                    raise BindError(f"ResourceClaim {record.key}: deallocating: {unsettled}") from None
                if half_written(obj):
                    try:
                        await self._send(record, obj, term, self._store.update_claim, _without_finalizer(obj))
                    except (ApiError, _Moved, _Unsettled) as err:
                        log.warning("ResourceClaim %s: deallocated, but its finalizer stays for now: %s",
                                    record.key, err)
                return None
        except _LostAuthority:
            raise BindError(f"ResourceClaim {record.key}: not deallocated: this replica is no longer the "
                            "leader") from None
        except _CALL_ERRORS as err:
            raise BindError(f"ResourceClaim {record.key}: deallocating: {_describe(err)}") from err
        raise BindError(f"ResourceClaim {record.key}: deallocating: still conflicting after {MAX_ATTEMPTS} "
                        "attempts")

    # ---- undo -----------------------------------------------------------------------------------

    async def _undo(self, written: list[_Written], *, pod_uid: str, namespace: str, name: str,
                    status_written: bool, term: int | None) -> tuple[list[str], dict[str, str]]:
        """Remove this bind's reservations, allocations and finalizers, and the pod's
        nodeAllocatableResourceClaimStatuses when it wrote them (`status_written`).

        Returns what could not be undone, and by claim UID the version at which an allocation this bind
        sent may still apply.

        Deliberately more than upstream: kube-scheduler's Unreserve only drops the pod from reservedFor
        and leaves an allocation it wrote for the resourceclaim controller or a later PostFilter to
        clear; here an allocation no other pod uses yet is cleared at once so its devices are free for
        the retry that follows.
        """
        problems = []
        unsettled: dict[str, str] = {}
        if status_written:
            try:
                await self._write_pod_status(namespace, name, STATUS_FIELD, [], term)
            except (BindError, _LostAuthority) as err:
                problems.append(str(err) or "no longer the leader")
                log.error("could not clear %s of pod %s/%s: %s", STATUS_FIELD, namespace, name, err)
        touched = [record for record in written if record.anything]
        for record in reversed(touched):
            try:
                await self._undo_claim(record, pod_uid, term)
            except (BindError, _LostAuthority, _Unsettled, *_CALL_ERRORS) as err:
                problems.append(f"ResourceClaim {record.key}: {_describe(err) or 'no longer the leader'}")
                log.error("could not undo bind writes on ResourceClaim %s: %s", record.key, err)
            if record.pending_write_rv is not None:
                unsettled[record.uid] = record.pending_write_rv
        if touched or status_written:
            self.undone += 1
        return problems, unsettled

    async def _delete_created(self, record: _Written, term: int | None) -> None:
        """Delete a special claim, retrying on conflicts (the claim changed between read and write)."""
        for _ in range(MAX_ATTEMPTS):
            try:
                return await self._delete_once(record, term)
            except ApiError as err:
                if not err.conflict:
                    raise
            await asyncio.sleep(self._retry_delay)
        raise BindError(f"still conflicting after {MAX_ATTEMPTS} attempts")

    async def _delete_once(self, record: _Written, term: int | None) -> None:
        try:
            obj = await self._fresh_claim(record)
        except BindError:
            record.pending_write_rv = None
            return  # already gone
        if FINALIZER in (metadata_of(obj).get("finalizers") or []):
            # Also fences off a status write of unknown outcome: the version it was sent at is gone.
            self._check_authority(term)
            await self._store.update_claim(_without_finalizer(obj))
            record.pending_write_rv = None
        self._check_authority(term)
        try:
            await self._store.delete_claim(record.namespace, record.name, record.uid)
        except ApiError as err:
            if not err.not_found:
                raise
        record.pending_write_rv = None

    async def _undo_claim(self, record: _Written, pod_uid: str, term: int | None) -> None:
        """Undo one claim. An allocation write of unknown outcome is fenced off first (see
        `_fence_pending`); `record.pending_write_rv` stays set when that was not possible."""
        if record.created_from is not None:
            if record.uid == record.created_from:
                return  # the create failed: there is nothing to delete
            await self._delete_created(record, term)
            return
        for attempt in range(MAX_ATTEMPTS):
            if attempt:
                await asyncio.sleep(self._retry_delay)
            try:
                obj = await self._read_back(record)
            except BindError:
                record.pending_write_rv = None
                return   # deleted: nothing left to undo
            status = obj.get("status") or {}
            current = status.get("allocation")
            ours = (current is not None and record.allocation is not None
                    and same_devices(current, record.allocation))
            if (record.pending_write_rv is not None and not ours
                    and metadata_of(obj).get("resourceVersion") == record.pending_write_rv):
                if not await self._fence_pending(record, obj, term):
                    continue
                return
            # Applied, or the claim moved on without it: either way it can never apply (again).
            record.pending_write_rv = None
            reserved = list(status.get("reservedFor") or [])
            remaining = [entry for entry in reserved if entry.get("uid") != _undone_consumer(record, pod_uid)]
            new_status = dict(status)
            if remaining:
                new_status["reservedFor"] = remaining
            else:
                new_status.pop("reservedFor", None)
            # Only an allocation this bind made, and only if no other pod started using it meanwhile.
            clear = record.allocation is not None and not remaining and ours
            if clear:
                new_status.pop("allocation", None)
                new_status.pop("devices", None)
            try:
                if clear or len(remaining) != len(reserved):
                    obj = await self._send(record, obj, term, self._store.update_claim_status,
                                           {**obj, "status": new_status})
                if ((record.finalizer_added or clear) and half_written(obj)):
                    await self._send(record, obj, term, self._store.update_claim, _without_finalizer(obj))
            except ApiError as err:
                if err.conflict:
                    continue
                raise
            except _Moved:
                continue
            return
        raise BindError(f"still conflicting after {MAX_ATTEMPTS} attempts")

    async def _fence_pending(self, record: _Written, obj: dict, term: int | None) -> bool:
        """The claim is still at the version our allocation write of unknown outcome was sent at: write
        it at that version (our finalizer removed) so that write can never apply. False when the claim
        changed meanwhile (decide again from a fresh read); raises _Unsettled when it cannot be done."""
        try:
            await self._send(record, obj, term, self._store.update_claim, _without_finalizer(obj))
        except ApiError as err:
            if err.conflict:
                return False
            raise
        except _Moved:
            return False
        record.pending_write_rv = None
        return True


def _pending(written: Sequence[_Written]) -> dict[str, str]:
    return {record.uid: record.pending_write_rv for record in written if record.pending_write_rv is not None}


def _created(written: Sequence[_Written]) -> dict[str, ResourceClaim]:
    return {record.created_from: record.created for record in written
            if record.created_from is not None and record.created is not None}


def same_devices(allocation: Mapping, other: Mapping) -> bool:
    """Do two allocations name the same devices for the same requests? (The mutating webhook adds the
    requests' tolerations to what we wrote, and a timestamp may differ: neither makes it another
    allocation.)"""
    def devices(value: Mapping) -> list[tuple]:
        results = (value.get("devices") or {}).get("results") or ()
        return sorted((str(r.get("request")), str(r.get("driver")), str(r.get("pool")), str(r.get("device")),
                       str(r.get("shareID") or "")) for r in results if isinstance(r, Mapping))
    return devices(allocation) == devices(other)


def _allocated_as(raw: Mapping, allocation: Mapping | None) -> bool:
    """Does the claim `raw` hold `allocation` (the same devices)?"""
    current = (raw.get("status") or {}).get("allocation")
    return current is not None and allocation is not None and same_devices(current, allocation)


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
