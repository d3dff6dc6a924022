"""The matchConditions of the webhook configurations and of the scheduler-name policy, evaluated with a CEL
interpreter (cel-python) on objects shaped as the API server passes them: the webhook is called exactly
when one of its rules can matter."""

from __future__ import annotations

import copy
from typing import Any

import celpy
import pytest
from deploy_manifests import DEPLOY, find, load_docs, resource_docs

WEBHOOKS = {
    hook["name"]: hook
    for doc in load_docs(DEPLOY / "base" / "webhooks.yaml")
    for hook in doc["webhooks"]
}
POLICY = find(resource_docs(DEPLOY / "components" / "second-scheduler"), "MutatingAdmissionPolicy",
              "dra-extender-scheduler-name")
ENV = celpy.Environment()


def matches(conditions: list[dict], obj: dict, old: dict | None = None) -> bool:
    """All conditions true (the API server skips the webhook when any is false)."""
    activation: dict[str, Any] = {"object": celpy.json_to_cel(obj)}
    activation["oldObject"] = celpy.json_to_cel(old) if old is not None else None
    results = [ENV.program(ENV.compile(c["expression"])).evaluate(activation) for c in conditions]
    for condition, result in zip(conditions, results, strict=True):
        assert isinstance(result, celpy.celtypes.BoolType), f"{condition['name']}: not a bool: {result!r}"
    return all(results)


def hook_matches(name: str, obj: dict, old: dict | None = None) -> bool:
    return matches(WEBHOOKS[name]["matchConditions"], obj, old)


def test_every_condition_compiles_and_stays_within_the_api_limit() -> None:
    for hook in WEBHOOKS.values():
        assert 0 < len(hook["matchConditions"]) <= 64
        for condition in hook["matchConditions"]:
            ENV.compile(condition["expression"])
    for condition in POLICY["spec"]["matchConditions"]:
        ENV.compile(condition["expression"])


# ---- resourceclaims/status ----------------------------------------------------------------------------

ALLOCATION = {"devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "node-1",
                                       "device": "gpu-0"}]},
              "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                  {"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]}}
POD_A = {"resource": "pods", "name": "a", "uid": "uid-a"}
POD_B = {"resource": "pods", "name": "b", "uid": "uid-b"}


def claim(status: dict | None) -> dict:
    obj: dict[str, Any] = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                           "metadata": {"name": "c", "namespace": "ns", "resourceVersion": "7"},
                           "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                               "deviceClassName": "gpu.example.com"}}]}}}
    if status is not None:
        obj["status"] = status
    return obj


UNALLOCATED = claim(None)
ALLOCATED = claim({"allocation": ALLOCATION})
RESERVED_A = claim({"allocation": ALLOCATION, "reservedFor": [POD_A]})
RESERVED_AB = claim({"allocation": ALLOCATION, "reservedFor": [POD_A, POD_B]})
DEVICE_STATUS = claim({"allocation": ALLOCATION, "reservedFor": [POD_A],
                       "devices": [{"driver": "gpu.example.com", "pool": "node-1", "device": "gpu-0",
                                    "conditions": [{"type": "Ready", "status": "True"}]}]})


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (UNALLOCATED, RESERVED_A, True),      # bind: allocation and reservation in one write
        (claim({}), ALLOCATED, True),         # empty status object before
        (ALLOCATED, RESERVED_A, False),       # reservation only: results already final
        (RESERVED_A, RESERVED_AB, False),
        (RESERVED_A, UNALLOCATED, False),     # deallocation
        (RESERVED_A, DEVICE_STATUS, False),   # a driver reports device status
    ],
)
def test_mutating_tolerations_webhook_runs_when_an_allocation_appears(old: dict, new: dict,
                                                                      expected: bool) -> None:
    assert hook_matches("claim-status-tolerations.dra-extender.io", new, old) is expected


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (UNALLOCATED, RESERVED_A, True),
        (ALLOCATED, RESERVED_A, True),         # reservation added
        (RESERVED_AB, RESERVED_A, True),       # kube-controller-manager removes a stale consumer
        (RESERVED_A, ALLOCATED, True),         # last consumer removed
        (ALLOCATED, UNALLOCATED, True),        # deallocation
        (RESERVED_A, DEVICE_STATUS, False),    # only status.devices changes
        (RESERVED_A, copy.deepcopy(RESERVED_A), False),
        (UNALLOCATED, claim({}), False),
    ],
)
def test_validating_status_webhook_runs_when_allocation_or_reservation_changes(old: dict, new: dict,
                                                                              expected: bool) -> None:
    assert hook_matches("claim-status.dra-extender.io", new, old) is expected


def test_a_changed_allocation_is_noticed_even_with_the_same_reservation() -> None:
    moved = copy.deepcopy(RESERVED_A)
    moved["status"]["allocation"]["devices"]["results"][0]["device"] = "gpu-1"
    assert hook_matches("claim-status.dra-extender.io", moved, RESERVED_A)


