"""dra-extender killed while kube-scheduler is binding pods through it, then started again: the
state is rebuilt from the cluster, no device ends up in two allocations and no allocation leaks."""

from __future__ import annotations

import contextlib
import threading
import time

from e2e_api import Api, ApiStatusError, wait_for
from e2e_cluster import ControlPlane
from e2e_objects import (
    assert_devices_consistent,
    bound,
    claim_spec,
    create_driver,
    create_pod,
    create_template,
    pods,
)

NODES, DEVICES, PODS = 4, 10, 50
# Pods arrive at this pace, so the kill lands while most of them do not exist yet, however fast
# the scheduler binds the first ones.
CREATE_INTERVAL_S = 0.1


def test_extender_killed_mid_run_restarts_without_double_allocation_or_leaks(
    control_plane: ControlPlane, api: Api, namespace: str
) -> None:
    driver = create_driver(api, nodes=NODES, devices=DEVICES)
    capacity = NODES * DEVICES
    try:
        create_template(api, namespace, "one-gpu", claim_spec(driver.device_class))
        creation_errors: list[BaseException] = []

        def create_pods() -> None:
            try:
                for i in range(PODS):
                    # The fixture's webhooks fail closed and live in the killed process: while it is
                    # down a create is refused, and is retried like a client would.
                    wait_for(
                        f"pod job-{i:02d} admitted",
                        lambda i=i: _created(api, namespace, f"job-{i:02d}"),
                        timeout_s=120,
                        interval_s=0.2,
                    )
                    time.sleep(CREATE_INTERVAL_S)
            except BaseException as error:  # reported by the test thread below
                creation_errors.append(error)

        creator = threading.Thread(target=create_pods, name="create-pods")
        creator.start()
        try:
            wait_for(
                "the first pods bound",
                lambda: len(bound(pods(api, namespace))) >= 5,
                timeout_s=60,
                interval_s=0.1,
            )
            control_plane.stop_extender(hard=True)
            bound_while_down = len(bound(pods(api, namespace)))
            assert bound_while_down < capacity, "the extender must go down while pods still wait for devices"
            control_plane.start_extender()
        finally:
            creator.join(timeout=180)
        assert not creation_errors, creation_errors

        wait_for(
            f"{capacity} pods bound",
            lambda: len(bound(pods(api, namespace))) == capacity,
            timeout_s=180,
            interval_s=1,
        )
        # Let in-flight work settle (claims of pods being bound), then nothing may be allocated twice
        # or held for a pod that is not bound.
        with contextlib.suppress(AssertionError):
            wait_for("a consistent cluster", lambda: _consistent(api, namespace, capacity), timeout_s=30)
        assert_devices_consistent(api, namespace, capacity, no_leaks=True)
        # Everything the restarted extender allocated has been confirmed by its watch.
        wait_for(
            "no allocation in flight", lambda: control_plane.debug_state()["inFlight"] == [], timeout_s=30
        )
        assert len(bound(pods(api, namespace))) == capacity, "more pods bound than devices exist"
    finally:
        # A failure between the kill and the restart must not leave the rest of the suite without it.
        if not control_plane.components["dra-extender"].running():
            control_plane.start_extender()
        for pod in pods(api, namespace):
            api.delete(
                f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}", grace_period_seconds=0
            )
        driver.cleanup()


def _created(api: Api, namespace: str, name: str) -> bool:
    try:
        create_pod(api, namespace, name, template="one-gpu")
    except ApiStatusError as error:
        if error.status == 409:  # an earlier attempt went through after all
            return True
        if "failed calling webhook" in error.message:
            return False
        raise
    return True


def _consistent(api: Api, namespace: str, in_use: int) -> bool:
    try:
        assert_devices_consistent(api, namespace, in_use, no_leaks=True)
    except AssertionError:
        return False
    return True
