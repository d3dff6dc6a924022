"""bind refuses what kube-scheduler could not have asked for (extender.plugin.bindchecks): a pod already
bound, of another scheduler, with another UID, or a node outside its nodeSelector, required node
affinity or untolerated NoSchedule/NoExecute taints. Every refusal arrives as kube-scheduler's
ExtenderBindingArgs on the bind verb, writes nothing, and is counted by reason."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import dra_objects as o
import orjson
import pytest
from test_server import post

from allocator import FeatureGates, Node
from extender.http.server import ExtenderServer
from extender.plugin.bindchecks import (
    REASONS,
    BindChecks,
    node_affinity_mismatch,
    toleration_tolerates,
    untolerated_taint,
)
from extender.plugin.claimwriter import ClaimWriter
from extender.plugin.scheduling import Scheduler
from extender.state.assume import AssumeCache
from extender.state.cache import ClusterCache

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def node(name: str = "node-1", labels: dict[str, str] | None = None,
         taints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    raw = o.node(name, labels)
    if taints is not None:
        raw["spec"] = {"taints": taints}
    return raw


def affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": list(terms)}}}


def expression(key: str, operator: str, *values: str) -> dict[str, Any]:
    requirement: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        requirement["values"] = list(values)
    return requirement


def name_is(operator: str, *names: str) -> dict[str, Any]:
    return {"matchFields": [expression("metadata.name", operator, *names)]}


LABELS = {"zone": "a", "gpus": "4", "odd": "1_0"}


@pytest.mark.parametrize(("spec", "fits"), [
    ({}, True),
    ({"nodeSelector": {"zone": "a"}}, True),
    ({"nodeSelector": {"zone": "b"}}, False),
    ({"nodeSelector": {"zone": "a", "rack": ""}}, False),  # a missing label is no empty one
    ({"nodeSelector": {}}, True),
    ({"affinity": {"nodeAffinity": {}}}, True),
    ({"affinity": {"podAffinity": {}}}, True),
    ({"affinity": affinity()}, False),  # no term matches no node
    ({"affinity": affinity({})}, False),  # an empty term matches no node
    ({"affinity": affinity({"matchExpressions": []})}, False),
    ({"affinity": affinity({"matchExpressions": [expression("zone", "In", "a", "b")]})}, True),
    ({"affinity": affinity({"matchExpressions": [expression("zone", "NotIn", "a")]})}, False),
    ({"affinity": affinity({"matchExpressions": [expression("rack", "NotIn", "a")]})}, True),
    ({"affinity": affinity({"matchExpressions": [expression("zone", "Exists")]})}, True),
    ({"affinity": affinity({"matchExpressions": [expression("zone", "DoesNotExist")]})}, False),
    ({"affinity": affinity({"matchExpressions": [expression("gpus", "Gt", "3")]})}, True),
    ({"affinity": affinity({"matchExpressions": [expression("gpus", "Lt", "4")]})}, False),
    # Go's strconv.ParseInt takes no underscore (Python's int() does).
    ({"affinity": affinity({"matchExpressions": [expression("odd", "Gt", "1")]})}, False),
    # ANDed within a term, ORed between terms.
    ({"affinity": affinity({"matchExpressions": [expression("zone", "In", "a"),
                                                 expression("gpus", "Gt", "8")]})}, False),
    ({"affinity": affinity({"matchExpressions": [expression("zone", "In", "b")]},
                           {"matchExpressions": [expression("gpus", "Gt", "2")]})}, True),
    # matchFields on metadata.name, alone and beside labels in the same term.
    ({"affinity": affinity(name_is("In", "node-1"))}, True),
    ({"affinity": affinity(name_is("In", "node-2"))}, False),
    ({"affinity": affinity(name_is("NotIn", "node-1"))}, False),
    ({"affinity": affinity({**name_is("In", "node-1"),
                            "matchExpressions": [expression("zone", "In", "b")]})}, False),
    ({"affinity": affinity(name_is("In", "node-1", "node-2"))}, False),  # the field selector takes one
    # A term that cannot be evaluated matches nothing, and does not keep another term from matching.
    ({"affinity": affinity({"matchExpressions": [expression("zone", "NotIn", "invalid value: ___@#$%^")]})},
     False),
    ({"affinity": affinity({"matchExpressions": [expression("gpus", "Gt", "many")]},
                           {"matchExpressions": [expression("zone", "In", "a")]})}, True),
    ({"affinity": affinity({"matchExpressions": [expression("zone", "Near", "a")]},
                           name_is("In", "node-1"))}, True),
    ({"affinity": affinity({"matchExpressions": [expression("zone", "In")]})}, False),
    ({"affinity": affinity({"matchExpressions": [expression("-bad-key", "Exists")]})}, False),
    # nodeSelector and node affinity must both hold.
    ({"nodeSelector": {"zone": "b"}, "affinity": affinity(name_is("In", "node-1"))}, False),
    ({"nodeSelector": {"zone": "a"}, "affinity": affinity(name_is("In", "node-2"))}, False),
    # Malformed (no API server admits these): refused, never a crash.
    ({"nodeSelector": ["zone"]}, False),
    ({"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": "all"}}}}, False),
    ({"affinity": affinity("term", {"matchExpressions": "zone"}, {"matchFields": [7]})}, False),
])
def test_node_affinity_is_kube_schedulers(spec: dict[str, Any], fits: bool) -> None:
    mismatch = node_affinity_mismatch(spec, Node(node("node-1", LABELS)))
    assert (mismatch == "") == fits, mismatch


@pytest.mark.parametrize(("toleration", "taint", "comparisons", "tolerated"), [
    ({"key": "k", "operator": "Exists", "effect": "NoSchedule"}, {"key": "k", "effect": "NoSchedule"}, False,
     True),
    ({"key": "k", "operator": "Exists"}, {"key": "k", "value": "v", "effect": "NoExecute"}, False, True),
    ({"operator": "Exists"}, {"key": "any", "value": "v", "effect": "NoSchedule"}, False, True),
    ({"key": "k", "value": "v", "effect": "NoSchedule"}, {"key": "k", "value": "v", "effect": "NoSchedule"},
     False, True),
    ({"key": "k", "operator": "Equal", "value": "w"}, {"key": "k", "value": "v", "effect": "NoSchedule"},
     False, False),
    ({"key": "k", "value": "v", "effect": "NoExecute"}, {"key": "k", "value": "v", "effect": "NoSchedule"},
     False, False),
    ({"key": "other", "operator": "Exists"}, {"key": "k", "effect": "NoSchedule"}, False, False),
])
def test_tolerations_are_core_v1s(toleration: dict[str, Any], taint: dict[str, Any], comparisons: bool,
                                  tolerated: bool) -> None:
    assert toleration_tolerates(toleration, taint, comparisons=comparisons) is tolerated


@pytest.mark.parametrize(("operator", "limit", "value", "tolerated"), [
    ("Gt", "3", "5", True), ("Gt", "5", "5", False), ("Lt", "0", "-3", True), ("Lt", "4", "-3", True),
    ("Lt", "10", "07", False), ("Gt", "+1", "5", False), ("Gt", "1", " 5", False), ("Gt", "1.0", "5", False),
    ("Gt", "1", "9223372036854775807", True), ("Gt", "1", "9223372036854775808", False),
    ("Near", "1", "1", False),
])
def test_lt_and_gt_tolerations_compare_canonical_integers_only_with_the_gate(
        operator: str, limit: str, value: str, tolerated: bool) -> None:
    toleration = {"key": "k", "operator": operator, "value": limit}
    taint = {"key": "k", "value": value, "effect": "NoSchedule"}
    assert toleration_tolerates(toleration, taint, comparisons=True) is tolerated
    assert not toleration_tolerates(toleration, taint, comparisons=False)
    assert not toleration_tolerates({**toleration, "key": "other"}, taint, comparisons=True)
    assert not toleration_tolerates({**toleration, "effect": "NoExecute"}, taint, comparisons=True)


def test_only_no_schedule_and_no_execute_taints_must_be_tolerated() -> None:
    soft = {"key": "soft", "effect": "PreferNoSchedule"}
    hard = {"key": "hard", "value": "yes", "effect": "NoExecute"}
    assert untolerated_taint(Node(node(taints=[soft])), [], comparisons=False) is None
    assert untolerated_taint(Node(node(taints=[soft, hard])), None, comparisons=False) == hard
    tolerated = [{"key": "hard", "operator": "Exists", "effect": "NoExecute"}]
    assert untolerated_taint(Node(node(taints=[soft, hard])), tolerated, comparisons=False) is None
    assert untolerated_taint(Node(node(taints=[hard, "x"])), [7, *tolerated], comparisons=False) is None


# ---- over the bind verb, as kube-scheduler calls it ---------------------------------------------------

TAINT = {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}


def cluster_objects() -> list[dict[str, Any]]:
    objs = o.cluster(2, 1)
    objs[1]["metadata"]["labels"]["zone"] = "a"           # node-0
    objs[3]["metadata"]["labels"]["zone"] = "b"           # node-1
    objs += [node("tainted", {"zone": "a"}, [TAINT]), o.gpu_slice("tainted", 1),
             node("evicting", {"zone": "a"}, [{"key": "gone", "effect": "NoExecute"}]),
             o.gpu_slice("evicting", 1),
             cordoned(node("cordoned", {"zone": "a"})), o.gpu_slice("cordoned", 1)]
    for name in ("p", "q"):
        objs += [o.claim(f"{name}-gpu"), o.pod(name, [f"{name}-gpu"])]
    return objs


def cordoned(node: dict[str, Any]) -> dict[str, Any]:
    """Just cordoned: spec.unschedulable set, the node controller's taint not added yet."""
    node.setdefault("spec", {})["unschedulable"] = True
    return node


