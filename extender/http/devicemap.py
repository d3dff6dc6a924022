"""`GET /debug/ui` on the debug port: a read-only device map for "where are my GPUs".

Every pool and device, grouped by node, coloured by state: free, allocated (with the claim and the
pods or PodGroups it is reserved for, and the device binding conditions still awaited), in flight
(chosen by the extender, not yet seen written by the watch), tainted (a NoSchedule/NoExecute taint of
its own or of a DeviceTaintRule) or counters used up (free, but the shared counters it draws on are
taken by other devices: the halves of a whole GPU in use). Partitions show under the counter set they
draw on, with what is consumed of it; each node lists per DeviceClass how many of its devices are used
and free. The pending pods that use devices (claims, or extended resources a DeviceClass maps) are
listed, each linked to its explanation (/debug/explain) and saying what a pod waiting for device
binding conditions waits for, and a headroom panel says how many more pods of a shape fit and where
(`?headroom=CLASS[:COUNT]`, or the shapes serve was given with --headroom), with the devices left
stranded for it outlined. The page says when its picture was taken.

One server-rendered HTML page: no scripts, no external assets (it works in an air-gapped cluster; the
Content-Security-Policy forbids loading anything), every value from the cluster escaped. Large
clusters are paginated by node (`?page=N&per_page=M`, `?node=TEXT` filters node names), so a page
stays small at 5,000 nodes; the map itself is built off the event loop.
"""

from __future__ import annotations

import asyncio
import datetime
import html
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from aiohttp import web

from allocator import DeviceClass, DeviceTaintRule, Quantity, ResourceClaim, ResourceSlice, cel
from common.claimrefs import is_group_reference, pod_key
from common.objects import metadata_of
from extender.http import wire
from extender.plugin.bindingconditions import BindingPolicy, ClaimBinding, State, claim_binding
from extender.plugin.extendedresources import requested_names
from extender.plugin.podclaims import ClaimsNotReady, InvalidPodError, claim_name_for, claim_references

if TYPE_CHECKING:
    from extender.state.cache import ClusterCache

ROUTE = "/debug/ui"
DEFAULT_PER_PAGE = 50
MAX_PER_PAGE = 500
MAX_PENDING_LISTED = 200
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
SHARED_POOLS = "(not node-local)"
STATES = ("free", "allocated", "in flight", "tainted", "counters used up")
USED_STATES = frozenset({"allocated", "in flight"})
# Class selectors are compiled as the allocator compiles stored ones.
CLASS_SELECTORS = cel.CompileOptions(consumable_capacity=True, list_type_attributes=True)
Counters = dict[str, dict[str, Quantity]]  # counter set -> counter -> amount
CONTENT_SECURITY_POLICY = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'self'"


@dataclass
class DeviceView:
    name: str
    state: str = "free"
    claims: list[str] = field(default_factory=list)
    pods: list[str] = field(default_factory=list)
    pod_groups: list[str] = field(default_factory=list)  # PodGroups a workload claim is reserved for
    taints: list[str] = field(default_factory=list)
    counter_set: str = ""  # the first counter set it draws on: partitions show under it
    stranded: str = ""     # why the first headroom shape cannot use it, when it is free for it
    binding: str = ""  # the device binding conditions its claim still waits for, failed or timed out


@dataclass
class PoolView:
    driver: str
    pool: str
    generation: int
    slices: list[ResourceSlice]

    @property
    def device_count(self) -> int:
        return sum(len(slice_.devices) for slice_ in self.slices)


@dataclass
class PendingPod:
    key: str
    claims: list[str]
    note: str = ""


