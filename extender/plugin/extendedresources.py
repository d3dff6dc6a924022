"""Extended resources backed by DRA (KEP-5004, GA and always on in Kubernetes 1.37).

A DeviceClass with `spec.extendedResourceName: example.com/gpu`, and every DeviceClass through its
implicit name `deviceclass.resource.kubernetes.io/<class>`, lets a pod ask for devices in its container
resources (`example.com/gpu: 2`) with no ResourceClaim. kube-scheduler's NodeResourcesFit leaves such a
resource to DRA on nodes whose allocatable does not list it, and the in-tree DynamicResources plugin
(disabled when DRA Extender schedules) allocates the devices. This module is our version of that
plugin's extended-resource part:

- which DeviceClass a resource name maps to (`ExtendedResources.class_for`),
- which of a pod's requests need DRA on a given node (a device plugin that lists the resource in the
  node's allocatable wins) and the device requests and container mappings for them, built with
  upstream's names and init-container rules (`build_requests`),
- the pod's in-memory "special" ResourceClaim that carries those requests into the same allocator
  search as the pod's ordinary claims, and the pod's special claim already in the cluster (stale, from
  an earlier attempt), found through an index kept from the cache's claim events.

The scheduler adds the special claim to the claims it allocates; the claim writer creates it at bind
(see extender/plugin/claimwriter.py). Everything here is node- and pod-local computation on raw API dicts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from cachetools import LRUCache

from allocator import Node, Quantity, ResourceClaim
from common.claimrefs import EXTENDED_CLAIM_ANNOTATION
from common.objects import metadata_of
from extender.state.cache import ClusterCache

# resourceapi.ResourceDeviceClassPrefix: the implicit extended resource name of every DeviceClass.
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
# The special claim before bind creates it. Not a valid object name, so it can never be a real claim's.
IN_MEMORY_NAME = "<extended-resources>"
_SPECIAL_CLAIM = re.compile(rf"claim (?:[^\s/]+/)?{re.escape(IN_MEMORY_NAME)}")
_NATIVE_NAMESPACE = "kubernetes.io/"
_QUOTA_PREFIX = "requests."
# Pods whose mapping and variants are kept between filter, prioritize and bind (building the requests
# and parsing the in-memory claim costs ~10x a claim pod's whole plan).
MEMO_PODS = 4096


def is_dra_extended_name(name: str) -> bool:
    """An extended resource name (a domain-prefixed, non-kubernetes.io name) or an implicit class name."""
    if name.startswith(IMPLICIT_PREFIX):
        return True
    return "/" in name and _NATIVE_NAMESPACE not in name and not name.startswith(_QUOTA_PREFIX)


def _whole_number(value: Any) -> int | None:
    """A container's quantity as a whole number; None when it is not one (upstream's AsInt64 fails)."""
    try:
        quantity = Quantity.parse(str(value))
    except ValueError:
        return None
    return quantity.as_integer() if quantity.is_integer() else None


def container_requests(container: Mapping) -> dict[str, Any]:
    """The container's resource requests. A resource given only under limits counts with its limit, as
    the API server's defaulting makes it for extended resources (snapshots may carry undefaulted pods)."""
    resources = container.get("resources") or {}
    if not isinstance(resources, dict):
        return {}
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    if not isinstance(requests, dict) or not isinstance(limits, dict):
        return {}
    return {**{k: v for k, v in limits.items() if is_dra_extended_name(str(k))}, **requests}


def _containers(pod: Mapping) -> tuple[list[dict], int]:
    """Init containers then containers (upstream's container index order), and how many are init."""
    spec = pod.get("spec") or {}
    if not isinstance(spec, dict):
        return [], 0
    lists = [spec.get("initContainers") or [], spec.get("containers") or []]
    init, regular = ([c for c in items if isinstance(c, dict)] if isinstance(items, list) else []
                     for items in lists)
    return init + regular, len(init)


def requested_names(pod: Mapping) -> set[str]:
    """DRA extended resource names some container of the pod asks for, with a non-zero quantity."""
    names: set[str] = set()
    containers, _ = _containers(pod)
    for container in containers:
        for name, value in container_requests(container).items():
            if is_dra_extended_name(str(name)) and _whole_number(value) != 0:
                names.add(str(name))
    return names


