"""Scheduler-config mode with two replicas and --leader-elect (client-go's default timings): kill -9 of
the leader during a burst. kube-scheduler and kube-apiserver reach the replicas through a stand-in for
their Services (service_proxy.py): the extender port goes to the ready replica (the leader), the
webhook to any live one. The standby takes over after the lease duration, fences, becomes ready, and
nothing is lost or given twice. The failover time measured here is the one docs/operations.md quotes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import urllib3
from e2e_api import Api
from e2e_cluster import ControlPlane, control_plane_binaries, running
from e2e_objects import bound, pods
from fault_proxy import Faults
from fault_scenario import assert_sound, run_scenario
from service_proxy import Route, ServiceProxy, free_ports, wait_until

LEASE_NAMESPACE = "dra-extender"
FLAGS = ["--leader-elect", f"--leader-elect-namespace={LEASE_NAMESPACE}"]
STANDBY = "dra-extender-b"


class Replicas:
    def __init__(self, plane: ControlPlane, standby_ports: tuple[int, int, int]) -> None:
        self.plane = plane
        self.ports = {"dra-extender": (plane.extender_port, plane.debug_port, plane.webhook_port),
                      STANDBY: standby_ports}
        self._http = urllib3.PoolManager(retries=False, timeout=2)

    def ready(self, name: str) -> bool:
        try:
            return self._http.request("GET", f"http://127.0.0.1:{self.ports[name][1]}/readyz").status == 200
        except urllib3.exceptions.HTTPError:
            return False

    def leader(self) -> str | None:
        leaders = [name for name in self.ports if self.ready(name)]
        return leaders[0] if len(leaders) == 1 else None

    def state(self, name: str) -> dict[str, Any]:
        answer = self._http.request("GET", f"http://127.0.0.1:{self.ports[name][1]}/debug/state")
        return dict(orjson.loads(answer.data))

    def start(self, name: str) -> None:
        """Start a replica and wait until its cache is synced (a standby is never ready)."""
        self.plane.start_replica(name, self.ports[name], FLAGS, wait_ready=False)


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    plane = ControlPlane(control_plane_binaries(), tmp_path_factory.mktemp("leader-plane"))
    extender_service, webhook_service, *standby = free_ports(5)
    service = ServiceProxy([
        Route(extender_service, [(plane.extender_port, plane.debug_port), (standby[0], standby[1])],
              "/readyz"),
        Route(webhook_service, [(plane.webhook_port, plane.debug_port), (standby[2], standby[1])],
              "/healthz"),
    ])
    plane.extender_url_port, plane.webhook_url_port = extender_service, webhook_service
    service.start()
    try:
        with running(plane, FLAGS):
            group = Replicas(plane, (standby[0], standby[1], standby[2]))
            group.start(STANDBY)
            yield group
    finally:
        service.stop()


def test_fault_leader_kill_9_fails_over_to_the_standby(replicas: Replicas) -> None:
    plane = replicas.plane
    assert plane.api is not None
    api: Api = plane.api
    assert replicas.leader() == "dra-extender" and not replicas.ready(STANDBY)
    standby_state = replicas.state(STANDBY)
    assert standby_state["authority"]["term"] is None
    assert standby_state["leaderElection"]["holder"] != standby_state["leaderElection"]["identity"]
    failover: dict[str, Any] = {}

    def kill_the_leader(creation_done: threading.Event, namespace: str) -> dict[str, Any]:
        time.sleep(8.0)  # the burst is under way, binds in flight
        leader = replicas.leader()
        assert leader is not None
        bound_before = len(bound(pods(api, namespace)))
        plane.components[leader].kill()
        survivor = next(name for name in replicas.ports if name != leader)
        started = time.monotonic()
        took_over = wait_until(lambda: replicas.ready(survivor), timeout_s=60, interval_s=0.05)
        rebound = wait_until(lambda: len(bound(pods(api, namespace))) > bound_before, timeout_s=60,
                             interval_s=0.1)
        failover.update(killed=leader, survivor=survivor, bound_at_kill=bound_before,
                        standby_ready_s=None if took_over is None else round(took_over, 1),
                        first_bind_after_kill_s=None if rebound is None else round(
                            time.monotonic() - started, 1))
        failover["fence_s"] = replicas.state(survivor)["fence"]["lastSeconds"]
        # Bring the dead one back as the new standby, as its Deployment would.
        plane.components[leader].start()
        return failover

    name = "kill -9 of the leader, 2 replicas, --leader-elect (15 s lease)"
    outcome = run_scenario(plane, None, api, name=name, faults=Faults(), pods=100, interval_s=0.25,
                           during=kill_the_leader)
    assert outcome.notes.get("standby_ready_s") is not None, outcome
    assert_sound(outcome)
    # The failover took the lease duration plus the fence, not more.
    assert outcome.notes["standby_ready_s"] < 15 + 10, outcome