class Served:
    def __init__(self, server: ExtenderServer) -> None:
        self.server = server
        self.scheduler = server.scheduler
        self.cache = server.cache

    def pod(self, name: str) -> dict[str, Any]:
        pod = self.cache.pod("default", name)
        assert pod is not None
        return pod

    def change_pod(self, name: str, **spec: Any) -> None:
        pod = copy.deepcopy(self.pod(name))
        pod["spec"].update(spec)
        pod["metadata"]["resourceVersion"] = str(int(pod["metadata"]["resourceVersion"]) + 1)
        self.cache.apply("Pod", "MODIFIED", pod)

    async def bind(self, name: str, node_name: str, *, uid: str | None = None) -> str:
        """The bind verb with ExtenderBindingArgs as kube-scheduler encodes them; the answer's Error."""
        args = {"PodName": name, "PodNamespace": "default",
                "PodUID": uid if uid is not None else self.pod(name)["metadata"]["uid"], "Node": node_name}
        status, body = await post(self.server.urls["extender"] + "/bind", orjson.dumps(args))
        assert status == 200 and set(body) == {"Error"}
        return str(body["Error"])

    def refusals(self) -> dict[str, float]:
        counts = {}
        for family in self.scheduler.metrics.registry.collect():
            if family.name == "dra_extender_bind_refusals":
                counts.update({sample.labels["reason"]: sample.value for sample in family.samples
                               if sample.name.endswith("_total")})
        return counts

    def nothing_written(self) -> None:
        assert self.scheduler.bind_attempts == 0 and len(self.scheduler.assume) == 0
        for name in ("p", "q"):
            claim = self.cache.claim("default", f"{name}-gpu")
            assert claim is not None and claim.allocation is None and not claim.reserved_uids
            assert not self.pod(name)["spec"].get("nodeName")


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    cache = ClusterCache.from_objects(cluster_objects(), FeatureGates())
    assume = AssumeCache()
    assume.attach(cache)
    server = ExtenderServer(Scheduler(cache, assume, ClaimWriter(None, cache)))
    await server.start("127.0.0.1", 0, 0)
    yield Served(server)
    await server.stop()


