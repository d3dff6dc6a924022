"""The cache keeps only the Node fields DRA Extender reads (extender.state.nodetransform): a Node as the
kubelet reports it is mostly status nothing here reads."""

from __future__ import annotations

import copy
from typing import Any

import dra_objects as o

from allocator import FeatureGates
from extender.state.cache import ClusterCache
from extender.state.nodetransform import slim_node


def kubelet_node(name: str) -> dict[str, Any]:
    """A Node as a kubelet reports it: images, conditions, addresses, nodeInfo, agents' annotations."""
    node = o.node(name, {"gpu": "a100"})
    node["metadata"]["annotations"] = {"node.alpha.kubernetes.io/ttl": "0",
                                       "csi.volume.kubernetes.io/nodeid": '{"ebs.csi.aws.com":"i-0abc"}'}
    node["metadata"]["managedFields"] = [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]
    node["metadata"]["creationTimestamp"] = "2026-12-01T00:00:00Z"
    node["spec"] = {"podCIDR": "10.0.1.0/24", "providerID": "aws:///i-0abc", "unschedulable": True,
                    "taints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"}]}
    node["status"] = {
        "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
        "allocatable": {"cpu": "7500m", "memory": "30Gi", "pods": "110", "example.com/fpga": "2"},
        "declaredFeatures": ["OptionalNodeOperations"],
        "conditions": [{"type": kind, "status": "False", "reason": "KubeletHasNo" + kind,
                        "lastHeartbeatTime": "2026-12-06T10:00:00Z"}
                       for kind in ("MemoryPressure", "DiskPressure")],
        "addresses": [{"type": "InternalIP", "address": "10.0.1.7"}, {"type": "Hostname", "address": name}],
        "nodeInfo": {"kubeletVersion": "v1.37.1", "osImage": "Ubuntu 24.04", "machineID": "f" * 32},
        "images": [{"names": [f"registry.example.com/team/app-{index}@sha256:{'0' * 64}"],
                    "sizeBytes": 123456789} for index in range(50)],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
    }
    return node


def test_slim_node_keeps_what_is_read_and_drops_the_rest() -> None:
    node = kubelet_node("node-1")
    before = copy.deepcopy(node)
    slim = slim_node(node)
    assert node == before, "the input is not changed"
    assert slim == {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "node-1", "uid": node["metadata"]["uid"], "resourceVersion": "1",
                     "labels": {"kubernetes.io/hostname": "node-1", "gpu": "a100"}},
        "spec": {"unschedulable": True, "taints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"}]},
        "status": {"allocatable": node["status"]["allocatable"],
                   "declaredFeatures": ["OptionalNodeOperations"]},
    }
    assert slim_node(slim) == slim


def test_the_cache_stores_the_slim_node_and_reads_the_same_from_it() -> None:
    node = kubelet_node("node-1")
    cache = ClusterCache.from_objects([copy.deepcopy(node)], FeatureGates())
    assert cache.raw("Node", "node-1") == slim_node(node)
    parsed = cache.node("node-1")
    assert parsed is not None and parsed.labels == node["metadata"]["labels"]
    assert parsed.declares("OptionalNodeOperations")
    malformed = {"kind": "Node", "metadata": {"name": "odd"}, "status": ["not", "an", "object"]}
    cache.apply("Node", "ADDED", malformed)
    assert cache.raw("Node", "odd") == malformed and cache.stats()["invalid"] == {"Node": 1}
