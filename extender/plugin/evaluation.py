"""What a node's devices give a pod's claims: the one interface NodeChecker (and prioritize's
NodeScorer) ask, whatever remembers outcomes behind it.

`Search` runs the allocator every time (bind, the filter hold and explain always use it, so they see
the current state). extender.plugin.filtercache.CachedEvaluation decorates it: the same questions,
answered from outcomes kept while nothing they depend on has changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, NamedTuple, Protocol

from allocator import AllocationOutcome, Node
from extender.plugin.scoring import NodeFit
from extender.plugin.verdicts import ClaimRefs

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


SEARCH = Search()
