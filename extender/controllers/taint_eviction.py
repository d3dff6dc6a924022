"""Device taint eviction: pods whose allocated devices carry a NoExecute taint they do not tolerate go.

Inputs arrive as cache events (pods, claims, slices via the shared PoolIndex, DeviceTaintRules); the
handlers only compute and hand wishes to the PodEvictor, which does the API work through the queue.
A pod must go when it is scheduled and one of its claims is allocated, reserved for this pod (UID)
or, with DRAWorkloadResourceClaims, for the pod's PodGroup (every pod of the group using the claim
goes), and uses a device with a NoExecute taint (from its slice or a matching DeviceTaintRule) that the
allocation result's tolerations do not tolerate forever; the earliest eviction time wins.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from typing import Any, NamedTuple, Protocol

from common.claimrefs import pod_uid
from common.objects import metadata_of
from common.tasks import SLICE_S, in_slices
from extender.controllers.claims import (
    ClaimIndex,
    claim_key,
    consumers,
    pod_claim_keys,
    result_device,
)
from extender.controllers.clock import Clock
from extender.controllers.evictor import Eviction, PodEvictor, PodRef, Reason
from extender.controllers.pools import DeviceId, PoolId, PoolIndex
from extender.controllers.rule_status import current_condition, eviction_condition, same_condition
from extender.controllers.tolerations import NO_EXECUTE, eviction_time
from extender.kube.events import format_time
from extender.plugin.podgroups import reserved_for_pod

log = logging.getLogger(__name__)

SOURCE = "taint"
RULE_STATUS_PERIOD = 10.0
RULE_PATH = "/apis/resource.k8s.io/v1/devicetaintrules/{name}/status"
RECOMPUTE_BATCH = 100  # claims whose eviction times a long recomputation computes per step


class RuleRef(NamedTuple):
    name: str
    uid: str


class _Written(NamedTuple):
    """The condition last written into a rule's status."""

    generation: int  # the rule's spec generation it reports on
    at: float
    condition: dict


class PodLookup(Protocol):
    def pod(self, namespace: str, name: str) -> dict | None: ...
    def pods_in_group(self, namespace: str, group_name: str) -> list[dict]: ...


class StatusClient(Protocol):
    async def patch(self, path: str, body: Any, content_type: str = ...) -> dict: ...


def rule_matches(rule: Mapping[str, Any], device: DeviceId) -> bool:
    """All selector fields that are set must match; a rule without a selector matches nothing."""
    selector = (rule.get("spec") or {}).get("deviceSelector")
    if not isinstance(selector, dict):
        return False
    return all(
        not selector.get(field) or selector[field] == value
        for field, value in zip(("driver", "pool", "device"), device, strict=True)
    )


def selected_pools(rule: Mapping[str, Any], known: Callable[[], Iterable[PoolId]]) -> Iterable[PoolId] | None:
    """The pools, out of `known()`, that hold every device `rule` can match; None when its selector
    names neither a driver nor a pool (its devices may be in any pool)."""
    selector = (rule.get("spec") or {}).get("deviceSelector")
    if not isinstance(selector, dict):
        return ()
    driver, pool = selector.get("driver"), selector.get("pool")
    if any(value and not isinstance(value, str) for value in (driver, pool)):
        return ()   # equal to no driver or pool name (rule_matches compares)
    if driver and pool:
        return ((driver, pool),)
    if not driver and not pool:
        return None
    return [known_pool for known_pool in known()
            if (not driver or known_pool[0] == driver) and (not pool or known_pool[1] == pool)]


def _rule_taint(rule: Mapping[str, Any]) -> dict:
    return (rule.get("spec") or {}).get("taint") or {}


def _uid(raw: Mapping[str, Any]) -> str:
    return str(metadata_of(raw).get("uid") or "")


