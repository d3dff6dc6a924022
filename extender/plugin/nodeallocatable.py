"""Node allocatable resources backed by DRA: kube-scheduler's side of the DRANodeAllocatableResources
gate (alpha, off by default in 1.37), which the extender must do itself.

A device may declare `nodeAllocatableResources`: what allocating it costs the node in cpu, memory or
hugepages (a CPU driver's cores are node CPUs; a GPU pins host memory). A `mapping` turns the
allocation into a quantity (per device, or per unit of consumed capacity) that belongs to the claim;
an `overhead` is added for every pod using the claim (`perPod`) and per referencing container
(`perContainer`). kube-scheduler's DynamicResources plugin, disabled when we schedule devices, then:

- refuses to let two pods use a claim with a mapped device (the mapped resources would be counted once
  but shared by two pods' cgroups): `unshareable`, a verdict for every node;
- at filter, adds the devices' footprint on the node to the pod's requests and checks them against the
  node's allocatable minus what its pods already request (`NodeAllocatable.fit`);
- at bind, writes the footprint to `pod.status.nodeAllocatableResourceClaimStatuses` (kubelet sizes the
  cgroups from it; kube-scheduler, with the gate on, counts it in the node's requested resources).

kube-scheduler's NodeResourcesFit still checks the pod's containers alone; only the claims' share is
ours to add. What the node's pods request comes from our cache (`NodeUsage`: bound pods, and pods we
bound that the watch has not shown bound yet). Deliberate differences from upstream, each for the same
reason (the extender sees the cluster, not kube-scheduler's snapshot): pods kube-scheduler assumed on a
node but has not bound yet are not known to us (kubelet's admission is then the last guard); bound
pods count their spec requests, not a resize in progress (status.containerStatuses[].allocatedResources
is not kept); pod-level resources are always honoured (PodLevelResources, beta and on by default); the
special claim of extended resources backed by DRA adds no footprint; a container listed twice for one
claim (two pod entries naming the same claim) is listed once.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, NamedTuple

from allocator import Device, Inventory, Node, Quantity, ResourceClaim, ResourceSlice, node_matches_selector
from common.objects import metadata_of

if TYPE_CHECKING:
    from extender.state.cache import ClusterCache

GATE = "DRANodeAllocatableResources"
NODE_USAGE_INDEX = "node-usage"
STATUS_FIELD = "nodeAllocatableResourceClaimStatuses"
# Pod-level requests can stand for the containers' sum of these (PodLevelResources).
POD_LEVEL_RESOURCES = ("cpu", "memory")
# How long a pod we bound counts on its node before the watch shows it there (it always does sooner;
# this only bounds what a lost event could cost).
ASSUMED_TTL_S = 120.0
INT64_MAX = 2**63 - 1
SHARED_MESSAGE = "node allocatable resource claim {name} has a mapped device and cannot be shared across pods"


class NodeAllocatableError(Exception):
    """Data the footprint cannot be worked out from (a device gone from its pool, a mapping by capacity
    on an allocation without consumed capacity): an error, as upstream's Error status."""


class ClaimUse(NamedTuple):
    """A claim of the pod with the allocation it has or gets on the node."""

    claim: ResourceClaim
    allocation: Mapping[str, Any]


def fits_node_resource(name: str) -> bool:
    """The resources upstream's plugin checks against the node (its nodeFitsResources)."""
    return name in ("cpu", "memory", "ephemeral-storage") or name.startswith("hugepages-")


def _results(allocation: Mapping[str, Any]) -> list[dict[str, Any]]:
    results = (allocation.get("devices") or {}).get("results") or []
    return [result for result in results if isinstance(result, dict)]


def _slice_serves(slice_: ResourceSlice, node: Node) -> bool:
    if slice_.node_name:
        return slice_.node_name == node.name
    if slice_.all_nodes:
        return True
    if slice_.node_selector is not None:
        return node_matches_selector(node, slice_.node_selector)
    return slice_.per_device_node_selection is True


def _device_serves(device: Device, node: Node) -> bool:
    if device.node_name:
        return device.node_name == node.name
    if device.all_nodes:
        return True
    return device.node_selector is not None and node_matches_selector(node, device.node_selector)


