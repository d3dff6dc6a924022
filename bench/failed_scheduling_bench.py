"""How long kube-scheduler's FailedScheduling text gets for a pod that fits none of 500 nodes, in our
words (--reasons=detailed, the only words before) and in upstream's (--reasons=upstream), plus our
DRAExplanation event.

The cluster: 500 nodes of 8 GPUs, 0 to 3 of them of another model than the pod's request selects, 1
to all of the others in use by other claims, varying from node to node as on a busy cluster; the pod
asks for 8 GPUs of one model. The filter is the extender's own (the same Scheduler as serve), and the text is
built from its answer as kube-scheduler builds it (tests/support/fiterror.py): the FitError for the
pod's PodScheduled condition, and the event, which kube-scheduler cuts to 1,024 characters.

    python bench/failed_scheduling_bench.py            # a table
    python bench/failed_scheduling_bench.py --json

It also gives the extender CPU one retry of such a pod costs (a filter answered from the filter cache),
which a shorter podMaxInUnschedulablePodsDuration multiplies by every pending pod.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "extender"))
sys.path.insert(0, str(ROOT / "tests" / "support"))

import dra_objects as o  # noqa: E402
from fiterror import event_message, fit_error  # noqa: E402

from allocator import FeatureGates  # noqa: E402
from extender.plugin.claimwriter import ClaimWriter  # noqa: E402
from extender.plugin.explanation import Explanations  # noqa: E402
from extender.plugin.scheduling import Scheduler  # noqa: E402
from extender.plugin.verdicts import Words  # noqa: E402
from extender.state.assume import AssumeCache  # noqa: E402
from extender.state.cache import ClusterCache  # noqa: E402

DEVICES = 8
WANTED = 8
RETRIES = 20
SELECTOR = 'device.attributes["gpu.example.com"].model == "A100"'


def cluster(nodes: int) -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = [o.device_class()]
    rng = random.Random(500)  # the same cluster every run
    for index in range(nodes):
        name = f"node-{index}"
        other_model = rng.randint(0, 3)  # devices of another model on this node
        models = ["H100"] * other_model + ["A100"] * (DEVICES - other_model)
        objs += [o.node(name), o.gpu_slice(name, DEVICES, models=models)]
        a100 = DEVICES - other_model
        in_use = rng.randint(1, a100)  # at least one: no node has WANTED free
        devices = [f"gpu-{d}" for d in range(other_model, other_model + in_use)]
        user = {"resource": "pods", "name": f"user-{index}", "uid": f"user-{index}"}
        claim = o.claim(f"used-{index}", count=len(devices))
        objs.append(o.allocate(claim, name, devices, reserved_for=[user]))
    selectors = [{"cel": {"expression": SELECTOR}}]
    exactly = {"deviceClassName": o.CLASS, "count": WANTED, "selectors": selectors}
    request = {"name": "gpu", "exactly": exactly}
    objs += [o.claim("training", requests=[request]), o.pod("trainer", ["training"])]
    return objs


class Sink:
    def __init__(self) -> None:
        self.messages: list[str] = []

    def record(self, involved: Any, reason: str, message: str, *, event_type: str = "Normal") -> None:
        self.messages.append(message)


async def measure(nodes: int) -> dict[str, Any]:
    cache = ClusterCache.from_objects(cluster(nodes), FeatureGates())
    assume = AssumeCache()
    assume.attach(cache)
    sink = Sink()
    scheduler = Scheduler(cache, assume, ClaimWriter(None, cache), explanations=Explanations(sink))
    pod = cache.pod("default", "trainer")
    assert pod is not None
    names = [f"node-{index}" for index in range(nodes)]
    figures: dict[str, Any] = {"nodes": nodes}
    for words in (Words.DETAILED, Words.UPSTREAM):
        scheduler.reasons = words
        scheduler.explanations = Explanations(sink)
        result = await scheduler.filter(pod, names, brief=True)
        assert not result.passed and not result.error, result.error
        text = fit_error(nodes, result.failed, result.unresolvable)
        figures[words.value] = {
            "distinct_reasons": len({*result.failed.values(), *result.unresolvable.values()}),
            "condition_chars": len(text),
            "event_chars": len(event_message(text)),
            "event_cut": len(event_message(text)) < len(text),
            "line": event_message(text),
        }
    figures["explanation"] = sink.messages[-1] if sink.messages else None
    # What retrying the pod costs the extender: a warm filter (outcomes cached) of a pod that fits
    # nowhere, as each retry of a waiting pod is.
    scheduler.reasons = Words.UPSTREAM
    started = time.process_time()
    for _ in range(RETRIES):
        await scheduler.filter(pod, names, brief=True)
    figures["retry_filter_cpu_ms"] = round((time.process_time() - started) / RETRIES * 1000, 2)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = asyncio.run(measure(args.nodes))
    if args.json:
        print(orjson.dumps(figures, option=orjson.OPT_INDENT_2).decode())
        return
    print(f"{args.nodes} nodes, pod fits none")
    for words in ("detailed", "upstream"):
        row = figures[words]
        print(f"--reasons={words}: {row['distinct_reasons']} distinct reasons, PodScheduled condition "
              f"{row['condition_chars']} chars, FailedScheduling event {row['event_chars']} chars"
              f"{' (cut)' if row['event_cut'] else ''}\n  {row['line']}")
    print(f"DRAExplanation ({len(figures['explanation'] or '')} chars):\n  {figures['explanation']}")
    print(f"one retry of the pod (a warm filter): {figures['retry_filter_cpu_ms']} ms of CPU")


if __name__ == "__main__":
    main()