class TaintEvictionController:
    def __init__(
        self,
        pods: PodLookup,
        client: StatusClient,
        clock: Clock,
        evictor: PodEvictor,
        pools: PoolIndex,
        claims: ClaimIndex,
        *,
        schedule_rule: Callable[[RuleRef, float], None],
        workload_claims: bool = False,
    ) -> None:
        self._pods = pods
        self._groups = workload_claims  # gate DRAWorkloadResourceClaims: PodGroup consumers count
        self._client = client
        self._clock = clock
        self._evictor = evictor
        self._pools = pools
        self._schedule_rule = schedule_rule
        self._claims = claims
        self._claim_eviction: dict[str, Eviction] = {}  # claims with an eviction time only
        self._rules: dict[str, dict] = {}  # every DeviceTaintRule by name
        self._evicted_by_rule: dict[str, int] = {}  # rule UID -> pods evicted since start
        self._written: dict[str, _Written] = {}  # by rule UID

    # ---- startup ------------------------------------------------------------------------------

    def seeding(self, rules: Iterable[dict], pods: Iterable[dict]) -> Iterator[None]:
        """Initial state, as steps to run in slices; the shared PoolIndex and ClaimIndex are filled."""
        for raw in rules:
            self._rules[str(metadata_of(raw).get("name"))] = raw
        yield from self._recomputing(self._claims.keys())
        for pod in pods:
            self._evaluate_pod(pod)
            yield
        now = self._clock.now()
        for rule in self._rules.values():
            self._schedule_rule(RuleRef(str(rule["metadata"].get("name")), _uid(rule)), now)

    # ---- event handlers (synchronous; what can be long is returned as steps) ------------------

    def on_claim(self, new: dict, previous: dict | None) -> None:
        """A claim changed (the ClaimIndex has it already); `previous` is the claim before."""
        key = claim_key(new)
        self._claim_eviction.pop(key, None)
        self._recompute([key])
        for claim in (previous, new):
            if claim is not None:
                for pod in consumers(claim, self._pods, groups=self._groups):
                    self._evaluate_pod(pod)

    def on_pod(self, new: dict, old: dict | None) -> None:
        """A pod was added or changed (deletions go straight to the PodEvictor)."""
        if old is not None and not _pod_changed(old, new):
            return
        self._evaluate_pod(new)

    def on_pools(self, touched: set[PoolId]) -> None:
        keys = sorted({key for pool in touched for key in self._claims.in_pool(pool)})
        self._reevaluate(self._recompute(keys))

    def on_rule(self, event_type: str, new: dict, old: dict | None) -> Iterator[None] | None:
        """A rule was added, changed or deleted. What its change needs (recomputing the claims it
        selected or selects, re-evaluating their pods: seconds for a rule over a whole driver at
        20,000 nodes) is returned as steps to run in slices, with later events held until they are done."""
        name = str(metadata_of(new).get("name"))
        previous = self._rules.get(name) or old
        if event_type == "DELETED":
            self._rules.pop(name, None)
            self._written.pop(_uid(new), None)
        else:
            self._rules[name] = new
        spec_changed = (
            previous is None
            or event_type == "DELETED"
            or previous.get("spec") != new.get("spec")
            or _uid(previous) != _uid(new)
        )
        generation = metadata_of(new).get("generation")
        status = None
        if event_type != "DELETED" and (
            spec_changed or (previous or {}).get("metadata", {}).get("generation") != generation
        ):
            status = RuleRef(name, _uid(new))
        if not spec_changed:
            if status is not None:
                self._schedule_rule(status, self._clock.now())
            return None
        return self._rule_changed(previous, new, status)

    def _rule_changed(self, previous: dict | None, new: dict, status: RuleRef | None) -> Iterator[None]:
        # Only claims with a device the rule matched or matches can change their eviction time.
        keys = self._claims_selected(previous, new)
        yield
        changed = yield from self._recomputing(keys)
        yield from self._reevaluating(changed)
        if status is not None:
            self._schedule_rule(status, self._clock.now())

    def on_evicted(self, ref: PodRef, eviction: Eviction) -> None:
        for reason in eviction.reasons:
            if reason.kind == "DeviceTaintRule":
                self._evicted_by_rule[reason.detail] = self._evicted_by_rule.get(reason.detail, 0) + 1
                # Not at once: the watch has yet to show the deletion, the count would still include the pod.
                self._schedule_rule(
                    RuleRef(reason.name, reason.detail), self._clock.now() + RULE_STATUS_PERIOD
                )

    # ---- state --------------------------------------------------------------------------------

    def _recompute(self, keys: list[str]) -> list[str]:
        """Recompute the claims' eviction times; returns the keys whose eviction changed."""
        rules = self._no_execute_rules()
        changed = []
        for key in keys:
            eviction = self._eviction_of_claim(key, self._claims.results(key), rules)
            if self._claim_eviction.get(key) != eviction:
                changed.append(key)
            if eviction is None:
                self._claim_eviction.pop(key, None)
            else:
                self._claim_eviction[key] = eviction
        return changed

    def _recomputing(self, keys: list[str]) -> Generator[None, None, list[str]]:
        """`_recompute` as steps of RECOMPUTE_BATCH claims; returns the keys whose eviction changed."""
        changed: list[str] = []
        for first in range(0, len(keys), RECOMPUTE_BATCH):
            changed += self._recompute(keys[first:first + RECOMPUTE_BATCH])
            yield
        return changed

    def _reevaluate(self, claim_keys: list[str]) -> None:
        for _ in self._reevaluating(claim_keys):
            pass

    def _reevaluating(self, claim_keys: list[str]) -> Iterator[None]:
        """Evaluate the pods of the claims again, a step per pod."""
        seen: set[PodRef] = set()
        for key in claim_keys:
            claim = self._claims.get(key)
            if claim is None:
                continue
            for pod in consumers(claim, self._pods, groups=self._groups):
                ref = PodRef.of(pod)
                if ref not in seen:
                    seen.add(ref)
                    self._evaluate_pod(pod)
                    yield

    def _claims_selected(self, *rules: Mapping[str, Any] | None) -> list[str]:
        """The claims holding a device in a pool one of `rules` can select (`selected_pools`)."""
        keys: set[str] = set()
        for rule in rules:
            pools = selected_pools(rule, self._claims.pools) if rule is not None else ()
            if pools is None:
                return self._claims.keys()
            for pool in pools:
                keys |= self._claims.in_pool(pool)
        return sorted(keys)

    def _no_execute_rules(self) -> list[dict]:
        return [rule for rule in self._rules.values() if _rule_taint(rule).get("effect") == NO_EXECUTE]

    def _eviction_of_claim(self, key: str, results: list[dict], rules: list[dict]) -> Eviction | None:
        """When the claim `key`'s devices (`results`, as ClaimIndex keeps them) evict its pods."""
        candidates: list[Eviction] = []
        for result in results:
            device = result_device(result)
            if device is None:
                continue
            tolerations = result.get("tolerations") or []
            tainted: list[tuple[dict, Reason]] = [
                (taint, Reason("ResourceSlice", "/".join(device), _describe_taint(taint)))
                for taint in self._pools.no_execute_taints(device)
            ]
            tainted += [
                (
                    {**_rule_taint(rule), "effect": NO_EXECUTE},
                    Reason("DeviceTaintRule", str(rule["metadata"].get("name")), _uid(rule)),
                )
                for rule in rules
                if rule_matches(rule, device)
            ]
            for taint, reason in tainted:
                try:
                    when = eviction_time(taint, tolerations)
                except ValueError as err:
                    log.warning("claim %s: ignoring taint %s: %s", key, reason, err)
                    continue
                if when is not None:
                    candidates.append(Eviction(when, (reason,)))
        return Eviction.combine(candidates)

    def _eviction_of_pod(self, pod: Mapping[str, Any]) -> Eviction | None:
        if not (pod.get("spec") or {}).get("nodeName"):
            return None
        evictions = []
        for key in pod_claim_keys(pod, self._claims, groups=self._groups):
            eviction = self._claim_eviction.get(key)   # None for most: then the claim is not read
            if eviction is not None and reserved_for_pod(self._claims.get(key) or {}, pod,
                                                         accept_group=self._groups):
                evictions.append(eviction)
        return Eviction.combine(evictions)

    def _evaluate_pod(self, pod: dict) -> None:
        if metadata_of(pod).get("deletionTimestamp"):
            return  # on its way out already (maybe our doing); a pending eviction just completes
        self._evictor.want(PodRef.of(pod), SOURCE, self._eviction_of_pod(pod))

    # ---- DeviceTaintRule status (called by the queue) -----------------------------------------

    async def process_rule(self, ref: RuleRef) -> float | None:
        rule = self._rules.get(ref.name)
        if rule is None or _uid(rule) != ref.uid:
            return None
        now = self._clock.now()
        generation = metadata_of(rule).get("generation") or 0
        effect = _rule_taint(rule).get("effect")
        existing = current_condition(rule)
        written = self._written.get(ref.uid)
        if effect != NO_EXECUTE:
            # One-time report per spec generation, also across restarts.
            if (existing or {}).get("observedGeneration") == generation or (
                written and written.generation == generation
            ):
                return None
        elif written and written.generation == generation and now < written.at + RULE_STATUS_PERIOD:
            return written.at + RULE_STATUS_PERIOD
        pods, namespaces, allocated = await self._affected_pods(rule)
        published = await self._published_devices(rule) if effect != NO_EXECUTE else 0
        if self._rules.get(ref.name) is not rule:
            return self._clock.now()   # updated or gone while counted: count again (or forget a gone rule)
        now = self._clock.now()
        condition = eviction_condition(
            rule,
            pending_pods=len(pods),
            pending_namespaces=namespaces,
            evicted_pods=self._evicted_by_rule.get(ref.uid, 0),
            published_devices=published,
            allocated_devices=allocated,
        )
        previous = written.condition if written else existing
        if not same_condition(previous, condition):
            self._written[ref.uid] = _Written(
                generation,
                now,
                await self._write_condition(rule, previous, condition, now),
            )
        if effect == NO_EXECUTE and pods:
            return now + RULE_STATUS_PERIOD
        return None

    async def _published_devices(self, rule: dict) -> int:
        """The devices in the slices that the rule selects, counted a pool per step in slices."""
        count = 0

        def steps() -> Iterator[None]:
            nonlocal count
            pools = selected_pools(rule, self._pools.pool_ids)
            for pool in self._pools.pool_ids() if pools is None else list(pools):
                count += sum(rule_matches(rule, (*pool, name)) for name in self._pools.device_names(pool))
                yield

        await in_slices(steps(), SLICE_S)
        return count

    async def _affected_pods(self, rule: dict) -> tuple[set[PodRef], int, int]:
        """Pods that this rule evicts (for effect None: would evict with NoExecute), their namespace count,
        and the number of allocated devices it selects; a claim per step, in slices (at 20,000 nodes a
        rule over a whole driver is about a second of work)."""
        as_no_execute = {**_rule_taint(rule), "effect": NO_EXECUTE}
        pods: set[PodRef] = set()
        allocated = 0

        def steps() -> Iterator[None]:
            nonlocal allocated
            for key in self._claims_selected(rule):
                yield
                allocated += self._affected_by(rule, as_no_execute, key, pods)

        await in_slices(steps(), SLICE_S)
        return pods, len({ref.namespace for ref in pods}), allocated

    def _affected_by(self, rule: dict, as_no_execute: dict, key: str, pods: set[PodRef]) -> int:
        """Adds to `pods` those of the claim `key` that the rule evicts; returns how many of the claim's
        devices it selects."""
        allocated = 0
        hit = False
        for result in self._claims.results(key):
            device = result_device(result)
            if device is None or not rule_matches(rule, device):
                continue
            allocated += 1
            try:
                hit = hit or eviction_time(as_no_execute, result.get("tolerations") or []) is not None
            except ValueError:
                continue
        claim = self._claims.get(key) if hit else None
        if claim is None:
            return allocated
        for pod in consumers(claim, self._pods, groups=self._groups):
            ref = PodRef.of(pod)
            if (
                (pod.get("spec") or {}).get("nodeName")
                and not metadata_of(pod).get("deletionTimestamp")
                and not self._evictor.was_evicted(ref.uid)
                and key in pod_claim_keys(pod, self._claims, groups=self._groups)
                and reserved_for_pod(claim, pod, accept_group=self._groups)
            ):
                pods.add(ref)
        return allocated

    async def _write_condition(self, rule: dict, previous: dict | None, condition: dict, now: float) -> dict:
        """Merge-patch the condition into the rule's status (UID pinned); returns what was written."""
        status = dict(condition)
        if (
            previous is None
            or previous.get("status") != condition["status"]
            or not previous.get("lastTransitionTime")
        ):
            status["lastTransitionTime"] = format_time(now)
        else:
            status["lastTransitionTime"] = previous["lastTransitionTime"]
        others = [
            c
            for c in (rule.get("status") or {}).get("conditions") or []
            if isinstance(c, dict) and c.get("type") != status["type"]
        ]
        body = {"metadata": {"uid": _uid(rule)}, "status": {"conditions": [*others, status]}}
        name = str(rule["metadata"].get("name"))
        await self._client.patch(RULE_PATH.format(name=name), body, "application/merge-patch+json")
        return status


def _pod_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    return (
        (old.get("spec") or {}).get("nodeName") != (new.get("spec") or {}).get("nodeName")
        or (old.get("status") or {}).get("resourceClaimStatuses")
        != (new.get("status") or {}).get("resourceClaimStatuses")
        or pod_uid(old) != pod_uid(new)
    )


def _describe_taint(taint: Mapping[str, Any]) -> str:
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"{taint.get('key')}{value}:{taint.get('effect')}"
