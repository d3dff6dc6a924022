"""Devices already in use: from written allocations, plus in-flight ones the extender has not written yet."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from allocator.model import ResourceClaim
from allocator.pools import DeviceKey
from allocator.quantity import Quantity

_SharedUse = tuple[DeviceKey, str, dict[str, Quantity]]   # (device, shareID, consumed)


class AllocationUse:
    """The devices one allocation uses, read once (:func:`allocation_use`).

    Tuples, not lists: one is kept per allocated claim, and most claims share no device (the empty
    tuple is a single object)."""

    __slots__ = ("exclusive", "key", "shared")

    def __init__(self, key: str, exclusive: tuple[DeviceKey, ...] = (),
                 shared: tuple[_SharedUse, ...] = ()) -> None:
        self.key = key
        self.exclusive = exclusive
        self.shared = shared


class AllocationReading(NamedTuple):
    """What :meth:`AllocatedState.add_raw_allocation` made of an allocation."""

    devices: int                 # results counted as using a device (admin access ones are not)
    problems: tuple[str, ...]    # "field path: problem", one per part that could not be read


_RESULTS_PATH = "status.allocation.devices.results"


def _claim_use(claim_key: str, allocation: Any, problems: list[str]) -> AllocationUse:
    """Read the devices an allocation uses, skipping (and describing in `problems`) what is unreadable.

    Lenient on purpose: the API server accepted this allocation, so every device it names must count
    as used even when other parts of the claim are beyond our object model."""
    if not isinstance(allocation, Mapping):
        problems.append("status.allocation: must be an object; no device counted")
        return AllocationUse(claim_key)
    devices = allocation.get("devices") or {}
    results = (devices.get("results") or []) if isinstance(devices, Mapping) else None
    if not isinstance(results, list):
        problems.append(f"{_RESULTS_PATH}: must be a list of objects; no device counted")
        return AllocationUse(claim_key)
    exclusive: list[DeviceKey] = []
    shared: list[_SharedUse] = []
    for i, result in enumerate(results):
        where = f"{_RESULTS_PATH}[{i}]"
        if not isinstance(result, Mapping):
            problems.append(f"{where}: must be an object; no device counted")
            continue
        if result.get("adminAccess") is True:
            continue  # admin access never makes a device unavailable to others
        missing = [name for name in ("driver", "pool", "device") if not isinstance(result.get(name), str)
                   or not result[name]]
        if missing:
            problems.append(f"{where}: {', '.join(missing)} missing or not a string; device not counted")
            continue
        key = (result["driver"], result["pool"], result["device"])
        share_id = result.get("shareID")
        if share_id:
            consumed = _consumed(result.get("consumedCapacity"), where, problems)
            shared.append((key, str(share_id), consumed))
        else:
            exclusive.append(key)
    return AllocationUse(claim_key, tuple(exclusive), tuple(shared))


def allocation_use(claim_key: str, allocation: Any) -> AllocationUse:
    """The devices `allocation` (a ``status.allocation``) uses, read leniently, for
    :meth:`AllocatedState.with_in_flight`: whoever keeps an allocation in flight reads it once, not
    for every view."""
    return _claim_use(claim_key, allocation, [])


def _consumed(raw: Any, where: str, problems: list[str]) -> dict[str, Quantity]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        problems.append(f"{where}.consumedCapacity: must be an object; counted as consuming nothing")
        return {}
    consumed: dict[str, Quantity] = {}
    for name, value in raw.items():
        if isinstance(value, Quantity):
            consumed[name] = value
            continue
        try:
            consumed[name] = Quantity.parse(str(value))
        except ValueError as error:
            problems.append(f"{where}.consumedCapacity[{name}]: {error}; counted as consuming nothing")
    return consumed


class _Layered(dict[Any, Any]):
    """A dict over a base mapping: lookups fall through to `base`, writes stay in this dict.

    Only lookups (``in``, ``[]``, ``get``) see the base; iteration and ``len`` see this layer alone,
    which is all a view made by :meth:`AllocatedState.with_in_flight` needs."""

    __slots__ = ("base",)

    def __init__(self, base: Mapping[Any, Any]) -> None:
        super().__init__()
        self.base = base

    def __missing__(self, key: Any) -> Any:
        return self.base[key]

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or key in self.base

    def get(self, key: Any, default: Any = None) -> Any:
        if dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        return self.base.get(key, default)


def _flat(mapping: Mapping[Any, Any]) -> dict[Any, Any]:
    """A plain dict with everything `mapping` holds, through every layer (dict() sees the top layer only)."""
    if isinstance(mapping, _Layered):
        return {**_flat(mapping.base), **mapping}
    return dict(mapping)


# The flags of a node with nothing in use, by device count (allocated_flags), shared by every such node.
_NONE_ALLOCATED: dict[int, tuple[bool, ...]] = {}


def _none_allocated(count: int) -> tuple[bool, ...]:
    flags = _NONE_ALLOCATED.get(count)
    if flags is None:
        flags = _NONE_ALLOCATED[count] = (False,) * count
    return flags


class AllocatedState:
    """Maintained incrementally. :meth:`with_in_flight` views never change this state."""

    def __init__(self) -> None:
        self._claims: dict[str, AllocationUse] = {}
        # device -> claim key ("ns/name") using it exclusively
        self.devices: dict[DeviceKey, str] = {}
        # device -> {claim uid: consumed capacity} for shared (shareID) allocations
        self._shares: dict[DeviceKey, dict[str, dict[str, Quantity]]] = {}
        # device -> total consumed capacity by name (only devices with shared allocations)
        self.capacity: dict[DeviceKey, dict[str, Quantity]] = {}
        self.changes = 0  # claims recorded or removed so far: whoever keeps a view of this state compares it

    def add_claim(self, claim: ResourceClaim) -> None:
        """Record a claim's written allocation; a claim without one just drops what was recorded."""
        self.remove_claim(claim.uid or claim.key)
        if claim.allocation is not None:
            self._add(claim.uid or claim.key, _claim_use(claim.key, claim.allocation, []))

    def add_raw_allocation(self, uid: str, claim_key: str, allocation: Any) -> AllocationReading:
        """Record the devices of a raw ``status.allocation`` whose claim our object model rejects.

        The API server accepted that allocation, so its devices are in use whatever else is wrong with
        the claim. Only ``devices.results`` is read (driver, pool, device, adminAccess, shareID,
        consumedCapacity), leniently: what cannot be read is skipped and described in the returned
        problems. Replaces what was recorded for `uid`; :meth:`remove_claim` removes it.
        """
        self.remove_claim(uid)
        problems: list[str] = []
        use = _claim_use(claim_key, allocation, problems)
        if use.exclusive or use.shared:
            self._add(uid, use)
        return AllocationReading(len(use.exclusive) + len(use.shared), tuple(problems))

    def remove_claim(self, uid: str) -> None:
        use = self._claims.pop(uid, None)
        if use is None:
            return
        self.changes += 1
        for key in use.exclusive:
            if self.devices.get(key) == use.key:
                del self.devices[key]
        for key, _share_id, _consumed in use.shared:
            shares = dict(self._shares.get(key, {}))
            shares.pop(uid, None)
            self._set_shares(key, shares)

    def _add(self, uid: str, use: AllocationUse) -> None:
        self.changes += 1
        self._claims[uid] = use
        for key in use.exclusive:
            self.devices[key] = use.key
        if use.shared:
            self._add_shares(uid, use)

    def _add_shares(self, uid: str, use: AllocationUse) -> None:
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

    def with_in_flight(self, items: Iterable[tuple[str, AllocationUse]]) -> AllocatedState:
        """A view that also counts allocations chosen but not yet written: (claim uid, what the
        allocation uses, from :func:`allocation_use`).

        Usually a thin layer over this state, made in O(len(items)): it reads through to this state,
        so it sees later changes of it (a device freed since is free in the view too), while the
        in-flight allocations are those given now. The scheduler copied the whole state for every pod
        before (a dict of every allocated device, several times per pod). Only when an in-flight
        allocation replaces one recorded here (that claim's recorded devices must disappear from the
        view) is the view a full copy."""
        items = list(items)
        if not items:
            return self
        copy = AllocatedState()
        uids = {uid for uid, _ in items}
        if any(uid in self._claims for uid in uids):
            copy._claims = _flat(self._claims)
            copy.devices = _flat(self.devices)
            copy._shares = _flat(self._shares)
            copy.capacity = _flat(self.capacity)
        else:
            copy._claims = _Layered(self._claims)
            copy.devices = _Layered(self.devices)
            copy._shares = _Layered(self._shares)
            copy.capacity = _Layered(self.capacity)
            if len(uids) == len(items):
                # The usual view: claims new to this state, each once (the in-flight entries are
                # keyed by claim), so the layers are filled in bulk; only shared devices need their
                # sums worked out.
                copy._claims.update(items)
                copy.devices.update({key: use.key for _, use in items for key in use.exclusive})
                for uid, use in items:
                    if use.shared:
                        copy._add_shares(uid, use)
                copy.changes = len(items)
                return copy
        for uid, use in items:   # one after the other, each replacing what was recorded for its claim
            copy.remove_claim(uid)
            copy._add(uid, use)
        return copy

    def copy(self) -> AllocatedState:
        """A state of its own with everything this one (or this view) holds, to change freely."""
        copy = AllocatedState()
        copy._claims = _flat(self._claims)
        copy.devices = _flat(self.devices)
        copy._shares = _flat(self._shares)
        copy.capacity = _flat(self.capacity)
        return copy

    def without(self, uids: Iterable[str]) -> AllocatedState:
        """A copy in which the claims recorded under `uids` hold no devices (what evicting their users
        would free); this state is not changed. Every layer of a view is copied (``dict()`` would take
        the top one alone: only the in-flight allocations)."""
        copy = self.copy()
        for uid in uids:
            copy.remove_claim(uid)
        return copy

    def is_allocated(self, key: DeviceKey) -> bool:
        """In use exclusively, or holding shared allocations (upstream's IsDeviceAllocated)."""
        return key in self.devices or key in self._shares

    def allocated_flags(self, keys: tuple[DeviceKey, ...]) -> tuple[bool, ...]:
        """`is_allocated` of each of `keys`, in order: one C-level intersection per layer instead of a
        Python-level lookup per key and layer (a cold filter asks this for every node it sees)."""
        if type(self.devices) is dict and not self._shares:  # the usual state: no layers, no sharing
            used = self.devices.keys() & keys
            if not used:
                return _none_allocated(len(keys))
            return tuple(map(used.__contains__, keys))
        used = set()
        for top in (self.devices, self._shares):
            mapping: Mapping[DeviceKey, object] = top
            while isinstance(mapping, _Layered):
                used.update(dict.keys(mapping) & keys)  # this layer only: dict's own lookup
                mapping = mapping.base
            used.update(mapping.keys() & keys)
        if not used:
            return _none_allocated(len(keys))
        return tuple(map(used.__contains__, keys))

    def owner_of(self, driver: str, pool: str, device: str) -> str | None:
        key = (driver, pool, device)
        owner = self.devices.get(key)
        if owner is not None:
            return owner
        shares = self._shares.get(key)
        if shares:
            # .get: a view's layer can still list a sharer the state it reads through has dropped since.
            use = self._claims.get(next(iter(shares)))
            return use.key if use is not None else None
        return None