def _allocatable(node: Node, name: str) -> int | None:
    """The node's allocatable for `name`; None when the node does not list it."""
    allocatable = node.allocatable or {}
    if not isinstance(allocatable, dict) or name not in allocatable:
        return None
    return _whole_number(allocatable[name]) or 0


@dataclass(frozen=True)
class Variant:
    """The special claim for one set of resources served through DRA (most nodes: all of them)."""

    resources: tuple[str, ...]
    claim: ResourceClaim | None  # None when no request comes out (nothing to allocate)
    mappings: tuple[dict, ...]  # pod.status.extendedResourceClaimStatus.requestMappings
    labels: dict[str, str]  # request name -> "example.com/gpu of container main"

    def describe(self, message: str) -> str:
        """`message` (an allocator reason) with the special claim's requests named by container and
        resource, so "why is my example.com/gpu: 2 pod pending" gets an answer in those words."""
        if IN_MEMORY_NAME not in message:
            return message
        message = _SPECIAL_CLAIM.sub("extended resources", message)
        for request, label in self.labels.items():
            message = message.replace(f"request {request}:", f"{label} (request {request}):")
            message = message.replace(f"request {request},", f"{label} (request {request}),")
        return message

    def extended_status(self, claim_name: str) -> dict:
        return {"requestMappings": list(self.mappings), "resourceClaimName": claim_name}


@dataclass
class ExtendedPlan:
    """A pod's extended resources that some DeviceClass maps, independent of the node."""

    pod: Mapping
    classes: dict[str, str]  # resource name -> DeviceClass name
    unmapped: tuple[str, ...]  # DRA-style names without a class: only a device plugin can serve them
    stale: ResourceClaim | None  # the pod's special claim from an earlier attempt
    variants: dict[tuple[str, ...], Variant] = field(default_factory=dict)

    @property
    def full(self) -> Variant:
        """The variant for nodes without a device plugin for any of the resources."""
        return self.variant(tuple(sorted(self.classes)))

    def variant(self, resources: tuple[str, ...]) -> Variant:
        found = self.variants.get(resources)
        if found is None:
            found = self.variants[resources] = _make_variant(self.pod, resources, self.classes)
        return found

    def on_node(self, node: Node) -> tuple[str, ...] | str:
        """The resources this node serves through DRA, or why the pod cannot fit the node."""
        for name in self.unmapped:
            if _allocatable(node, name) is None:
                return f"node does not provide extended resource {name} and no DeviceClass maps it"
        return tuple(name for name in sorted(self.classes) if not _allocatable(node, name))


class _PlanMemo(NamedTuple):
    generation: int  # of the DeviceClasses
    plan: ExtendedPlan | None