@dataclass
class DeviceMap:
    """Pools grouped by node, with the state of every device counted; the per-device views are made only
    for the pools a page shows (`devices`), which keeps a page of a 5,000-node cluster cheap."""

    groups: dict[str, list[PoolView]]   # node name (or SHARED_POOLS) -> its pools
    pending: list[PendingPod]
    totals: Counter[str]
    held: dict[str, tuple[list[str], list[str], list[str]]]
    flying: dict[str, list[str]]
    taint_rules: list[DeviceTaintRule]
    counters: dict[tuple[str, str], tuple[Counters, Counters]] = field(default_factory=dict)  # (total, used)
    classes: list[DeviceClass] = field(default_factory=list)
    taken_at: float = 0.0
    binding: dict[str, str] = field(default_factory=dict)  # device id -> DeviceView.binding

    def _taints(self, pool: PoolView, device: Any) -> list[Mapping[str, Any]]:
        taints = list(device.taints)
        for rule in self.taint_rules:
            if rule.matches(pool.driver, pool.pool, device.name):
                taints.append(rule.taint)
        return taints

    def _state(self, ident: str, taints: list[Mapping[str, Any]], pool: PoolView, device: Any) -> str:
        if ident in self.held:
            return "allocated"
        if ident in self.flying:
            return "in flight"
        if any(t.get("effect") in BLOCKING_EFFECTS for t in taints):
            return "tainted"
        if device.consumes_counters and not self._counters_left(pool, device):
            return "counters used up"
        return "free"

    def _counters_left(self, pool: PoolView, device: Any) -> bool:
        """Whether what the pool's counter sets have left covers what the device draws on."""
        total, used = self.counters.get((pool.driver, pool.pool), ({}, {}))
        for set_name, amounts in device.consumes_counters:
            for counter, amount in amounts.items():
                limit = total.get(set_name, {}).get(counter)
                taken = used.get(set_name, {}).get(counter)
                if limit is not None and (taken + amount if taken is not None else amount) > limit:
                    return False
        return True

    def count(self) -> None:
        self._count_counters()
        for pools in self.groups.values():
            for pool in pools:
                prefix = f"{pool.driver}/{pool.pool}/"
                for slice_ in pool.slices:
                    for device in slice_.devices:
                        taints = self._taints(pool, device) if device.taints or self.taint_rules else []
                        self.totals[self._state(prefix + device.name, taints, pool, device)] += 1

    def _count_counters(self) -> None:
        """Per pool with counter sets: their amounts, and what the devices in use (or in flight) take."""
        for pools in self.groups.values():
            for pool in pools:
                total: Counters = {name: dict(amounts) for slice_ in pool.slices
                                   for name, amounts in slice_.counter_sets}
                if not total:
                    continue
                used: Counters = {}
                for slice_ in pool.slices:
                    for device in slice_.devices:
                        ident = f"{pool.driver}/{pool.pool}/{device.name}"
                        if ident not in self.held and ident not in self.flying:
                            continue
                        for set_name, amounts in device.consumes_counters:
                            taken = used.setdefault(set_name, {})
                            for counter, amount in amounts.items():
                                taken[counter] = taken[counter] + amount if counter in taken else amount
                self.counters[(pool.driver, pool.pool)] = (total, used)

    def class_use(self, pools: list[PoolView]) -> list[tuple[str, int, int]]:
        """(DeviceClass, devices of a node's pools its selectors accept in use, free) for each class that
        accepts some; a selector that fails on a device does not accept it."""
        found = []
        for device_class in self.classes:
            programs = _class_programs(device_class)
            if programs is None:
                continue
            used = free = 0
            for pool in pools:
                for view, device in zip(self.devices(pool), (d for s in pool.slices for d in s.devices),
                                        strict=True):
                    if _accepts(programs, device, pool.driver):
                        used += view.state in USED_STATES
                        free += view.state == "free"
            if used or free:
                found.append((device_class.name, used, free))
        return found

    def devices(self, pool: PoolView) -> list[DeviceView]:
        views = []
        for slice_ in pool.slices:
            for device in slice_.devices:
                ident = f"{pool.driver}/{pool.pool}/{device.name}"
                taints = self._taints(pool, device)
                view = DeviceView(device.name, self._state(ident, taints, pool, device),
                                  taints=[_taint_text(t) for t in taints],
                                  counter_set=(device.consumes_counters[0][0]
                                               if device.consumes_counters else ""))
                if view.state == "allocated":
                    view.claims, view.pods, view.pod_groups = self.held[ident]
                    view.binding = self.binding.get(ident, "")
                elif view.state == "in flight":
                    view.claims = self.flying[ident]
                views.append(view)
        return views


