"""Consumable capacity: how much of each capacity a request takes from a device, and whether it fits."""

from __future__ import annotations

from collections.abc import Mapping

from allocator.model import CapacityRequestPolicy, Device
from allocator.quantity import Quantity

ZERO = Quantity.parse("0")


def _requested(requests: Mapping[str, Quantity] | None, name: str, driver: str) -> Quantity | None:
    """A capacity request may omit the domain when it is the device's driver."""
    if not requests:
        return None
    value = requests.get(name)
    if value is not None:
        return value
    domain, sep, ident = name.partition("/")
    if sep:
        return requests.get(ident) if domain == driver else None
    return requests.get(f"{driver}/{name}")


def undefined_requests(requests: Mapping[str, Quantity] | None, device: Device, driver: str) -> list[str]:
    """Requested capacity names the device does not define."""
    if not requests:
        return []
    missing = []
    for name in requests:
        domain, sep, ident = name.partition("/")
        alternatives = {name, ident} if sep and domain == driver else {name, f"{driver}/{name}"}
        if not alternatives & device.capacity.keys():
            missing.append(name)
    return missing


def _round_up(value: Quantity, policy: CapacityRequestPolicy) -> Quantity:
    if policy.valid_range is not None:
        minimum, _maximum, step = policy.valid_range
        if value < minimum:
            return minimum
        if step is not None and step.sign() > 0:
            offset = (value - minimum).value
            steps = -(-offset // step.value)  # ceiling division on Fractions
            return Quantity.from_fraction(minimum.value + steps * step.value, minimum.format)
        return value
    for candidate in policy.valid_values:
        if candidate >= value:
            return candidate
    return value


def _violates(value: Quantity, policy: CapacityRequestPolicy) -> bool:
    if policy.default is not None and value == policy.default:
        return False
    if policy.valid_range is not None:
        minimum, maximum, step = policy.valid_range
        if value < minimum or (maximum is not None and value > maximum):
            return True
        return step is not None and step.sign() > 0 and (value - minimum).value % step.value != 0
    if policy.valid_values:
        return value not in policy.valid_values
    return False


def consumed_capacity(
    requests: Mapping[str, Quantity] | None, device: Device, driver: str
) -> dict[str, Quantity]:
    """What one allocation takes of every capacity of the device (all names listed, zero included)."""
    consumed = {}
    for name, capacity in device.capacity.items():
        requested = _requested(requests, name, driver)
        policy = capacity.policy
        if requested is None:
            value = policy.default if policy is not None and policy.default is not None else capacity.value
        elif policy is None:
            value = requested
        else:
            value = _round_up(requested, policy)
        consumed[name] = value
    return consumed


def fits(
    requests: Mapping[str, Quantity] | None,
    device: Device,
    driver: str,
    multiple: bool,
    already: Mapping[str, Quantity] | None,
    allocating: Mapping[str, Quantity] | None,
) -> bool:
    """Does the request fit? For shareable devices, together with what is allocated and being allocated."""
    for name, value in consumed_capacity(requests, device, driver).items():
        capacity = device.capacity[name]
        if capacity.policy is not None and _violates(value, capacity.policy):
            return False
        total = value
        if multiple:
            if already and name in already:
                total = total + already[name]
            if allocating and name in allocating:
                total = total + allocating[name]
        if total > capacity.value:
            return False
    return True