class ExtendedResources:
    """DeviceClass mapping and the pods' special claims, kept up to date from the cluster cache."""

    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache
        self._classes: dict[str, dict] = {}  # DeviceClass name -> raw object
        self._mapping: dict[str, str] | None = None  # resource name -> class name, rebuilt on change
        self._special: dict[str, str] = {}  # pod uid -> "namespace/name" of its special claim
        self._special_pod: dict[str, str] = {}  # claim key -> pod uid (to unindex)
        # pod uid -> the pod's plan without its stale claim, for a class generation. Container resources
        # of extended resources cannot change (in-place resize covers cpu and memory only).
        self._generation = 0
        self._memo: LRUCache[str, _PlanMemo] = LRUCache(maxsize=MEMO_PODS)
        for raw in cache.objects():
            self._on_change(str(raw.get("kind")), "ADDED", raw, None)
        cache.subscribe(self._on_change)

    def _on_change(self, kind: str, event_type: str, new: dict, old: dict | None) -> None:
        meta = metadata_of(new)
        if kind == "DeviceClass":
            name = str(meta.get("name") or "")
            if event_type == "DELETED":
                self._classes.pop(name, None)
            else:
                self._classes[name] = new
            self._mapping = None
            self._generation += 1
        elif kind == "ResourceClaim":
            key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
            previous = self._special_pod.pop(key, None)
            if previous is not None and self._special.get(previous) == key:
                del self._special[previous]
            owner = special_claim_owner(new)
            if event_type != "DELETED" and owner:
                self._special[owner] = key
                self._special_pod[key] = owner

    # ---- DeviceClass mapping -----------------------------------------------------------------

    def class_for(self, resource: str) -> str | None:
        """The DeviceClass serving `resource`. Several classes naming the same extendedResourceName:
        the newest (creationTimestamp) wins, on a tie the smallest name, as upstream's
        ExtendedResourceCache decides. Unlike that cache we recompute from all classes whenever one
        changes: deleting one class leaves the name with the best remaining one, where upstream's
        incremental cache forgets the name until a class naming it is added or updated."""
        if self._mapping is None:
            self._mapping = self._build_mapping()
        name = self._mapping.get(resource)
        return name if name is not None and self.cache.device_class(name) is not None else None

    def _build_mapping(self) -> dict[str, str]:
        mapping: dict[str, str] = {}
        explicit: dict[str, tuple[str, str]] = {}  # resource -> (creationTimestamp, name) of the winner
        for name, raw in self._classes.items():
            mapping[IMPLICIT_PREFIX + name] = name
            resource = (raw.get("spec") or {}).get("extendedResourceName")
            if not isinstance(resource, str) or not resource:
                continue
            created = str(metadata_of(raw).get("creationTimestamp") or "")
            best = explicit.get(resource)
            # RFC 3339 UTC timestamps order as strings; newest first, then the smaller name.
            if best is None or created > best[0] or (created == best[0] and name < best[1]):
                explicit[resource] = (created, name)
        for resource, (_, name) in explicit.items():
            mapping.setdefault(resource, name)
        return mapping

    # ---- per pod ------------------------------------------------------------------------------

    def requested(self, pod: Mapping) -> bool:
        """Does the pod ask for a resource some DeviceClass maps? (Cheap: most pods ask for none.)"""
        return any(self.class_for(name) is not None for name in requested_names(pod))

    def stale_claim(self, pod: Mapping) -> ResourceClaim | None:
        """The pod's special claim already in the cluster (created by an earlier attempt)."""
        uid = str(metadata_of(pod).get("uid") or "")
        key = self._special.get(uid)
        if key is None:
            return None
        namespace, _, name = key.partition("/")
        return self.cache.claim(namespace, name)

    def plan(self, pod: Mapping) -> ExtendedPlan | None:
        """The pod's mapped extended resources, or None when it asks for none."""
        uid = str(metadata_of(pod).get("uid") or "")
        memo = self._memo.get(uid) if uid else None
        if memo is not None and memo.generation == self._generation:
            known = memo.plan
        else:
            names = requested_names(pod)
            classes = {name: cls for name in names if (cls := self.class_for(name)) is not None}
            unmapped = tuple(sorted(names - classes.keys()))
            known = ExtendedPlan(pod, classes, unmapped, None) if classes else None
            if uid:
                self._memo[uid] = _PlanMemo(self._generation, known)
        if known is None:
            return None
        return ExtendedPlan(known.pod, known.classes, known.unmapped, self.stale_claim(pod), known.variants)


def special_claim_owner(claim_raw: Mapping) -> str | None:
    """The UID of the pod a special claim belongs to (annotation and the pod as controller), or None."""
    meta = metadata_of(claim_raw)
    if (meta.get("annotations") or {}).get(EXTENDED_CLAIM_ANNOTATION) != "true":
        return None
    for owner in meta.get("ownerReferences") or []:
        if isinstance(owner, dict) and owner.get("controller") is True and owner.get("kind") == "Pod":
            return str(owner.get("uid") or "") or None
    return None


