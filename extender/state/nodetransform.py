"""What of a Node the cache keeps: the fields allocation, bind's checks and the node allocatable
resources read, nothing else.

A Node as the kubelet reports it is mostly status nobody here reads: the container images on the node
(up to 50 entries of names and sizes), conditions, addresses, nodeInfo, volumes, and annotations
written by every agent on the node. The transform is an allow-list, as for Pods
(extender.state.podtransform), so a field added to the Node API later stays out until someone needs it.

Kept:
- metadata: name, uid, resourceVersion, deletionTimestamp, labels (node selectors, affinity);
- spec: taints and unschedulable (extender.plugin.bindchecks, the headroom gauges);
- status: allocatable (extended resources and node allocatable resources, extender.plugin.
  extendedresources and nodeallocatable) and declaredFeatures (allocator.model.Node).

The result is still a valid Node for the cache and for `serve --snapshot` (snapshots stay replayable).

To keep a new field: add it here, and say which code reads it.
"""

from __future__ import annotations

from typing import Any

from extender.state.podtransform import pick

METADATA_FIELDS = frozenset({"name", "uid", "resourceVersion", "deletionTimestamp", "labels"})
SPEC_FIELDS = frozenset({"taints", "unschedulable"})
STATUS_FIELDS = frozenset({"allocatable", "declaredFeatures"})


def slim_node(node: dict) -> dict:
    """A new Node dict with only the fields listed above; `node` is not changed."""
    slim: dict[str, Any] = {key: node[key] for key in ("apiVersion", "kind") if key in node}
    for key, fields in (("metadata", METADATA_FIELDS), ("spec", SPEC_FIELDS), ("status", STATUS_FIELDS)):
        if key in node:
            slim[key] = pick(node[key], fields)
    return slim