def _device(inventory: Inventory, result: Mapping[str, Any], node: Node | None) -> Device:
    """The device an allocation result names, as seen from `node` (any node: None). Raises
    NodeAllocatableError with upstream's words when there is none."""
    driver, pool, name = (str(result.get(key) or "") for key in ("driver", "pool", "device"))
    for slice_, device in inventory.devices_named(driver, pool, name):
        if node is None:
            return device
        if not _slice_serves(slice_, node):
            continue
        if slice_.per_device_node_selection and not _device_serves(device, node):
            raise NodeAllocatableError(f"device {name} does not match node")
        return device
    raise NodeAllocatableError(f"device {name} not found in pool {pool} for driver {driver}")


def claim_has_mapped_device(inventory: Inventory, allocation: Mapping[str, Any]) -> bool:
    """Does the allocation hold a device whose nodeAllocatableResources map a resource? Devices that
    cannot be found count as not mapped, as upstream."""
    for result in _results(allocation):
        try:
            device = _device(inventory, result, None)
        except NodeAllocatableError:
            continue
        if any(entry.mapped for entry in device.node_allocatable.values()):
            return True
    return False


def unshareable(claim: ResourceClaim, allocation: Mapping[str, Any], inventory: Inventory) -> str | None:
    """Upstream's sharing rule: a claim with a mapped device is one pod's. The message for a pod that
    would share it (a verdict for every node), or None when the claim may be shared."""
    if claim_has_mapped_device(inventory, allocation):
        return SHARED_MESSAGE.format(name=claim.name)
    return None


# ---- the footprint of a pod's claims -----------------------------------------------------------------

def _add(totals: dict[str, Quantity], name: str, value: Quantity) -> None:
    current = totals.get(name)
    totals[name] = value if current is None or current.sign() == 0 else current + value


def _times(value: Quantity, factor: Quantity) -> Quantity:
    return Quantity.from_fraction(value.value * factor.value, value.format)


def _claim_footprint(use: ClaimUse, devices: Sequence[tuple[dict[str, Any], Device]]
                     ) -> tuple[dict[str, Quantity], dict[str, dict[str, Quantity]]]:
    """The claim's mapped quantities and overheads by resource name."""
    mapped: dict[str, Quantity] = {}
    overhead: dict[str, dict[str, Quantity]] = {}
    claim = use.claim
    for result, device in devices:
        for resource, entry in device.node_allocatable.items():
            if entry.capacity_key is not None:
                consumed = result.get("consumedCapacity")
                if not isinstance(consumed, dict):
                    raise NodeAllocatableError(
                        f"claim {claim.namespace}/{claim.name}, device {result.get('device')}: "
                        f"ConsumedCapacity is nil, but Capacity key '{entry.capacity_key}' is set in "
                        f"NodeAllocatableResources for resource {resource}")
                if entry.capacity_key in consumed:  # otherwise this mapping does not apply to the allocation
                    try:
                        amount = _parse(str(consumed[entry.capacity_key]))
                    except ValueError as error:
                        raise NodeAllocatableError(
                            f"claim {claim.namespace}/{claim.name}, device {result.get('device')}: "
                            f"consumedCapacity[{entry.capacity_key}]: {error}") from None
                    if entry.capacity_multiplier is not None:
                        amount = _times(amount, entry.capacity_multiplier)
                    _add(mapped, resource, amount)
            elif entry.device_multiplier is not None:
                _add(mapped, resource, entry.device_multiplier)
            for part, value in (("perPod", entry.per_pod), ("perContainer", entry.per_container)):
                if value is not None:
                    _add(overhead.setdefault(resource, {}), part, value)
    return mapped, overhead


