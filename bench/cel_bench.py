"""CEL selector benchmark: compile, cold and memoized evaluation, and full 40,000-device passes.

    python bench/cel_bench.py --json

A pass evaluates three typical selectors on every device, the way the allocator does: the
devices' CEL views are built beforehand (the cluster cache builds them once per ResourceSlice
generation), the engine input (activation) is built during the cold pass and reused, and the
memoized pass repeats the cold pass with warm memos. Pure-Python celpy would take about a minute
for a cold 40,000-device pass, so by default it runs on fewer devices and the JSON says which
figures are extrapolated from how many devices.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from allocator import cel

DRIVER = "gpu.example.com"
SELECTORS = [
    f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].model == "A100" '
    f'&& device.attributes["{DRIVER}"].memoryGiB >= 40',
    f'"{DRIVER}" in device.attributes && device.attributes["{DRIVER}"].family in ["ampere", "hopper"]',
    f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0',
]
DEVICES_PER_NODE = 8
MODELS = ["A100", "H100", "L4", "T4"]
FAMILIES = {"A100": "ampere", "H100": "hopper", "L4": "ada", "T4": "turing"}


def make_devices(count: int) -> list[cel.CELDevice]:
    devices = []
    for i in range(count):
        node, index = divmod(i, DEVICES_PER_NODE)
        model = MODELS[(node + index) % len(MODELS)]
        memory = 80 if model in ("A100", "H100") and index % 2 else 40 if model != "T4" else 16
        devices.append(cel.make_device(
            DRIVER,
            {
                "index": {"int": index},
                "uuid": {"string": f"gpu-{i:08x}-0000-0000-0000-000000000000"},
                "model": {"string": model},
                "family": {"string": FAMILIES[model]},
                "memoryGiB": {"int": memory},
                "migCapable": {"bool": model in ("A100", "H100")},
                "driverVersion": {"version": f"1.{node % 5}.{index}"},
                "pcieRoot": {"string": f"pci{index // 4:04d}:00"},
            },
            {"memory": {"value": f"{memory}Gi"}, "cores": {"value": "108"}},
            memo_key=(f"slice-{node}", 1, f"gpu-{index}"),
        ))
    return devices


def full_pass(selectors: list[cel.Selector], devices: list[cel.CELDevice]) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds of this process, matches."""
    start, cpu_start = time.perf_counter(), time.process_time()
    matched = 0
    for device in devices:
        for selector in selectors:
            if selector.matches(device):
                matched += 1
    return time.perf_counter() - start, time.process_time() - cpu_start, matched


def measure(engine_name: str, device_count: int, repeats: int) -> dict[str, object]:
    engine = cel.get_engine(engine_name)
    backend = engine._backend  # a fresh Engine per compile measures compiles, not cache hits

    compile_times = []
    for _ in range(max(repeats, 5)):
        for expression in SELECTORS:
            start = time.perf_counter()
            cel.Engine(backend).compile(expression)
            compile_times.append(time.perf_counter() - start)

    colds, cold_cpus, memos, memo_cpus, matched = [], [], [], [], 0
    for _ in range(repeats):
        devices = make_devices(device_count)  # fresh views: no activation built, empty memos
        selectors = [cel.Engine(backend).compile(expression) for expression in SELECTORS]
        cold, cold_cpu, matched = full_pass(selectors, devices)
        colds.append(cold)
        cold_cpus.append(cold_cpu)
        memo, memo_cpu, _ = min(full_pass(selectors, devices) for _ in range(3))
        memos.append(memo)
        memo_cpus.append(memo_cpu)
    cold, memo = statistics.median(colds), statistics.median(memos)
    evaluations = device_count * len(SELECTORS)
    scale = 40_000 / device_count
    result: dict[str, object] = {
        "compile_us": round(statistics.median(compile_times) * 1e6, 1),
        "eval_cold_us": round(cold / evaluations * 1e6, 2),
        "eval_memo_us": round(memo / evaluations * 1e6, 3),
        "pass_40k_cold_s": round(cold * scale, 3),
        "pass_40k_memo_s": round(memo * scale, 4),
        # CPU time of this process: what the pass costs when other processes compete for the 2 cores
        "pass_40k_cold_cpu_s": round(statistics.median(cold_cpus) * scale, 3),
        "pass_40k_memo_cpu_s": round(statistics.median(memo_cpus) * scale, 4),
        "matches_per_pass": round(matched * scale),
        "repeats": repeats,
    }
    if device_count != 40_000:
        result["pass_40k_cold_s_extrapolated_from"] = device_count
        result["pass_40k_memo_s_extrapolated_from"] = device_count
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object keyed by engine name")
    parser.add_argument("--devices", type=int, default=40_000, help="devices per pass for cel-expr")
    parser.add_argument("--celpy-devices", type=int, default=2_000,
                        help="devices per pass for celpy (figures are scaled to 40,000)")
    parser.add_argument("--repeats", type=int, default=3, help="passes per figure (the median is reported)")
    parser.add_argument("--engines", default="cel-expr,celpy", help="comma-separated engine names")
    args = parser.parse_args()

    results: dict[str, object] = {
        "load_average_1m_at_start": round(os.getloadavg()[0], 2),
        "selectors": SELECTORS,
        "eval_cold_us": "per selector and device, building each device's engine input once (shared by 3)",
    }
    for name in args.engines.split(","):
        if name == "cel-expr" and not cel.cel_expr_available():
            results[name] = {"skipped": "cel-expr-python is not installed"}
            continue
        count = args.celpy_devices if name == "celpy" else args.devices
        repeats = 1 if name == "celpy" else args.repeats
        results[name] = measure(name, count, repeats)
    if args.json:
        print(orjson.dumps(results, option=orjson.OPT_INDENT_2).decode())
        return
    for name, figures in results.items():
        if isinstance(figures, dict):
            print(f"{name:9} " + "  ".join(f"{key}={value}" for key, value in figures.items()))


if __name__ == "__main__":
    main()
