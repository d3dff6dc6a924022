"""Reuse per-node allocation outcomes across filter calls while nothing they depend on has changed.

An outcome for one node depends on the claims' specs (and namespace), the node's labels and
status.declaredFeatures (DRAOptionalNodeOperations), the inventory (slices with their taints and
pool generations, shared slices, classes, taint rules: all move `Inventory.version`) and which devices
are in use in the pools the node sees. We keep a version per pool, bumped whenever an allocation
touching the pool appears or disappears, in the cache (claim events) or in flight (the assume cache,
diffed at every lookup round, so releases and TTL expiry count too). Feature gates are fixed for the
process. Claim status (allocated, reservedFor, deletion) is checked per call before this cache is
consulted. tests/extender/test_filtercache_differential.py checks that answers with and without this
cache are identical under random changes of all these.
Pods of one workload have claims with identical specs (one template), so after the first pod the
filter only recomputes the nodes whose pools changed. For the same reason each claims spec has a
snapshot of its entries by node name (`hits_for`), brought up to date with a log of what changed
since (bumped pools, Node events; a new inventory version starts every snapshot again): a filter works
out the node key of the changed nodes only. The snapshot also keeps the verdicts filters made from its
entries (evaluation.VerdictMemo), dropped with the entry, so a warm filter answers its nodes without a
Python step per node (`known_verdicts`). A miss may still be answered without a search by a node that
is alike (twins.py).

A successful outcome names no claim, so it is shared by every claim with the same spec. A failure's
messages name the claims: for other claims with the same specs they can be carried over with the names
replaced (AllocationOutcome.for_claims), so on a filling cluster the full nodes are not searched and
explained again for every pod of a workload. `get` only says which claims a failure was worked out
for; the caller renames when it needs the words (a filter where another node fits never does). Bind
never uses this cache: it always re-checks against the current state.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, NamedTuple, cast

from allocator import AllocatedState, AllocationOutcome, Node
from common.objects import metadata_of
from extender.plugin.evaluation import SEARCH, FitMemo, Known, KnownFor, NodeEvaluation, VerdictMemo
from extender.plugin.twins import TwinKey, TwinVerdicts
from extender.plugin.verdicts import (
    ClaimRefs,
    ClaimsSignature,
    NodeVerdict,
    claims_signature,
    renames,
    unresolvable,
)
from extender.state.assume import AssumeCache
from extender.state.cache import ClusterCache

if TYPE_CHECKING:
    from extender.plugin.planning import PodPlan

PoolId = tuple[str, str]



class _NodeMemo(NamedTuple):
    verdict_key: tuple
    inventory_version: int
    token: int
    pool_ids: tuple[PoolId, ...]


# About 1.5 KB per outcome: ~30 MB at most, room for 40 claim shapes on 500 nodes.
MAX_ENTRIES = 20_000
# Claim shapes with a snapshot of their entries by node name (a dict entry per node each), and the
# changes kept for bringing them up to date; with more changes the snapshots start again.
MAX_SNAPSHOTS = 16
MAX_LOGGED_CHANGES = 50_000

# A cached outcome: (the outcome, the claims it was computed for, whether a failure can be carried
# over to other claims (renamed), whether a failure is `unresolvable`: worked out once here, not on
# every filter that reuses the entry). A plain tuple: a filter unpacks one per node, and unpacking a
# NamedTuple takes the generic path, 2.5 times as slow.
Entry = tuple[AllocationOutcome, ClaimRefs, bool, bool]


class _InFlight(NamedTuple):
    allocation: dict  # compared by identity: an id() could be reused once the old one is freed
    pools: frozenset[PoolId]



class _Snapshot:
    """One claims spec's entries, the filter's verdicts made from them and prioritize's fits by node
    name, as the node keys found them, up to date with the change log up to `position`. A node's
    verdicts and fit go whenever its entry does."""

    __slots__ = ("fits", "found", "position", "verdicts")

    def __init__(self, position: int) -> None:
        self.found: dict[str, Entry] = {}
        self.fits: FitMemo = {}
        self.verdicts = VerdictMemo()
        self.position = position


def allocation_pools(allocation: dict | None) -> frozenset[PoolId]:
    results = ((allocation or {}).get("devices") or {}).get("results") or []
    return frozenset((str(r.get("driver")), str(r.get("pool"))) for r in results if isinstance(r, dict))


class FilterCache:
    def __init__(self, cache: ClusterCache, assume: AssumeCache, *, max_entries: int = MAX_ENTRIES) -> None:
        self.cache = cache
        self.assume = assume
        # (spec, node key) -> the outcome, the claims it was computed for, and whether a failure can
        # be carried over to other claims; least recently used first. An OrderedDict rather than
        # cachetools' LRUCache: a filter looks up every node it is given, and the C-level
        # get/move_to_end costs a fraction of LRUCache's Python methods.
        self._entries: OrderedDict[tuple, Entry] = OrderedDict()
        self.max_entries = max_entries
        self._pool_versions: defaultdict[PoolId, int] = defaultdict(int)
        # claim uid -> the in-flight allocation object and its pools
        self._in_flight: dict[str, _InFlight] = {}
        self.epoch = 0  # moves with every bump: outcomes computed from an older view are not stored
        # node name -> (verdict key, inventory version, token, pool ids) for node_key. A token is never
        # reused, so a key made for other labels, declared features or an older inventory can never match.
        self._node_memo: dict[str, _NodeMemo] = {}
        self._last_token = 0
        # Node keys hits_for worked out for the nodes it had no entry for, for `get` to take (a cold
        # filter asks both for every node), with the Node object each is for. Emptied by every
        # change, so each is what node_key would give now.
        self._missed_keys: dict[str, tuple[Node, tuple[int, ...]]] = {}
        self._missed_version = -1  # the inventory version they were made under
        self.hits = 0
        self.verdict_hits = 0  # the hits answered with a verdict kept from an earlier filter
        self.misses = 0
        # Outcomes shared by nodes that are alike (twins.py): a miss here that a twin answers costs
        # no search.
        self.twins = TwinVerdicts()
        # The per-shape snapshots (hits_for): claims spec -> its entries by node name, least recently
        # used first. What can change a node's key since a snapshot was brought up to date is in the
        # change log: a bumped pool (its nodes' entries go) or a node name (a Node event). A new
        # inventory version starts every snapshot again.
        self._snapshots: OrderedDict[str, _Snapshot] = OrderedDict()
        self._changes: list[PoolId | str] = []
        self._changes_start = 0  # the position of _changes[0] in the log
        # Each pool's nodes, from the node memos: the name alone while the pool has one node (a node's
        # own pool, the usual case; a set for each was 4 MB at 20,000 nodes), then a set.
        self._pool_nodes: dict[PoolId, str | set[str]] = {}
        self._snapshot_inventory = -1
        cache.subscribe(self._on_change)

    # ---- invalidation -------------------------------------------------------------------------

    def _bump(self, pools: Iterable[PoolId]) -> None:
        self._missed_keys.clear()
        for pool in pools:
            self._pool_versions[pool] += 1
            self.epoch += 1
            self._log(pool)

    def _log(self, change: PoolId | str) -> None:
        if not self._snapshots:
            return
        if len(self._changes) >= MAX_LOGGED_CHANGES:
            self._changes_start += len(self._changes)
            self._changes.clear()
            self._snapshots.clear()
            return
        self._changes.append(change)

    def _on_change(self, kind: str, event_type: str, new: dict, old: dict | None) -> None:
        self._missed_keys.clear()  # slices, classes and rules move the inventory version: keys change
        if kind == "Node":
            self._log(str(metadata_of(new).get("name")))  # its labels are in its node key
            return
        if kind != "ResourceClaim":
            return  # slices, classes and taint rules move Inventory.version; the node is in the key
        before = ((old or {}).get("status") or {}).get("allocation") if isinstance(old, dict) else None
        after = None if event_type == "DELETED" else (new.get("status") or {}).get("allocation")
        if before != after:
            self._bump(allocation_pools(before) | allocation_pools(after))

    def sync_in_flight(self) -> None:
        """Bump the pools of in-flight allocations that appeared, changed or went away since last time."""
        current: dict[str, _InFlight] = {}
        for claim_uid, _, allocation in self.assume.in_flight():
            seen = self._in_flight.get(claim_uid)
            if seen is not None and seen.allocation is allocation:
                current[claim_uid] = seen
                continue
            pools = allocation_pools(allocation)
            current[claim_uid] = _InFlight(allocation, pools)
            self._bump(pools | (seen.pools if seen else frozenset()))
        for claim_uid, (_, pools) in self._in_flight.items():
            if claim_uid not in current:
                self._bump(pools)
        self._in_flight = current

    # ---- lookups ------------------------------------------------------------------------------

    def node_key(self, node: Node) -> tuple[int, ...]:
        """What the outcome of any claims on `node` depends on besides the claims, as of now: a token
        for (node name, labels and declared features, inventory version), then the version of each
        pool the node sees.

        Filter and prioritize ask this for every node they are given; the token saves hashing the
        labels and looking up the node's pools on every call."""
        inventory = self.cache.inventory
        memo = self._node_memo.get(node.name)
        if memo is None or memo.inventory_version != inventory.version or not (
                memo.verdict_key is node.verdict_key or memo.verdict_key == node.verdict_key):
            if inventory.version != self._snapshot_inventory:
                self._restart_snapshots(inventory.version)
            self._last_token += 1
            pool_ids = inventory.node_pools(node, self.cache.features).pool_ids
            memo = _NodeMemo(node.verdict_key, inventory.version, self._last_token, pool_ids)
            for pool in pool_ids:
                self._note_pool_node(pool, node.name)
            self._node_memo.pop(node.name, None)
            if len(self._node_memo) >= MAX_ENTRIES:  # the oldest one, not all at once
                del self._node_memo[next(iter(self._node_memo))]
            self._node_memo[node.name] = memo
        pool_ids, versions = memo.pool_ids, self._pool_versions
        if len(pool_ids) == 1:  # a node with its own pool: the usual case, kept cheap
            return memo.token, versions[pool_ids[0]]
        return (memo.token, *[versions[pool] for pool in pool_ids])

    def _note_pool_node(self, pool: PoolId, name: str) -> None:
        known = self._pool_nodes.get(pool)
        if known is None:
            self._pool_nodes[pool] = name
        elif isinstance(known, set):
            known.add(name)
        elif known != name:
            self._pool_nodes[pool] = {known, name}

    def get(
        self, signature: ClaimsSignature, node: Node
    ) -> tuple[tuple, AllocationOutcome | None, ClaimRefs | None, bool]:
        """(node key, cached outcome or None, the claims a failure was worked out for when they are not
        the signature's: rename with `renames` before showing its reasons, and whether the failure is
        `unresolvable`)."""
        missed = self._missed_keys.pop(node.name, None)
        if missed is not None and missed[0] is node and self._missed_version == self.cache.inventory.version:
            node_key = missed[1]
        else:
            node_key = self.node_key(node)
        found = self._usable(signature, node_key)
        if found is None:
            self.misses += 1
            return node_key, None, None, False
        self.hits += 1
        return (node_key, *found)

    def hits_for(
        self, signature: ClaimsSignature, names: Iterable[str], node_of: Callable[[str], Node | None]
    ) -> list[tuple[str, AllocationOutcome, ClaimRefs | None, bool]]:
        """`get` for many nodes at once, returning the hits only (a filter's first pass over the nodes
        it is given: most are hits, and the misses go through `get` when they are searched).

        Answered from the shape's snapshot where it has the node: no node key to work out, only the
        nodes whose pools (or Node) changed since the last filter of this shape are looked up again.
        `node_of` gives the node of a name the snapshot lacks (None: skip the name)."""
        hits: list[tuple[str, AllocationOutcome, ClaimRefs | None, bool]] = []
        snapshot = self._snapshot(signature.spec)
        found = snapshot.found
        entries = self._entries
        spec, claims = signature
        node_key = self.node_key
        missed = self._missed_keys
        missed.clear()
        self._missed_version = self.cache.inventory.version
        for name in names:
            entry = found.get(name)
            if entry is None:
                node = node_of(name)
                if node is None:
                    continue
                key = (spec, node_key(node))
                entry = entries.get(key)
                if entry is None:
                    missed[name] = (node, key[1])
                    continue
                entries.move_to_end(key)
                found[name] = entry
            outcome, computed_for, carries, beyond_eviction = entry
            if outcome.success or computed_for == claims:
                hits.append((name, outcome, None, beyond_eviction))
            elif carries:
                hits.append((name, outcome, computed_for, beyond_eviction))
        self.hits += len(hits)
        return hits

    def _snapshot(self, spec: str) -> _Snapshot:
        """The spec's snapshot, brought up to date with the change log (made empty when there is none)."""
        if self.cache.inventory.version != self._snapshot_inventory:
            self._restart_snapshots(self.cache.inventory.version)
        end = self._changes_start + len(self._changes)
        snapshot = self._snapshots.get(spec)
        if snapshot is None or snapshot.position < self._changes_start:
            snapshot = self._snapshots[spec] = _Snapshot(end)
            if len(self._snapshots) > MAX_SNAPSHOTS:
                self._snapshots.popitem(last=False)
        elif snapshot.position < end:
            found, fits, pool_nodes = snapshot.found, snapshot.fits, self._pool_nodes
            drop = snapshot.verdicts.drop
            for change in self._changes[snapshot.position - self._changes_start:]:
                names = change if isinstance(change, str) else pool_nodes.get(change, ())
                for name in (names,) if isinstance(names, str) else names:
                    found.pop(name, None)
                    fits.pop(name, None)
                    drop(name)
            snapshot.position = end
        self._snapshots.move_to_end(spec)
        return snapshot

    def known_verdicts(self, signature: ClaimsSignature,
                       names: list[str]) -> tuple[dict[str, NodeVerdict], list[str], VerdictMemo]:
        """The verdicts kept for `names` from this spec's entries (VerdictMemo), for these claims: a
        warm filter's nodes without a Python step each."""
        memo = self._snapshot(signature.spec).verdicts.for_claims(signature.claims)
        verdicts, rest = memo.known(names)
        self.hits += len(verdicts)
        self.verdict_hits += len(verdicts)
        return verdicts, rest, memo

    def fits_memo(self, spec: str) -> FitMemo:
        """Prioritize's memo of node fits for claims `spec`, by node name: kept in the spec's snapshot,
        so a node's fit goes whenever its entry does (its pools, the Node or the inventory changed)."""
        return self._snapshot(spec).fits

    def _restart_snapshots(self, inventory_version: int) -> None:
        """A new inventory version: every node key changes (and a node's pools may have)."""
        self._snapshots.clear()
        self._pool_nodes.clear()
        self._changes_start += len(self._changes)
        self._changes.clear()
        self._snapshot_inventory = inventory_version

    def _usable(
        self, signature: ClaimsSignature, node_key: tuple
    ) -> tuple[AllocationOutcome, ClaimRefs | None, bool] | None:
        key = (signature.spec, node_key)
        entry = self._entries.get(key)
        if entry is None:
            return None
        outcome, claims, carries, beyond_eviction = entry
        own = outcome.success or claims == signature.claims
        if not own and not carries:
            return None
        self._entries.move_to_end(key)
        return outcome, None if own else claims, beyond_eviction

    def put(self, signature: ClaimsSignature, node_key: tuple, outcome: AllocationOutcome, *,
            node: str) -> None:
        """Store a fresh outcome for `node` (call it before anything changes: a failure's reasons are
        read here)."""
        key = (signature.spec, node_key)
        claims = signature.claims
        success = outcome.success
        carries = success or outcome.for_claims(renames(claims, claims)) is not None
        entry: Entry = (outcome, claims, carries, not success and unresolvable(outcome))
        self._entries[key] = entry
        self._entries.move_to_end(key)
        snapshot = self._snapshots.get(signature.spec)
        if snapshot is not None:
            # `node_key` is the node's key now: a change since the snapshot's last update is still in
            # the log, and the next update drops the entry again.
            snapshot.found[node] = entry
            snapshot.verdicts.drop(node)  # made from the entry this one replaces
        if len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def warm(self, node: Node) -> None:
        """Work out now what the first filter of any claims would for `node`: its node key, its
        likeness id and which of its devices are in use (serve does this for every node once synced,
        as it builds the node views)."""
        self.sync_in_flight()  # the node key then describes the view below
        node_key = self.node_key(node)
        inventory = self.cache.inventory
        pools, alike = inventory.node_likeness(node, self.cache.features)
        view = self.assume.allocated_view(self.cache)
        self.twins.key(node, pools, alike, view, inventory.version, node_key)

    def twin(self, signature: ClaimsSignature, node: Node, view: AllocatedState,
             node_key: tuple | None = None) -> tuple[TwinKey | None, AllocationOutcome | None]:
        """For a node `get` missed: its twin key under `view` (None when the node is not shared) and the
        outcome of a twin searched before, for this node (None when there is none). `node_key`: the
        node's key, when `view` is what it describes (see TwinVerdicts.key)."""
        inventory = self.cache.inventory
        pools, alike = inventory.node_likeness(node, self.cache.features)
        key = self.twins.key(node, pools, alike, view, inventory.version, node_key)
        if key is None:
            return None, None
        return key, self.twins.get(signature.spec, key, node, pools)

    def put_twin(self, signature: ClaimsSignature, key: TwinKey, node: Node,
                 outcome: AllocationOutcome) -> None:
        """Share a fresh outcome searched under the view `key` was made from (kept only if it fits)."""
        pools = self.cache.inventory.node_pools(node, self.cache.features)
        self.twins.put(signature.spec, key, node, pools, outcome)

    def stats(self) -> dict[str, int]:
        return {"entries": len(self._entries), "hits": self.hits, "verdictHits": self.verdict_hits,
                "misses": self.misses,
                **self.twins.stats()}



