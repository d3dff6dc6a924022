"""Devices already in use: from written allocations, plus in-flight ones the extender has not written yet."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from allocator.model import ResourceClaim
from allocator.pools import DeviceKey
from allocator.quantity import Quantity


class _ClaimUse:
    __slots__ = ("exclusive", "key", "shared")

    def __init__(self, key: str) -> None:
        self.key = key
        self.exclusive: list[DeviceKey] = []
        self.shared: list[tuple[DeviceKey, str, dict[str, Quantity]]] = []  # (device, shareID, consumed)


def _claim_use(claim_key: str, allocation: Mapping[str, Any]) -> _ClaimUse:
    use = _ClaimUse(claim_key)
    for result in (allocation.get("devices") or {}).get("results") or []:
        if result.get("adminAccess"):
            continue  # admin access never makes a device unavailable to others
        key = (result["driver"], result["pool"], result["device"])
        share_id = result.get("shareID")
        if share_id:
            consumed = {
                name: value if isinstance(value, Quantity) else Quantity.parse(str(value))
                for name, value in (result.get("consumedCapacity") or {}).items()
            }
            use.shared.append((key, share_id, consumed))
        else:
            use.exclusive.append(key)
    return use


class AllocatedState:
    """Maintained incrementally; copies made by :meth:`with_in_flight` share nothing mutable with it."""

    def __init__(self) -> None:
        self._claims: dict[str, _ClaimUse] = {}
        # device -> claim key ("ns/name") using it exclusively
        self.devices: dict[DeviceKey, str] = {}
        # device -> {claim uid: consumed capacity} for shared (shareID) allocations
        self._shares: dict[DeviceKey, dict[str, dict[str, Quantity]]] = {}
        # device -> total consumed capacity by name (only devices with shared allocations)
        self.capacity: dict[DeviceKey, dict[str, Quantity]] = {}

    def add_claim(self, claim: ResourceClaim) -> None:
        """Record a claim's written allocation; a claim without one just drops what was recorded."""
        self.remove_claim(claim.uid or claim.key)
        if claim.allocation is not None:
            self._add(claim.uid or claim.key, _claim_use(claim.key, claim.allocation))

    def remove_claim(self, uid: str) -> None:
        use = self._claims.pop(uid, None)
        if use is None:
            return
        for key in use.exclusive:
            if self.devices.get(key) == use.key:
                del self.devices[key]
        for key, _share_id, _consumed in use.shared:
            shares = dict(self._shares.get(key, {}))
            shares.pop(uid, None)
            self._set_shares(key, shares)

    def _add(self, uid: str, use: _ClaimUse) -> None:
        self._claims[uid] = use
        for key in use.exclusive:
            self.devices[key] = use.key
        for key, _share_id, consumed in use.shared:
            shares = dict(self._shares.get(key, {}))
            previous = shares.get(uid)
            if previous:
                consumed = {n: previous.get(n, Quantity.parse("0")) + v for n, v in consumed.items()} | {
                    n: v for n, v in previous.items() if n not in consumed
                }
            shares[uid] = consumed
            self._set_shares(key, shares)

    def _set_shares(self, key: DeviceKey, shares: dict[str, dict[str, Quantity]]) -> None:
        # Replace rather than mutate: copies made by with_in_flight share these dicts.
        if not shares:
            self._shares.pop(key, None)
            self.capacity.pop(key, None)
            return
        self._shares[key] = shares
        total: dict[str, Quantity] = {}
        for consumed in shares.values():
            for name, value in consumed.items():
                total[name] = total[name] + value if name in total else value
        self.capacity[key] = total

    def with_in_flight(self, items: Iterable[tuple[str, ResourceClaim, dict[str, Any]]]) -> AllocatedState:
        """A copy that also counts allocations chosen but not yet written: (claim uid, claim, allocation)."""
        items = list(items)
        if not items:
            return self
        copy = AllocatedState()
        copy._claims = dict(self._claims)
        copy.devices = dict(self.devices)
        copy._shares = dict(self._shares)
        copy.capacity = dict(self.capacity)
        for uid, claim, allocation in items:
            copy.remove_claim(uid)
            copy._add(uid, _claim_use(claim.key, allocation))
        return copy

    def is_allocated(self, key: DeviceKey) -> bool:
        """In use exclusively, or holding shared allocations (upstream's IsDeviceAllocated)."""
        return key in self.devices or key in self._shares

    def owner_of(self, driver: str, pool: str, device: str) -> str | None:
        key = (driver, pool, device)
        owner = self.devices.get(key)
        if owner is not None:
            return owner
        shares = self._shares.get(key)
        if shares:
            return self._claims[next(iter(shares))].key
        return None
