"""kube-scheduler's FailedScheduling text for a pod that an extender's filter left without a node.

Built as kube-scheduler v1.37 builds it (pkg/scheduler/framework/types.go, FitError.Error; the
extender's lists become statuses in schedule_one.go, findNodesThatPassExtenders; preemption's part
in framework/preemption/preemption.go): every distinct message counted over the nodes, "N message"
sorted as strings, joined by ", ". The preemption part assumes no lower-priority pod to evict: a
node the extender called resolvable then finds no victims, the others are "not helpful". The event
kube-scheduler records is this text cut to 1,024 characters (truncateMessage); the pod's
PodScheduled condition carries it whole.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

EVENT_LIMIT = 1024  # validation.NoteLengthLimit, what truncateMessage cuts to
NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_HELPFUL = "Preemption is not helpful for scheduling"


def _histogram(num_all_nodes: int, reasons: Iterable[str], absent: str | None) -> str:
    counts = Counter(reasons)
    listed = sum(counts.values())
    if absent is not None and listed < num_all_nodes:
        counts[absent] += num_all_nodes - listed
    text = f"0/{num_all_nodes} nodes are available:"
    parts = sorted(f"{count} {reason}" for reason, count in counts.items())
    return text + (f" {', '.join(parts)}." if parts else "")


def fit_error(num_all_nodes: int, failed: Mapping[str, str], unresolvable: Mapping[str, str], *,
              preemption: bool = True) -> str:
    """The FitError text for an answer with no node in NodeNames (FailedNodes, FailedAndUnresolvableNodes)."""
    statuses = {**{node: (False, message) for node, message in failed.items()},
                **{node: (True, message) for node, message in unresolvable.items()}}
    text = _histogram(num_all_nodes, (message for _, message in statuses.values()), None)
    if preemption:
        helpful = [NO_VICTIMS for beyond, _ in statuses.values() if not beyond]
        text += " preemption: " + _histogram(num_all_nodes, helpful, NOT_HELPFUL)
    return text


def event_message(text: str) -> str:
    """What kube-scheduler's FailedScheduling event carries of `text`."""
    if len(text) <= EVENT_LIMIT:
        return text
    suffix = " ..."
    return text[:EVENT_LIMIT - len(suffix)] + suffix
