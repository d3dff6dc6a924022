"""What a node's devices give a pod's claims: the one interface NodeChecker (and prioritize's
NodeScorer) ask, whatever remembers outcomes behind it.

`Search` runs the allocator every time (bind, the filter hold and explain always use it, so they see
the current state). extender.plugin.filtercache.CachedEvaluation decorates it: the same questions,
answered from outcomes kept while nothing they depend on has changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import compress
from operator import not_
from typing import TYPE_CHECKING, NamedTuple, Protocol, cast

from allocator import AllocationOutcome, Node
from extender.plugin.scoring import NodeFit
from extender.plugin.verdicts import AllFit, ClaimRefs, NodeVerdict

if TYPE_CHECKING:
    from extender.plugin.planning import PodPlan

# A remembered outcome: (outcome, the claims a failure was worked out for when they are not the plan's
# (rename before showing its reasons), whether a failure is beyond what eviction can free).
Known = tuple[AllocationOutcome, ClaimRefs | None, bool]
# One node's name with its remembered outcome.
KnownFor = tuple[str, AllocationOutcome, ClaimRefs | None, bool]


class MemoisedFit(NamedTuple):
    """A node's fit for prioritize (placement.py) and the outcome it was worked out for."""

    outcome: AllocationOutcome  # compared by identity
    fit: NodeFit


# Prioritize's node fits by node name.
FitMemo = dict[str, MemoisedFit]


class VerdictMemo:
    """The verdicts a filter made from remembered outcomes of one claims spec, by node name: while a
    node's outcome stays, the next filter of the spec answers the node with the same verdict object.
    A fits verdict names no claim and holds for every claims of the spec; a failure's words name the
    claims, so `failing` holds the failures of `claims` only (the pod filtered last).

    Whatever remembers the outcomes owns the memo and drops a node's verdicts whenever it drops the
    node's outcome, so a lookup needs no check per node: a warm filter looks its nodes up in C (`known`)
    instead of making and checking a verdict for each in Python."""

    __slots__ = ("claims", "failing", "fitting")

    def __init__(self) -> None:
        self.fitting: dict[str, NodeVerdict] = {}
        self.failing: dict[str, NodeVerdict] = {}
        self.claims: ClaimRefs = ()

    def for_claims(self, claims: ClaimRefs) -> VerdictMemo:
        if claims != self.claims:
            self.failing, self.claims = {}, claims
        return self

    def drop(self, name: str) -> None:
        self.fitting.pop(name, None)
        self.failing.pop(name, None)

    def known(self, names: list[str]) -> tuple[dict[str, NodeVerdict], list[str]]:
        """(the verdicts the memo has for `names`, in their order; the names it has none for)."""
        if not self.fitting and not self.failing:  # a claims spec filtered for the first time
            return {}, names
        found = list(map(self.fitting.get, names))
        if self.failing:  # a node is in one dict at most: failing.get falls back to the fits verdict
            found = list(map(self.failing.get, names, found))
        if all(found):
            complete = cast("list[NodeVerdict]", found)
            if not self.failing:  # fits verdicts only
                return AllFit(zip(names, complete, strict=True)), []
            return dict(zip(names, complete, strict=True)), []
        known = dict(zip(compress(names, found), filter(None, found), strict=True))
        return known, list(compress(names, map(not_, found)))


class NodeEvaluation(Protocol):
    def prepare(self, plan: PodPlan) -> None:
        """Called before a plan's nodes are evaluated (not at bind)."""
        ...

    def known(self, plan: PodPlan, node: Node) -> tuple[object, Known | None]:
        """(a handle for `evaluate`, the outcome already known for `node`, or None)."""
        ...

    def evaluate(self, plan: PodPlan, node: Node, handle: object,
                 search: Callable[[], AllocationOutcome]) -> AllocationOutcome:
        """The outcome on `node` for a node `known` had none for; `search` runs the allocator."""
        ...

    def known_for(self, plan: PodPlan, names: Iterable[str],
                  node_of: Callable[[str], Node | None]) -> list[KnownFor]:
        """`known` for many nodes at once, the nodes with an outcome only."""
        ...

    def refresh(self, plan: PodPlan) -> None:
        """After the event loop ran other work in the middle of evaluating a plan's nodes."""
        ...

    def fits_memo(self, plan: PodPlan) -> FitMemo | None:
        """Where prioritize may keep the node fits of the plan's claims (None: nowhere)."""
        ...

    def known_verdicts(self, plan: PodPlan,
                       names: list[str]) -> tuple[dict[str, NodeVerdict], list[str], VerdictMemo]:
        """(the verdicts remembered for `names` and the plan's claims, in their order; the names with
        none, for `known_for`; the memo to keep the verdicts made from those outcomes in)."""
        ...


class Search:
    """Every outcome searched afresh against the current state."""

    def prepare(self, plan: PodPlan) -> None:
        return None

    def known(self, plan: PodPlan, node: Node) -> tuple[object, Known | None]:
        return None, None

    def evaluate(self, plan: PodPlan, node: Node, handle: object,
                 search: Callable[[], AllocationOutcome]) -> AllocationOutcome:
        return search()

    def known_for(self, plan: PodPlan, names: Iterable[str],
                  node_of: Callable[[str], Node | None]) -> list[KnownFor]:
        return []

    def refresh(self, plan: PodPlan) -> None:
        return None

    def fits_memo(self, plan: PodPlan) -> FitMemo | None:
        return None

    def known_verdicts(self, plan: PodPlan,
                       names: list[str]) -> tuple[dict[str, NodeVerdict], list[str], VerdictMemo]:
        return {}, names, VerdictMemo()  # a memo nobody keeps


SEARCH = Search()
