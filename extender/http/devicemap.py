"""`GET /debug/ui` on the debug port: a read-only device map for "where are my GPUs".

Every pool and device, grouped by node, coloured by state: free, allocated (with the claim and the
pods or PodGroups it is reserved for, and the device binding conditions still awaited), in flight
(chosen by the extender, not yet seen written by the watch) or tainted (a NoSchedule/NoExecute taint of
its own or of a DeviceTaintRule), and the pending pods that have claims, each linked to its explanation
(/debug/explain), with what a pod waiting for device binding conditions waits for.

One server-rendered HTML page: no scripts, no external assets (it works in an air-gapped cluster; the
Content-Security-Policy forbids loading anything), every value from the cluster escaped. Large
clusters are paginated by node (`?page=N&per_page=M`, `?node=TEXT` filters node names), so a page
stays small at 5,000 nodes; the map itself is built off the event loop.
"""

from __future__ import annotations

import asyncio
import html
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from aiohttp import web

from allocator import DeviceTaintRule, ResourceSlice
from common.claimrefs import is_group_reference, pod_key
from common.objects import metadata_of
from extender.http import wire
from extender.plugin.bindingconditions import BindingPolicy, ClaimBinding, State, claim_binding
from extender.plugin.podclaims import ClaimsNotReady, InvalidPodError, claim_name_for, claim_references

if TYPE_CHECKING:
    from extender.state.cache import ClusterCache

ROUTE = "/debug/ui"
DEFAULT_PER_PAGE = 50
MAX_PER_PAGE = 500
MAX_PENDING_LISTED = 200
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
SHARED_POOLS = "(not node-local)"
STATES = ("free", "allocated", "in flight", "tainted")
CONTENT_SECURITY_POLICY = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'self'"


@dataclass
class DeviceView:
    name: str
    state: str = "free"
    claims: list[str] = field(default_factory=list)
    pods: list[str] = field(default_factory=list)
    pod_groups: list[str] = field(default_factory=list)  # PodGroups a workload claim is reserved for
    taints: list[str] = field(default_factory=list)
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
    binding: dict[str, str] = field(default_factory=dict)  # device id -> DeviceView.binding

    def _taints(self, pool: PoolView, device: Any) -> list[Mapping[str, Any]]:
        taints = list(device.taints)
        for rule in self.taint_rules:
            if rule.matches(pool.driver, pool.pool, device.name):
                taints.append(rule.taint)
        return taints

    def _state(self, ident: str, taints: list[Mapping[str, Any]]) -> str:
        if ident in self.held:
            return "allocated"
        if ident in self.flying:
            return "in flight"
        if any(t.get("effect") in BLOCKING_EFFECTS for t in taints):
            return "tainted"
        return "free"

    def count(self) -> None:
        for pools in self.groups.values():
            for pool in pools:
                prefix = f"{pool.driver}/{pool.pool}/"
                for slice_ in pool.slices:
                    for device in slice_.devices:
                        taints = self._taints(pool, device) if device.taints or self.taint_rules else []
                        self.totals[self._state(prefix + device.name, taints)] += 1

    def devices(self, pool: PoolView) -> list[DeviceView]:
        views = []
        for slice_ in pool.slices:
            for device in slice_.devices:
                ident = f"{pool.driver}/{pool.pool}/{device.name}"
                taints = self._taints(pool, device)
                view = DeviceView(device.name, self._state(ident, taints),
                                  taints=[_taint_text(t) for t in taints])
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
    claims: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    in_flight: list[dict[str, Any]]
    taint_rules: list[DeviceTaintRule]
    pod_names_by_uid: dict[str, str]
    # Device binding conditions: the binding timeout (None with the feature gates off) and the time.
    binding_timeout_s: float | None = None
    now: float = 0.0


def take_view(cache: ClusterCache, in_flight: list[dict[str, Any]],
              binding: BindingPolicy | None = None) -> ClusterView:
    """What the map shows, taken from the cache and the allocations in flight at one moment."""
    pods = cache.valid_objects("Pod")
    wanted = {entry.get("podUID") for entry in in_flight}
    names: dict[str, str] = {}
    for pod in pods:
        uid = metadata_of(pod).get("uid")
        if uid in wanted and isinstance(uid, str):
            names[uid] = pod_key(pod)
    enabled = binding is not None and binding.enabled
    return ClusterView(list(cache.inventory.slices()), cache.valid_objects("ResourceClaim"), pods, in_flight,
                       cache.taint_rules(), names,
                       binding.timeout_s if binding is not None and enabled else None,
                       binding.wall_clock() if binding is not None and enabled else 0.0)


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


