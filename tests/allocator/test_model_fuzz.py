"""Property: malformed objects raise InvalidObjectError, never anything else."""

from __future__ import annotations

import contextlib
import copy
from typing import Any

from allocator_objects import claim_obj, class_obj, dev, req, slice_obj
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocator import InvalidObjectError, parse_object

VALID = [
    slice_obj(
        "s",
        [
            dev(
                "d",
                attrs={"i": 1, "s": "x"},
                capacity={
                    "m": {"value": "1Gi", "requestPolicy": {"default": "1", "validRange": {"min": "1"}}}
                },
                taints=[{"key": "k", "effect": "NoSchedule"}],
                consumesCounters=[{"counterSet": "c", "counters": {"x": {"value": "1"}}}],
            )
        ],
        sharedCounters=[{"name": "c", "counters": {"x": {"value": "2"}}}],
    ),
    claim_obj(
        "c",
        req("r", tolerations=[{"operator": "Exists"}], capacity={"requests": {"m": "1"}}),
        constraints=[{"matchAttribute": "a/b"}],
        config=[{"requests": ["r"], "opaque": {}}],
    ),
    class_obj("gpu", "true", config=[{"opaque": {"driver": "d", "parameters": {}}}]),
    {"kind": "Node", "metadata": {"name": "n", "labels": {"a": "b"}}},
    {
        "kind": "DeviceTaintRule",
        "metadata": {"name": "t"},
        "spec": {"deviceSelector": {"driver": "d"}, "taint": {"key": "k", "effect": "None"}},
    },
]

junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.text(max_size=3),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found.extend(paths(item, (*prefix, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.extend(paths(item, (*prefix, index)))
    return found


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(VALID), st.data(), junk)
def test_replacing_any_field_with_junk(original: dict, data: st.DataObject, replacement: Any) -> None:
    raw = copy.deepcopy(original)
    path = data.draw(st.sampled_from(paths(raw)[1:]))
    target = raw
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = replacement
    with contextlib.suppress(InvalidObjectError):
        parse_object(raw)
