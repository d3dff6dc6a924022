"""The benches start processes (`dra-extender serve`, fake API servers, a whole control plane in sessions
of their own, e2e_throughput's set-ups as bench processes of their own); stopped with SIGTERM, as
`timeout` and job control stop them, they must stop those too (bench/termination.py), not leave them
running to skew the next measurement."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"

# A bench's shape: asyncio.run of a coroutine that starts a process in a session of its own (no signal
# to the bench reaches it) and stops it in `finally`, taking a while, with SIGTERM arriving meanwhile.
# Its first line is that process's pid.
CHILD = f"""
import asyncio, signal, subprocess, sys, os, time
sys.path.insert(0, {str(BENCH)!r})
from termination import stop_on_sigterm

async def measure():
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    try:
        print(server.pid, flush=True)
        await asyncio.sleep(120)
    finally:
        os.kill(os.getpid(), signal.SIGTERM)  # a second SIGTERM must not cut this cleanup short
        time.sleep(0.2)
        server.terminate()
        server.wait()

stop_on_sigterm()
asyncio.run(measure())
"""

# e2e_throughput's shape: the bench runs each set-up as a bench process of its own.
PARENT = f"""
import subprocess, sys
sys.path.insert(0, {str(BENCH)!r})
from termination import stop_child, stop_on_sigterm

stop_on_sigterm()
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]])
try:
    child.wait()
except BaseException:
    stop_child(child)
    raise
"""


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _sigterm_stops_the_server(command: list[str]) -> None:
    bench = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    server = 0
    try:
        assert bench.stdout is not None
        server = int(bench.stdout.readline())
        assert _running(server)
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(30) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 10
        while _running(server) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(server)
    finally:
        bench.kill()
        bench.wait()
        if server and _running(server):
            os.kill(server, signal.SIGKILL)


def test_sigterm_stops_what_the_bench_started() -> None:
    _sigterm_stops_the_server([sys.executable, "-c", CHILD])


def test_sigterm_to_a_bench_reaches_what_its_bench_processes_started() -> None:
    """subprocess.run answers an exception with SIGKILL, which left a set-up's control plane running."""
    _sigterm_stops_the_server([sys.executable, "-c", PARENT, CHILD])