async def test_a_pod_kube_scheduler_may_bind_is_bound(served: Served) -> None:
    served.change_pod("p", nodeSelector={"zone": "a"}, affinity=affinity(name_is("NotIn", "node-0")),
                      tolerations=[{"key": "dedicated", "operator": "Exists"}])
    assert await served.bind("p", "tainted") == ""
    assert served.pod("p")["spec"]["nodeName"] == "tainted"
    assert served.refusals() == {}


REFUSALS = [
    ("scheduler-name", {"schedulerName": "gpu-scheduler"}, "node-0",
     "pod default/p is for scheduler 'gpu-scheduler'; dra-extender binds only pods of default-scheduler"),
    ("node-affinity", {"nodeSelector": {"zone": "b"}}, "node-0",
     "pod default/p cannot go to node node-0: the node does not have the label zone=b of spec.nodeSelector"),
    ("node-affinity", {"affinity": affinity(name_is("In", "node-1"))}, "node-0",
     "pod default/p cannot go to node node-0: the node matches none of the terms of "
     f"spec.affinity.nodeAffinity.{REQUIRED}"),
    ("node-affinity", {"affinity": affinity({"matchExpressions": [expression("zone", "In", "b")]})}, "node-0",
     "the node matches none of the terms"),
    ("taint", {}, "tainted",
     "pod default/p cannot go to node tainted: it does not tolerate the node's taint "
     "dedicated=infra:NoSchedule"),
    ("taint", {"tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}]}, "tainted",
     "dedicated=infra:NoSchedule"),
    ("taint", {"tolerations": [{"key": "dedicated", "operator": "Exists"}]}, "evicting",
     "does not tolerate the node's taint gone:NoExecute"),
    ("unknown-node", {}, "node-9", "node node-9 is not known to dra-extender"),
    ("cordoned", {}, "cordoned", "pod default/p cannot go to node cordoned: the node is cordoned "
     "(spec.unschedulable) and the pod does not tolerate node.kubernetes.io/unschedulable:NoSchedule"),
    ("cordoned", {"tolerations": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoExecute",
                                   "operator": "Exists"}]}, "cordoned", "the node is cordoned"),
]


