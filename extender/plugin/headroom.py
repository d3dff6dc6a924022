"""How many more pods of a shape fit right now, and where: the allocator's own placements against the
devices in use, allocations in flight included (allocator/headroom.py says how copies are placed and
what "stranded" means).

A shape is the claims one pod of it gets: from a DeviceClass with a count (and selectors, and
attributes the devices must share), from a ResourceClaimTemplate, or from a pod's spec (its claim
templates; a claim named by resourceClaimName is shared, not one per pod, so it is refused).

Nodes are filled one after another in name order, so devices of pools several nodes see (network
attached, `allNodes`) are counted once, on the first nodes. Nodes alike for the search (node-local
pools with the same devices, the same devices in use: allocator/likeness.py) are searched once and
their answer reused, which is what keeps a 5,000-node cluster under a second. Node taints, cpu and
memory and affinity other than a pod's nodeSelector are kube-scheduler's to check and are not here;
cordoned nodes (spec.unschedulable) take no pods.
"""

from __future__ import annotations

import datetime
import gc
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import GaugeMetricFamily

from allocator import (
    Allocator,
    InvalidObjectError,
    Likeness,
    Node,
    NodeHeadroom,
    NodePools,
    ResourceClaim,
    Stranded,
    declared_features,
    devices_in_use,
    fill,
    local_likeness,
)
from common.objects import metadata_of
from extender.state.assume import AssumeCache
from extender.state.cache import ClusterCache

SHAPE_NAMESPACE = "headroom"


class ShapeError(ValueError):
    """A shape that cannot be made; the message says what is wrong."""


@dataclass(frozen=True)
class Shape:
    """What one pod of the shape gets: `specs` are ResourceClaim specs, one claim each."""

    name: str
    specs: tuple[dict[str, Any], ...]
    node_selector: tuple[tuple[str, str], ...] = ()

    def claims(self) -> list[ResourceClaim]:
        made = []
        for index, spec in enumerate(self.specs):
            raw = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                   "metadata": {"name": f"shape-{index}", "namespace": SHAPE_NAMESPACE,
                                "uid": f"headroom-shape-{index}"},
                   "spec": spec}
            try:
                made.append(ResourceClaim.from_api(raw))
            except InvalidObjectError as error:
                raise ShapeError(f"shape {self.name}: {error}") from None
        if not made:
            raise ShapeError(f"shape {self.name}: no claims (a pod without resourceClaims takes no devices)")
        return made


def class_shape(device_class: str, count: int = 1, *, selectors: Sequence[str] = (),
                match_attributes: Sequence[str] = ()) -> Shape:
    """`count` devices of `device_class` matching every CEL selector and sharing each attribute."""
    if count < 1:
        raise ShapeError(f"--count must be 1 or more, got {count}")
    exactly: dict[str, Any] = {"deviceClassName": device_class, "allocationMode": "ExactCount",
                               "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": text}} for text in selectors]
    devices: dict[str, Any] = {"requests": [{"name": "devices", "exactly": exactly}]}
    if match_attributes:
        devices["constraints"] = [{"requests": ["devices"], "matchAttribute": a} for a in match_attributes]
    name = f"{count} x {device_class}" + "".join(f", same {a}" for a in match_attributes) + (
        f", {len(selectors)} selector(s)" if selectors else "")
    return Shape(name, ({"devices": devices},))


def template_shape(template: Mapping[str, Any]) -> Shape:
    """One claim made from a ResourceClaimTemplate (its spec.spec)."""
    meta = metadata_of(template)
    spec = (template.get("spec") or {}).get("spec")
    if not isinstance(spec, dict):
        raise ShapeError(f"ResourceClaimTemplate {meta.get('name')!r} has no spec.spec")
    return Shape(f"template {meta.get('namespace') or 'default'}/{meta.get('name')}", (spec,))


def pod_shape(pod: Mapping[str, Any], template_of: Any) -> Shape:
    """The claims a new pod like `pod` gets: one per resourceClaims entry made from a template
    (`template_of(namespace, name)` finds it, None when there is none)."""
    meta = metadata_of(pod)
    namespace = meta.get("namespace") or "default"
    spec = pod.get("spec") or {}
    specs: list[dict[str, Any]] = []
    for entry in spec.get("resourceClaims") or ():
        if not isinstance(entry, dict):
            raise ShapeError("spec.resourceClaims: entries must be objects")
        if entry.get("resourceClaimName"):
            raise ShapeError(
                f"resourceClaims[{entry.get('name')}] names claim {entry['resourceClaimName']!r}, which "
                "every pod would share: headroom counts pods that each get their own claims (use a template)")
        template_name = entry.get("resourceClaimTemplateName")
        if not template_name:
            raise ShapeError(f"resourceClaims[{entry.get('name')}] has no resourceClaimTemplateName")
        template = template_of(namespace, template_name)
        if template is None:
            raise ShapeError(f"ResourceClaimTemplate {namespace}/{template_name} not found")
        specs.extend(template_shape(template).specs)
    selector = spec.get("nodeSelector") or {}
    if not isinstance(selector, dict):
        raise ShapeError("spec.nodeSelector must be an object")
    return Shape(f"pod {namespace}/{meta.get('name')}", tuple(specs),
                 tuple(sorted((str(k), str(v)) for k, v in selector.items())))


