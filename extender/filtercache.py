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
filter only recomputes the nodes whose pools changed.

A successful outcome names no claim, so it is shared by every claim with the same spec. A failure's
messages name the claims: for other claims with the same specs they can be carried over with the names
replaced (AllocationOutcome.for_claims), so on a filling cluster the full nodes are not searched and
explained again for every pod of a workload. `get` only says which claims a failure was worked out
for; the caller renames when it needs the words (a filter where another node fits never does). Bind
never uses this cache: it always re-checks against the current state.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import orjson

from allocator import AllocationOutcome, Node, ResourceClaim
from extender.assume import AssumeCache
from extender.cache import ClusterCache

PoolId = tuple[str, str]
# Claims as (key, uid) each, in order.
ClaimRefs = tuple[tuple[str, str], ...]


class ClaimsSignature(NamedTuple):
    spec: str  # what an outcome depends on: the claims' namespace and specs
    claims: ClaimRefs  # which claims an outcome is computed for


class _NodeMemo(NamedTuple):
    verdict_key: tuple
    inventory_version: int
    token: int
    pool_ids: tuple[PoolId, ...]


# About 1.5 KB per outcome: ~30 MB at most, room for 40 claim shapes on 500 nodes.
MAX_ENTRIES = 20_000


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
        self._entries: OrderedDict[tuple, tuple[AllocationOutcome, ClaimRefs, bool]] = OrderedDict()
        self.max_entries = max_entries
        self._pool_versions: defaultdict[PoolId, int] = defaultdict(int)
        # claim uid -> (the in-flight allocation object, its pools). The object itself is kept and
        # compared by identity: an id() could be reused by a new allocation once the old one is freed.
        self._in_flight: dict[str, tuple[dict, frozenset[PoolId]]] = {}
        self.epoch = 0  # moves with every bump: outcomes computed from an older view are not stored
        # node name -> (verdict key, inventory version, token, pool ids) for node_key. A token is never
        # reused, so a key made for other labels, declared features or an older inventory can never match.
        self._node_memo: dict[str, _NodeMemo] = {}
        self._last_token = 0
        self.hits = 0
        self.misses = 0
        cache.subscribe(self._on_change)

    # ---- invalidation -------------------------------------------------------------------------

    def _bump(self, pools: Iterable[PoolId]) -> None:
        for pool in pools:
            self._pool_versions[pool] += 1
            self.epoch += 1

    def _on_change(self, kind: str, event_type: str, new: dict, old: dict | None) -> None:
        if kind != "ResourceClaim":
            return  # slices, classes and taint rules move Inventory.version; the node is in the key
        before = ((old or {}).get("status") or {}).get("allocation") if isinstance(old, dict) else None
        after = None if event_type == "DELETED" else (new.get("status") or {}).get("allocation")
        if before != after:
            self._bump(allocation_pools(before) | allocation_pools(after))

    def sync_in_flight(self) -> None:
        """Bump the pools of in-flight allocations that appeared, changed or went away since last time."""
        current: dict[str, tuple[dict, frozenset[PoolId]]] = {}
        for claim_uid, _, allocation in self.assume.in_flight():
            seen = self._in_flight.get(claim_uid)
            if seen is not None and seen[0] is allocation:
                current[claim_uid] = seen
                continue
            pools = allocation_pools(allocation)
            current[claim_uid] = (allocation, pools)
            self._bump(pools | (seen[1] if seen else frozenset()))
        for claim_uid, (_, pools) in self._in_flight.items():
            if claim_uid not in current:
                self._bump(pools)
        self._in_flight = current

    # ---- lookups ------------------------------------------------------------------------------

    @staticmethod
    def claims_signature(claims: Sequence[ResourceClaim]) -> ClaimsSignature:
        spec = orjson.dumps(
            [[claim.namespace, claim.raw.get("spec")] for claim in claims], option=orjson.OPT_SORT_KEYS
        ).decode()  # a compact str: orjson's bytes keep their whole write buffer alive in every key
        return ClaimsSignature(spec, tuple((claim.key, claim.uid) for claim in claims))

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
            self._last_token += 1
            pool_ids = inventory.node_pools(node, self.cache.features).pool_ids
            memo = _NodeMemo(node.verdict_key, inventory.version, self._last_token, pool_ids)
            if len(self._node_memo) >= MAX_ENTRIES:
                self._node_memo.clear()
            self._node_memo[node.name] = memo
        pool_ids, versions = memo.pool_ids, self._pool_versions
        if len(pool_ids) == 1:  # a node with its own pool: the usual case, kept cheap
            return memo.token, versions[pool_ids[0]]
        return (memo.token, *[versions[pool] for pool in pool_ids])

    def get(
        self, signature: ClaimsSignature, node: Node
    ) -> tuple[tuple, AllocationOutcome | None, ClaimRefs | None]:
        """(node key, cached outcome or None, the claims a failure was worked out for when they are not
        the signature's: rename with `renames` before showing its reasons)."""
        node_key = self.node_key(node)
        found = self._usable(signature, node_key)
        if found is None:
            self.misses += 1
            return node_key, None, None
        self.hits += 1
        return node_key, found[0], found[1]

    def hits_for(
        self, signature: ClaimsSignature, nodes: Iterable[Node]
    ) -> list[tuple[Node, AllocationOutcome, ClaimRefs | None]]:
        """`get` for many nodes at once, returning the hits only (a filter's first pass over the nodes
        it is given: most are hits, and the misses go through `get` when they are searched)."""
        found = []
        usable = self._usable
        node_key = self.node_key
        for node in nodes:
            hit = usable(signature, node_key(node))
            if hit is not None:
                found.append((node, hit[0], hit[1]))
        self.hits += len(found)
        return found

    def _usable(
        self, signature: ClaimsSignature, node_key: tuple
    ) -> tuple[AllocationOutcome, ClaimRefs | None] | None:
        key = (signature.spec, node_key)
        entry = self._entries.get(key)
        if entry is None:
            return None
        outcome, claims, carries = entry
        own = outcome.success or claims == signature.claims
        if not own and not carries:
            return None
        self._entries.move_to_end(key)
        return outcome, None if own else claims

    def put(self, signature: ClaimsSignature, node_key: tuple, outcome: AllocationOutcome) -> None:
        """Store a fresh outcome (call it before anything changes: a failure's reasons are read here)."""
        key = (signature.spec, node_key)
        claims = signature.claims
        carries = outcome.success or outcome.for_claims(renames(claims, claims)) is not None
        self._entries[key] = (outcome, claims, carries)
        self._entries.move_to_end(key)
        if len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def stats(self) -> dict[str, int]:
        return {"entries": len(self._entries), "hits": self.hits, "misses": self.misses}


def renames(old: ClaimRefs, new: ClaimRefs) -> dict[str, str]:
    """Claim key of `old` -> claim key of `new`, position by position (AllocationOutcome.for_claims)."""
    return {before[0]: after[0] for before, after in zip(old, new, strict=True)}
