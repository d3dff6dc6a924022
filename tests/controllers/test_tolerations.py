from __future__ import annotations

import pytest
from ctrl_objects import taint, toleration

from allocator import tolerates
from extender.controllers.tolerations import earliest, eviction_time

T0 = 1_800_000_000.0


def test_no_toleration_evicts_at_time_added() -> None:
    assert eviction_time(taint("broken", added=T0), []) == T0


def test_smallest_matching_toleration_seconds_wins() -> None:
    tolerations = [
        toleration("broken", seconds=60),
        toleration("broken", seconds=30),
        toleration("other", seconds=5),
    ]
    assert eviction_time(taint("broken", added=T0), tolerations) == T0 + 30


def test_matching_toleration_without_seconds_tolerates_forever() -> None:
    assert (
        eviction_time(taint("broken", added=T0), [toleration("broken", seconds=30), toleration("broken")])
        is None
    )


def test_non_matching_tolerations_do_not_delay() -> None:
    tolerations = [
        toleration("other"),
        toleration("broken", operator="Equal", value="yes"),
        toleration("broken", effect="NoSchedule"),
    ]
    assert eviction_time(taint("broken", value="no", added=T0), tolerations) == T0


def test_empty_effect_toleration_counts_for_no_execute() -> None:
    # Deliberate difference from upstream (which needs effect NoExecute): see tolerations.py.
    assert eviction_time(taint("broken", added=T0), [toleration("broken", effect="", seconds=45)]) == T0 + 45
    assert eviction_time(taint("broken", added=T0), [toleration(effect="")]) is None


def test_equal_operator_compares_values() -> None:
    broken = taint("broken", value="yes", added=T0)
    assert eviction_time(broken, [toleration("broken", operator="Equal", value="yes", seconds=10)]) == T0 + 10
    assert tolerates({"key": "broken", "value": "yes"}, broken)  # operator defaults to Equal
    assert not tolerates({"key": "broken", "operator": "Gt", "value": "yes"}, broken)


def test_negative_seconds_count_as_zero() -> None:
    assert eviction_time(taint("broken", added=T0), [toleration("broken", seconds=-100)]) == T0


def test_only_no_execute_taints_evict() -> None:
    assert eviction_time(taint("broken", effect="NoSchedule", added=T0), []) is None
    assert eviction_time(taint("broken", effect="None", added=T0), []) is None


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="tolerationSeconds 'soon'"):
        eviction_time(
            taint("broken", added=T0), [{"key": "broken", "operator": "Exists", "tolerationSeconds": "soon"}]
        )
    with pytest.raises(ValueError, match="invalid timestamp 'yesterday'"):
        eviction_time({"key": "broken", "effect": "NoExecute", "timeAdded": "yesterday"}, [])


def test_earliest_over_claims() -> None:
    assert earliest([None, T0 + 5, T0 + 1]) == T0 + 1
    assert earliest([None, None]) is None
