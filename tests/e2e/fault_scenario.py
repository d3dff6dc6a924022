"""One fault scenario on the real control plane: a burst of pods with one-device claim templates on a
cluster with fewer devices than pods (so pods contend), faults injected meanwhile, then the faults stop
and the cluster must settle. Every invariant is read from the API server's own objects.

The figures of each run (pods bound / expected, recovery time, each invariant's count, what the proxy
injected) are printed, and appended as a JSON line to the file named by $DRA_FAULT_REPORT if set.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import urllib3
from e2e_api import Api, ApiStatusError, temporary_namespace, wait_for
from e2e_cluster import ControlPlane
from e2e_objects import (
    FINALIZER,
    RESOURCE,
    allocated_devices,
    claim_spec,
    create_driver,
    create_pod,
    create_template,
)
from fault_proxy import FaultProxy, Faults

REPORT_ENV = "DRA_FAULT_REPORT"


@dataclass
class Outcome:
    scenario: str
    pods: int
    devices: int
    expected_bound: int
    bound: int = 0
    recovery_s: float = 0.0          # from the end of the faults until every invariant held
    duration_s: float = 0.0          # the whole scenario
    invariants: dict[str, int] = field(default_factory=dict)
    injected: dict[str, int] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)


def invariant_counts(api: Api, namespace: str, expected_bound: int,
                     log_offsets: dict[str, int], plane: ControlPlane) -> tuple[dict[str, int], int]:
    """Each invariant's count of violations (all 0 when the cluster is sound), and the pods bound."""
    pod_list = api.items(f"/api/v1/namespaces/{namespace}/pods")
    claim_list = api.items(f"{RESOURCE}/namespaces/{namespace}/resourceclaims")
    by_name = {c["metadata"]["name"]: c for c in claim_list}
    seen: dict[tuple[str, str, str], int] = {}
    for claim in claim_list:
        for device in allocated_devices(claim):
            seen[device] = seen.get(device, 0) + 1
    bound = [p for p in pod_list if p["spec"].get("nodeName")]
    without_devices = 0
    for pod in bound:
        statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
        names = [s.get("resourceClaimName") for s in statuses if s.get("resourceClaimName")]
        ok = bool(names)
        for name in names:
            claim = by_name.get(name)
            status = (claim or {}).get("status") or {}
            devices = allocated_devices(claim) if claim else []
            if (not status.get("allocation") or not devices
                    or pod["metadata"]["uid"] not in {r.get("uid") for r in status.get("reservedFor") or ()}
                    or {pool for _, pool, _ in devices} != {pod["spec"]["nodeName"]}):
                ok = False
        without_devices += not ok
    half_written = sum(1 for c in claim_list if FINALIZER in (c["metadata"].get("finalizers") or ())
                       and not (c.get("status") or {}).get("allocation"))
    tracebacks = 0
    for component in plane.extender_logs():
        if component.log_file.exists():
            text = component.log_file.read_text(errors="replace")
            tracebacks += text[log_offsets.get(component.name, 0):].count("Traceback")
    counts = {
        "devices_in_two_allocations": sum(1 for n in seen.values() if n > 1),
        "bound_pods_without_their_devices": without_devices,
        "claims_with_our_finalizer_and_no_allocation": half_written,
        "fitting_pods_not_bound": max(0, expected_bound - len(bound)),
        "pods_bound_beyond_capacity": max(0, len(bound) - expected_bound),
        "tracebacks_in_our_log": tracebacks,
    }
    return counts, len(bound)


def _create_pods(api: Api, namespace: str, count: int, interval_s: float, errors: list[BaseException],
                 done: threading.Event) -> None:
    try:
        for index in range(count):
            name = f"job-{index:03d}"
            wait_for(f"pod {name} admitted", lambda name=name: _created(api, namespace, name),
                     timeout_s=180, interval_s=0.2)
            time.sleep(interval_s)
    except BaseException as error:  # reported by the test thread
        errors.append(error)
    finally:
        done.set()


