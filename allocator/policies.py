"""What the API server (v1.37.1) rejects in a new ResourceSlice's capacity request policies, for
`dra-extender check`: the allocator itself takes stored slices as they are.

DRAFractionalCapacityRange changes the rules: with it on, a range with a fractional min, max, step or
default is checked in milli units (each value must have an exact milli value) and validValues are
told apart by their exact value; with it off, bounds are read as whole numbers rounded up, as the
allocator then computes, and validValues that round to the same number are duplicates.
"""

from __future__ import annotations

from collections.abc import Iterator

from allocator.capacity import CapacityError, milli_units, whole_units
from allocator.model import CapacityRequestPolicy, Device
from allocator.quantity import Quantity

DISCRETE_MAX_OPTIONS = 10  # CapacityRequestPolicyDiscreteMaxOptions
_INT64_MAX = 2**63 - 1


def request_policy_problems(device: Device, path: str, *, fractional: bool) -> list[str]:
    """Problems of ``device``'s capacity request policies, each naming its field under ``path``
    (the device's own path, ``spec.devices[i]``)."""
    problems: list[str] = []
    for name, capacity in device.capacity.items():
        policy = capacity.policy
        if policy is None:
            continue
        where = f"{path}.capacity[{name}].requestPolicy"
        if not device.allow_multiple_allocations:
            problems.append(f"{where}: Forbidden: allowMultipleAllocations must be true")
            continue
        if policy.default is None and (policy.valid_values or policy.valid_range):
            kind = "validValues" if policy.valid_values else "validRange"
            problems.append(f"{where}.default: Required value: required when {kind} is defined")
            continue
        if policy.valid_values:
            values = f"{where}.validValues"
            problems.extend(_valid_values_problems(policy, capacity.value, values, fractional=fractional))
        elif policy.valid_range is not None:
            problems.extend(_range_problems(policy, capacity.value, f"{where}.validRange",
                                           fractional=fractional))
    return problems


def _invalid(path: str, value: Quantity, message: str) -> str:
    return f'{path}: Invalid value: "{value}": {message}'


def _valid_values_problems(
    policy: CapacityRequestPolicy, capacity: Quantity, path: str, *, fractional: bool
) -> Iterator[str]:
    values, default = policy.valid_values, policy.default
    assert default is not None
    for i in range(1, len(values)):
        if values[i - 1] > values[i]:
            yield _invalid(f"{path}[{i}]", values[i], "values must be sorted in ascending order")
    if len(values) > DISCRETE_MAX_OPTIONS:
        yield f"{path}: Too many: {len(values)}: must have at most {DISCRETE_MAX_OPTIONS} items"
        # The API server stops at the count (and then does not find the default either).
        yield _invalid(path, default, "default value is not valid according to the requestPolicy")
        return
    for i, value in enumerate(values):
        if value > capacity:
            yield _invalid(f"{path}[{i}]", value, f"option is larger than capacity value: {capacity}")
    seen: set[object] = set()
    for i, value in enumerate(values):
        key = value.value if fractional else whole_units(value)
        if key in seen:
            yield f'{path}[{i}]: Duplicate value: "{value if fractional else key}"'
        seen.add(key)
    if not any(value == default for value in values):
        yield _invalid(path, default, "default value is not valid according to the requestPolicy")


def _range_problems(
    policy: CapacityRequestPolicy, capacity: Quantity, path: str, *, fractional: bool
) -> Iterator[str]:
    assert policy.valid_range is not None and policy.default is not None
    minimum, maximum, step = policy.valid_range
    default = policy.default
    if minimum > capacity:
        yield _invalid(f"{path}.min", minimum, f"min is larger than capacity value: {capacity}")
    if default < minimum:
        yield _invalid(f"{path}.default", default, f"default is less than min: {minimum}")
    if maximum is not None:
        if minimum > maximum:
            yield _invalid(f"{path}.max", minimum, f"min is larger than max: {maximum}")
        if maximum > capacity:
            yield _invalid(f"{path}.max", maximum, f"max is larger than capacity value: {capacity}")
        if default > maximum:
            yield _invalid(f"{path}.default", default, f"default is more than max: {maximum}")
    named = [("default", default), ("min", minimum), ("max", maximum), ("step", step)]
    # The default counts here although the allocator's choice of arithmetic ignores it: the API server
    # would otherwise accept a fractional default that is no step from min.
    use_milli = fractional and any(q is not None and q.value.denominator != 1 for _, q in named)
    if use_milli:
        unsafe = [
            _invalid(f"{path}.{name}", q, "value cannot be represented as a milli value")
            for name, q in named
            if q is not None and not _has_milli_value(q)
        ]
        if unsafe:
            yield from unsafe
            return
    if step is None:
        return
    if step.sign() <= 0:
        yield _invalid(f"{path}.step", step, "must be greater than zero")
        return
    if minimum + step > capacity:
        message = f"one step {minimum + step} is larger than capacity value: {capacity}"
        yield _invalid(f"{path}.step", step, message)
    if not use_milli:
        out_of_range = [
            _invalid(f"{path}.{name}", q, problem)
            for name, q in named
            if q is not None and (problem := _int64_problem(q)) is not None
        ]
        if out_of_range:
            yield from out_of_range
            return
    units = milli_units if use_milli else whole_units
    for value in (default, maximum):
        if value is not None and (units(value) - units(minimum)) % units(step):
            yield _invalid(
                f"{path}.step", value, f"value is not a multiple of a given step ({step}) from ({minimum})"
            )


def _has_milli_value(value: Quantity) -> bool:
    try:
        milli_units(value)
    except CapacityError:
        return False
    return True


def _int64_problem(value: Quantity) -> str | None:
    if value.sign() < 0:
        return "must be greater than or equal to 0"
    if value.value > _INT64_MAX:
        return f"must not be larger than {_INT64_MAX}"
    return None
