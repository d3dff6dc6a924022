"""DRADeviceCompatibilityGroups: devices drawing from one counter set may only be allocated together
when the compatibility groups they declare for that counter set have a group in common.

A device that declares no groups for a counter set goes only with devices that declare none there
either. The check is per (driver, pool, counter set) and spans every claim of one search: it starts
from the devices already allocated in the pool (their groups read from the slices as they are now),
then narrows with every device the search tentatively takes, and widens again when the search gives
a device back.
"""

from __future__ import annotations

from collections.abc import Iterable

from allocator.model import Device
from allocator.pools import DeviceEntry, Pool
from allocator.state import AllocatedState

# The running intersection of one counter set: the groups every member so far has in common, or
# None while every member declared no groups. A counter set nobody draws from has no entry at all.
Intersection = frozenset[str] | None
CounterSetKey = tuple[str, str, str]  # (driver, pool, counter set)


class _Absent:
    """Marks "no entry": the counter set had no members before."""


_NONE = _Absent()
_EMPTY: frozenset[str] = frozenset()
# What taking a device changed, to give back in reverse: (counter set, its previous entry or _NONE).
Undo = list[tuple[CounterSetKey, Intersection | _Absent]]


def device_groups(device: Device) -> Iterable[tuple[str, frozenset[str]]]:
    """(counter set, declared groups) for each counter set the device consumes, in its order."""
    if device.compatibility_groups:
        return device.compatibility_groups
    return ((counter_set, _EMPTY) for counter_set, _ in device.consumes_counters)


def admits(current: Intersection | _Absent, groups: frozenset[str]) -> bool:
    if isinstance(current, _Absent):
        return True
    if not groups:
        return current is None
    return current is not None and not current.isdisjoint(groups)


def fold(current: Intersection | _Absent, groups: frozenset[str]) -> Intersection:
    """The intersection with one more member. Left unchanged when either side declares no groups:
    after a successful ``admits`` both sides then declare none. Allocated peers are folded in without
    ``admits`` (they may disagree, say after a driver changed its slices); like upstream, the result
    then depends on their order, and an empty frozenset admits nothing."""
    if isinstance(current, _Absent):
        return groups or None
    if current is None or not groups:
        return current
    return current & groups


class CompatibilityGroups:
    """The rolling intersections of one search."""

    __slots__ = ("_allocated", "_baselines", "_running")

    def __init__(self, allocated: AllocatedState) -> None:
        self._allocated = allocated
        self._baselines: dict[tuple[str, str], dict[str, Intersection]] = {}
        self._running: dict[CounterSetKey, Intersection] = {}

    def _baseline(self, pool: Pool) -> dict[str, Intersection]:
        """Per counter set of the pool, the intersection of the devices allocated before this search
        (devices of slices that target other nodes too, as counters count them)."""
        found = self._baselines.get((pool.driver, pool.name))
        if found is None:
            found = {}
            for device in pool.all_devices():
                if device.consumes_counters and self._allocated.is_allocated(
                    (pool.driver, pool.name, device.name)
                ):
                    for counter_set, groups in device_groups(device):
                        found[counter_set] = fold(found.get(counter_set, _NONE), groups)
            self._baselines[(pool.driver, pool.name)] = found
        return found

    def _current(self, key: CounterSetKey, baseline: dict[str, Intersection]) -> Intersection | _Absent:
        if key in self._running:
            return self._running[key]
        return baseline.get(key[2], _NONE)

    def take(self, entry: DeviceEntry) -> Undo | None:
        """Admit the device on every counter set it consumes and narrow their intersections; None
        (nothing changed) when one of them does not admit it."""
        baseline = self._baseline(entry.pool)
        driver, pool = entry.key[0], entry.key[1]
        undo: Undo = []
        for counter_set, groups in device_groups(entry.device):
            key = (driver, pool, counter_set)
            current = self._current(key, baseline)
            if not admits(current, groups):
                self.give_back(undo)
                return None
            undo.append((key, self._running.get(key, _NONE)))
            self._running[key] = fold(current, groups)
        return undo

    def give_back(self, undo: Undo) -> None:
        for key, previous in reversed(undo):
            if isinstance(previous, _Absent):
                self._running.pop(key, None)
            else:
                self._running[key] = previous

    def clear(self) -> None:
        """Forget this search's own choices (the baselines stay valid)."""
        self._running.clear()
