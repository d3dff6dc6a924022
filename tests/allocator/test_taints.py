"""Toleration matching (upstream's ToleratesTaint) and which taints block allocation."""

from __future__ import annotations

import pytest

from allocator.taints import tolerates, untolerated

TAINT = {"key": "gpu.example.com/ecc", "value": "bad", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        ({"key": "gpu.example.com/ecc", "operator": "Equal", "value": "bad"}, True),
        ({"key": "gpu.example.com/ecc", "value": "bad"}, True),  # empty operator means Equal
        ({"key": "gpu.example.com/ecc", "operator": "Equal", "value": "good"}, False),
        ({"key": "gpu.example.com/ecc", "operator": "Exists"}, True),
        ({"operator": "Exists"}, True),  # empty key: every key
        ({"operator": "Exists", "effect": "NoExecute"}, False),
        ({"operator": "Exists", "effect": "NoSchedule"}, True),
        ({"value": "bad"}, True),  # empty key with Equal compares values only
        ({"key": "other", "operator": "Exists"}, False),
        ({"key": "gpu.example.com/ecc", "operator": "Gt", "value": "bad"}, False),
    ],
)
def test_tolerates(toleration: dict, expected: bool) -> None:
    assert tolerates(toleration, TAINT) is expected


def test_untolerated_needs_every_blocking_taint_tolerated() -> None:
    other = {"key": "other", "effect": "NoExecute"}
    assert untolerated([TAINT, other], [{"key": "gpu.example.com/ecc", "operator": "Exists"}])
    assert not untolerated([TAINT, other], [{"operator": "Exists"}])
    assert not untolerated([], [])