def claim_statuses(pod: Mapping[str, Any], uses: Iterable[ClaimUse], pod_claim_names: Mapping[str, set[str]],
                   inventory: Inventory, node: Node) -> list[dict[str, Any]]:
    """`pod.status.nodeAllocatableResourceClaimStatuses` for the claims' allocations on `node`, sorted by
    claim name; empty when no device of theirs declares node allocatable resources.

    `pod_claim_names`: by claim UID, the pod's `spec.resourceClaims[].name` entries naming it (which
    containers use the claim). Raises NodeAllocatableError for data upstream refuses with an error."""
    statuses: dict[str, dict[str, Any]] = {}
    for use in uses:
        found: list[tuple[dict[str, Any], Device]] = []
        missing: list[tuple[dict[str, Any], NodeAllocatableError]] = []
        for result in _results(use.allocation):
            try:
                found.append((result, _device(inventory, result, node)))
            except NodeAllocatableError as error:
                missing.append((result, error))
        if not any(device.node_allocatable for _, device in found):
            continue  # not a node allocatable claim: upstream passes over its devices
        if missing:
            result, problem = missing[0]
            raise NodeAllocatableError(
                f"claim {use.claim.namespace}/{use.claim.name}, device {result.get('device')}, driver "
                f"{result.get('driver')}: {problem}")
        mapped, overhead = _claim_footprint(use, found)
        if not mapped and not overhead:
            continue
        status: dict[str, Any] = {"resourceClaimName": use.claim.name}
        if mapped:
            status["mapping"] = [{"name": name, "quantity": str(mapped[name])} for name in sorted(mapped)]
        if overhead:
            status["overhead"] = [
                {"name": name, **{part: str(value) for part, value in overhead[name].items()}}
                for name in sorted(overhead)]
        status["containers"] = _containers_using(pod, pod_claim_names.get(use.claim.uid, set()))
        statuses[use.claim.name] = status
    return [_ordered(statuses[name]) for name in sorted(statuses)]


def _ordered(status: dict[str, Any]) -> dict[str, Any]:
    """Fields in the API's order, and no empty list (the API omits them)."""
    return {key: status[key] for key in ("resourceClaimName", "containers", "mapping", "overhead")
            if status.get(key)}


def _containers_using(pod: Mapping[str, Any], names: set[str]) -> list[str]:
    spec = pod.get("spec") or {}
    using: list[str] = []
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or ():
            if not isinstance(container, dict):
                continue
            claims = (container.get("resources") or {}).get("claims") or ()
            if any(isinstance(ref, dict) and ref.get("name") in names for ref in claims):
                name = container.get("name")
                if isinstance(name, str) and name not in using:
                    using.append(name)
    return using


# ---- what a pod requests -----------------------------------------------------------------------------

@functools.lru_cache(maxsize=4096)
def _parse(text: str) -> Quantity:
    """Quantity.parse, remembered: every node check reads the same few quantities again."""
    return Quantity.parse(text)


def _quantities(raw: Any) -> dict[str, Quantity]:
    """A ResourceList; values that do not parse are left out (the API server never stores them)."""
    values: dict[str, Quantity] = {}
    if isinstance(raw, dict):
        for name, text in raw.items():
            try:
                values[str(name)] = _parse(str(text))
            except ValueError:
                continue
    return values


def _sum(into: dict[str, Quantity], other: Mapping[str, Quantity]) -> None:
    for name, value in other.items():
        _add(into, name, value)


def _at_least(into: dict[str, Quantity], other: Mapping[str, Quantity]) -> None:
    for name, value in other.items():
        if name not in into or into[name] < value:
            into[name] = value


def container_requests(pod: Mapping[str, Any], field: str = "requests") -> dict[str, Quantity]:
    """The containers' requests (or `field` "limits") the way kube-scheduler adds them up: long-lived
    containers and sidecars summed, each plain init container against the sidecars started before it,
    the larger wins."""
    spec = pod.get("spec") or {}
    total: dict[str, Quantity] = {}
    for container in spec.get("containers") or ():
        if isinstance(container, dict):
            _sum(total, _quantities((container.get("resources") or {}).get(field)))
    sidecars: dict[str, Quantity] = {}
    init_peak: dict[str, Quantity] = {}
    for container in spec.get("initContainers") or ():
        if not isinstance(container, dict):
            continue
        requests = _quantities((container.get("resources") or {}).get(field))
        if container.get("restartPolicy") == "Always":
            _sum(total, requests)
            _sum(sidecars, requests)
            _at_least(init_peak, sidecars)
        else:
            running = dict(requests)
            _sum(running, sidecars)
            _at_least(init_peak, running)
    _at_least(total, init_peak)
    return total


