"""SIGTERM for the benches that start processes: stop them, do not leave them running.

Killed by SIGTERM (`timeout`, job control, a CI step's limit), Python ends without running `finally`
blocks, so a bench left behind what it started: `dra-extender serve`, its fake API server, or a whole
control plane (those run in sessions of their own, so no signal reaches them), which then skewed the
next measurement and held its ports.
"""

from __future__ import annotations

import signal
import subprocess

# Long enough for a bench process to stop a control plane (each component gets 15 s to exit).
CHILD_STOP_S = 120.0


def stop_on_sigterm() -> None:
    """Let SIGTERM unwind the bench as Ctrl-C does, through the `finally` blocks that stop what it
    started; the exit status stays 128 + SIGTERM. Once either signal has started the unwinding, later
    SIGTERMs are ignored: a parent stopping its bench children (`stop_child`), or a group-wide signal
    after Ctrl-C, must not cut their cleanup short. A second Ctrl-C still interrupts."""
    def stop(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


def stop_child(child: subprocess.Popen[bytes]) -> None:
    """Stop a bench started as a child process so that it stops what it started: SIGTERM, and SIGKILL
    only if it has not exited within CHILD_STOP_S (subprocess.run kills at once, which left a control
    plane running)."""
    if child.poll() is not None:
        return
    child.terminate()
    try:
        child.wait(CHILD_STOP_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
