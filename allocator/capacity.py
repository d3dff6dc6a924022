"""Consumable capacity: how much of each capacity a request takes from a device, and whether it fits."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

from allocator.model import CapacityRequestPolicy, Device
from allocator.quantity import Quantity

_INT64_MAX = 2**63 - 1


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


class CapacityError(ValueError):
    """A request the device's range arithmetic cannot represent (upstream aborts the allocation)."""


_NOT_REPRESENTABLE = "capacity request cannot be represented in the device's range arithmetic"


def milli_units(value: Quantity) -> int:
    """The exact milli value, like upstream's safeMilliValue (an error when it would round or leave
    the int64 range)."""
    milli = value.value * 1000
    if milli.denominator != 1 or not -_INT64_MAX - 1 <= milli <= _INT64_MAX:
        raise CapacityError(f"{_NOT_REPRESENTABLE}: request {value} is not a representable milli value")
    return int(milli)


def _use_milli(valid_range: tuple[Quantity, Quantity | None, Quantity | None], *, fractional: bool) -> bool:
    """DRAFractionalCapacityRange: range arithmetic in milli units when min, max and step all have an
    exact milli value and the step is at least 1m; otherwise (and without the gate) in whole units,
    each bound rounded up as Quantity.Value() does."""
    if not fractional:
        return False
    try:
        milli = [milli_units(q) for q in valid_range if q is not None]
    except CapacityError:
        return False
    step = valid_range[2]
    return step is None or milli[-1] >= 1


def whole_units(value: Quantity) -> int:
    """Quantity.Value(): rounded up, away from zero."""
    return -(-value.milli_value() // 1000) if value.sign() >= 0 else value.milli_value() // 1000


def _round_up(value: Quantity, policy: CapacityRequestPolicy, *, fractional: bool) -> Quantity:
    if policy.valid_range is not None:
        minimum, _maximum, step = policy.valid_range
        if value < minimum:
            return minimum
        if step is None or step.sign() <= 0:
            return value
        # Upstream computes in int64 and refuses (aborting the allocation) what would not fit in it.
        if _use_milli(policy.valid_range, fractional=fractional):
            base, unit = milli_units(minimum), milli_units(step)
            steps = -(-(milli_units(value) - base) // unit)
            if steps > (_INT64_MAX - base) // unit:
                raise CapacityError(
                    f"{_NOT_REPRESENTABLE}: rounding request {value} up to the next step passes the "
                    "milli-value range"
                )
            return Quantity.from_fraction(Fraction(base + steps * unit, 1000), step.format)
        if value.value > _INT64_MAX:
            raise CapacityError(f"{_NOT_REPRESENTABLE}: request {value} exceeds MaxInt64")
        base, unit = whole_units(minimum), whole_units(step)
        steps = -(-(whole_units(value) - base) // unit)
        if base >= 0 and steps > (_INT64_MAX - base) // unit:
            raise CapacityError(
                f"{_NOT_REPRESENTABLE}: rounding request {value} up to the next step passes MaxInt64"
            )
        return Quantity.from_fraction(base + steps * unit, step.format)
    for candidate in policy.valid_values:
        if candidate >= value:
            return candidate
    return value


def _violates(value: Quantity, policy: CapacityRequestPolicy, *, fractional: bool) -> bool:
    # As upstream: the minimum is not checked here (rounding up already reached it).
    if policy.default is not None and value == policy.default:
        return False
    if policy.valid_range is not None:
        minimum, maximum, step = policy.valid_range
        if maximum is not None and value > maximum:
            return True
        if step is None or step.sign() <= 0:
            return False
        if _use_milli(policy.valid_range, fractional=fractional):
            try:
                return (milli_units(value) - milli_units(minimum)) % milli_units(step) != 0
            except CapacityError:
                return True
        return (whole_units(value) - whole_units(minimum)) % whole_units(step) != 0
    if policy.valid_values:
        return value not in policy.valid_values
    return False


def consumed_capacity(
    requests: Mapping[str, Quantity] | None, device: Device, driver: str, *, fractional: bool = True
) -> dict[str, Quantity]:
    """What one allocation takes of every capacity of the device (all names listed, zero included).
    Raises CapacityError for a request the range arithmetic cannot represent."""
    consumed = {}
    for name, capacity in device.capacity.items():
        requested = _requested(requests, name, driver)
        policy = capacity.policy
        if requested is None:
            value = policy.default if policy is not None and policy.default is not None else capacity.value
        elif policy is None:
            value = requested
        else:
            value = _round_up(requested, policy, fractional=fractional)
        consumed[name] = value
    return consumed


def fits(
    requests: Mapping[str, Quantity] | None,
    device: Device,
    driver: str,
    *,
    multiple: bool,
    already: Mapping[str, Quantity] | None,
    allocating: Mapping[str, Quantity] | None,
    fractional: bool = True,
) -> bool:
    """Does the request fit? For shareable devices, together with what is allocated and being allocated.
    Raises CapacityError like consumed_capacity."""
    consumed = consumed_capacity(requests, device, driver, fractional=fractional)
    for name, value in consumed.items():
        if value.sign() < 0:
            raise CapacityError(f"capacity {name!r}: capacity value is negative")
    for name, value in consumed.items():
        capacity = device.capacity[name]
        if capacity.policy is not None and _violates(value, capacity.policy, fractional=fractional):
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