def _bindings(view: ClusterView) -> dict[str, ClaimBinding]:
    """Claim key -> the binding state of the allocated claims whose devices have binding conditions and
    are not all ready."""
    if view.binding_timeout_s is None:
        return {}
    found = {}
    for claim in view.claims:
        state = claim_binding(claim, timeout_s=view.binding_timeout_s, now=view.now)
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


def _pending(pods: Iterable[Mapping[str, Any]], bindings: Mapping[str, ClaimBinding]) -> list[PendingPod]:
    pending = []
    for pod in pods:
        spec = pod.get("spec") or {}
        phase = (pod.get("status") or {}).get("phase")
        if spec.get("nodeName") or phase in ("Succeeded", "Failed"):
            continue
        try:
            refs = claim_references(pod)
        except InvalidPodError as error:
            pending.append(PendingPod(pod_key(pod), [], str(error)))
            continue
        if not refs:
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
    bindings = _bindings(view)
    device_map = DeviceMap(groups, _pending(view.pods, bindings), Counter(), _holders(view.claims), flying,
                           view.taint_rules, _device_binding(bindings))
    device_map.count()
    return device_map


# ---- HTML -----------------------------------------------------------------------------------------

def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1b1f24}
h1{font-size:1.4em;margin:0 0 .3em} h2{font-size:1.1em;margin:1.4em 0 .4em}
.legend span,.dev{display:inline-block;border-radius:4px;padding:2px 7px;margin:2px;border:1px solid #0002}
.free{background:#d4f4dd} .allocated{background:#ffd8a8} .inflight{background:#a5d8ff}
.tainted{background:#ffc9c9} .taint{outline:2px dashed #c92a2a}
.node{border:1px solid #d0d7de;border-radius:6px;padding:.4em .8em;margin:.6em 0}
.pool{margin:.3em 0} .pool b{font-family:monospace} small{color:#57606a}
table{border-collapse:collapse} td,th{padding:2px 10px;text-align:left;border-bottom:1px solid #eee}
nav a{margin-right:1em}
"""


def _device_html(device: DeviceView) -> str:
    details = [device.state]
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
    css = device.state.replace(" ", "") + (" taint" if device.taints else "")
    text = _e(device.name)
    if device.claims:
        text += f" <small>{_e(device.claims[0])}</small>"
    return (f'<span class="dev {css}" data-state="{_e(device.state)}" data-device="{_e(device.name)}" '
            f'title="{_e("; ".join(details))}">{text}</span>')


def _page_link(query: Mapping[str, str], page: int, label: str) -> str:
    return f'<a href="{ROUTE}?{_e(urlencode({**query, "page": str(page)}))}">{_e(label)}</a>'


def render_page(device_map: DeviceMap, *, page: int, per_page: int, node_filter: str) -> str:
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
           f"<p>{sum(totals.values())} device(s) in {pool_count} pool(s) "
           f"on {len(device_map.groups)} node group(s): "
           + ", ".join(f"{totals.get(state, 0)} {state}" for state in STATES) + "</p>",
           '<p class="legend">'
           + "".join(f'<span class="{s.replace(" ", "")}">{s}</span>' for s in STATES)
           + '<span class="taint">has a taint</span></p>']
    out.append(f'<form method="get" action="{ROUTE}"><label>node contains <input name="node" '
               f'value="{_e(node_filter)}"></label> <button>filter</button></form>')

    out.append(f"<h2>Pending pods with claims ({len(device_map.pending)})</h2>")
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
        out.append(f'<section class="node" data-node="{_e(node)}"><b>{_e(node)}</b>')
        for pool in device_map.groups[node]:
            out.append(f'<div class="pool" data-pool="{_e(pool.driver)}/{_e(pool.pool)}">'
                       f"<b>{_e(pool.driver)}/{_e(pool.pool)}</b> <small>generation {_e(pool.generation)}, "
                       f"{pool.device_count} device(s)</small><br>"
                       + "".join(_device_html(d) for d in device_map.devices(pool)) + "</div>")
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


def register(app: web.Application, view: Callable[[], ClusterView]) -> None:
    """Add the device map to a debug app; `view` takes the picture it draws (see take_view)."""

    async def device_map(request: web.Request) -> web.Response:
        page = _int_query(request, "page", default=1, maximum=10**9)
        per_page = _int_query(request, "per_page", default=DEFAULT_PER_PAGE, maximum=MAX_PER_PAGE)
        node_filter = request.query.get("node", "")
        picture = view()
        text = await asyncio.to_thread(
            lambda: render_page(build_map(picture), page=page, per_page=per_page, node_filter=node_filter)
        )
        response = web.Response(text=text, content_type="text/html", charset="utf-8")
        response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response

    app.router.add_get(ROUTE, device_map)
    # Browsers ask each origin for an icon; a 404 there is an error in their console.
    app.router.add_get("/favicon.ico", _no_icon)
