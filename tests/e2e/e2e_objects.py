"""Objects the end-to-end tests create: a fake driver's nodes and slices, classes, templates, pods."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from e2e_api import Api, wait_for

RESOURCE = "/apis/resource.k8s.io/v1"
FINALIZER = "resource.kubernetes.io/delete-protection"
REQUEST = "gpu"


@dataclass
class Driver:
    """A driver publishing `devices` devices on each of `nodes` nodes, one pool per node, and a
    DeviceClass selecting only its devices (so tests sharing the cluster never see each other's)."""

    api: Api
    name: str
    node_names: list[str]
    devices: int

    @property
    def device_class(self) -> str:
        return self.name

    def slice_name(self, node: str) -> str:
        return f"{node}-{self.name}"

    def device_names(self) -> list[str]:
        return [f"dev-{i}" for i in range(self.devices)]

    def set_taints(self, node: str, taints: dict[str, list[dict[str, Any]]]) -> None:
        """Replace the taints of devices on one node's slice: {device name: taints}."""
        path = f"{RESOURCE}/resourceslices/{self.slice_name(node)}"
        current = self.api.get(path)
        for device in current["spec"]["devices"]:
            device["taints"] = taints.get(device["name"], [])
        self.api.update(path, current)

    def cleanup(self) -> None:
        for node in self.node_names:
            self.api.delete(f"{RESOURCE}/resourceslices/{self.slice_name(node)}")
            self.api.delete(f"/api/v1/nodes/{node}")
        self.api.delete(f"{RESOURCE}/deviceclasses/{self.device_class}")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def create_node(api: Api, name: str) -> None:
    resources = {"cpu": "64", "memory": "256Gi", "pods": "500"}
    api.create("/api/v1/nodes", {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}})
    # The TaintNodesByCondition admission plugin taints new nodes not-ready; with no kubelet and no
    # node lifecycle controller nothing else would ever lift it.
    api.patch(f"/api/v1/nodes/{name}", {"spec": {"taints": None}})
    ready = {"type": "Ready", "status": "True", "reason": "E2E", "message": "no kubelet in end-to-end tests"}
    api.patch(
        f"/api/v1/nodes/{name}/status",
        {"status": {"capacity": resources, "allocatable": resources, "conditions": [ready]}},
    )


def create_driver(api: Api, nodes: int, devices: int) -> Driver:
    name = unique("drv") + ".example.com"
    prefix = name.split(".")[0]
    driver = Driver(api, name, [f"{prefix}-node-{i}" for i in range(nodes)], devices)
    api.create(
        f"{RESOURCE}/deviceclasses",
        {
            "metadata": {"name": driver.device_class},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{name}"'}}]},
        },
    )
    for node in driver.node_names:
        create_node(api, node)
        api.create(
            f"{RESOURCE}/resourceslices",
            {
                "metadata": {"name": driver.slice_name(node)},
                "spec": {
                    "driver": name,
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": [
                        {"name": device, "attributes": {"index": {"int": i}}}
                        for i, device in enumerate(driver.device_names())
                    ],
                },
            },
        )
    return driver