def _as_dict(found: NodeHeadroom) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "node": found.node,
        "count": found.count,
        "stranded": [{"device": f"{s.driver}/{s.pool}/{s.device}", "reason": s.reason}
                     for s in found.stranded],
    }
    if found.capped:
        entry["capped"] = True
    if found.error:
        entry["error"] = found.error
    return entry


def _renamed(found: NodeHeadroom, node: str, pool_ids: Sequence[tuple[str, str]],
             new_ids: Sequence[tuple[str, str]]) -> NodeHeadroom:
    """A twin's answer for `node`: its devices in the node's own pools (one per driver, same order)."""
    pool_of = {old: new[1] for old, new in zip(pool_ids, new_ids, strict=True)}
    moved = [Stranded(s.driver, pool_of[(s.driver, s.pool)], s.device, s.reason) for s in found.stranded]
    return NodeHeadroom(node, found.count, moved, found.capped, found.error)


class Headroom:
    def __init__(self, cache: ClusterCache, assume: AssumeCache, *, node_deadline_s: float = 1.0) -> None:
        self.cache = cache
        self.assume = assume
        self.node_deadline_s = node_deadline_s
        self._local: dict[str, tuple[NodePools, Likeness | None]] = {}

    def compute(self, shape: Shape, nodes: Iterable[str] | None = None) -> dict[str, Any]:
        """The report: per node the pods of `shape` that fit more and the stranded devices, the total,
        the stranded devices counted by reason, and when it was worked out."""
        # Its few thousand small objects would otherwise set off collections that walk the whole
        # cache (millions of objects where serve has not frozen them): most of the time at 5,000 nodes.
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._compute(shape, nodes)
        finally:
            if enabled:
                gc.enable()

    def _compute(self, shape: Shape, nodes: Iterable[str] | None) -> dict[str, Any]:
        started = time.perf_counter()
        claims = shape.claims()
        for claim in claims:
            for request in claim.requests:
                names = [request.exactly.device_class_name] if request.exactly is not None else [
                    sub.device_class_name for sub in request.first_available]
                for name in names:
                    if self.cache.device_class(name) is None:
                        raise ShapeError(f"DeviceClass {name} not found")
        features = self.cache.features
        inventory = self.cache.inventory
        state = self.assume.allocated_view(self.cache).copy()
        allocator = Allocator(inventory, state, features, deadline_s=self.node_deadline_s)
        wanted = dict(shape.node_selector)
        twins: dict[tuple[Any, ...], tuple[NodeHeadroom, tuple[tuple[str, str], ...]]] = {}
        found: list[NodeHeadroom] = []
        skipped: dict[str, str] = {}
        for name in sorted(nodes if nodes is not None else self.cache.node_names()):
            node = self.cache.node(name)
            if node is None:
                raise ShapeError(f"node {name} not found")
            why = self._skip(node, wanted)
            if why:
                skipped[name] = why
                continue
            pools, alike = self._likeness(node)
            key = None if alike is None else (alike, devices_in_use(pools, state), declared_features(node))
            twin = twins.get(key) if key is not None else None
            if twin is not None:
                found.append(_renamed(twin[0], name, twin[1], pools.pool_ids))
                continue
            result = fill(allocator, node, claims, prefix=f"headroom/{name}/")
            if key is not None:
                twins[key] = (result, pools.pool_ids)
            found.append(result)
        stranded: Counter[str] = Counter(s.reason for entry in found for s in entry.stranded)
        return {
            "shape": shape.name,
            "claims": list(shape.specs),
            "asOf": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "total": sum(entry.count for entry in found),
            "nodesWithRoom": sum(1 for entry in found if entry.count),
            "nodes": [_as_dict(entry) for entry in found],
            "skipped": skipped,
            "strandedByReason": dict(sorted(stranded.items())),
            "seconds": round(time.perf_counter() - started, 4),
        }

    def _likeness(self, node: Node) -> tuple[NodePools, Likeness | None]:
        """The node's pools and what makes two nodes fill alike (None: it is searched on its own),
        remembered while its pools stay the same object (the inventory replaces them on change)."""
        pools, alike = self.cache.inventory.node_likeness(node, self.cache.features)
        if alike is not None:
            return pools, alike
        known = self._local.get(node.name)
        if known is None or known[0] is not pools:
            known = self._local[node.name] = (pools, local_likeness(node.name, pools))
        return known

    def _skip(self, node: Node, selector: Mapping[str, str]) -> str:
        raw = self.cache.raw("Node", node.name) or {}
        if (raw.get("spec") or {}).get("unschedulable"):
            return "cordoned (spec.unschedulable)"
        missing = [f"{k}={v}" for k, v in selector.items() if node.labels.get(k) != v]
        return f"nodeSelector {', '.join(missing)} does not match" if missing else ""