@pytest.mark.parametrize(("reason", "spec", "node_name", "message"), REFUSALS)
async def test_bind_refuses_before_writing_anything(served: Served, reason: str, spec: dict[str, Any],
                                                    node_name: str, message: str) -> None:
    served.change_pod("p", **spec)
    assert message in await served.bind("p", node_name)
    served.nothing_written()
    assert served.refusals() == {reason: 1.0}


async def test_a_cordoned_node_takes_a_pod_that_tolerates_its_taint(served: Served) -> None:
    served.change_pod("p", tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}])
    assert await served.bind("p", "cordoned") == ""


async def test_bind_refuses_a_pod_already_bound(served: Served) -> None:
    served.change_pod("p", nodeName="node-1")
    assert await served.bind("p", "node-0") == "pod default/p is already bound to node node-1"
    assert served.pod("p")["spec"]["nodeName"] == "node-1"
    claim = served.cache.claim("default", "p-gpu")
    assert claim is not None and claim.allocation is None and served.scheduler.bind_attempts == 0
    # Bound by our own earlier bind: a second call for the same pod is refused the same way.
    assert await served.bind("q", "node-0") == ""
    assert await served.bind("q", "node-0") == "pod default/q is already bound to node node-0"
    assert served.refusals() == {"already-bound": 2.0}


async def test_bind_refuses_another_uid_and_an_unknown_pod(served: Served) -> None:
    other = "3b20479b-0000-0000-0000-000000000000"
    assert await served.bind("p", "node-0", uid=other) == (
        f"pod default/p has UID {served.pod('p')['metadata']['uid']}, not {other}")
    assert await served.bind("nobody", "node-0", uid="u") == "pod default/nobody is not known to dra-extender"
    served.nothing_written()
    assert served.refusals() == {"uid": 1.0, "unknown-pod": 1.0}


async def test_the_scheduler_names_served_are_configurable(served: Served) -> None:
    served.scheduler.bind_checks = BindChecks(served.cache, ("dra-scheduler", "gpu-scheduler"))
    assert "dra-extender binds only pods of dra-scheduler, gpu-scheduler" in await served.bind("p", "node-0")
    served.change_pod("p", schedulerName="gpu-scheduler")
    assert await served.bind("p", "node-0") == ""
    served.change_pod("q", schedulerName=None)  # the API server's default when a pod names none
    assert "is for scheduler 'default-scheduler'" in await served.bind("q", "node-0")


async def test_comparison_tolerations_follow_the_feature_gate() -> None:
    tainted = node("node-0", taints=[{"key": "tier", "value": "5", "effect": "NoSchedule"}])
    pod = o.pod("p", [])
    pod["spec"]["tolerations"] = [{"key": "tier", "operator": "Gt", "value": "3", "effect": "NoSchedule"}]
    for gates, refused in ((FeatureGates(), True),
                           (FeatureGates({"TaintTolerationComparisonOperators": True}), False)):
        cache = ClusterCache.from_objects([tainted, pod], gates)
        refusal = BindChecks(cache).refusal(pod, uid=pod["metadata"]["uid"], node_name="node-0")
        assert (refusal is not None) is refused and (refusal is None or refusal.reason == "taint")


def test_every_reason_is_named() -> None:
    assert {reason for reason, *_ in REFUSALS} | {"already-bound", "uid", "unknown-pod"} == set(REASONS)