# ---- pods ---------------------------------------------------------------------------------------------


def pod(claims: list[dict] | None) -> dict:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
    if claims is not None:
        spec["resourceClaims"] = claims
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}, "spec": spec}


@pytest.mark.parametrize(
    ("claims", "expected"),
    [
        (None, False),
        ([], False),
        ([{"name": "gpu", "resourceClaimTemplateName": "gpu-template"}], False),  # own claim, never full
        ([{"name": "gpu", "resourceClaimName": "shared"}], True),
        ([{"name": "a", "resourceClaimTemplateName": "t"},
          {"name": "b", "resourceClaimName": "shared"}], True),
    ],
)
def test_pod_webhook_runs_only_for_pods_naming_a_shared_claim(
    claims: list[dict] | None, expected: bool
) -> None:
    assert hook_matches("pods.dra-extender.io", pod(claims)) is expected


# ---- claims and templates: selectors ------------------------------------------------------------------

SELECTOR = [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]


def claim_spec(request: dict) -> dict:
    return {"devices": {"requests": [{"name": "r", **request}]}}


SPECS = [
    (claim_spec({"exactly": {"deviceClassName": "gpu"}}), False),
    (claim_spec({"exactly": {"deviceClassName": "gpu", "selectors": SELECTOR}}), True),
    (claim_spec({"firstAvailable": [{"name": "a", "deviceClassName": "gpu"},
                                    {"name": "b", "deviceClassName": "gpu", "selectors": SELECTOR}]}), True),
    (claim_spec({"firstAvailable": [{"name": "a", "deviceClassName": "gpu"}]}), False),
    ({"devices": {}}, False),
    ({}, False),
]


@pytest.mark.parametrize(("spec", "expected"), SPECS)
def test_claim_webhook_runs_only_when_there_are_selectors(spec: dict, expected: bool) -> None:
    obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c"},
           "spec": spec}
    assert hook_matches("resourceclaims.dra-extender.io", obj) is expected


@pytest.mark.parametrize(("spec", "expected"), SPECS)
def test_template_webhook_runs_only_when_there_are_selectors(spec: dict, expected: bool) -> None:
    obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "t"},
           "spec": {"spec": spec}}
    assert hook_matches("resourceclaimtemplates.dra-extender.io", obj) is expected


# ---- DeviceTaintRules ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("effect", "expected"), [("NoExecute", True), ("NoSchedule", False), ("None", False)]
)
def test_taint_rule_webhook_runs_only_for_no_execute(effect: str, expected: bool) -> None:
    rule = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": "r"},
            "spec": {"deviceSelector": {}, "taint": {"key": "k", "effect": effect}}}
    assert hook_matches("devicetaintrules.dra-extender.io", rule) is expected


# ---- scheduler-name policy (components/second-scheduler) ----------------------------------------------


@pytest.mark.parametrize(
    ("requests", "init", "expected"),
    [
        ({"example.com/gpu": "2", "cpu": "1"}, False, True),
        ({"example.com/gpu": "2"}, True, True),  # an init container's
        ({"deviceclass.resource.kubernetes.io/gpu": "1"}, False, True),  # an implicit class name
        ({"cpu": "1", "memory": "1Gi"}, False, False),
        ({"hugepages-2Mi": "1Gi", "kubernetes.io/something": "1"}, False, False),
        (None, False, False),
    ],
)
def test_extended_resource_pods_go_to_the_second_scheduler_too(
    requests: dict | None, init: bool, expected: bool
) -> None:
    obj = pod(None)
    resources = {"requests": requests} if requests is not None else {}
    target = {"name": "setup", "image": "x", "resources": resources}
    if init:
        obj["spec"]["initContainers"] = [target]
    else:
        obj["spec"]["containers"][0]["resources"] = resources
    assert matches(POLICY["spec"]["matchConditions"], obj) is expected


@pytest.mark.parametrize(
    ("claims", "scheduler_name", "expected"),
    [
        ([{"name": "gpu", "resourceClaimTemplateName": "t"}], "default-scheduler", True),
        ([{"name": "gpu", "resourceClaimTemplateName": "t"}], None, True),
        ([{"name": "gpu", "resourceClaimTemplateName": "t"}], "my-scheduler", False),  # an explicit choice
        ([], "default-scheduler", False),
        (None, "default-scheduler", False),
    ],
)
def test_scheduler_name_policy_only_takes_pods_with_claims_that_chose_no_scheduler(
    claims: list[dict] | None, scheduler_name: str | None, expected: bool
) -> None:
    obj = pod(claims)
    if scheduler_name is not None:
        obj["spec"]["schedulerName"] = scheduler_name
    assert matches(POLICY["spec"]["matchConditions"], obj) is expected