@dataclass(frozen=True)
class ClusterView:
    """What the map is made of, taken on the event loop (cheap list copies of objects the cache replaces
    rather than edits), so the building can run in a thread."""

    slices: list[ResourceSlice]
    # Parsed: the cache keeps claims packed, and their raw objects are unpacked by the building thread.
    claims: list[ResourceClaim]
    pods: list[dict[str, Any]]   # pending ones (take_view leaves out the bound and finished)
    in_flight: list[dict[str, Any]]
    taint_rules: list[DeviceTaintRule]
    pod_names_by_uid: dict[str, str]
    classes: list[DeviceClass] = field(default_factory=list)
    # pod key -> the extended resources backed by DRA it asks for (pods without claims that use devices)
    extended: dict[str, list[str]] = field(default_factory=dict)
    taken_at: float = 0.0
    # Device binding conditions: the binding timeout (None with the feature gates off) and the time.
    binding_timeout_s: float | None = None
    binding_now: float = 0.0


def take_view(cache: ClusterCache, in_flight: list[dict[str, Any]],
              maps_extended: Callable[[str], bool] | None = None,
              binding: BindingPolicy | None = None) -> ClusterView:
    """What the map shows, taken from the cache and the allocations in flight at one moment;
    `maps_extended(name)` says whether a DeviceClass maps that extended resource; `binding`, how long
    devices may wait for their binding conditions."""
    wanted = {entry.get("podUID") for entry in in_flight}
    names: dict[str, str] = {}
    extended: dict[str, list[str]] = {}
    pods = []  # the pending ones only (what the map lists): the cache's pods are read one at a time
    for pod in cache.each_valid("Pod"):
        uid = metadata_of(pod).get("uid")
        if uid in wanted and isinstance(uid, str):
            names[uid] = pod_key(pod)
        if not _settled(pod):
            pods.append(pod)
        if maps_extended is not None and not (pod.get("spec") or {}).get("nodeName"):
            mapped = [name for name in requested_names(pod) if maps_extended(name)]
            if mapped:
                extended[pod_key(pod)] = mapped
    classes = [found for raw in cache.valid_objects("DeviceClass")
               if (found := cache.device_class(metadata_of(raw).get("name", ""))) is not None]
    waits = binding is not None and binding.enabled
    return ClusterView(list(cache.inventory.slices()), cache.claims(), pods, in_flight,
                       cache.taint_rules(), names, classes, extended, time.time(),
                       binding.timeout_s if binding is not None and waits else None,
                       binding.wall_clock() if binding is not None and waits else 0.0)


def _newest_pools(slices: Iterable[ResourceSlice]) -> dict[tuple[str, str], list[ResourceSlice]]:
    pools: dict[tuple[str, str], list[ResourceSlice]] = {}
    for slice_ in slices:
        pools.setdefault((slice_.driver, slice_.pool), []).append(slice_)
    for key, members in pools.items():
        newest = max(s.pool_generation for s in members)
        pools[key] = sorted((s for s in members if s.pool_generation == newest), key=lambda s: s.name)
    return pools


def _taint_text(taint: Mapping[str, Any]) -> str:
    value = taint.get("value")
    return f"{taint.get('key')}{'=' + str(value) if value else ''}:{taint.get('effect')}"