def build_requests(pod: Mapping, resources: tuple[str, ...], classes: Mapping[str, str]
                   ) -> tuple[list[dict], list[dict]]:
    """Device requests and container mappings for `resources`, as upstream names and counts them.

    One request per container and resource, named `container-<i>-request-<j>` (i: index among init
    containers then containers; j: index of the resource among the container's sorted request names),
    asking for exactly the container's whole-number quantity of the class's devices. Containers that run
    for the pod's lifetime (regular containers and restartable init containers, "sidecars") each get
    their own devices. A plain init container runs before them and alone: it first reuses the devices
    of the long-lived containers from its own position on, and only asks for what is missing; of those
    missing parts only the largest becomes a request, which every such init container maps to.
    """
    containers, init_count = _containers(pod)
    requests: list[dict] = []
    mappings: list[dict] = []
    for resource in sorted(resources):
        class_name = classes[resource]
        long_lived: dict[int, dict] = {}
        long_mappings: list[dict] = []
        short_lived: list[tuple[int, dict | None, list[dict]]] = []
        for index, container in enumerate(containers):
            sidecar = container.get("restartPolicy") == "Always"
            if index < init_count and not sidecar:
                continue
            request = _container_request(index, container, resource, class_name, already=0)
            if request is not None:
                long_lived[index] = request
                long_mappings.append(_mapping(container, resource, request["name"]))
        for index, container in enumerate(containers[:init_count]):
            if container.get("restartPolicy") == "Always":
                continue
            wanted = _whole_number(container_requests(container).get(resource, 0)) or 0
            if wanted <= 0:
                continue
            container_mappings = []
            reused = 0
            for later in sorted(i for i in long_lived if i >= index):
                reused += long_lived[later]["exactly"]["count"]
                container_mappings.append(_mapping(container, resource, long_lived[later]["name"]))
                if reused >= wanted:
                    break
            own = None
            if reused < wanted:
                own = _container_request(index, container, resource, class_name, already=reused)
                assert own is not None
                container_mappings.append(_mapping(container, resource, own["name"]))
            short_lived.append((index, own, container_mappings))
        largest = None
        for _, own, _ in short_lived:
            if own is not None and (largest is None or own["exactly"]["count"] > largest["exactly"]["count"]):
                largest = own
        own_names = {own["name"] for _, own, _ in short_lived if own is not None}
        short_mappings = []
        for _, _, container_mappings in short_lived:
            for entry in container_mappings:
                if largest is not None and entry["requestName"] in own_names:
                    entry = {**entry, "requestName": largest["name"]}
                short_mappings.append(entry)
        if largest is not None:
            requests.append(largest)
        requests.extend(long_lived[i] for i in sorted(long_lived))
        mappings.extend(long_mappings)
        mappings.extend(short_mappings)
    requests.sort(key=lambda request: request["name"])
    return requests, mappings


def _container_request(index: int, container: Mapping, resource: str, class_name: str, *,
                       already: int) -> dict | None:
    requests = container_requests(container)
    wanted = _whole_number(requests.get(resource, 0)) or 0
    if wanted <= 0:
        return None
    position = sorted(str(name) for name in requests).index(resource)
    return {
        "name": f"container-{index}-request-{position}",
        "exactly": {"deviceClassName": class_name, "allocationMode": "ExactCount", "count": wanted - already},
    }


def _mapping(container: Mapping, resource: str, request_name: str) -> dict:
    return {"containerName": str(container.get("name") or ""), "resourceName": resource,
            "requestName": request_name}


def _make_variant(pod: Mapping, resources: tuple[str, ...], classes: Mapping[str, str]) -> Variant:
    requests, mappings = build_requests(pod, resources, classes)
    labels: dict[str, list[str]] = {}
    for entry in mappings:
        label = labels.setdefault(entry["requestName"], [entry["resourceName"]])
        label.append(entry["containerName"])
    described = {
        request: f"{names[0]} of container{'s' if len(names) > 2 else ''} {', '.join(names[1:])}"
        for request, names in labels.items()
    }
    claim = ResourceClaim.from_api(in_memory_claim(pod, requests)) if requests else None
    return Variant(resources, claim, tuple(mappings), described)


def in_memory_claim(pod: Mapping, requests: list[dict]) -> dict:
    """The special claim as upstream's PreFilter prepares it: owned by the pod as controller, with the
    annotation, a generated name to be, and a UID of our own until the API server gives it one."""
    meta = metadata_of(pod)
    name, uid = str(meta.get("name") or ""), str(meta.get("uid") or "")
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": IN_MEMORY_NAME,
            "generateName": f"{name}-extended-resources-",
            "namespace": str(meta.get("namespace") or ""),
            "uid": f"extended-resources-{uid}",
            "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid, "controller": True}
            ],
        },
        "spec": {"devices": {"requests": requests}},
    }


def creation_body(claim: ResourceClaim, finalizer: str) -> dict:
    """What bind POSTs for the special claim: no name (the API server generates it from generateName),
    no UID, no status. The delete-protection finalizer comes with the create: upstream adds it with a
    separate update right after, one API call more for the same result."""
    meta = {k: v for k, v in claim.raw["metadata"].items() if k not in ("name", "uid")}
    meta["finalizers"] = [finalizer]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta,
            "spec": claim.raw["spec"]}