def parse_shape_flag(text: str) -> tuple[str, str, int]:
    """`--headroom` as serve takes it: CLASS[:COUNT] or template:[NAMESPACE/]NAME; returns (kind, name,
    count) with kind "class" or "template". Raises ShapeError naming what is wrong."""
    if text.startswith("template:"):
        name = text.removeprefix("template:")
        if not name or name.count("/") > 1:
            raise ShapeError(f"--headroom {text!r}: expected template:[NAMESPACE/]NAME")
        return "template", name if "/" in name else f"default/{name}", 1
    name, _, count = text.partition(":")
    if not name or (count and not (count.isascii() and count.isdigit() and int(count) > 0)):
        raise ShapeError(f"--headroom {text!r}: expected CLASS[:COUNT] (COUNT 1 or more) or template:NAME")
    return "class", name, int(count or 1)


def report(headroom: Headroom, text: str) -> tuple[str, dict[str, Any]]:
    """(the shape as written, its report, or {"error": ...} when the shape cannot be made now)."""
    try:
        return text, headroom.compute(flag_shape(text, headroom.cache))
    except ShapeError as error:
        return text, {"error": str(error)}


def flag_shape(text: str, cache: ClusterCache) -> Shape:
    """The shape a --headroom value (or the device map's ?headroom=) names, its template read now."""
    kind, name, count = parse_shape_flag(text)
    if kind == "class":
        return class_shape(name, count)
    template = cache.raw("ResourceClaimTemplate", name)
    if template is None:
        raise ShapeError(f"ResourceClaimTemplate {name} not found")
    return template_shape(template)


class HeadroomGauges:
    """dra_extender_headroom_pods{shape} and dra_extender_headroom_stranded_devices{shape,reason} for the
    shapes serve was given, worked out at scrape time (on the event loop: the allocator reads the live
    cache) and kept while nothing they depend on changes, or for `fresh_s` after a change."""

    def __init__(self, headroom: Headroom, flags: Sequence[str], *, fresh_s: float = 15.0,
                 clock: Any = time.monotonic) -> None:
        self.headroom = headroom
        self.flags = list(flags)
        for text in self.flags:
            parse_shape_flag(text)
        self.fresh_s = fresh_s
        self.clock = clock
        self._changes = 0
        headroom.cache.subscribe(self._changed)
        self._kept: tuple[tuple[int, tuple[str, ...]], float, list[tuple[str, dict[str, Any]]]] | None = None

    def _changed(self, kind: str, event_type: str, new: dict, old: dict | None) -> None:
        self._changes += 1

    def reports(self) -> list[tuple[str, dict[str, Any]]]:
        """(shape label, report or {"error": ...}) per shape, recomputed only when needed."""
        version = (self._changes, tuple(sorted(uid for uid, _, _ in self.headroom.assume.in_flight())))
        now = self.clock()
        kept = self._kept
        if kept is not None and (kept[0] == version or now - kept[1] < self.fresh_s):
            return kept[2]
        found = [report(self.headroom, text) for text in self.flags]
        self._kept = (version, now, found)
        return found

    def collect(self) -> Iterator[GaugeMetricFamily]:
        pods = GaugeMetricFamily("dra_extender_headroom_pods",
                                 "More pods of the shape that fit now (serve --headroom), -1 when the shape "
                                 "cannot be made (its class or template is missing).", labels=["shape"])
        stranded = GaugeMetricFamily("dra_extender_headroom_stranded_devices",
                                     "Free devices of the shape's kind that it cannot use, by why.",
                                     labels=["shape", "reason"])
        if self.headroom.cache.ready:
            for label, report in self.reports():
                pods.add_metric([label], report.get("total", -1))
                for reason, number in (report.get("strandedByReason") or {}).items():
                    stranded.add_metric([label, reason], number)
        yield pods
        yield stranded