def claims_requests(statuses: Iterable[Any], *, container: str | None = None) -> dict[str, Quantity]:
    """What the claims of nodeAllocatableResourceClaimStatuses add to the pod's requests: the mapped
    quantities, each overhead's perPod and perContainer times the containers listed. With `container`:
    what they add to that container's limits (the claims it uses: mapped, perPod and perContainer
    once)."""
    total: dict[str, Quantity] = {}
    for status in statuses:
        if not isinstance(status, dict):
            continue
        if container is not None:
            if container not in (status.get("containers") or ()):
                continue
            status = {**status, "containers": [container]}
        for entry in status.get("mapping") or ():
            if isinstance(entry, dict):
                _sum(total, _quantities({entry.get("name"): entry.get("quantity")}))
        containers = len(status.get("containers") or ())
        for entry in status.get("overhead") or ():
            if not isinstance(entry, dict):
                continue
            name = str(entry.get("name"))
            _sum(total, _quantities({name: entry.get("perPod")}))
            per_container = _quantities({name: entry.get("perContainer")}).get(name)
            if per_container is not None and containers:
                _add(total, name, Quantity(per_container.nanos * containers, per_container.format))
    return total


def pod_level_requests(pod: Mapping[str, Any]) -> dict[str, Quantity]:
    """The pod-level requests that stand for the containers' (cpu, memory, hugepages-*)."""
    requests = _quantities(((pod.get("spec") or {}).get("resources") or {}).get("requests"))
    return {name: value for name, value in requests.items()
            if name in POD_LEVEL_RESOURCES or name.startswith("hugepages-")}


def pod_requests(pod: Mapping[str, Any], statuses: Iterable[Any]) -> dict[str, Quantity]:
    """The pod's requests with its claims' node allocatable resources (`statuses`), pod-level requests
    and pod overhead: upstream's PodRequests with the DRA statuses."""
    total = container_requests(pod)
    _sum(total, claims_requests(statuses))
    total.update(pod_level_requests(pod))
    _sum(total, _quantities((pod.get("spec") or {}).get("overhead")))
    return total


def _is_hugepages(name: str) -> bool:
    return name.startswith("hugepages-")


def pod_level_shortfall(pod: Mapping[str, Any], statuses: Sequence[Any]) -> str | None:
    """Upstream refuses a pod whose pod-level requests do not cover its containers' plus its claims'
    node allocatable resources, or whose pod-level limits do not cover the containers' hugepages limits
    plus the claims' hugepages or one container's limit plus what its claims add (API validation could
    not know the claims' part)."""
    pod_level = pod_level_requests(pod)
    if pod_level:
        containers = container_requests(pod)
        _sum(containers, claims_requests(statuses))
        for name in sorted(pod_level):
            if name in containers and pod_level[name] < containers[name]:
                return (f"pod level request for {name} is insufficient to cover the aggregated container and "
                        "node-allocatable DRA requests")
    limits = _quantities(((pod.get("spec") or {}).get("resources") or {}).get("limits"))
    if not limits:
        return None
    aggregated = container_requests(pod, "limits")
    for name, value in claims_requests(statuses).items():
        if name in aggregated or _is_hugepages(name):  # kubelet sets no limit the spec does not
            _add(aggregated, name, value)
    for name in sorted(aggregated):
        if _is_hugepages(name) and name in limits and limits[name] < aggregated[name]:
            return (f"pod level limit for {name} is insufficient to cover the aggregated container and "
                    "node-allocatable DRA limits")
    for container in (pod.get("spec") or {}).get("containers") or ():
        if not isinstance(container, dict):
            continue
        own = claims_requests(statuses, container=str(container.get("name")))
        for name, value in sorted(_quantities((container.get("resources") or {}).get("limits")).items()):
            if _is_hugepages(name) or name not in limits:
                continue
            effective = value + own[name] if name in own else value
            if limits[name] < effective:
                return (f"pod level limit for {name} is insufficient to cover the limit and DRA overhead for "
                        f"container {container.get('name')}")
    return None


def as_fit_units(requests: Mapping[str, Quantity]) -> dict[str, int]:
    """Only the resources checked against the node, in kube-scheduler's units: cpu in millicores, the
    others in whole units rounded up."""
    return {name: _rounded_up(value.nanos, 1_000_000 if name == "cpu" else 1_000_000_000)
            for name, value in requests.items() if fits_node_resource(name)}


