"""common/heap.py: the collector paused while the cache takes in objects that stay alive."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from common.heap import collector_paused


@pytest.fixture
def collector_on() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.enable()
    yield
    gc.unfreeze()
    (gc.enable if was_enabled else gc.disable)()


def test_blocks_at_once_share_one_pause_and_the_last_freezes_what_is_alive(collector_on: None) -> None:
    frozen_before = gc.get_freeze_count()
    first, second = collector_paused(), collector_paused()
    first.__enter__()
    assert not gc.isenabled()
    second.__enter__()
    kept = [[index] for index in range(1000)]   # made during the pause, still alive at its end
    first.__exit__(None, None, None)
    assert not gc.isenabled() and gc.get_freeze_count() == frozen_before
    second.__exit__(None, None, None)
    assert gc.isenabled() and gc.get_freeze_count() >= frozen_before + len(kept)


def test_an_error_in_the_block_still_turns_the_collector_back_on(collector_on: None) -> None:
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("list failed")
    assert gc.isenabled()


def test_a_collector_someone_else_turned_off_stays_off_and_nothing_is_frozen(collector_on: None) -> None:
    gc.disable()
    frozen_before = gc.get_freeze_count()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled() and gc.get_freeze_count() == frozen_before
