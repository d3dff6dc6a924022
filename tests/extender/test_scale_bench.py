"""bench/scale_bench.py starts `dra-extender serve` and a fake API server as child processes; stopped with
SIGTERM (as `timeout` and job control stop it), it must stop them too, not leave them running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"

# The bench's shape: asyncio.run of a coroutine that starts a child and stops it in `finally`.
PROGRAM = f"""
import asyncio, subprocess, sys
sys.path.insert(0, {str(BENCH)!r})
from scale_bench import stop_on_sigterm

async def measure():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        print(child.pid, flush=True)
        await asyncio.sleep(120)
    finally:
        child.terminate()
        child.wait()

stop_on_sigterm()
asyncio.run(measure())
"""


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigterm_stops_what_the_bench_started() -> None:
    bench = subprocess.Popen([sys.executable, "-c", PROGRAM], stdout=subprocess.PIPE, text=True)
    child = 0
    try:
        assert bench.stdout is not None
        child = int(bench.stdout.readline())
        assert _running(child)
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(30) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 10
        while _running(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(child)
    finally:
        bench.kill()
        bench.wait()
        if child and _running(child):
            os.kill(child, signal.SIGKILL)
