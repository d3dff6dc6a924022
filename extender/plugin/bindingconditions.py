"""Device binding conditions (DRADeviceBindingConditions): a pod is bound only once the devices it got
are ready for it.

A device may declare `bindingConditions` and `bindingFailureConditions` (condition types). The allocator
copies them into the claim's allocation result, and we stamp `allocationTimestamp`. From then on the
device's driver (or a controller attaching the device: network-attached, composable, fabric devices)
reports on the device in the claim's `status.devices[].conditions`:

- every binding condition of every allocated device True: the pod may be bound;
- a binding failure condition True: the claim is deallocated (its device statuses cleared with it) and
  the pod scheduled again, possibly elsewhere;
- still not ready `--binding-timeout` after `allocationTimestamp`: the same.

This module holds the state of one claim as a pure function of the claim and the time
(`ClaimBinding`), what a pod's own claims allow (`release_blocker`), and the backstop that frees a
failed claim no bind settles (`BindingSweeper`). How bind waits across calls, restarts and leaders is
in docs/architecture.md ("Binding conditions") and extender.plugin.scheduling.Scheduler.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from allocator import ResourceClaim
from common.claimrefs import group_name_of, is_group_reference, pod_key, pod_uid
from common.objects import metadata_of
from extender.plugin.authority import Authority
from extender.state.cache import ClaimWatch, ClusterCache

log = logging.getLogger(__name__)

DEFAULT_BINDING_TIMEOUT_S = 600.0  # upstream's DynamicResourcesArgs.bindingTimeout default
# How long one bind call waits for the conditions before it answers kube-scheduler with an error (which
# retries the pod after its backoff while the claims stay allocated and reserved). Below kube-scheduler's
# extender httpTimeout (5 s unless set, 10 s in deploy/) with room for the bind's own writes.
DEFAULT_BIND_WAIT_S = 3.0
GATES = ("DRADeviceBindingConditions", "DRAResourceClaimDeviceStatus")
# How long a claim stays failed or timed out before the sweeper frees it: by then kube-scheduler has
# retried its pod (backoff at most 10 s by default) and bind or filter would have done it, saying so.
SWEEP_GRACE_S = 30.0
EVENT_PENDING = "BindingConditionsPending"  # upstream's reason for the same event
EVENT_FAILED = "BindingConditionsFailed"


class State(StrEnum):
    READY = "ready"          # every binding condition of every device is True
    PENDING = "pending"      # some are not True yet
    FAILED = "failed"        # a binding failure condition is True
    TIMED_OUT = "timed out"  # not ready the binding timeout after allocationTimestamp


SETTLED_BADLY = frozenset({State.FAILED, State.TIMED_OUT})


@dataclass(frozen=True)
class FailedCondition:
    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class DeviceBinding:
    """One allocated device with binding conditions: those not True yet, and the failure conditions that
    are True."""

    device: str  # driver/pool/device
    pending: tuple[str, ...]
    failed: tuple[FailedCondition, ...]


@dataclass(frozen=True)
class ClaimBinding:
    key: str
    uid: str
    state: State
    devices: tuple[DeviceBinding, ...]   # the devices of the allocation that have binding conditions
    allocated_at: float | None           # allocationTimestamp (seconds since the epoch)
    timeout_s: float

    @property
    def deadline(self) -> float | None:
        return self.allocated_at + self.timeout_s if self.allocated_at is not None else None

    def describe(self) -> str:
        """What the state is, naming the claim, the device and the conditions. Only a timeout says
        "binding timeout" (upstream's words, which its tests and users look for)."""
        if self.state == State.FAILED:
            device = next(d for d in self.devices if d.failed)
            failed = device.failed[0]
            why = ": ".join(part for part in (failed.reason, failed.message) if part)
            return (f"device binding failed: claim {self.key}, device {device.device}: binding failure "
                    f"condition {failed.type} is True" + (f" ({why})" if why else ""))
        waiting = [d for d in self.devices if d.pending]
        named = "; ".join(f"device {d.device}: {', '.join(d.pending)} not True" for d in waiting)
        if self.state == State.TIMED_OUT:
            return (f"device binding timeout: claim {self.key}, {named} {self.timeout_s:g}s after its "
                    f"allocation at {format_time(self.allocated_at)}")
        if self.state == State.PENDING:
            until = f" (until {format_time(self.deadline)})" if self.deadline is not None else ""
            return f"waiting for device binding conditions: claim {self.key}, {named} yet{until}"
        return f"claim {self.key}: every device binding condition is True"

    def to_dict(self) -> dict[str, Any]:
        """For explain and /debug/state."""
        return {
            "claim": self.key,
            "state": str(self.state),
            "allocatedAt": format_time(self.allocated_at) if self.allocated_at is not None else None,
            "deadline": format_time(self.deadline) if self.deadline is not None else None,
            "devices": [{"device": d.device, "pending": list(d.pending),
                         "failed": [f.type for f in d.failed]} for d in self.devices],
            "message": self.describe(),
        }


def format_time(epoch: float | None) -> str:
    if epoch is None:
        return "?"
    return datetime.datetime.fromtimestamp(int(epoch), datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: object) -> float | None:
    """A metav1.Time (RFC 3339) as seconds since the epoch; None when absent or unreadable, which, as
    upstream, never times out."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return parsed.timestamp()


def _condition_true(conditions: Sequence[Any], kind: str) -> dict | None:
    """The condition of type `kind` when it is True (upstream's FindStatusCondition: the first of that
    type)."""
    for condition in conditions:
        if isinstance(condition, dict) and condition.get("type") == kind:
            return condition if condition.get("status") == "True" else None
    return None


def claim_binding(raw: Mapping[str, Any], *, timeout_s: float, now: float) -> ClaimBinding | None:
    """The binding state of an allocated claim, or None when no device of its allocation has binding
    conditions (or it is not allocated).

    As upstream's plugin: a device status is found by driver, pool and device; a device without one has
    all its conditions pending. We deliberately look at every device for a True failure condition before
    calling the claim pending: upstream stops at the first device without a status and so can miss a
    failure reported for a later one until the timeout."""
    status = raw.get("status") or {}
    allocation = status.get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or ()
    with_conditions = [r for r in results if isinstance(r, dict) and r.get("bindingConditions")]
    if not with_conditions:
        return None
    reported: dict[tuple[object, object, object], Sequence[Any]] = {}
    for entry in status.get("devices") or ():
        if isinstance(entry, dict):
            key = (entry.get("driver"), entry.get("pool"), entry.get("device"))
            reported.setdefault(key, entry.get("conditions") or ())
    devices = []
    for result in with_conditions:
        conditions = reported.get((result.get("driver"), result.get("pool"), result.get("device")))
        failed: list[FailedCondition] = []
        if conditions is None:
            pending = tuple(str(c) for c in result["bindingConditions"])
        else:
            for kind in result.get("bindingFailureConditions") or ():
                found = _condition_true(conditions, kind)
                if found is not None:
                    failed.append(FailedCondition(str(kind), str(found.get("reason") or ""),
                                                  str(found.get("message") or "")))
            pending = tuple(str(kind) for kind in result["bindingConditions"]
                            if _condition_true(conditions, kind) is None)
        device = f"{result.get('driver')}/{result.get('pool')}/{result.get('device')}"
        devices.append(DeviceBinding(device, pending, tuple(failed)))
    allocated_at = parse_time(allocation.get("allocationTimestamp"))
    if any(d.failed for d in devices):
        state = State.FAILED
    elif not any(d.pending for d in devices):
        state = State.READY
    elif allocated_at is not None and allocated_at + timeout_s < now:
        state = State.TIMED_OUT
    else:
        state = State.PENDING
    meta = metadata_of(raw)
    return ClaimBinding(f"{meta.get('namespace')}/{meta.get('name')}", str(meta.get("uid") or ""), state,
                        tuple(devices), allocated_at, timeout_s)


def has_binding_conditions(raw: Mapping[str, Any]) -> bool:
    """Is the claim allocated with a device that has binding conditions?"""
    results = (((raw.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")
    return any(isinstance(result, dict) and result.get("bindingConditions") for result in results or ())


class BindingPolicy:
    """The binding timeout and the clock, and whether the feature gates are on (as upstream: both
    DRADeviceBindingConditions and DRAResourceClaimDeviceStatus)."""

    def __init__(self, cache: ClusterCache, *, timeout_s: float = DEFAULT_BINDING_TIMEOUT_S,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.cache = cache
        self.timeout_s = timeout_s
        self.wall_clock = wall_clock

    @property
    def enabled(self) -> bool:
        features = self.cache.features
        return all(features.enabled(gate) for gate in GATES)

    def of(self, claim: ResourceClaim | Mapping[str, Any]) -> ClaimBinding | None:
        """The claim's binding state; None with the gates off or when it has no binding conditions."""
        if not self.enabled:
            return None
        raw = claim.raw if isinstance(claim, ResourceClaim) else claim
        return claim_binding(raw, timeout_s=self.timeout_s, now=self.wall_clock())

    def of_all(self, claims: Iterable[ResourceClaim]) -> list[ClaimBinding]:
        if not self.enabled:
            return []
        return [found for claim in claims if (found := self.of(claim)) is not None]


def release_blocker(raw: Mapping[str, Any], pod: Mapping[str, Any], cache: ClusterCache, *,
                    workload_claims: bool) -> str | None:
    """Why the claim may not be deallocated on behalf of `pod` (None: it may). Upstream's rule for the
    claims it frees to reschedule a pod: reserved for nobody, for the pod alone, or (with
    DRAWorkloadResourceClaims) for the pod's PodGroup alone while none of the group's pods is bound. Any
    other consumer may be using the devices."""
    reserved = [e for e in (raw.get("status") or {}).get("reservedFor") or () if isinstance(e, dict)]
    uid = pod_uid(pod)
    group = group_name_of(pod) if workload_claims else None
    namespace = str(metadata_of(pod).get("namespace") or "")
    others = []
    for entry in reserved:
        if entry.get("uid") == uid:
            continue
        if group is not None and is_group_reference(entry) and entry.get("name") == group:
            if any((p.get("spec") or {}).get("nodeName") for p in cache.pods_in_group(namespace, group)):
                others.append(f"PodGroup {namespace}/{group}, which has bound pods")
            continue
        others.append(f"{entry.get('resource') or 'consumer'} {namespace}/{entry.get('name')}")
    if not others:
        return None
    return "it is reserved for " + ", ".join(others)


class ClaimReleaser(Protocol):
    """What the sweeper needs of the claim writer (extender.plugin.claimwriter.ClaimWriter)."""

    def writing(self, claim_uid: str) -> bool: ...

    async def deallocate(self, raw: dict, *, still: Callable[[dict], str | None],
                         term: int | None) -> str | None: ...


Report = Callable[[dict, str, str], None]  # (pod, reason, message): a Warning event on the pod


class BindingSweeper:
    """The backstop: a claim whose binding failed or timed out and that no bind or filter has freed
    within SWEEP_GRACE_S is deallocated here, when it is reserved for nobody or only for pods that are
    not bound (each of them hears why in an event).

    Normally kube-scheduler retries the pod and our bind or filter frees the claim and says why in the
    pod's condition. A pod that kube-scheduler no longer sends us would keep its devices forever: its
    node became unfit for kube-scheduler's own filters while it waited (between two bind calls it is
    not counted there), or kube-scheduler stopped. Runs as a duty of the leader's term."""

    def __init__(self, cache: ClusterCache, writer: ClaimReleaser, policy: BindingPolicy,
                 authority: Authority, *,
                 clock: Callable[[], float] = time.monotonic, grace_s: float = SWEEP_GRACE_S,
                 report: Report | None = None) -> None:
        self.cache = cache
        self.writer = writer
        self.policy = policy
        self.authority = authority
        self._clock = clock
        self.grace_s = grace_s
        self.report = report
        # Claim UID -> (key, since): allocated with binding conditions.
        self._watched = ClaimWatch(cache, has_binding_conditions, clock=clock).claims
        self._bad_since: dict[str, float] = {}  # claim UID -> first seen failed or timed out
        self.freed = 0

    def _waiting_pods(self, raw: Mapping[str, Any]) -> list[dict] | None:
        """The unbound pods the claim is reserved for; None when anything else uses it (a bound pod, a
        PodGroup, an unknown consumer)."""
        pods = []
        for entry in (raw.get("status") or {}).get("reservedFor") or ():
            if not isinstance(entry, dict) or entry.get("resource") != "pods" or entry.get("apiGroup"):
                return None
            pod = self.cache.pod_by_uid(str(entry.get("uid") or ""))
            if pod is None or (pod.get("spec") or {}).get("nodeName"):
                return None
            pods.append(pod)
        return pods

    async def sweep_once(self) -> int:
        """Free the claims that stayed failed or timed out past the grace period; returns how many."""
        term = self.authority.term
        if term is None or not self.policy.enabled:
            return 0
        now = self._clock()
        freed = 0
        for uid in set(self._bad_since) - set(self._watched):
            del self._bad_since[uid]  # deallocated or deleted meanwhile
        for uid, (key, _) in list(self._watched.items()):
            raw = self.cache.raw("ResourceClaim", key)
            state = self.policy.of(raw) if raw is not None and metadata_of(raw).get("uid") == uid else None
            if state is None or state.state not in SETTLED_BADLY:
                self._bad_since.pop(uid, None)
                continue
            since = self._bad_since.setdefault(uid, now)
            if now - since < self.grace_s or self.writer.writing(uid):
                continue
            assert raw is not None
            pods = self._waiting_pods(raw)
            if pods is None:
                continue  # in use: not ours to free (a bound pod keeps its devices, as upstream)

            def still(fresh: dict) -> str | None:
                again = self.policy.of(fresh)
                if again is None or again.state not in SETTLED_BADLY:
                    return "its binding conditions changed"
                return None if self._waiting_pods(fresh) is not None else "it is in use now"

            try:
                why_not = await self.writer.deallocate(raw, still=still, term=term)
            except Exception as error:  # an API error: tried again at the next sweep
                log.warning("ResourceClaim %s: freeing it after its binding %s failed: %s", key,
                            state.state, error)
                continue
            if why_not is not None:
                continue
            self.freed += 1
            freed += 1
            self._bad_since.pop(uid, None)
            message = (f"{state.describe()}; dra-extender deallocated the claim so the pod can be scheduled "
                       "again")
            log.warning("%s (pods %s)", message, ", ".join(pod_key(p) for p in pods) or "none")
            if self.report is not None:
                for pod in pods:
                    self.report(pod, EVENT_FAILED, message)
        return freed

    def describe(self) -> dict[str, Any]:
        return {"watched": len(self._watched), "failedOrTimedOut": len(self._bad_since), "freed": self.freed}
