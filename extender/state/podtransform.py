"""What of a Pod the cache keeps: the fields scheduling, bind, explain, the webhook and the controllers
read, nothing else.

Every Pod of the cluster passes through the cache, and everything it keeps is served by
`/debug/snapshot`, shown by the startup banner and counted in the process's memory. Pods carry what
must not leak (container `env` values, `command` and `args`, annotations such as
`kubectl.kubernetes.io/last-applied-configuration`) and much that is only bulk (volumes, probes,
managedFields). kube-scheduler's informers drop managedFields the same way; here the transform is an
allow-list, so a field added to the Pod API later stays out until someone needs it.

Kept:
- metadata: identity and versioning (name, namespace, uid, resourceVersion, deletionTimestamp and its
  grace period), labels, ownerReferences, finalizers, and only our own annotations
  (`dra-extender.io/...`); not creationTimestamp or generation, which nothing here reads;
- spec: the scheduling fields (nodeName, schedulerName, resourceClaims, tolerations, priority and
  preemption, nodeSelector, schedulingGates, schedulingGroup, overhead and pod-level resources), of
  affinity only the required node affinity (bind's checks, extender.plugin.bindchecks) and, per
  container and init container, its name, resources and restartPolicy (what extended resources backed
  by DRA and sidecar accounting need);
- status: phase, nominatedNodeName, resourceClaimStatuses, extendedResourceClaimStatus,
  nodeAllocatableResourceClaimStatuses (what a bound pod's claims add to its requests, read by
  extender.plugin.nodeallocatable).

The result is still a valid Pod for the cache and for `serve --snapshot` (snapshots stay replayable),
not one to create in a cluster (containers have no image).

To keep a new field: add it here, and say which code reads it.
"""

from __future__ import annotations

from typing import Any

OWN_ANNOTATION_PREFIX = "dra-extender.io/"

METADATA_FIELDS = frozenset({
    "name", "namespace", "uid", "resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds",
    "labels", "ownerReferences", "finalizers",
})
SPEC_FIELDS = frozenset({
    "nodeName", "schedulerName", "resourceClaims", "tolerations", "priority", "priorityClassName",
    "preemptionPolicy", "nodeSelector", "schedulingGates", "schedulingGroup", "overhead", "resources",
})
CONTAINER_FIELDS = frozenset({"name", "resources", "restartPolicy"})
REQUIRED_NODE_AFFINITY = frozenset({"requiredDuringSchedulingIgnoredDuringExecution"})
STATUS_FIELDS = frozenset({
    "phase", "nominatedNodeName", "resourceClaimStatuses", "extendedResourceClaimStatus",
    "nodeAllocatableResourceClaimStatuses",
})


def pick(value: Any, fields: frozenset[str]) -> Any:
    """The listed fields of an object; anything that is not an object is kept as it is (the cache
    reports malformed objects, so they must reach it unchanged)."""
    if not isinstance(value, dict):
        return value
    return {key: item for key, item in value.items() if key in fields}


def _containers(value: Any) -> Any:
    if not isinstance(value, list):
        return value
    return [pick(container, CONTAINER_FIELDS) for container in value]


def _required_node_affinity(affinity: Any) -> Any:
    """Of `affinity`, only nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution (pod affinity
    terms name other pods' labels, and preferences are kube-scheduler's scoring, not ours)."""
    if not isinstance(affinity, dict):
        return affinity  # malformed: kept, as pick keeps it
    node_affinity = affinity.get("nodeAffinity")
    if not isinstance(node_affinity, dict):
        return {} if node_affinity is None else {"nodeAffinity": node_affinity}
    required = pick(node_affinity, REQUIRED_NODE_AFFINITY)
    return {"nodeAffinity": required} if required else {}


def slim_pod(pod: dict) -> dict:
    """A new Pod dict with only the fields listed above; `pod` is not changed."""
    slim: dict[str, Any] = {key: pod[key] for key in ("apiVersion", "kind") if key in pod}
    meta = pod.get("metadata")
    if meta is not None:
        slim["metadata"] = pick(meta, METADATA_FIELDS)
        annotations = meta.get("annotations") if isinstance(meta, dict) else None
        if isinstance(annotations, dict):
            own = {key: value for key, value in annotations.items()
                   if isinstance(key, str) and key.startswith(OWN_ANNOTATION_PREFIX)}
            if own:
                slim["metadata"]["annotations"] = own
    spec = pod.get("spec")
    if spec is not None:
        slim["spec"] = pick(spec, SPEC_FIELDS)
        if isinstance(spec, dict):
            for key in ("containers", "initContainers"):
                if key in spec:
                    slim["spec"][key] = _containers(spec[key])
            if spec.get("affinity") is not None:
                affinity = _required_node_affinity(spec["affinity"])
                if affinity:
                    slim["spec"]["affinity"] = affinity
    status = pod.get("status")
    if status is not None:
        slim["status"] = pick(status, STATUS_FIELDS)
    return slim