def _created(api: Api, namespace: str, name: str) -> bool:
    """Create a pod, as a client retrying through the faults would: while the webhook (in the killed
    extender) or kube-apiserver itself is down, the create is retried."""
    try:
        create_pod(api, namespace, name, template="one-device")
    except ApiStatusError as error:
        if error.status == 409:  # an earlier attempt went through after all
            return True
        if error.status >= 500 or "failed calling webhook" in error.message or error.status == 429:
            return False
        raise
    except (OSError, urllib3.exceptions.HTTPError):  # kube-apiserver restarting
        return False
    return True


def run_scenario(plane: ControlPlane, proxy: FaultProxy | None, api: Api, *, name: str, faults: Faults,
                 nodes: int = 20, devices: int = 4, pods: int = 100, interval_s: float = 0.2,
                 during: Callable[[threading.Event, str], dict[str, Any] | None] | None = None,
                 settle_timeout_s: float = 240.0) -> Outcome:
    """Run the burst with `faults` in the proxy and `during(creation_done, namespace)` in this thread
    (kill loops, restarts), then clear the faults and wait until every invariant holds. Returns the
    figures; the caller asserts."""
    started = time.monotonic()
    capacity = nodes * devices
    outcome = Outcome(name, pods, capacity, min(pods, capacity))
    driver = create_driver(api, nodes=nodes, devices=devices)
    offsets = {c.name: c.log_file.stat().st_size if c.log_file.exists() else 0 for c in plane.extender_logs()}
    before = proxy.counts() if proxy is not None else {}
    try:
        with temporary_namespace(api, prefix="fault") as namespace:
            create_template(api, namespace, "one-device", claim_spec(driver.device_class))
            if proxy is not None:
                proxy.faults = faults
            errors: list[BaseException] = []
            done = threading.Event()
            creator = threading.Thread(target=_create_pods, name="create-pods",
                                       args=(api, namespace, pods, interval_s, errors, done))
            creator.start()
            try:
                if during is not None:
                    outcome.notes.update(during(done, namespace) or {})
            finally:
                creator.join(timeout=300)
                if proxy is not None:
                    proxy.faults = Faults()
            assert not errors, errors
            assert not creator.is_alive(), "pod creation did not finish"
            faults_ended = time.monotonic()
            deadline = faults_ended + settle_timeout_s
            while True:
                counts, bound = _counts_or_none(api, namespace, outcome.expected_bound, offsets, plane)
                if counts is not None and not any(counts.values()):
                    break
                if time.monotonic() > deadline:
                    break
                time.sleep(1.0)
            outcome.recovery_s = round(time.monotonic() - faults_ended, 1)
            outcome.invariants = counts or {}
            outcome.bound = bound
            if proxy is not None:
                after = proxy.counts()
                outcome.injected = {k: after.get(k, 0) - before.get(k, 0) for k in after
                                    if after.get(k, 0) != before.get(k, 0)}
            for pod in api.items(f"/api/v1/namespaces/{namespace}/pods"):
                api.delete(f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}",
                           grace_period_seconds=0)
    finally:
        if proxy is not None:
            proxy.faults = Faults()
        driver.cleanup()
    outcome.duration_s = round(time.monotonic() - started, 1)
    report(outcome)
    return outcome


def _counts_or_none(api: Api, namespace: str, expected: int, offsets: dict[str, int],
                    plane: ControlPlane) -> tuple[dict[str, int] | None, int]:
    try:
        return invariant_counts(api, namespace, expected, offsets, plane)
    except (ApiStatusError, OSError, urllib3.exceptions.HTTPError):
        return None, 0


def report(outcome: Outcome) -> None:
    line = json.dumps(asdict(outcome), sort_keys=True)
    print(f"fault scenario: {line}")
    path = os.environ.get(REPORT_ENV)
    if path:
        with open(path, "a") as out:
            out.write(line + "\n")


def assert_sound(outcome: Outcome) -> None:
    bad = {name: count for name, count in outcome.invariants.items() if count}
    assert outcome.invariants and not bad, f"{outcome.scenario}: invariants violated: {bad} ({outcome})"
    assert outcome.bound == outcome.expected_bound, outcome
