"""The extender's view of the cluster: every object it needs, indexed so the filter path never scans.

All changes enter through `ClusterCache.apply`, from the watcher (cluster mode), from `from_objects`
(snapshot mode) or from the ClaimWriter (objects it wrote, so the next scheduling cycle sees them
before the watch delivers them). Slices, classes and taint rules feed `allocator.Inventory`;
allocated claims feed `allocator.AllocatedState`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from typing import Any, Protocol, TypeVar, cast

from allocator import (
    AllocatedState,
    AllocationReading,
    DeviceClass,
    DeviceTaintRule,
    FeatureGates,
    InvalidObjectError,
    Inventory,
    Node,
    ResourceClaim,
    ResourceSlice,
)
from common.claimrefs import check_group_claims, group_name_of
from common.objects import metadata_of
from extender.state.nodetransform import slim_node
from extender.state.packing import CLAIM_SECTIONS, PackedClaim, PackedNode, PackedStore
from extender.state.podtransform import slim_pod
from extender.state.sharing import ObjectSharer

log = logging.getLogger(__name__)

# kind -> (apiVersion, namespaced)
KINDS: dict[str, tuple[str, bool]] = {
    "Node": ("v1", False),
    "Pod": ("v1", True),
    "DeviceClass": ("resource.k8s.io/v1", False),
    "ResourceSlice": ("resource.k8s.io/v1", False),
    "ResourceClaim": ("resource.k8s.io/v1", True),
    "ResourceClaimTemplate": ("resource.k8s.io/v1", True),
    "DeviceTaintRule": ("resource.k8s.io/v1", False),
    # Watched only with the DRAWorkloadResourceClaims gate (see extender.plugin.podgroups).
    "PodGroup": ("scheduling.k8s.io/v1beta1", True),
}
EVENT_TYPES = ("ADDED", "MODIFIED", "DELETED")
# Bounded so a flood of broken objects cannot grow /debug/state without limit.
MAX_INVALID_DETAILS = 100
# Distinct claim specs whose parse is kept for the next claim with the same spec (one per template or
# workload shape in practice); a stream of unique specs empties the table, which costs only re-parses.
MAX_PARSED_SPECS = 4096

Subscriber = Callable[[str, str, dict, "dict | None"], None]


class CacheError(ValueError):
    """A change the cache cannot take (unknown kind or event type); never raised for bad object content."""


def object_key(raw: dict, *, namespaced: bool) -> str:
    meta = raw.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise ValueError("metadata.name: required")
    if not namespaced:
        return meta["name"]
    namespace = meta.get("namespace")
    if not isinstance(namespace, str) or not namespace:
        raise ValueError("metadata.namespace: required")
    return f"{namespace}/{meta['name']}"


def _resource_version(raw: dict) -> int | None:
    value = metadata_of(raw).get("resourceVersion")
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _check_pod(raw: dict) -> None:
    meta = raw["metadata"]
    if not isinstance(meta.get("uid"), str) or not meta["uid"]:
        raise ValueError("metadata.uid: required")
    spec = raw.get("spec")
    if spec is not None and not isinstance(spec, dict):
        raise ValueError("spec: must be an object")
    claims = (spec or {}).get("resourceClaims")
    if claims is not None and not isinstance(claims, list):
        raise ValueError("spec.resourceClaims: must be a list")


class PodIndex(Protocol):
    """A view of the valid pods kept up to date by the cache (see ClusterCache.pod_index)."""

    def update(self, key: str, pod: dict) -> None: ...

    def remove(self, key: str) -> None: ...


PodIndexT = TypeVar("PodIndexT", bound=PodIndex)


class ClusterCache:
    def __init__(self, features: FeatureGates) -> None:
        self.features = features
        self.inventory = Inventory()
        self.allocated = AllocatedState()
        self.ready = False
        # Every object currently known, valid or not (the snapshot endpoint returns all of them). Pods and
        # claims, the most numerous, ResourceSlices, the largest, and Nodes are kept packed
        # (extender.state.packing): a read of one is a new dict. What allocation and the hot paths read
        # is parsed (the inventory's slices, the PackedClaims and PackedNodes), so only reads of a whole
        # object unpack it.
        self._objects: dict[str, MutableMapping[str, dict]] = {kind: {} for kind in KINDS}
        # A Pod's claim references and statuses: a dict per claim, on every Pod its own statuses, and its
        # own references when it names its claims (a workload's pods share theirs: `shared`).
        self._objects["Pod"] = PackedStore(
            listed=frozenset({("spec", "resourceClaims"), ("status", "resourceClaimStatuses")}),
            shared=frozenset({("spec", "resourceClaims")}))
        self._claim_store = self._objects["ResourceClaim"] = PackedStore(
            listed=frozenset({("status", "reservedFor")}), sections=CLAIM_SECTIONS)
        self._objects["ResourceSlice"] = PackedStore(listed=frozenset({("spec", "devices")}))
        self._node_store = self._objects["Node"] = PackedStore()
        self._invalid: dict[str, dict[str, str]] = {kind: {} for kind in KINDS}
        self._nodes: dict[str, Node] = {}
        self._node_names: list[str] | None = []
        self._pod_keys_by_uid: dict[str, str] = {}
        self._pods_by_group: dict[str, set[str]] = {}   # "ns/podgroup" -> pod keys
        self._claims: dict[str, ResourceClaim] = {}
        # id(spec) -> a claim parsed with that spec object (see _parsed_spec_of); bounded, emptied when full.
        self._claims_by_spec: dict[int, ResourceClaim] = {}
        self._claim_keys_by_uid: dict[str, str] = {}
        # Invalid claims whose status.allocation is still counted: key -> (uid it is recorded under, reading).
        self._invalid_claim_allocations: dict[str, tuple[str, AllocationReading]] = {}
        self._taint_rules: dict[str, DeviceTaintRule] = {}
        self._subscribers: list[Subscriber] = []
        self._ignored = 0
        self._unnamed_invalid = 0   # objects without a usable name cannot be stored at all
        self._sharer = ObjectSharer(pod_by_uid=self.pod_by_uid)
        # Indexes over the valid pods that the scheduling plugin registers (see pod_index).
        self._pod_indexes: dict[str, PodIndex] = {}

    # ---- construction -------------------------------------------------------------------------

    @classmethod
    def from_objects(cls, objs: Iterable[dict], features: FeatureGates) -> ClusterCache:
        """A ready cache holding `objs` (snapshot mode).

        `*List` objects are flattened. Hand-written snapshots often leave out the namespace and uid, so
        namespaced objects default to namespace "default" and a missing uid gets a stable one derived
        from kind/namespace/name. Objects of other kinds are counted as ignored.
        """
        cache = cls(features)
        for raw in _flatten(objs):
            kind = raw.get("kind") if isinstance(raw, dict) else None
            if kind not in KINDS:
                cache._ignored += 1
                continue
            cache.apply(kind, "ADDED", _with_snapshot_defaults(raw, kind))
        cache.ready = True
        return cache

    def pod_index(self, name: str, make: Callable[[], PodIndexT]) -> PodIndexT:
        """The index of valid pods registered as `name`, made with `make()` and filled with the pods
        already stored the first time it is asked for; from then on it follows every pod change.

        This is how rules above the cache keep their own views of the pods (as client-go's indexers
        do) without the cache knowing the rules."""
        index = self._pod_indexes.get(name)
        if index is None:
            index = make()
            for key, raw in self._objects["Pod"].items():
                if key not in self._invalid["Pod"]:
                    index.update(key, raw)
            self._pod_indexes[name] = index
        return cast(PodIndexT, index)

    # ---- the single entry for changes ---------------------------------------------------------

    def apply(self, kind: str, event_type: str, raw: object) -> None:
        """Apply one watch-style change. Bad object content is logged and counted, never raised.

        ADDED/MODIFIED carrying an older resourceVersion than the stored object are ignored: the
        ClaimWriter stores what it wrote before the watch delivers it, and the late event must not
        roll that back. An equal copy with the same resourceVersion (the watch echoing that write, or
        an unchanged object in a re-list) is skipped without parsing it again; passing the stored
        object itself again re-indexes it (not a Pod, claim, slice or Node: those are kept packed, what
        the cache gives of them is a copy, and an equal copy is skipped). The cache owns `raw` from here on
        (its managedFields are dropped); a Pod is stored as `slim_pod(raw)`, a Node as `slim_node(raw)`,
        and Pods, ResourceSlices, ResourceClaims and Nodes as copies whose parts equal to other stored
        objects' are shared with them (`_shared`), then packed.
        """
        if kind not in KINDS:
            raise CacheError(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
        if event_type not in EVENT_TYPES:
            raise CacheError(f"unknown event type {event_type!r}; expected one of {', '.join(EVENT_TYPES)}")
        key = self._key_of(kind, raw)
        if key is not None:
            self._apply_keyed(kind, event_type, cast(dict, raw), key)

    def _key_of(self, kind: str, raw: object) -> str | None:
        """`raw`'s key in the store, or None (reported) when it is not an object with a usable name."""
        if not isinstance(raw, dict):
            self._reject_unnamed(f"{kind}: object must be a mapping, got {type(raw).__name__}")
            return None
        try:
            return object_key(raw, namespaced=KINDS[kind][1])
        except ValueError as err:
            self._reject_unnamed(f"{kind} {_describe(raw)}: {err}")
            return None

    def _apply_keyed(self, kind: str, event_type: str, raw: dict, key: str) -> None:
        """`apply` of an object whose key `_key_of` has worked out."""
        api_version = KINDS[kind][0]
        raw.setdefault("kind", kind)
        raw.setdefault("apiVersion", api_version)
        meta = raw.get("metadata")
        if isinstance(meta, dict) and "managedFields" in meta:
            # Dropped, as kube-scheduler's informers do: nothing here reads them, they are much of an
            # object's size, and an update written back without them keeps the server's (the API
            # server decodes and compares whatever managedFields an update carries).
            del meta["managedFields"]
        store = self._objects[kind]
        old = store.get(key)
        if raw is not old:
            if kind == "Pod":
                raw = slim_pod(raw)
            elif kind == "Node":
                raw = slim_node(raw)
        old_indexed = old is not None and key not in self._invalid[kind]
        if event_type == "DELETED":
            if old is None:
                return
            del store[key]
            self._forget_invalid_claim_allocation(kind, key)
            self._invalid[kind].pop(key, None)
            if old_indexed:
                self._unindex(kind, key, old)
        else:
            if old is not None:
                old_rv, new_rv = _resource_version(old), _resource_version(raw)
                if old_rv is not None and new_rv is not None and (
                        new_rv < old_rv or (new_rv == old_rv and raw is not old and raw == old)):
                    return
            if raw is not old:
                raw = self._shared(kind, raw, old)
            store[key] = raw
            self._invalid[kind].pop(key, None)
            self._forget_invalid_claim_allocation(kind, key)
            try:
                self._index(kind, key, raw, old if old_indexed else None)
            except ValueError as err:
                if old_indexed and old is not None:
                    self._unindex(kind, key, old)
                # InvalidObjectError already names the object; other ValueErrors do not.
                message = str(err) if isinstance(err, InvalidObjectError) else f"{kind} {key}: {err}"
                self._record_invalid(kind, key, message, raw)
            except Exception as err:
                # A bug in parsing or indexing must not stop the watch that feeds every other object.
                log.exception("internal error indexing %s %s", kind, key)
                if old_indexed and old is not None:
                    self._unindex(kind, key, old)
                message = f"{kind} {key}: internal error: {type(err).__name__}: {err}"
                self._record_invalid(kind, key, message, raw)
        for callback in self._subscribers:
            try:
                callback(kind, event_type, raw, old)
            except Exception:
                log.exception("cache subscriber failed on %s %s %s", event_type, kind, key)

    def _shared(self, kind: str, raw: dict, old: dict | None) -> dict:
        """`raw` (a Pod already slimmed: see extender.state.podtransform, no secrets and no bulk) with its
        parts equal to other stored objects' shared (see extender.state.sharing), starting with `old`, the
        version it replaces. Only for objects that are stored: a deleted or stale one is not worth it."""
        if kind == "Pod":
            return self._sharer.pod(raw, old)
        if kind == "ResourceSlice":
            return self._sharer.resource_slice(raw)
        if kind == "ResourceClaim":
            return self._sharer.resource_claim(raw, old)
        if kind == "Node":
            return self._sharer.node(raw)
        return raw

    def replace(self, kind: str, items: Iterable[dict]) -> None:
        """Make `items` the complete contents of `kind` (after a re-list): missing objects are deleted."""
        replacement = self.replacing(kind)
        for raw in items:
            replacement.add(raw)
        replacement.finish()

    def replacing(self, kind: str) -> Replacement:
        """`replace` in steps, for contents that arrive in parts (pages, a stream of initial events):
        each part is applied as it comes, so its decoded form can be freed before the next arrives."""
        if kind not in KINDS:
            raise CacheError(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
        return Replacement(self, kind)

    def subscribe(self, callback: Subscriber) -> None:
        """Call `callback(kind, event_type, new, old)` after every applied change."""
        self._subscribers.append(callback)

    # ---- queries ------------------------------------------------------------------------------

    def node(self, name: str) -> Node | None:
        return self._nodes.get(name)

    def node_names(self) -> list[str]:
        """All valid nodes, sorted (a fresh list; the sorted order is kept between changes)."""
        if self._node_names is None:
            self._node_names = sorted(self._nodes)
        return list(self._node_names)

    def _valid_raw(self, kind: str, key: str) -> dict | None:
        return None if key in self._invalid[kind] else self._objects[kind].get(key)

    def pod(self, namespace: str, name: str) -> dict | None:
        return self._valid_raw("Pod", f"{namespace}/{name}")

    def pod_by_uid(self, uid: str) -> dict | None:
        key = self._pod_keys_by_uid.get(uid)
        return self._objects["Pod"].get(key) if key is not None else None

    def claim(self, namespace: str, name: str) -> ResourceClaim | None:
        return self._claims.get(f"{namespace}/{name}")

    def claims(self) -> list[ResourceClaim]:
        """Every valid claim, parsed (a list copy; reading one's `raw` unpacks it)."""
        return list(self._claims.values())

    def claim_version(self, namespace: str, name: str) -> str | None:
        """The stored claim's resourceVersion, valid or not, without reading the claim whole (None when
        none is stored)."""
        key = f"{namespace}/{name}"
        claim = self._claims.get(key)
        if claim is not None:
            return claim.resource_version
        raw = self._objects["ResourceClaim"].get(key)
        return None if raw is None else metadata_of(raw).get("resourceVersion")

    def claim_by_uid(self, uid: str) -> ResourceClaim | None:
        key = self._claim_keys_by_uid.get(uid)
        return self._claims.get(key) if key is not None else None

    def pod_group(self, namespace: str, name: str) -> dict | None:
        return self._valid_raw("PodGroup", f"{namespace}/{name}")

    def pods_in_group(self, namespace: str, group_name: str) -> list[dict]:
        """Pods whose spec.schedulingGroup names this PodGroup (whether or not it exists)."""
        pods = self._objects["Pod"]
        return [pods[key] for key in sorted(self._pods_by_group.get(f"{namespace}/{group_name}", ()))]

    def device_class(self, name: str) -> DeviceClass | None:
        return self.inventory.device_class(name)

    def taint_rules(self) -> list[DeviceTaintRule]:
        return list(self._taint_rules.values())

    def valid_objects(self, kind: str) -> list[dict]:
        """The valid stored objects of `kind` (a fresh list; stored objects are replaced, never edited).
        For Pods, `each_valid` unless all of them are needed at once: every one is unpacked here."""
        invalid = self._invalid[kind]
        return [raw for key, raw in self._objects[kind].items() if key not in invalid]

    def each_valid(self, kind: str) -> Iterator[dict]:
        """The valid objects of `kind` stored when it starts, one at a time as it goes on (a Pod unpacked
        when its turn comes); objects deleted or made invalid meanwhile are left out."""
        store, invalid = self._objects[kind], self._invalid[kind]
        for key in list(store):
            if key not in invalid:
                raw = store.get(key)
                if raw is not None:
                    yield raw

    def raw(self, kind: str, key: str) -> dict | None:
        """The stored object of `kind` under `key` ("name" or "namespace/name"), valid or not."""
        return self._objects.get(kind, {}).get(key)

    def object_counts(self) -> dict[str, int]:
        """Valid objects stored, per kind."""
        return {kind: len(objs) - len(self._invalid[kind]) for kind, objs in self._objects.items()}

    def stats(self) -> dict[str, Any]:
        counts = self.object_counts()
        details = [
            {"kind": kind, "key": key, "error": message}
            for kind, entries in self._invalid.items()
            for key, message in entries.items()
        ]
        readings = [reading for _, reading in self._invalid_claim_allocations.values()]
        return {
            "ready": self.ready,
            "objects": counts,
            "allocatedClaims": sum(1 for claim in self._claims.values() if claim.allocation is not None),
            # Claims our model rejects whose written allocation still counts (their errors say more).
            "invalidClaimAllocations": {
                "claims": len(readings),
                "devices": sum(reading.devices for reading in readings),
                "unreadable": sum(len(reading.problems) for reading in readings),
            },
            "invalid": {kind: len(entries) for kind, entries in self._invalid.items() if entries},
            "invalidObjects": details[:MAX_INVALID_DETAILS],
            "unnamedInvalid": self._unnamed_invalid,
            "ignored": self._ignored,
        }

    def objects(self, *kinds: str) -> list[dict]:
        """Every stored object (valid or not) with kind and apiVersion set, in a stable order; only those
        of `kinds` when given (Pods, claims and slices, kept packed, are unpacked only when asked for)."""
        return list(self.objects_taken(*kinds)())

    def objects_taken(self, *kinds: str) -> Callable[[], Iterator[dict]]:
        """`objects(*kinds)` in two steps: what is stored is taken now (a shallow copy, the packed
        objects as their tuples, which never change); the function returned gives an iterator that
        sorts each kind and unpacks its objects as it reaches them, which a reader runs on another
        thread or in slices: at 20,000 nodes that is seconds of work."""
        taken: list[dict[str, Any]] = [
            store.packed_copy() if isinstance(store, PackedStore) else dict(store)
            for store in (self._objects[kind] for kind in kinds or KINDS)]

        def read() -> Iterator[dict]:
            for stored_by_key in taken:
                for key in sorted(stored_by_key):
                    stored = stored_by_key[key]
                    yield PackedStore.unpack(stored) if type(stored) is tuple else cast(dict, stored)
        return read

    # ---- index maintenance --------------------------------------------------------------------

    def _reject_unnamed(self, message: str) -> None:
        log.warning("ignoring invalid object: %s", message)
        self._unnamed_invalid += 1

    def _count_invalid_claim_allocation(self, key: str, raw: dict) -> str:
        """Keep counting the devices of an invalid claim's status.allocation; returns a note for its error.

        The API server accepted that allocation, so its devices are taken whatever our model thinks of
        the claim; forgetting them would let the next pod get the same devices. The claim itself stays
        out of the indexes: we never allocate or reserve it."""
        status = raw.get("status")
        allocation = status.get("allocation") if isinstance(status, dict) else None
        if allocation is None:
            return ""
        uid = metadata_of(raw).get("uid")
        uid = uid if isinstance(uid, str) and uid else key
        reading = self.allocated.add_raw_allocation(uid, key, allocation)
        self._invalid_claim_allocations[key] = (uid, reading)
        note = f"; its status.allocation still counts {reading.devices} device(s) as in use"
        if reading.problems:
            note += (f"; unreadable parts of status.allocation (devices named there may be given out "
                     f"twice): {'; '.join(reading.problems)}")
        return note

    def _forget_invalid_claim_allocation(self, kind: str, key: str) -> None:
        if kind == "ResourceClaim" and key in self._invalid_claim_allocations:
            uid, _ = self._invalid_claim_allocations.pop(key)
            self.allocated.remove_claim(uid)

    def _record_invalid(self, kind: str, key: str, message: str, raw: dict) -> None:
        if kind == "ResourceClaim":
            message += self._count_invalid_claim_allocation(key, raw)
        log.warning("ignoring invalid object: %s", message)
        self._invalid[kind][key] = message

    def _index(self, kind: str, key: str, raw: dict, old: dict | None) -> None:
        """Add `raw` to the typed indexes, replacing `old`. Raises ValueError before changing anything."""
        if kind == "Node":
            node = PackedNode(raw)
            node.keep(self._node_store.packed(key))
            if key not in self._nodes:
                self._node_names = None
            self._nodes[key] = node
        elif kind == "Pod":
            _check_pod(raw)
            if old is not None:
                self._unindex_pod(key, old)
            self._pod_keys_by_uid[raw["metadata"]["uid"]] = key
            group = group_name_of(raw)
            if group is not None:
                self._pods_by_group.setdefault(f"{raw['metadata']['namespace']}/{group}", set()).add(key)
            for index in self._pod_indexes.values():
                index.update(key, raw)
        elif kind == "ResourceClaim":
            claim = PackedClaim(raw, spec_of=self._parsed_spec_of(key, raw))
            claim.keep(self._claim_store.packed(key))
            claim.key = key   # equal: one string for the store's key and the claim's
            self._index_claim(key, claim)
            spec = raw.get("spec")
            if isinstance(spec, dict):
                if len(self._claims_by_spec) >= MAX_PARSED_SPECS:
                    self._claims_by_spec.clear()
                self._claims_by_spec[id(spec)] = claim
        elif kind == "ResourceSlice":
            self.inventory.upsert_slice(ResourceSlice.from_api(raw))
        elif kind == "DeviceClass":
            self.inventory.upsert_class(DeviceClass.from_api(raw))
        elif kind == "DeviceTaintRule":
            rule = DeviceTaintRule.from_api(raw)
            self.inventory.upsert_taint_rule(rule)
            self._taint_rules[key] = rule
        elif kind == "PodGroup":
            _check_pod(raw)  # the same shape: a uid, and spec.resourceClaims a list when present
            check_group_claims((raw.get("spec") or {}).get("resourceClaims") or [])
        # ResourceClaimTemplate: only stored raw.

    def _parsed_spec_of(self, key: str, raw: dict) -> ResourceClaim | None:
        """A claim whose spec is the very object `raw` has (the sharer makes equal specs one object), so
        that its parsed requests are taken rather than parsed again: the previous version of this claim,
        or any claim indexed with that spec. Claims made from one template all have the same spec."""
        spec = raw.get("spec")
        previous = self._claims.get(key)
        if previous is not None and previous.spec is spec:
            return previous
        # The entry keeps its claim, and so the spec, alive: an id found here is that spec's.
        return self._claims_by_spec.get(id(spec))

    def _index_claim(self, key: str, claim: ResourceClaim) -> None:
        previous = self._claims.get(key)
        unchanged = False
        if previous is not None:
            same_uid = previous.uid == claim.uid
            if not same_uid:
                self._claim_keys_by_uid.pop(previous.uid, None)
            unchanged = same_uid and previous.allocation == claim.allocation
            if previous.allocation is not None and not unchanged:
                self.allocated.remove_claim(_allocated_id(previous))
        if claim.allocation is not None and not unchanged:
            self.allocated.add_claim(claim)
        self._claims[key] = claim
        self._claim_keys_by_uid[claim.uid] = key

    def _unindex(self, kind: str, key: str, old: dict) -> None:
        if kind == "Node":
            if self._nodes.pop(key, None) is not None:
                self._node_names = None
        elif kind == "Pod":
            self._unindex_pod(key, old)
        elif kind == "ResourceClaim":
            claim = self._claims.pop(key, None)
            if claim is not None:
                self._claim_keys_by_uid.pop(claim.uid, None)
                if claim.allocation is not None:
                    self.allocated.remove_claim(_allocated_id(claim))
        elif kind == "ResourceSlice":
            self.inventory.remove_slice(key)
        elif kind == "DeviceClass":
            self.inventory.remove_class(key)
        elif kind == "DeviceTaintRule":
            del self._taint_rules[key]
            self.inventory.remove_taint_rule(key)

    def _unindex_pod(self, key: str, old: dict) -> None:
        for index in self._pod_indexes.values():
            index.remove(key)
        meta = metadata_of(old)
        if self._pod_keys_by_uid.get(meta.get("uid", "")) == key:  # indexed pods have a uid
            del self._pod_keys_by_uid[meta["uid"]]
        namespace = meta.get("namespace")
        group = group_name_of(old)
        members = self._pods_by_group.get(f"{namespace}/{group}") if group is not None else None
        if members is not None:
            members.discard(key)
            if not members:
                del self._pods_by_group[f"{namespace}/{group}"]


class ClaimWatch:
    """The claims in the cache for which `wanted(raw)` holds, kept up to date from the cache's changes:
    by UID, the claim's key and since when (by `clock`) it has been wanted without a break."""

    def __init__(self, cache: ClusterCache, wanted: Callable[[dict], bool], *,
                 clock: Callable[[], float]) -> None:
        self._wanted = wanted
        self._clock = clock
        self.claims: dict[str, tuple[str, float]] = {}
        for raw in cache.valid_objects("ResourceClaim"):
            self._on_change("ResourceClaim", "ADDED", raw, None)
        cache.subscribe(self._on_change)

    def _on_change(self, kind: str, event_type: str, new: dict, old: dict | None) -> None:
        if kind != "ResourceClaim":
            return
        meta = metadata_of(new)
        uid = str(meta.get("uid") or "")
        if event_type != "DELETED" and self._wanted(new):
            self.claims.setdefault(uid, (f"{meta.get('namespace')}/{meta.get('name')}", self._clock()))
        else:
            self.claims.pop(uid, None)


# Stored objects a replacement's finishing checks per step: about 1 ms.
FINISH_STEP = 5000


class Replacement:
    """The complete contents of one kind, applied object by object; `finish` deletes the rest."""

    def __init__(self, cache: ClusterCache, kind: str) -> None:
        self._cache = cache
        self._kind = kind
        self._seen: set[str] = set()

    def add(self, raw: dict) -> None:
        cache, kind = self._cache, self._kind
        key = cache._key_of(kind, raw)   # once per object: the list's objects are most of a sync's work
        if key is None:
            return
        self._seen.add(key)
        cache._apply_keyed(kind, "MODIFIED" if key in cache._objects[kind] else "ADDED", raw, key)

    def finish(self) -> None:
        for _ in self.finishing():
            pass

    def finishing(self) -> Iterator[None]:
        """`finish` in steps of FINISH_STEP objects, for a caller that lets others run in between: the
        objects stored when it starts and not seen since are deleted, as stored when their step comes."""
        store = self._cache._objects[self._kind]
        keys = list(store)   # keys only: a list of (key, object) pairs of a large kind is slow to make
        for first in range(0, len(keys), FINISH_STEP):
            for key in keys[first:first + FINISH_STEP]:
                if key not in self._seen:
                    old = store.get(key)
                    if old is not None:
                        self._cache.apply(self._kind, "DELETED", old)
            yield


def _allocated_id(claim: ResourceClaim) -> str:
    """The id AllocatedState.add_claim records a claim under: its UID, or its key when it has none."""
    return claim.uid or claim.key


def _describe(raw: dict) -> str:
    meta = raw.get("metadata")
    if isinstance(meta, dict) and meta.get("name"):
        return f"{meta.get('namespace', '')}/{meta['name']}".lstrip("/")
    return "(unnamed)"


def _flatten(objs: Iterable[Any]) -> Iterable[Any]:
    for raw in objs:
        if isinstance(raw, dict) and isinstance(raw.get("items"), list) and str(raw.get("kind", "")).endswith(
                "List"):
            item_kind = raw["kind"][: -len("List")]
            for item in raw["items"]:
                if isinstance(item, dict) and item_kind and "kind" not in item:
                    item = {**item, "kind": item_kind}
                yield item
        elif raw is not None:
            yield raw


def _with_snapshot_defaults(raw: dict, kind: str) -> dict:
    meta = raw.get("metadata")
    if not isinstance(meta, dict) or not meta.get("name"):
        return raw
    namespaced = KINDS[kind][1]
    if (namespaced and not meta.get("namespace")) or not meta.get("uid"):
        meta = dict(meta)
        if namespaced and not meta.get("namespace"):
            meta["namespace"] = "default"
        if not meta.get("uid"):
            identity = f"{kind}/{meta.get('namespace', '')}/{meta['name']}"
            meta["uid"] = str(uuid.uuid5(uuid.NAMESPACE_URL, identity))
        raw = {**raw, "metadata": meta}
    return raw
