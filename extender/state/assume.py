"""Allocations chosen but not yet seen in the cluster cache ("in flight").

Between the moment the extender picks devices for a claim and the moment the cache holds the
written allocation, those devices must already count as used, or the next pod could get them too.

Invariant (no double allocation): a caller computes an allocation from `allocated_view(cache)` and
calls `reserve()` for it with no `await` in between. The extender runs on one asyncio event loop,
so no other coroutine can allocate from the same view in that window, and every later view
includes the reservation. The entry then lives until the cache shows the claim allocated (the
ClaimWriter applies what it wrote; the watch confirms it later), until the caller releases it (the
write certainly failed, the bind was refused), or until its TTL passes (filter-hold mode). An entry
for a write whose outcome is unknown ("unsettled") names the resourceVersion the write was sent at: it
ends when the cache shows the claim allocated, deleted, or at another version (the write can then
never apply), and has no TTL, since only the API server's objects can tell.

The cache indexes a claim's allocation before it notifies subscribers, so when the watch confirms
an allocation the devices are counted by the cache before the entry here is dropped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from allocator import AllocatedState, AllocationUse, ResourceClaim, allocation_use
from common.objects import metadata_of
from extender.state.cache import ClusterCache


class AlreadyInFlight(ValueError):
    """The claim is being allocated for another pod."""


@dataclass(frozen=True)
class InFlight:
    claim: ResourceClaim
    allocation: dict
    pod_uid: str  # the owner: a pod's UID, or "podgroup:<uid>" for a PodGroup's shared claim
    expires_at: float | None
    # Unsettled: the claim's resourceVersion at which a write of this allocation may still apply.
    pending_at: str | None = None
    # The devices the allocation uses, read once for all the views that count it.
    use: AllocationUse = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "use", allocation_use(self.claim.key, self.allocation))

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and self.expires_at <= now


class AssumeCache:
    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._entries: dict[str, InFlight] = {}
        # The last view without exclusions and what it rests on: (entries' changes, the cache's
        # allocated state and its changes). Filter, prioritize and bind each ask for a view, and most
        # of those calls find nothing changed since the last.
        self._changes = 0
        self._view: tuple[tuple[int, int, int], AllocatedState] | None = None
        # No entry expires before this (None: none has a TTL): the views need not look at every
        # entry's expiry each time (a bind's entries have none, and dozens are in flight under load).
        self._next_expiry: float | None = None

    def reserve(self, claim: ResourceClaim, allocation: dict, pod_uid: str, *,
                ttl_s: float | None = None, pending_at: str | None = None) -> None:
        """Count `allocation` as used for `claim` from now on.

        Reserving again for the same pod replaces the entry (e.g. a held filter result now bound on
        another node); reserving a claim that is in flight for a different pod is refused.
        """
        current = self.pending(claim.uid)
        if current is not None and current.pod_uid != pod_uid:
            raise AlreadyInFlight(f"resource claim {claim.key} is in the process of being allocated "
                                  f"(pod uid {current.pod_uid})")
        expires_at = self._clock() + ttl_s if ttl_s is not None else None
        self._entries[claim.uid] = InFlight(claim, allocation, pod_uid, expires_at, pending_at)
        self._expiring_at(expires_at)
        self._changes += 1

    def release(self, claim_uid: str, *, allocation: dict | None = None) -> None:
        """Drop the claim's entry; with `allocation`, only if the entry still holds that very object
        (a caller releasing its own hold must not drop what a later bind reserved for the claim)."""
        entry = self._entries.get(claim_uid)
        if entry is not None and (allocation is None or entry.allocation is allocation):
            self._drop(claim_uid)

    def extend(self, claim_uid: str, ttl_s: float) -> None:
        """Push back the expiry of an entry that has one (a hold still in use); others are left alone."""
        entry = self._entries.get(claim_uid)
        if entry is not None and entry.expires_at is not None:
            self._entries[claim_uid] = InFlight(entry.claim, entry.allocation, entry.pod_uid,
                                                max(entry.expires_at, self._clock() + ttl_s))

    def release_owned_by(self, owner: str) -> int:
        """Drop every entry `owner` (a pod UID, or a PodGroup's owner key) holds; returns how many."""
        owned = [uid for uid, entry in self._entries.items() if entry.pod_uid == owner]
        for uid in owned:
            self._drop(uid)
        return len(owned)

    def pending(self, claim_uid: str) -> InFlight | None:
        entry = self._entries.get(claim_uid)
        if entry is not None and entry.expired(self._clock()):
            self._drop(claim_uid)
            return None
        return entry

    def in_flight(self) -> list[tuple[str, ResourceClaim, dict]]:
        self._expire()
        return [(uid, entry.claim, entry.allocation) for uid, entry in self._entries.items()]

    def allocated_view(self, cache: ClusterCache, *,
                       excluding_owners: Collection[str] = ()) -> AllocatedState:
        """Devices in use: the cache's allocated state plus every in-flight allocation it lacks, but
        those of `excluding_owners` (a bind replaces its own pod's and PodGroup's entries).

        Views are read-only, so a view is handed out again for as long as neither the entries nor the
        cache's allocated state changed."""
        self._expire()
        entries = self._entries
        if excluding_owners and not any(entry.pod_uid in excluding_owners for entry in entries.values()):
            excluding_owners = ()
        allocated = cache.allocated
        rests_on = (self._changes, id(allocated), allocated.changes)
        if not excluding_owners and self._view is not None and self._view[0] == rests_on:
            return self._view[1]
        items = []
        for uid, entry in list(self._entries.items()):
            cached = cache.claim_by_uid(uid)
            if cached is not None and cached.allocation is not None:
                self._drop(uid)   # the cache counts it already; no confirmation was wired up
                continue
            if entry.pod_uid not in excluding_owners:
                items.append((uid, entry.use))
        view = allocated.with_in_flight(items)
        if not excluding_owners:
            self._view = ((self._changes, id(allocated), allocated.changes), view)
        return view

    def attach(self, cache: ClusterCache) -> None:
        """Confirm or drop entries as claim changes reach `cache` (from the watch or the ClaimWriter)."""
        cache.subscribe(self._on_change)

    def describe(self) -> list[dict[str, Any]]:
        """For /debug/state."""
        self._expire()
        now = self._clock()
        return [
            {
                "claim": entry.claim.key,
                "claimUID": uid,
                "podUID": entry.pod_uid,
                "devices": [
                    f"{r.get('driver')}/{r.get('pool')}/{r.get('device')}"
                    for r in (entry.allocation.get("devices") or {}).get("results") or ()
                ],
                "expiresInSeconds": None if entry.expires_at is None else round(entry.expires_at - now, 3),
                **({"unsettledAtResourceVersion": entry.pending_at} if entry.pending_at is not None else {}),
            }
            for uid, entry in self._entries.items()
        ]

    def __len__(self) -> int:
        self._expire()
        return len(self._entries)

    def _expiring_at(self, expires_at: float | None) -> None:
        if expires_at is not None and (self._next_expiry is None or expires_at < self._next_expiry):
            self._next_expiry = expires_at

    def _expire(self) -> None:
        now = self._clock()
        if self._next_expiry is None or now < self._next_expiry:
            return
        expired = [uid for uid, entry in self._entries.items() if entry.expired(now)]
        for uid in expired:
            self._drop(uid)
        self._next_expiry = min((entry.expires_at for entry in self._entries.values()
                                 if entry.expires_at is not None), default=None)

    def _drop(self, claim_uid: str) -> None:
        del self._entries[claim_uid]
        self._changes += 1

    def _on_change(self, kind: str, event_type: str, new: dict, old: dict | None) -> None:
        if kind != "ResourceClaim":
            return
        meta = metadata_of(new)
        uid = str(meta.get("uid") or "")
        entry = self._entries.get(uid)
        if entry is None:
            return
        if (event_type == "DELETED" or (new.get("status") or {}).get("allocation") is not None
                or (entry.pending_at is not None and meta.get("resourceVersion") != entry.pending_at)):
            self._drop(uid)
