"""bench/answer_digest.py, the proof that performance work left every answer the same, must itself give
the same digest on every run of the same workload, and a different one when an answer differs."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "answer_digest.py"


@pytest.fixture(scope="module")
def digest() -> ModuleType:
    spec = importlib.util.spec_from_file_location("answer_digest", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["answer_digest"] = module
    spec.loader.exec_module(module)
    return module


def options(seed: int = 31) -> argparse.Namespace:
    return argparse.Namespace(pods=24, nodes=6, seed=seed, churn_every=5, hashes=True)


async def test_the_same_workload_gives_the_same_digest(digest: ModuleType) -> None:
    first = await digest.run(options())
    second = await digest.run(options())
    assert first["hashes"] == second["hashes"]
    assert first["digest"] == second["digest"]
    # Every verb answered, some pods bound and some unschedulable: the digest covers each path.
    assert first["pods"] == first["filter"] == 24
    assert first["bind"] > 0 and first["prioritize"] > 0 and first["preempt"] > 0
    assert first["unschedulable"] > 0
    assert first["answers"] == len(first["hashes"])


async def test_another_workload_gives_another_digest(digest: ModuleType) -> None:
    assert (await digest.run(options(seed=7)))["digest"] != (await digest.run(options()))["digest"]
