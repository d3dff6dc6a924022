"""Pods bound without their devices get them, or everyone hears about it.

A pod bound to a node while one of its claims is not allocated, or not reserved for it, never starts:
the kubelet waits for the reservation. Our own bind never leaves that state behind (a lost Binding
answer keeps the claims), but a Binding from elsewhere can (a manual one, another scheduler, an older
version of this extender). After a grace period (the claim watch may simply lag the pod's), such a pod's
claims are allocated on its node, like a bind without the Binding, when the devices are free there.
Otherwise the pod is reported: a Warning event on the pod, the metric
dra_extender_bound_pods_without_devices, and /debug/state's "repair" section; it is tried again with
a growing pause, as devices may free up.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from common.claimrefs import WORKLOAD_CLAIMS, known_claim_names, pod_key, pod_uid
from common.objects import metadata_of
from extender.plugin.podclaims import has_claims
from extender.plugin.podgroups import reserved_for_pod
from extender.plugin.scheduling import BindFailed, Scheduler

log = logging.getLogger(__name__)

REPAIR_GRACE_S = 5.0
RETRY_MAX_S = 60.0
EVENT_REASON = "DevicesMissing"

Report = Callable[[dict, str, str], None]  # (pod, reason, message): an event on the pod


class BoundPodRepair:
    def __init__(self, scheduler: Scheduler, *, clock: Callable[[], float] = time.monotonic,
                 grace_s: float = REPAIR_GRACE_S, report: Report | None = None) -> None:
        self.scheduler = scheduler
        self.cache = scheduler.cache
        self._clock = clock
        self.grace_s = grace_s
        self.report = report
        # pod UID -> (when it is due, attempts so far)
        self._due: dict[str, tuple[float, int]] = {}
        self.unrepairable: dict[str, dict[str, str]] = {}
        self.repaired = 0
        for raw in self.cache.valid_objects("Pod"):
            self._check(raw)
        self.cache.subscribe(self._on_change)

    def missing(self, pod: dict) -> str | None:
        """What a bound, unfinished pod lacks of its claims (None when nothing, or not such a pod)."""
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        if (not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed")
                or metadata_of(pod).get("deletionTimestamp") or not has_claims(pod)):
            return None
        namespace = str(metadata_of(pod).get("namespace") or "")
        groups = self.cache.features.enabled(WORKLOAD_CLAIMS)
        for name in known_claim_names(pod):
            claim = self.cache.claim(namespace, name)
            if claim is None:
                continue
            if claim.allocation is None:
                return f"ResourceClaim {claim.key} is not allocated"
            if not reserved_for_pod(claim.raw, pod, accept_group=groups):
                return f"ResourceClaim {claim.key} is not reserved for the pod"
        return None

    def _check(self, pod: dict) -> None:
        uid = pod_uid(pod)
        if self.missing(pod) is None:
            self._due.pop(uid, None)
            self.unrepairable.pop(uid, None)
        elif uid not in self._due:
            self._due[uid] = (self._clock() + self.grace_s, 0)

    def _on_change(self, kind: str, event_type: str, new: dict, old: dict | None) -> None:
        if kind == "Pod":
            if event_type == "DELETED":
                self._due.pop(pod_uid(new), None)
                self.unrepairable.pop(pod_uid(new), None)
            else:
                self._check(new)
        elif kind == "ResourceClaim" and old is not None:
            # A claim that lost its allocation or a reservation: the pods it was reserved for.
            for entry in (old.get("status") or {}).get("reservedFor") or ():
                pod = self.cache.pod_by_uid(str(entry.get("uid") or "")) if isinstance(entry, dict) else None
                if pod is not None:
                    self._check(pod)

    async def repair_due(self) -> int:
        """Repair the pods whose grace period (or pause after a failed attempt) is over; returns how many
        got their devices."""
        term = self.scheduler.authority.term
        if term is None:
            return 0
        now = self._clock()
        done = 0
        for uid, (due, attempts) in list(self._due.items()):
            if due > now:
                continue
            pod = self.cache.pod_by_uid(uid)
            problem = self.missing(pod) if pod is not None else None
            if pod is None or problem is None:
                self._due.pop(uid, None)
                continue
            try:
                await self.scheduler.repair(pod, term=term)
            except BindFailed as failure:
                current = self.cache.pod_by_uid(uid)
                if current is None or self.missing(current) is None:
                    self._due.pop(uid, None)  # fine meanwhile (a lagging watch caught up)
                    continue
                pause = min(RETRY_MAX_S, self.grace_s * 2 ** attempts)
                self._due[uid] = (self._clock() + pause, attempts + 1)
                self._unrepairable(pod, problem, str(failure))
                continue
            self._due.pop(uid, None)
            self.unrepairable.pop(uid, None)
            self.repaired += 1
            done += 1
            self.scheduler.metrics.repairs.labels(outcome="repaired").inc()
            log.warning("pod %s was bound to node %s without its devices (%s): allocated and reserved them",
                        pod_key(pod), (pod.get("spec") or {}).get("nodeName"), problem)
        return done

    def _unrepairable(self, pod: dict, problem: str, failure: str) -> None:
        uid = pod_uid(pod)
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        first = uid not in self.unrepairable
        self.unrepairable[uid] = {"pod": pod_key(pod), "node": node, "problem": problem, "lastError": failure}
        self.scheduler.metrics.repairs.labels(outcome="failed").inc()
        if first:
            message = (f"bound to node {node} but {problem}, and dra-extender cannot allocate it there: "
                       f"{failure}. The kubelet will not start the pod until its claims are allocated and "
                       "reserved for it")
            log.error("pod %s: %s", pod_key(pod), message)
            if self.report is not None:
                self.report(pod, EVENT_REASON, message)

    def describe(self) -> dict[str, Any]:
        return {"repaired": self.repaired, "waiting": len(self._due),
                "withoutDevices": sorted(self.unrepairable.values(), key=lambda entry: entry["pod"])}