def _rounded_up(nanos: int, unit: int) -> int:
    """nanos / unit rounded away from zero (Quantity.MilliValue and Value), in integers only."""
    return -(-nanos // unit) if nanos >= 0 else nanos // unit


def _shown(name: str, amount: int) -> str:
    if name == "cpu":
        return str(Quantity.from_fraction(Fraction(amount, 1000)))
    return str(Quantity.from_fraction(amount, "BinarySI"))


# ---- what the node's pods request ----------------------------------------------------------------------

class _Counted(NamedTuple):
    node: str
    uid: str
    requests: dict[str, int]


class NodeUsage:
    """What the pods on each node request (in fit units), as kube-scheduler's NodeInfo counts it: every
    pod bound to the node and not finished, with its claims' node allocatable resources; plus pods we
    bound whose binding the watch has not delivered yet. Fed by the cache (only with the gate on)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._pods: dict[str, _Counted] = {}            # pod key -> where it counts
        self._keys_by_uid: dict[str, str] = {}
        self._by_node: dict[str, dict[str, int]] = {}
        self._assumed: dict[str, tuple[_Counted, float]] = {}  # pod uid -> (counted, expiry)

    def update(self, key: str, pod: Mapping[str, Any]) -> None:
        self.remove(key)
        meta = metadata_of(pod)
        uid = str(meta.get("uid") or "")
        node = (pod.get("spec") or {}).get("nodeName")
        self._assumed.pop(uid, None)
        if not isinstance(node, str) or not node:
            return
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return  # kube-scheduler does not count finished pods either
        statuses = (pod.get("status") or {}).get(STATUS_FIELD)
        requests = pod_requests(pod, statuses if isinstance(statuses, list) else ())
        counted = _Counted(node, uid, as_fit_units(requests))
        self._pods[key] = counted
        self._keys_by_uid[uid] = key
        self._change(counted, +1)

    def remove(self, key: str) -> None:
        counted = self._pods.pop(key, None)
        if counted is None:
            return
        if self._keys_by_uid.get(counted.uid) == key:
            del self._keys_by_uid[counted.uid]
        self._assumed.pop(counted.uid, None)
        self._change(counted, -1)

    def assume(self, uid: str, node: str, requests: dict[str, int]) -> None:
        """A pod we just bound: it counts on `node` until the watch shows it there."""
        key = self._keys_by_uid.get(uid)
        if key is not None and self._pods[key].node == node:
            return  # the watch was quicker
        self._assumed[uid] = (_Counted(node, uid, requests), self._clock() + ASSUMED_TTL_S)

    def requested(self, node: str, *, evicting: Collection[str] = ()) -> dict[str, int]:
        """What the node's pods request; without the pods whose UIDs are in `evicting` (preemption's
        victims)."""
        total = dict(self._by_node.get(node) or {})
        for uid in evicting:
            counted = self._pods.get(self._keys_by_uid.get(uid, ""))
            if counted is not None and counted.node == node:
                for name, amount in counted.requests.items():
                    total[name] = total.get(name, 0) - amount
        if self._assumed:
            now = self._clock()
            for uid, (counted, expiry) in list(self._assumed.items()):
                if expiry <= now:
                    del self._assumed[uid]
                elif counted.node == node and uid not in evicting:
                    for name, amount in counted.requests.items():
                        total[name] = total.get(name, 0) + amount
        return total

    def _change(self, counted: _Counted, sign: int) -> None:
        totals = self._by_node.setdefault(counted.node, {})
        for name, amount in counted.requests.items():
            totals[name] = totals.get(name, 0) + sign * amount
            if not totals[name]:
                del totals[name]
        if not totals:
            del self._by_node[counted.node]


# ---- the check -----------------------------------------------------------------------------------------

_UPSTREAM_ORDER = {"cpu": 0, "memory": 1, "ephemeral-storage": 2}


@dataclass(frozen=True)
class NodeFit:
    """The pod's node allocatable footprint on one node and whether the node can hold it."""

    statuses: list[dict[str, Any]]
    requests: dict[str, int]  # the pod's, in fit units, with the claims' part
    problem: str | None = None
    unresolvable: bool = False
    # Upstream's words for the problem: its first reason only ("Insufficient cpu"), as an extender
    # gives one message per node where the in-tree plugin's status may list several.
    words: str | None = None


