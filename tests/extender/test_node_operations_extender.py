"""DRAOptionalNodeOperations in the extender: a node's status.declaredFeatures reaches the verdicts and
their cache key, and an allocated claim whose devices skip node operations fits only such nodes."""

from __future__ import annotations

from typing import Any

import dra_objects as o

from allocator import OPTIONAL_NODE_OPERATIONS, FeatureGates
from extender.plugin.claimwriter import ClaimWriter
from extender.plugin.filtercache import FilterCache
from extender.plugin.nodecheck import NODE_OPERATIONS_MESSAGE
from extender.plugin.scheduling import Scheduler
from extender.state.assume import AssumeCache
from extender.state.cache import ClusterCache

GATES = FeatureGates({"DRAOptionalNodeOperations": True})


def make(objs: list[dict[str, Any]]) -> Scheduler:
    cache = ClusterCache.from_objects(objs, GATES)
    assume = AssumeCache()
    assume.attach(cache)
    return Scheduler(cache, assume, ClaimWriter(None, cache), filter_cache=FilterCache(cache, assume))


def declaring(node: dict[str, Any], version: str = "2") -> dict[str, Any]:
    node["metadata"]["resourceVersion"] = version
    node["status"] = {"declaredFeatures": [OPTIONAL_NODE_OPERATIONS], "images": [{"names": ["big"]}]}
    return node


def skipping_slice(node_name: str) -> dict[str, Any]:
    raw = o.gpu_slice(node_name, 1)
    raw["spec"]["skipNodeOperations"] = ["*"]
    return raw


def pod_of(scheduler: Scheduler, name: str) -> dict[str, Any]:
    pod = scheduler.cache.pod("default", name)
    assert pod is not None
    return pod


async def test_a_node_that_comes_to_declare_the_feature_is_not_answered_from_the_cache() -> None:
    objs = [o.device_class(), o.node("node-0"), skipping_slice("node-0"), o.claim("c0"), o.claim("c1")]
    objs += [o.pod("p0", ["c0"]), o.pod("p1", ["c1"])]
    scheduler = make(objs)
    first = await scheduler.filter(pod_of(scheduler, "p0"), ["node-0"])
    assert "1 skipping node operations without DRAOptionalNodeOperations" in first.unresolvable["node-0"]
    scheduler.cache.apply("Node", "MODIFIED", declaring(o.node("node-0")))
    node = scheduler.cache.node("node-0")
    assert node is not None and node.declares(OPTIONAL_NODE_OPERATIONS)  # the cache keeps the field
    second = await scheduler.filter(pod_of(scheduler, "p1"), ["node-0"])
    assert second.passed == ["node-0"]


async def test_an_allocated_claim_that_skips_node_operations_needs_a_declaring_node() -> None:
    shared = o.allocate(o.claim("shared"), "node-0", ["gpu-0"])
    shared["status"]["allocation"]["devices"]["results"][0]["skipNodeOperations"] = ["*"]
    shared["status"]["allocation"].pop("nodeSelector")
    objs = [o.device_class(), o.node("node-0"), declaring(o.node("node-1")), shared, o.pod("p", ["shared"])]
    # Checked whatever the gates, as upstream's Filter: gates off here.
    cache = ClusterCache.from_objects(objs, FeatureGates())
    assume = AssumeCache()
    assume.attach(cache)
    scheduler = Scheduler(cache, assume, ClaimWriter(None, cache))
    result = await scheduler.filter(pod_of(scheduler, "p"), ["node-0", "node-1"])
    assert result.passed == ["node-1"]
    assert result.unresolvable == {"node-0": NODE_OPERATIONS_MESSAGE}
