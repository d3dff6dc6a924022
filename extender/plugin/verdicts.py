"""Whether a pod fits a node, and the filter answer made from those verdicts.

Vocabulary for the extender side: every verdict carries a `Reason` (also the filter outcome metric's
label), and the answer to kube-scheduler is built here only (`answer`), whether or not filter holds
devices.

A failed node is answered in one of two vocabularies (`Words`, serve's --reasons). `upstream` gives
the in-tree DynamicResources plugin's words and statuses, so kube-scheduler's FailedScheduling line
(`0/N nodes are available: ...`) reads and aggregates as with that plugin; our own account of why then
goes into a pod Event (extender.plugin.explanation). `detailed` gives our words per node, as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import compress
from operator import attrgetter
from typing import NamedTuple

import orjson

from allocator import PREEMPTION_MAY_HELP, AllocationOutcome, ResourceClaim


class Reason(StrEnum):
    """Why a node got its verdict (the metric label of filter outcomes)."""

    FITS = "fits"
    DEVICES = "devices"  # the allocator found no devices on the node
    TIMEOUT = "timeout"  # the node's search did not finish in time: not known whether the pod fits
    UNKNOWN_NODE = "unknown node"
    NODE_ERROR = "node error"
    CLAIM_ON_OTHER_NODE = "claim on other node"
    NODE_OPERATIONS = "node operations"  # an allocated claim skips node operations the node does not declare
    EXTENDED_RESOURCE = "extended resource"
    NODE_ALLOCATABLE = "node allocatable"  # the node cannot hold the cpu/memory the pod's devices add
    HELD_ELSEWHERE = "held elsewhere"  # --filter-holds-devices chose another node
    # Verdicts for every node, from the pod's claims (PodPlan.blocked):
    CLAIMS_NOT_READY = "claims not ready"
    CLAIM_OF_A_PODGROUP = "claim of a PodGroup"
    CLAIM_IN_USE = "claim in use"
    CLAIM_IN_FLIGHT = "claim in flight"
    CLASS_MISSING = "class missing"
    FEATURE_DISABLED = "feature disabled"
    STALE_EXTENDED_CLAIM = "stale extended claim"
    BINDING_FAILED = "binding failed"  # a claim's device binding failed or timed out, and others use it
    ERROR = "error"  # a real error (SchedulingError): the whole filter failed


# The reasons the hot paths compare against, bound once: reading a member off an Enum class costs
# several times a str comparison in Python 3.11, and answer() compares every node's verdict (the
# Reason StrEnum made a 5,000-node filter's answer measurably slower).
_TIMEOUT, _DEVICES, _UNKNOWN_NODE = Reason.TIMEOUT, Reason.DEVICES, Reason.UNKNOWN_NODE
# Verdicts of bind's re-check that mean another pod got there first.
CONFLICT_REASONS = frozenset({Reason.DEVICES, Reason.CLAIM_IN_FLIGHT, Reason.CLAIM_IN_USE,
                              Reason.CLAIM_ON_OTHER_NODE, Reason.NODE_ALLOCATABLE})
# Upstream's plugin's words for a node without devices for the pod; ours too where another node fits
# (see split), or where no reason could be given.
CANNOT_ALLOCATE = "cannot allocate all claims"
NOT_AVAILABLE = "resourceclaim not available on the node"
UNKNOWN_NODE = "node not known to dra-extender"
NAMED_UNKNOWN_NODES = 100
TIMED_OUT_MESSAGE = "timed out trying to allocate devices"


class Words(StrEnum):
    """How the filter answer words a failed node (serve's --reasons; FULL is for explain and simulate)."""

    UPSTREAM = "upstream"  # the in-tree plugin's words and statuses
    DETAILED = "detailed"  # ours; where some node fits, a node without devices says only CANNOT_ALLOCATE
    FULL = "full"  # ours for every node, whether or not some node fits


REASONS_CHOICES = (Words.UPSTREAM.value, Words.DETAILED.value)

# The in-tree plugin's status message for the verdicts whose words do not depend on the node; the
# others carry upstream's words themselves (NodeVerdict.words) or already speak them (their message).
_UPSTREAM_WORDS: dict[str, str] = {
    Reason.DEVICES: CANNOT_ALLOCATE,
    Reason.CLAIM_ON_OTHER_NODE: NOT_AVAILABLE,
    Reason.NODE_OPERATIONS: NOT_AVAILABLE,
    Reason.TIMEOUT: TIMED_OUT_MESSAGE,
    Reason.EXTENDED_RESOURCE: "cannot fit resource",
    Reason.STALE_EXTENDED_CLAIM: "cannot schedule extended resource claim",
    Reason.BINDING_FAILED: NOT_AVAILABLE,
}
# Every status of the in-tree plugin that rejects a node is UnschedulableAndUnresolvable, except
# "Insufficient cpu" and the like when evicting pods could make room (NODE_ALLOCATABLE decides as
# upstream does). Two are ours alone and keep our status: a held node, and a timed-out node where
# another node fits (upstream aborts the whole attempt there, see answer).
_OWN_STATUS = frozenset({Reason.NODE_ALLOCATABLE, Reason.HELD_ELSEWHERE, Reason.TIMEOUT})

# Claims as (key, uid) each, in order.
ClaimRefs = tuple[tuple[str, str], ...]


class ClaimsSignature(NamedTuple):
    """How an evaluation that remembers outcomes keys a plan's claims to allocate."""

    spec: str  # what an outcome depends on: the claims' namespace and specs
    claims: ClaimRefs  # which claims an outcome is computed for


def claims_signature(claims: Sequence[ResourceClaim]) -> ClaimsSignature:
    spec = orjson.dumps(
        [[claim.namespace, claim.spec] for claim in claims], option=orjson.OPT_SORT_KEYS
    ).decode()  # a compact str: orjson's bytes keep their whole write buffer alive in every key
    return ClaimsSignature(spec, tuple((claim.key, claim.uid) for claim in claims))


def unresolvable(outcome: AllocationOutcome) -> bool:
    """Could evicting pods free what the node lacks? If not, preemption need not try the node."""
    return PREEMPTION_MAY_HELP.isdisjoint(outcome.rejection_keys())


def renames(old: ClaimRefs, new: ClaimRefs) -> dict[str, str]:
    """Claim key of `old` -> claim key of `new`, position by position (AllocationOutcome.for_claims)."""
    return {old_key: new_key for (old_key, _), (new_key, _) in zip(old, new, strict=True)}


# A failure the filter cache carried over from other claims with the same specs: (the outcome, the
# claims it names, the claims to name instead). A plain tuple: a NamedTuple's constructor costs five
# times as much, and a filter on a filling cluster makes one for most of its nodes.
CarriedFailure = tuple[AllocationOutcome, ClaimRefs, ClaimRefs]


class NodeVerdict:
    """Whether the pod fits one node, and why not.

    A carried failure is renamed (message and outcome) only when read: a filter where another node fits
    never reads it (see split)."""

    __slots__ = ("_carried", "_message", "_outcome", "fits", "node", "reason", "unresolvable", "words")

    def __init__(self, node: str, fits: bool, message: str = "", unresolvable: bool = False,
                 reason: Reason = Reason.FITS, outcome: AllocationOutcome | None = None,
                 carried: CarriedFailure | None = None, words: str | None = None) -> None:
        self.node = node
        self.fits = fits
        self._message = message
        self.unresolvable = unresolvable
        self.reason = reason
        self._outcome = outcome
        self._carried = carried
        self.words = words  # upstream's words when the reason alone does not give them (upstream_words)

    def _rename(self) -> None:
        assert self._carried is not None
        outcome, old, new = self._carried
        renamed = outcome.for_claims(renames(old, new))
        assert renamed is not None, "the filter cache only carries over failures that can be renamed"
        self._outcome, self._message, self._carried = renamed, failure_message(renamed), None

    @property
    def message(self) -> str:
        if self._carried is not None:
            self._rename()
        return self._message

    @property
    def outcome(self) -> AllocationOutcome | None:
        if self._carried is not None:
            self._rename()
        return self._outcome

    @property
    def timed_out(self) -> bool:
        """Not known whether the pod fits: the search ran out of time."""
        return self.reason == _TIMEOUT

    def on(self, node: str) -> NodeVerdict:
        """This verdict (one for every node: the pod's claims decide) for `node`."""
        return NodeVerdict(node, fits=self.fits, message=self.message, unresolvable=self.unresolvable,
                           reason=self.reason, words=self.words)

    @property
    def upstream_words(self) -> str:
        """What the in-tree plugin's Filter (or PreFilter) says for this node."""
        return self.words or _UPSTREAM_WORDS.get(self.reason) or self.message

    @property
    def upstream_unresolvable(self) -> bool:
        """The in-tree plugin's status: UnschedulableAndUnresolvable, or only Unschedulable."""
        return self.reason not in _OWN_STATUS or self.unresolvable

    def __repr__(self) -> str:
        return (f"NodeVerdict({self.node!r}, fits={self.fits}, reason={self.reason!r}, "
                f"message={self.message!r})")


@dataclass
class FilterResult:
    passed: list[str]
    failed: dict[str, str]
    unresolvable: dict[str, str]
    error: str = ""


def blocked(message: str, reason: Reason, *, unresolvable: bool = True) -> NodeVerdict:
    """A verdict for every node (the pod's claims are not ready, ...); `on` names the node."""
    return NodeVerdict("", fits=False, message=message, unresolvable=unresolvable, reason=reason)


def timed_out(node_name: str) -> NodeVerdict:
    # Resolvable: a timeout says nothing about the node, a later attempt may find the pod fits there.
    return NodeVerdict(node_name, fits=False, message=TIMED_OUT_MESSAGE, reason=_TIMEOUT)


def outcome_verdict(node_name: str, outcome: AllocationOutcome) -> NodeVerdict:
    if outcome.success:
        return NodeVerdict(node_name, fits=True, outcome=outcome)
    return NodeVerdict(node_name, fits=False, message=failure_message(outcome),
                       unresolvable=unresolvable(outcome), reason=_DEVICES, outcome=outcome)


def cached_verdict(node_name: str, outcome: AllocationOutcome, computed_for: ClaimRefs | None,
                   claims: ClaimRefs, beyond_eviction: bool) -> NodeVerdict:
    """A verdict from the filter cache (`beyond_eviction`: the entry's `unresolvable`); a failure
    worked out for other claims is renamed to `claims` only when read.

    Called and calling positionally: a filter on a filling cluster makes one carried failure for most
    of its nodes, and keyword arguments double the cost of making one."""
    if computed_for is None:
        return outcome_verdict(node_name, outcome)
    return NodeVerdict(node_name, False, "", beyond_eviction, _DEVICES, None, (outcome, computed_for, claims))


class AllFit(dict[str, NodeVerdict]):
    """Verdicts by node name every one of which fits: made so from verdicts known to fit (the filter
    cache's kept fits verdicts, evaluation.VerdictMemo) and never changed afterwards, so the answer
    need not read each verdict again."""

    __slots__ = ()


_FITS = attrgetter("fits")


def fitting_names(verdicts: Mapping[str, NodeVerdict]) -> list[str]:
    """The nodes whose verdict fits, in order (in C: a filter where every node fits needs nothing else
    of its verdicts, see answer)."""
    if type(verdicts) is AllFit:
        return list(verdicts)
    return list(compress(verdicts, map(_FITS, verdicts.values())))


def answer(verdicts: Mapping[str, NodeVerdict], *, words: Words = Words.FULL,
           passed: list[str] | None = None) -> FilterResult:
    """The filter answer, with timed-out nodes treated as "not known", not as "does not fit".

    Reporting a timeout as unresolvable (what upstream's plugin first did) parks the pod in
    kube-scheduler's unschedulable queue until a cluster event or up to 5 minutes, although only the
    machine was busy. Following upstream PR #137607, a timeout that leaves no node for the pod is an
    Error (with upstream's words, naming the first node that timed out): kube-scheduler then retries the
    pod after its backoff (seconds). We deliberately differ from upstream when another node fits: there
    a node's Error aborts the whole attempt; here the pod goes to a node known to fit and the timed-out
    nodes are only resolvable failures.

    `passed`: fitting_names(verdicts), when the caller has worked it out (the answer takes the list).
    """
    if passed is None:
        passed = fitting_names(verdicts)
    if len(passed) == len(verdicts):  # every node fits: nothing timed out, nothing to say
        return FilterResult(passed, {}, {})
    some_fit, timed_out_count, first_timed_out = bool(passed), 0, ""
    if not some_fit:  # where some node fits, the timeouts change nothing
        for verdict in verdicts.values():
            if verdict.reason == _TIMEOUT:
                timed_out_count += 1
                first_timed_out = first_timed_out or verdict.node
    if timed_out_count:
        if words == Words.UPSTREAM:
            return FilterResult([], {}, {}, f"node {first_timed_out}: {TIMED_OUT_MESSAGE}")
        return FilterResult([], {}, {}, f"{TIMED_OUT_MESSAGE} on {timed_out_count} of {len(verdicts)} "
                                        "node(s) and no other node fits")
    return split(verdicts, words=words, some_fit=some_fit)


def split(verdicts: Mapping[str, NodeVerdict], *, words: Words = Words.FULL,
          some_fit: bool | None = None) -> FilterResult:
    """The answer's three lists.

    Words.DETAILED (the answer to kube-scheduler in our words): where some node fits, nodes without
    devices for the pod say only CANNOT_ALLOCATE, as upstream's plugin does. kube-scheduler shows the
    failures' messages only when no node is left (in the FailedScheduling event), so working out and
    sending why for each of hundreds of full nodes is CPU and bytes for nothing on every pod that gets
    scheduled; with no node left, every node says why. Words.UPSTREAM never works out why: each node
    gets the in-tree plugin's fixed words. `dra-extender explain` and simulate always give the details
    (Words.FULL)."""
    result = FilterResult([], {}, {})
    unknown = 0
    if some_fit is None:  # whether any verdict fits, when the caller has not worked it out
        some_fit = any(verdict.fits for verdict in verdicts.values())
    passed, failed, unresolvable = result.passed, result.failed, result.unresolvable
    upstream = words == Words.UPSTREAM
    terse = words == Words.DETAILED and some_fit  # a node without devices only says CANNOT_ALLOCATE
    brief = words != Words.FULL
    for name, verdict in verdicts.items():
        if verdict.fits:
            passed.append(name)
        elif verdict.reason == _UNKNOWN_NODE and brief:
            # kube-scheduler counts a node its extender leaves out of every list as unschedulable and
            # unresolvable, exactly what an unknown node is: naming a few is enough, so a request of
            # made-up names cannot blow up into an answer several times its size.
            unknown += 1
            if unknown <= NAMED_UNKNOWN_NODES:
                unresolvable[name] = verdict.message
        elif upstream:
            if verdict.reason == _DEVICES:  # most failed nodes, answered without reading their outcome
                unresolvable[name] = CANNOT_ALLOCATE
            else:
                (unresolvable if verdict.upstream_unresolvable else failed)[name] = verdict.upstream_words
        else:
            said = CANNOT_ALLOCATE if terse and verdict.reason == _DEVICES else verdict.message
            (unresolvable if verdict.unresolvable else failed)[name] = said
    return result


def failure_message(outcome: AllocationOutcome) -> str:
    return outcome.summary() or CANNOT_ALLOCATE