def _holders(claims: Iterable[Mapping[str, Any]]) -> dict[str, tuple[list[str], list[str], list[str]]]:
    """device id -> (claims holding it, the pods and the PodGroups those claims are reserved for)."""
    held: dict[str, tuple[list[str], list[str], list[str]]] = {}
    for claim in claims:
        status = claim.get("status") or {}
        allocation = status.get("allocation") or {}
        meta = metadata_of(claim)
        namespace = meta.get("namespace", "")
        key = f"{namespace}/{meta.get('name', '')}"
        reserved = [ref for ref in status.get("reservedFor") or () if isinstance(ref, dict)]
        pods = [f"{namespace}/{ref.get('name')}" for ref in reserved if ref.get("resource") == "pods"]
        groups = [f"{namespace}/{ref.get('name')}" for ref in reserved if is_group_reference(ref)]
        for result in (allocation.get("devices") or {}).get("results") or ():
            device = f"{result.get('driver')}/{result.get('pool')}/{result.get('device')}"
            claims_of, pods_of, groups_of = held.setdefault(device, ([], [], []))
            claims_of.append(key)
            pods_of.extend(p for p in pods if p not in pods_of)
            groups_of.extend(g for g in groups if g not in groups_of)
    return held


def _bindings(view: ClusterView, claims: list[dict[str, Any]]) -> dict[str, ClaimBinding]:
    """Claim key -> the binding state of the allocated `claims` whose devices have binding conditions and
    are not all ready."""
    if view.binding_timeout_s is None:
        return {}
    found = {}
    for claim in claims:
        state = claim_binding(claim, timeout_s=view.binding_timeout_s, now=view.binding_now)
        if state is not None and state.state != State.READY:
            found[state.key] = state
    return found


def _device_binding(bindings: Mapping[str, ClaimBinding]) -> dict[str, str]:
    notes = {}
    for state in bindings.values():
        for device in state.devices:
            if device.failed:
                notes[device.device] = "binding failed: " + ", ".join(f.type for f in device.failed)
            elif device.pending:
                notes[device.device] = (f"binding: {', '.join(device.pending)} "
                                        + ("timed out" if state.state == State.TIMED_OUT else "pending"))
    return notes


def _settled(pod: Mapping[str, Any]) -> bool:
    """Bound or finished: not a pod the map lists as pending."""
    return bool((pod.get("spec") or {}).get("nodeName")) or (pod.get("status") or {}).get("phase") in (
        "Succeeded", "Failed")


def _pending(pods: Iterable[Mapping[str, Any]], extended: Mapping[str, list[str]],
             bindings: Mapping[str, ClaimBinding]) -> list[PendingPod]:
    pending = []
    for pod in pods:
        if _settled(pod):
            continue
        try:
            refs = claim_references(pod)
        except InvalidPodError as error:
            pending.append(PendingPod(pod_key(pod), [], str(error)))
            continue
        if not refs:
            mapped = extended.get(pod_key(pod))
            if mapped:
                pending.append(PendingPod(pod_key(pod), [], "extended resources " + ", ".join(mapped)))
            continue
        namespace = metadata_of(pod).get("namespace", "")
        claims, note = [], ""
        for ref in refs:
            try:
                name, _ = claim_name_for(pod, ref)
            except (ClaimsNotReady, InvalidPodError) as error:
                note = str(error)
                continue
            if name:
                claims.append(f"{namespace}/{name}")
        waiting = [bindings[key].describe() for key in claims if key in bindings]
        pending.append(PendingPod(pod_key(pod), claims, "; ".join(waiting) if waiting else note))
    return sorted(pending, key=lambda p: p.key)


def build_map(view: ClusterView) -> DeviceMap:
    flying: dict[str, list[str]] = {}
    for entry in view.in_flight:
        who = view.pod_names_by_uid.get(entry.get("podUID") or "", "")
        for device in entry.get("devices") or ():
            flying.setdefault(device, []).append(f"{entry.get('claim')}" + (f" (pod {who})" if who else ""))
    groups: dict[str, list[PoolView]] = {}
    for (driver, pool), members in sorted(_newest_pools(view.slices).items()):
        node = members[0].node_name or SHARED_POOLS
        groups.setdefault(node, []).append(PoolView(driver, pool, members[0].pool_generation, members))
    claims = [claim.raw for claim in view.claims]
    bindings = _bindings(view, claims)
    device_map = DeviceMap(groups, _pending(view.pods, view.extended, bindings), Counter(),
                           _holders(claims), flying, view.taint_rules, classes=view.classes,
                           taken_at=view.taken_at, binding=_device_binding(bindings))
    device_map.count()
    return device_map


