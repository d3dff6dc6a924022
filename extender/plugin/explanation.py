"""Our account of why a pod fits no node, written as a pod Event beside kube-scheduler's.

With --reasons=upstream the per-node answer carries the in-tree plugin's words, so kube-scheduler's
FailedScheduling event reads "0/500 nodes are available: 500 cannot allocate all claims." We add one
Event of our own, reason DRAExplanation, summing up over the nodes why, e.g.

    request gpu of claim default/x: 0 of 500 nodes (480 in use, 20 rejected by request selectors)

Its own reason, not a second FailedScheduling: tools and alerts count FailedScheduling events per
attempt, and kube-scheduler's event series would interleave with ours. The "DRA" prefix says which
part of scheduling explains itself; `kubectl describe pod` lists it right under kube-scheduler's.

Written only when it says more than kube-scheduler's line (a pod waiting for its claim to be created
gets none), at most once per pod every PER_POD_INTERVAL_S, the same text again only after REPEAT_AFTER_S,
and at most RATE_PER_S events a second over all pods (a burst of BURST): thousands of pending pods
retried after every cluster event must not become thousands of API writes. `dra-extender explain`
and /debug/explain give the per-node details.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol

from cachetools import TTLCache

from allocator import REJECTION_PHRASES, Reason, Rejection
from common.objects import metadata_of
from extender.plugin.verdicts import NodeVerdict
from extender.plugin.verdicts import Reason as VerdictReason

EVENT_REASON = "DRAExplanation"
MAX_MESSAGE = 1024  # kube-scheduler cuts its own event at this length (the events API's note limit)
PER_POD_INTERVAL_S = 30.0
REPEAT_AFTER_S = 600.0
RATE_PER_S = 5.0
BURST = 50
MAX_PODS = 10_000  # pods whose last explanation is remembered

_DEVICES, _NODE_ALLOCATABLE = VerdictReason.DEVICES, VerdictReason.NODE_ALLOCATABLE
_PHRASES: dict[Rejection, str] = {**REJECTION_PHRASES, Rejection.CLASS_SELECTOR: "of other device classes"}
_ORDER = {key: index for index, key in enumerate(_PHRASES)}


class EventSink(Protocol):
    """What writes the Event (extender.kube.events.EventRecorder)."""

    def record(self, involved: Mapping[str, Any], reason: str, message: str, *,
               event_type: str = "Normal") -> None: ...


def _label(reason: Reason) -> str:
    if "," in reason.claim or "," in reason.request:  # devices the requests need together
        return f"requests {reason.request} of {reason.claim} together"
    request = f"{reason.request}/{reason.subrequest}" if reason.subrequest else reason.request
    return f"request {request} of claim {reason.claim}"


def _cause(reason: Reason) -> str:
    """Why one node lacks devices for one request, in a word: what turned most devices away."""
    if reason.considered == 0:
        return "no devices"
    counted = [key for key, count in reason.rejected.items() if count]
    if not counted:
        return "too few devices"
    # The most devices; on a tie, the phrase the node's own message lists first.
    most = max(counted, key=lambda key: (reason.rejected[key], -_ORDER.get(key, len(_ORDER))))
    return _PHRASES.get(most, str(most))


class _Request:
    __slots__ = ("causes", "nodes")

    def __init__(self) -> None:
        self.nodes = 0  # nodes where the request could not be satisfied
        self.causes: Counter[str] = Counter()


def _nodes(count: int) -> str:
    return f"{count} node" if count == 1 else f"{count} nodes"


def summarize(verdicts: Mapping[str, NodeVerdict]) -> str | None:
    """One line over all nodes that do not fit: per request of the pod's claims on how many of the
    searched nodes it could be satisfied and what kept it from the others; the other nodes counted
    by what they said. None when that says nothing beyond upstream's words."""
    searched = 0
    requests: dict[str, _Request] = {}
    others: Counter[str] = Counter()
    more = False
    for verdict in verdicts.values():
        if verdict.fits:
            searched += 1
            continue
        if verdict.reason == _DEVICES and verdict.outcome is not None:
            searched += 1
            more = True
            for reason in verdict.outcome.reasons:
                tally = requests.get(_label(reason))
                if tally is None:
                    tally = requests[_label(reason)] = _Request()
                tally.nodes += 1
                tally.causes[_cause(reason)] += 1
            continue
        if verdict.reason == _NODE_ALLOCATABLE:
            searched += 1  # its devices fit: only the cpu or memory they add does not
            others[verdict.upstream_words] += 1  # the node's free amounts would make every line differ
            continue
        others[verdict.message] += 1
        more = more or verdict.message != verdict.upstream_words
    if not more:
        return None
    parts = []
    for label, tally in requests.items():
        causes = ", ".join(f"{count} {cause}" for cause, count in
                           sorted(tally.causes.items(), key=lambda item: (-item[1], item[0])))
        parts.append(f"{label}: {searched - tally.nodes} of {_nodes(searched)} ({causes})")
    parts += [f"{_nodes(count)}: {message}" for message, count in
              sorted(others.items(), key=lambda item: (-item[1], item[0]))]
    text = "; ".join(parts)
    if len(text) > MAX_MESSAGE:
        text = text[:MAX_MESSAGE - 4] + " ..."
    return text


class _Sent(NamedTuple):
    message: str
    at: float


class Explanations:
    """Writes a pod's DRAExplanation Event after a filter that found no node, within the limits of
    the module docstring."""

    def __init__(self, sink: EventSink, *, clock: Callable[[], float] = time.monotonic,
                 per_pod_interval_s: float = PER_POD_INTERVAL_S, repeat_after_s: float = REPEAT_AFTER_S,
                 rate_per_s: float = RATE_PER_S, burst: int = BURST) -> None:
        self.sink = sink
        self.clock = clock
        self.per_pod_interval_s = per_pod_interval_s
        self.repeat_after_s = repeat_after_s
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._tokens, self._refilled = float(burst), clock()
        self._sent: TTLCache[str, _Sent] = TTLCache(maxsize=MAX_PODS, ttl=repeat_after_s, timer=clock)
        self.written = 0
        self.rate_limited = 0

    def _take_token(self, now: float) -> bool:
        self._tokens = min(float(self.burst), self._tokens + (now - self._refilled) * self.rate_per_s)
        self._refilled = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True

    def after_filter(self, pod: Mapping[str, Any], verdicts: Mapping[str, NodeVerdict], *,
                     describe: Callable[[str], str] | None = None) -> None:
        """Called with the verdicts of a filter whose answer passed no node. `describe` rewords the
        line (names the requests of extended resources backed by DRA)."""
        meta = metadata_of(pod)
        uid = str(meta.get("uid") or "")
        if not uid or not verdicts:
            return
        now = self.clock()
        last = self._sent.get(uid)
        if last is not None and now - last.at < self.per_pod_interval_s:
            return
        message = summarize(verdicts)
        if message is not None and describe is not None:
            message = describe(message)
        if message is None or (last is not None and last.message == message):
            return  # the same words again only once the entry has expired (REPEAT_AFTER_S)
        if not self._take_token(now):
            self.rate_limited += 1
            return
        self._sent[uid] = _Sent(message, now)
        self.written += 1
        # A reference of our own making: kube-scheduler's copy of a pod has no apiVersion or kind.
        involved = {"apiVersion": "v1", "kind": "Pod", "name": str(meta.get("name") or ""),
                    "namespace": str(meta.get("namespace") or ""), "uid": uid}
        self.sink.record(involved, EVENT_REASON, message, event_type="Warning")