def claim_spec(
    device_class: str, count: int = 1, tolerations: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    exactly: dict[str, Any] = {
        "deviceClassName": device_class,
        "allocationMode": "ExactCount",
        "count": count,
    }
    if tolerations:
        exactly["tolerations"] = tolerations
    return {"devices": {"requests": [{"name": REQUEST, "exactly": exactly}]}}


def create_template(api: Api, namespace: str, name: str, spec: dict[str, Any]) -> None:
    api.create(
        f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates",
        {
            "metadata": {"name": name},
            "spec": {"spec": spec},
        },
    )


def create_claim(api: Api, namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return api.create(
        f"{RESOURCE}/namespaces/{namespace}/resourceclaims", {"metadata": {"name": name}, "spec": spec}
    )


def pod_body(name: str, *, template: str | None = None, claim: str | None = None) -> dict[str, Any]:
    source = {"resourceClaimTemplateName": template} if template else {"resourceClaimName": claim}
    return {
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "resourceClaims": [{"name": "dev", **source}],
            "containers": [
                {"name": "c", "image": "registry.invalid/pause", "resources": {"claims": [{"name": "dev"}]}}
            ],
        },
    }


def create_pod(api: Api, namespace: str, name: str, **source: str) -> dict[str, Any]:
    return api.create(f"/api/v1/namespaces/{namespace}/pods", pod_body(name, **source))


def pods(api: Api, namespace: str) -> list[dict[str, Any]]:
    return api.items(f"/api/v1/namespaces/{namespace}/pods")


def bound(pod_list: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pod_list if p["spec"].get("nodeName")]


def claims(api: Api, namespace: str) -> list[dict[str, Any]]:
    return api.items(f"{RESOURCE}/namespaces/{namespace}/resourceclaims")


def claim_of_pod(api: Api, namespace: str, pod_name: str) -> dict[str, Any]:
    """The claim generated for a pod's template (named in the pod's status by the controller)."""

    def generated() -> str | None:
        pod = api.get(f"/api/v1/namespaces/{namespace}/pods/{pod_name}")
        for status in pod.get("status", {}).get("resourceClaimStatuses") or []:
            if status.get("resourceClaimName"):
                return str(status["resourceClaimName"])
        return None

    name = wait_for(f"the claim generated for pod {pod_name}", generated, timeout_s=30)
    return api.get(f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{name}")


def allocated_devices(claim: dict[str, Any]) -> list[tuple[str, str, str]]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return [
        (r["driver"], r["pool"], r["device"]) for r in (allocation.get("devices") or {}).get("results") or []
    ]


def scheduling_failures(api: Api, namespace: str, pod_name: str) -> list[str]:
    events = api.items(
        f"/api/v1/namespaces/{namespace}/events",
        fieldSelector=f"involvedObject.name={pod_name},reason=FailedScheduling",
    )
    return [str(e.get("message", "")) for e in events]


def wait_for_reason(api: Api, namespace: str, pod_name: str, reason: str) -> list[str]:
    """FailedScheduling messages of a pod once one carries `reason`: the first attempts may still
    find the generated claim not created yet."""
    return wait_for(
        f"a FailedScheduling event of {pod_name} saying {reason!r}",
        lambda: [m for m in scheduling_failures(api, namespace, pod_name) if reason in m],
        timeout_s=30,
    )


def assert_devices_consistent(api: Api, namespace: str, in_use: int, *, no_leaks: bool = False) -> None:
    """No device in two allocations; each reserved pod is bound to its device's node (or not yet
    bound); `in_use` devices serve bound pods. With `no_leaks`, no allocation serves only unbound
    or vanished pods."""
    live = {p["metadata"]["uid"]: p for p in pods(api, namespace)}
    owner: dict[tuple[str, str, str], str] = {}
    serving = 0
    for claim in claims(api, namespace):
        name = claim["metadata"]["name"]
        devices = allocated_devices(claim)
        for device in devices:
            assert device not in owner, f"{device} allocated to both {owner[device]} and {name}"
            owner[device] = name
        consumers = [
            live[c["uid"]] for c in (claim.get("status") or {}).get("reservedFor") or [] if c["uid"] in live
        ]
        nodes = {p["spec"].get("nodeName") for p in consumers} - {None}
        for device in devices:
            assert nodes <= {device[1]}, f"claim {name}: device on {device[1]}, pods bound to {nodes}"
        if nodes:
            serving += len(devices)
        elif no_leaks:
            assert not devices, f"claim {name} holds {devices} but no bound pod uses it"
    assert serving == in_use, f"{serving} devices serve bound pods, expected {in_use}"


CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def create_stub_crds(api: Api, group: str, kinds: tuple[tuple[str, str], ...]) -> list[str]:
    """Namespaced (kind, plural) CRDs in `group`/v1 taking any content, served once this returns: just
    enough of another project's API (cert-manager's, say) for manifests that use it. Returns their names."""
    names = []
    for kind, plural in kinds:
        name = f"{plural}.{group}"
        api.create(CRDS, {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": name},
            "spec": {
                "group": group,
                "scope": "Namespaced",
                "names": {"kind": kind, "plural": plural, "singular": kind.lower(),
                          "listKind": f"{kind}List"},
                "versions": [{
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object",
                                                   "x-kubernetes-preserve-unknown-fields": True}},
                }],
            },
        })
        names.append(name)

    def served() -> bool:
        for name in names:
            conditions = (api.get(f"{CRDS}/{name}").get("status") or {}).get("conditions") or []
            if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return False
        # Discovery, which kubectl and helm map kinds through, must list them too.
        listed = {r["name"] for r in (api.get_or_none(f"/apis/{group}/v1") or {}).get("resources") or []}
        return listed >= {plural for _, plural in kinds}

    wait_for(f"CRDs {names} served", served, timeout_s=30)
    return names


def delete_crds(api: Api, names: list[str]) -> None:
    for name in names:
        api.delete(f"{CRDS}/{name}")
