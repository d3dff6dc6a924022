"""The fault-injection suite (issue: no device twice and no pod without its devices, whatever fails).

A control plane of this module's own, with dra-extender talking to kube-apiserver through the fault
proxy (fault_proxy.py). Each test runs a burst of 100 pods with one-device claim templates on 20 nodes x
4 devices while one kind of fault hits, then checks from the API server's objects (fault_scenario.py):
no device in two allocations, every bound pod's claims allocated and reserved for it on its node, no
claim with our finalizer and no allocation, every pod that fits bound, no traceback in our log.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from e2e_api import Api
from e2e_cluster import ControlPlane, own_control_plane
from fault_proxy import FaultProxy, Faults
from fault_scenario import assert_sound, run_scenario

KILL_CYCLES = 10


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with own_control_plane(tmp_path_factory.mktemp("fault-plane"), {}, []) as started:
        yield started


@pytest.fixture(scope="module")
def proxy(plane: ControlPlane) -> Iterator[FaultProxy]:
    """The extender restarted to reach kube-apiserver through the fault proxy."""
    started = FaultProxy(plane.server, plane.ca_file, plane.serving_cert, plane.serving_key, seed=27)
    started.start()
    plane.point_extender_at(started.url)
    plane.stop_extender()
    plane.start_extender()
    yield started
    started.stop()


@pytest.fixture
def api(plane: ControlPlane, proxy: FaultProxy) -> Api:
    assert plane.api is not None
    return plane.api


def test_fault_proxy_latency_lost_answers_cuts_and_refusals(plane: ControlPlane, proxy: FaultProxy,
                                                            api: Api) -> None:
    faults = Faults(write_delay_s=(0.0, 3.0), answer_lost=0.1, cut_before=0.05, refused=0.05,
                    watch_cut_after_s=15.0)
    name = "proxy: 0-3 s writes, 10% answers lost, 5% cut, 5% refused"
    outcome = run_scenario(plane, proxy, api, name=name, faults=faults)
    assert outcome.injected.get("answer lost (504)", 0) + outcome.injected.get("answer lost (cut)", 0) > 0
    assert_sound(outcome)


def test_fault_kill_9_loop_with_slow_writes(plane: ControlPlane, proxy: FaultProxy, api: Api) -> None:
    """kill -9 of the extender at least ten times during the burst, with writes taking 0-3 s to land (so
    some are in flight at each kill), restarted at once each time: the probe that gave devices twice."""
    rng = random.Random(2727)

    def kill_loop(creation_done: threading.Event, namespace: str) -> dict[str, Any]:
        cycles = 0
        while cycles < KILL_CYCLES or not creation_done.is_set():
            time.sleep(rng.uniform(0.3, 1.5))
            plane.stop_extender(hard=True)
            cycles += 1
            plane.start_extender()
            if cycles >= 3 * KILL_CYCLES:
                break
        return {"kill_cycles": cycles}

    outcome = run_scenario(plane, proxy, api, name=f"kill -9 loop (>= {KILL_CYCLES} cycles), 0-3 s writes",
                           faults=Faults(write_delay_s=(0.0, 3.0)), interval_s=0.3, during=kill_loop)
    assert outcome.notes["kill_cycles"] >= KILL_CYCLES
    assert_sound(outcome)


def test_fault_half_the_binding_answers_lost(plane: ControlPlane, proxy: FaultProxy, api: Api) -> None:
    """50% of the Bindings applied with their answer lost, and the pod reads that should settle them
    failing half of the time too."""
    outcome = run_scenario(plane, proxy, api, name="50% Binding answers lost, 50% pod reads failing",
                           faults=Faults(binding_lost=0.5, pod_reads_failing=0.5))
    assert outcome.injected.get("answer lost (504)", 0) + outcome.injected.get("answer lost (cut)", 0) > 10
    assert_sound(outcome)


def test_fault_kube_apiserver_restart(plane: ControlPlane, proxy: FaultProxy, api: Api) -> None:
    def restart(creation_done: threading.Event, namespace: str) -> dict[str, Any]:
        time.sleep(6.0)
        started = time.monotonic()
        plane.restart_apiserver(hard=True, down_s=2.0)
        return {"apiserver_down_s": round(time.monotonic() - started, 1)}

    outcome = run_scenario(plane, proxy, api, name="kill -9 of kube-apiserver mid-burst",
                           faults=Faults(write_delay_s=(0.0, 0.5)), during=restart)
    assert_sound(outcome)


def test_fault_watch_expiry(plane: ControlPlane, proxy: FaultProxy, api: Api) -> None:
    """Every watch cut within 5 s and every resumed watch answered 410 Gone: the extender re-lists each
    kind again and again during the burst."""
    outcome = run_scenario(plane, proxy, api, name="watches cut within 5 s, every resume 410 Gone",
                           faults=Faults(watch_cut_after_s=5.0, watch_expired=1.0, write_delay_s=(0.0, 0.3)))
    assert outcome.injected.get("watch expired (410)", 0) > 0
    assert_sound(outcome)