def node_allocatable(node: Node) -> dict[str, int]:
    return as_fit_units(_quantities(node.allocatable))


class Demand(NamedTuple):
    """The pod's requests (fit units) with one footprint of its claims."""

    requests: dict[str, int]
    claims_part: dict[str, int]  # what the claims add
    shortfall: str | None  # the pod-level resources do not cover it (upstream's words)


class PodDemand:
    """A pod's requests per footprint of its claims, each worked out once: a filter checks many nodes
    whose devices give the pod the same footprint."""

    __slots__ = ("_by_footprint", "pod")
    MAX_FOOTPRINTS = 64

    def __init__(self, pod: Mapping[str, Any]) -> None:
        self.pod = pod
        self._by_footprint: dict[str, Demand] = {}

    def of(self, statuses: list[dict[str, Any]]) -> Demand:
        """Raises NodeAllocatableError for requests beyond what kube-scheduler can add up."""
        key = repr(statuses)
        found = self._by_footprint.get(key)
        if found is None:
            requests = as_fit_units(pod_requests(self.pod, statuses))
            for name, amount in requests.items():
                if amount > INT64_MAX:
                    # kube-scheduler holds requests in int64 (millicores for cpu); beyond that its sums wrap.
                    unit = "millicores" if name == "cpu" else "units"
                    raise NodeAllocatableError(
                        f"{name} requested with the claims' node allocatable resources is "
                        f"{_shown(name, amount)}: more than {INT64_MAX} {unit}")
            found = Demand(requests, as_fit_units(claims_requests(statuses)),
                           pod_level_shortfall(self.pod, statuses))
            if len(self._by_footprint) >= self.MAX_FOOTPRINTS:
                self._by_footprint.clear()
            self._by_footprint[key] = found
        return found


def fit(demand: PodDemand, uses: Iterable[ClaimUse], pod_claim_names: Mapping[str, set[str]],
        inventory: Inventory, node: Node, usage: NodeUsage, *,
        evicting: Collection[str] = ()) -> NodeFit | None:
    """Can `node` hold the pod (`demand`) with its claims' node allocatable resources (once the pods
    whose UIDs are in `evicting` are gone)? None when no device of the pod's claims declares any
    (kube-scheduler's NodeResourcesFit alone decides then). Raises NodeAllocatableError."""
    statuses = claim_statuses(demand.pod, uses, pod_claim_names, inventory, node)
    if not statuses:
        return None
    requests, claims_part, shortfall = demand.of(statuses)
    if shortfall is not None:
        return NodeFit(statuses, requests, shortfall, unresolvable=True)
    allocatable = node_allocatable(node)
    requested = usage.requested(node.name, evicting=evicting)
    problems = []
    unresolvable = False
    short: list[str] = []
    for name in sorted(requests):
        wanted = requests[name]
        capacity, used = allocatable.get(name, 0), requested.get(name, 0)
        if wanted <= 0 or wanted <= capacity - used:
            continue
        short.append(name)
        unresolvable = unresolvable or wanted > capacity
        through_claims = _shown(name, claims_part.get(name, 0))
        problems.append(
            f"Insufficient {name}: the pod requests {_shown(name, wanted)} ({through_claims} of it for its "
            f"claims' devices), the node has {_shown(name, max(capacity - used, 0))} of "
            f"{_shown(name, capacity)} allocatable free")
    # Upstream checks cpu, memory and ephemeral-storage in that order, then hugepages.
    first = min(short, key=lambda name: (_UPSTREAM_ORDER.get(name, len(_UPSTREAM_ORDER)), name), default=None)
    return NodeFit(statuses, requests, "; ".join(problems) or None, unresolvable,
                   f"Insufficient {first}" if first is not None else None)


def node_usage(cache: ClusterCache) -> NodeUsage | None:
    """The cache's index of what pods request on each node; None with the gate off, where nothing
    reads it and keeping it would cost every pod event."""
    if not cache.features.enabled(GATE):
        return None
    return cache.pod_index(NODE_USAGE_INDEX, NodeUsage)