def _class_programs(device_class: DeviceClass) -> list[Any] | None:
    """The class's compiled selectors (None: one does not compile, so it accepts nothing here)."""
    programs = device_class.compiled.get(CLASS_SELECTORS)
    if programs is None:
        try:
            programs = [cel.compile(text or "", CLASS_SELECTORS) for text in device_class.selectors]
        except cel.CELError:
            return None
        device_class.compiled[CLASS_SELECTORS] = programs
    return programs


def _accepts(programs: list[Any], device: Any, driver: str) -> bool:
    try:
        view = device.cel_device(driver)
        return all(program.matches(view) for program in programs)
    except (cel.CELError, ValueError):
        return False


def rfc3339(epoch_s: float) -> str:
    return datetime.datetime.fromtimestamp(epoch_s).astimezone().isoformat(timespec="seconds")


# ---- HTML -----------------------------------------------------------------------------------------

def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1b1f24}
h1{font-size:1.4em;margin:0 0 .3em} h2{font-size:1.1em;margin:1.4em 0 .4em}
.legend span,.dev{display:inline-block;border-radius:4px;padding:2px 7px;margin:2px;border:1px solid #0002}
.free{background:#d4f4dd} .allocated{background:#ffd8a8} .inflight{background:#a5d8ff}
.tainted{background:#ffc9c9} .taint{outline:2px dashed #c92a2a} .countersusedup{background:#dee2e6}
.stranded{outline:2px dotted #5f3dc4} .set{display:inline-block;border:1px dashed #adb5bd;border-radius:5px;
padding:1px 5px;margin:2px} .classes{color:#57606a;font-size:.9em} .room{font-weight:bold;color:#2b8a3e}
.node{border:1px solid #d0d7de;border-radius:6px;padding:.4em .8em;margin:.6em 0}
.pool{margin:.3em 0} .pool b{font-family:monospace} small{color:#57606a}
table{border-collapse:collapse} td,th{padding:2px 10px;text-align:left;border-bottom:1px solid #eee}
nav a{margin-right:1em}
"""


def _device_html(device: DeviceView) -> str:
    details = [device.state]
    if device.stranded:
        details.append(f"stranded for the headroom shape: {device.stranded}")
    if device.claims:
        details.append("claim " + ", ".join(device.claims))
    if device.pods:
        details.append("pods " + ", ".join(device.pods))
    if device.pod_groups:
        details.append("podgroups " + ", ".join(device.pod_groups))
    if device.taints:
        details.append("taints " + ", ".join(device.taints))
    if device.binding:
        details.append(device.binding)
    css = device.state.replace(" ", "") + (" taint" if device.taints else "") + (
        " stranded" if device.stranded else "")
    text = _e(device.name)
    if device.claims:
        text += f" <small>{_e(device.claims[0])}</small>"
    return (f'<span class="dev {css}" data-state="{_e(device.state)}" data-device="{_e(device.name)}" '
            f'title="{_e("; ".join(details))}">{text}</span>')


def _page_link(query: Mapping[str, str], page: int, label: str) -> str:
    return f'<a href="{ROUTE}?{_e(urlencode({**query, "page": str(page)}))}">{_e(label)}</a>'


def _pool_html(device_map: DeviceMap, pool: PoolView, stranded: Mapping[str, str]) -> str:
    """A pool's devices; partitions grouped under the counter set they draw on, with what is used of it."""
    views = device_map.devices(pool)
    for view in views:
        view.stranded = stranded.get(f"{pool.driver}/{pool.pool}/{view.name}", "")
    out = [_device_html(view) for view in views if not view.counter_set]
    total, used = device_map.counters.get((pool.driver, pool.pool), ({}, {}))
    for set_name in dict.fromkeys(view.counter_set for view in views if view.counter_set):
        members = "".join(_device_html(view) for view in views if view.counter_set == set_name)
        amounts = total.get(set_name, {})
        taken = used.get(set_name, {})
        usage = ", ".join(f"{name} {taken.get(name, 0)} of {amount} used"
                          for name, amount in sorted(amounts.items()))
        out.append(f'<span class="set" data-set="{_e(set_name)}"><b>{_e(set_name)}</b> '
                   f"<small>{_e(usage)}</small><br>{members}</span>")
    return "".join(out)


def _headroom_html(reports: list[tuple[str, dict[str, Any]]], asked: str) -> list[str]:
    out = ["<h2>Headroom</h2>",
           f'<form method="get" action="{ROUTE}"><label>more pods of shape <input name="headroom" '
           f'value="{_e(asked)}" placeholder="CLASS[:COUNT] or template:NAMESPACE/NAME"></label> '
           "<button>count</button></form>"]
    if not reports:
        out.append("<p><small>no shape asked for (serve --headroom, or the form above)</small></p>")
        return out
    out.append('<table id="headroom"><tr><th>shape</th><th>more pods</th><th>nodes with room</th>'
               "<th>stranded devices</th><th>as of</th></tr>")
    for label, report in reports:
        if "error" in report:
            out.append(f"<tr><td>{_e(label)}</td><td colspan=4>{_e(report['error'])}</td></tr>")
            continue
        stranded = ", ".join(f"{n} {why}" for why, n in report["strandedByReason"].items()) or "none"
        out.append(f'<tr data-shape="{_e(label)}"><td>{_e(report["shape"])}</td>'
                   f'<td class="total">{report["total"]}</td><td>{report["nodesWithRoom"]} of '
                   f'{len(report["nodes"])}</td><td>{_e(stranded)}</td><td>{_e(report["asOf"])}</td></tr>')
    out.append("</table>")
    return out


def render_page(device_map: DeviceMap, *, page: int, per_page: int, node_filter: str,
                headroom: list[tuple[str, dict[str, Any]]] | None = None, asked: str = "") -> str:
    nodes = sorted(device_map.groups, key=lambda n: (n != SHARED_POOLS, n))
    if node_filter:
        nodes = [n for n in nodes if node_filter in n]
    pages = max(1, -(-len(nodes) // per_page))
    page = min(max(page, 1), pages)
    shown = nodes[(page - 1) * per_page: page * per_page]
    totals = device_map.totals
    pool_count = sum(len(p) for p in device_map.groups.values())
    out = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
           "<title>DRA Extender: device map</title>", f"<style>{STYLE}</style></head><body>",
           "<h1>Device map</h1>",
           f'<p class="asof">as of {_e(rfc3339(device_map.taken_at))}</p>',
           f"<p>{sum(totals.values())} device(s) in {pool_count} pool(s) "
           f"on {len(device_map.groups)} node group(s): "
           + ", ".join(f"{totals.get(state, 0)} {state}" for state in STATES) + "</p>",
           '<p class="legend">'
           + "".join(f'<span class="{s.replace(" ", "")}">{s}</span>' for s in STATES)
           + '<span class="taint">has a taint</span>'
           + '<span class="stranded">stranded for the headroom shape</span>'
           + "</p>"]
    out.append(f'<form method="get" action="{ROUTE}"><label>node contains <input name="node" '
               f'value="{_e(node_filter)}"></label> <button>filter</button></form>')

    headroom = headroom or []
    out.extend(_headroom_html(headroom, asked))
    first = next((report for _, report in headroom if "error" not in report), None)
    room = {entry["node"]: entry for entry in first["nodes"]} if first else {}
    stranded = {item["device"]: item["reason"] for entry in room.values() for item in entry["stranded"]}

    out.append(f"<h2>Pending pods that use devices ({len(device_map.pending)})</h2>")
    if device_map.pending:
        out.append('<table id="pending"><tr><th>pod</th><th>claims</th><th></th></tr>')
        for pending in device_map.pending[:MAX_PENDING_LISTED]:
            link = f"/debug/explain?{urlencode({'pod': pending.key, 'format': 'text'})}"
            claims = ", ".join(pending.claims) or ""
            note = f" <small>{_e(pending.note)}</small>" if pending.note else ""
            out.append(f"<tr><td>{_e(pending.key)}</td><td>{_e(claims)}{note}</td>"
                       f'<td><a class="explain" href="{_e(link)}">why pending?</a></td></tr>')
        out.append("</table>")
        if len(device_map.pending) > MAX_PENDING_LISTED:
            out.append(f"<p><small>and {len(device_map.pending) - MAX_PENDING_LISTED} more</small></p>")
    else:
        out.append("<p>none</p>")

    out.append(f"<h2>Nodes {min(len(nodes), (page - 1) * per_page + 1)}-{(page - 1) * per_page + len(shown)} "
               f"of {len(nodes)}</h2>")
    query = {"per_page": str(per_page), **({"node": node_filter} if node_filter else {})}
    nav = []
    if page > 1:
        nav.append(_page_link(query, page - 1, "previous"))
    nav.append(f"<span>page {page} of {pages}</span>")
    if page < pages:
        nav.append(_page_link(query, page + 1, "next"))
    out.append("<nav>" + " ".join(nav) + "</nav>")
    for node in shown:
        uses = device_map.class_use(device_map.groups[node])
        classes = "; ".join(f"{name}: {used} used, {free} free" for name, used, free in uses)
        fits = room.get(node)
        badge = (f' <span class="room" data-room="{fits["count"]}">takes {fits["count"]} more of '
                 f'{_e(first["shape"])}</span>') if fits is not None and first is not None else ""
        out.append(f'<section class="node" data-node="{_e(node)}"><b>{_e(node)}</b>{badge}'
                   + (f' <span class="classes">{_e(classes)}</span>' if classes else ""))
        for pool in device_map.groups[node]:
            out.append(f'<div class="pool" data-pool="{_e(pool.driver)}/{_e(pool.pool)}">'
                       f"<b>{_e(pool.driver)}/{_e(pool.pool)}</b> <small>generation {_e(pool.generation)}, "
                       f"{pool.device_count} device(s)</small><br>"
                       + _pool_html(device_map, pool, stranded) + "</div>")
        out.append("</section>")
    out.append("</body></html>")
    return "\n".join(out)


def _int_query(request: web.Request, name: str, *, default: int, maximum: int) -> int:
    text = request.query.get(name) or str(default)
    # isascii: str.isdigit() is also true of "²" and other digits int() refuses.
    value = int(text) if text.isascii() and text.isdigit() and len(text) < 12 else 0
    if not 1 <= value <= maximum:
        raise wire.BadRequest(f"query parameter {name}: must be a number from 1 to {maximum}, got {text!r}")
    return value


async def _no_icon(_request: web.Request) -> web.Response:
    return web.Response(status=204)


Headroom = Callable[[str], list[tuple[str, dict[str, Any]]]]


def register(app: web.Application, view: Callable[[], ClusterView], headroom: Headroom | None = None) -> None:
    """Add the device map to a debug app; `view` takes the picture it draws (see take_view), and
    `headroom(asked)` gives the headroom reports to show (of `asked`, a shape from the URL, else the
    configured ones); it raises ValueError for a shape it cannot read."""

    async def device_map(request: web.Request) -> web.Response:
        page = _int_query(request, "page", default=1, maximum=10**9)
        per_page = _int_query(request, "per_page", default=DEFAULT_PER_PAGE, maximum=MAX_PER_PAGE)
        node_filter = request.query.get("node", "")
        asked = request.query.get("headroom", "").strip()
        try:
            reports = headroom(asked) if headroom is not None else []
        except ValueError as error:
            raise wire.BadRequest(f"query parameter headroom: {error}") from None
        picture = view()
        text = await asyncio.to_thread(
            lambda: render_page(build_map(picture), page=page, per_page=per_page, node_filter=node_filter,
                                headroom=reports, asked=asked)
        )
        response = web.Response(text=text, content_type="text/html", charset="utf-8")
        response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response

    app.router.add_get(ROUTE, device_map)
    # Browsers ask each origin for an icon; a 404 there is an error in their console.
    app.router.add_get("/favicon.ico", _no_icon)
