"""`dra-extender serve` runs on uvloop when the `fast` extra installed it, else on asyncio's loop."""

from __future__ import annotations

import asyncio
import importlib.util

from extender import eventloop


async def _loop_module() -> str:
    await asyncio.sleep(0)
    return type(asyncio.get_running_loop()).__module__


def test_runs_on_the_loop_it_names() -> None:
    module = eventloop.run(_loop_module())
    if eventloop.name() == "uvloop":
        assert module.startswith("uvloop")
    else:
        assert module.startswith("asyncio")


def test_uses_uvloop_exactly_when_installed() -> None:
    installed = importlib.util.find_spec("uvloop") is not None
    assert eventloop.name() == ("uvloop" if installed else "asyncio")