class CachedEvaluation:
    """A NodeEvaluation (the allocator's search, by default) with this cache around it: outcomes the
    cache has are answered from it, fresh ones are stored for the next filter of the same claims, and
    a miss a twin node answers costs no search."""

    def __init__(self, cache: FilterCache, inner: NodeEvaluation = SEARCH) -> None:
        self.cache = cache
        self.inner = inner

    def prepare(self, plan: PodPlan) -> None:
        """Key the plan's claims, as of the in-flight allocations now (the plan's view, made later,
        reads through to the allocated state, which has not changed while the epoch has not moved)."""
        if plan.signature is None and plan.to_allocate:
            self.cache.sync_in_flight()
            plan.signature = claims_signature(plan.to_allocate)
            plan.cache_epoch = self.cache.epoch
        self.inner.prepare(plan)

    def known(self, plan: PodPlan, node: Node) -> tuple[object, Known | None]:
        if plan.signature is None:
            return self.inner.known(plan, node)
        node_key, outcome, computed_for, beyond_eviction = self.cache.get(plan.signature, node)
        return node_key, None if outcome is None else (outcome, computed_for, beyond_eviction)

    def evaluate(self, plan: PodPlan, node: Node, handle: object,
                 search: Callable[[], AllocationOutcome]) -> AllocationOutcome:
        signature, cache = plan.signature, self.cache
        if signature is None or handle is None:
            return self.inner.evaluate(plan, node, handle, search)
        assert plan.view is not None  # made by the search's allocator before this is called
        current = cache.epoch == plan.cache_epoch
        twin_key, outcome = cache.twin(signature, node, plan.view, cast(tuple, handle) if current else None)
        if outcome is None:
            outcome = self.inner.evaluate(plan, node, None, search)
            if twin_key is not None:
                cache.put_twin(signature, twin_key, node, outcome)
        if cache.epoch == plan.cache_epoch:
            cache.put(signature, cast(tuple, handle), outcome, node=node.name)
        return outcome

    def known_for(self, plan: PodPlan, names: Iterable[str],
                  node_of: Callable[[str], Node | None]) -> list[KnownFor]:
        if plan.signature is None:
            return self.inner.known_for(plan, names, node_of)
        return self.cache.hits_for(plan.signature, names, node_of)

    def known_verdicts(self, plan: PodPlan,
                       names: list[str]) -> tuple[dict[str, NodeVerdict], list[str], VerdictMemo]:
        if plan.signature is None:
            return self.inner.known_verdicts(plan, names)
        return self.cache.known_verdicts(plan.signature, names)

    def refresh(self, plan: PodPlan) -> None:
        if plan.signature is not None:
            self.cache.sync_in_flight()
        self.inner.refresh(plan)

    def fits_memo(self, plan: PodPlan) -> FitMemo | None:
        """The fits of the plan's claims while the plan's view is current (see NodeScorer)."""
        if plan.signature is None or plan.cache_epoch != self.cache.epoch:
            return self.inner.fits_memo(plan)
        return self.cache.fits_memo(plan.signature.spec)
