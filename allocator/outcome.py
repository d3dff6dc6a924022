"""What an allocation attempt returns: the results, or why the claims do not fit."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Rejection(StrEnum):
    """Why a device was turned away from a request: the keys of ``Reason.rejected``, as served and
    shown (their values are part of the explain output)."""

    CLASS_SELECTOR = "class selector"
    REQUEST_SELECTOR = "request selector"
    IN_USE = "in use"
    TAINT = "taint"
    COUNTERS = "counters"
    COMPATIBILITY_GROUPS = "compatibility groups"  # DRADeviceCompatibilityGroups, against allocated devices
    CAPACITY = "capacity"
    CONSTRAINT = "constraint"
    INCOMPLETE_POOL = "incomplete pool"
    GROUPS_IGNORED = "groups ignored"  # in pools left incomplete: DRADeviceCompatibilityGroups is off
    INVALID_POOL = "invalid pool"
    NODE = "node"
    NODE_OPERATIONS = "node operations"  # skips node operations the node does not declare (or gate off)
    BINDING_CONDITIONS = "binding conditions"


# Rejections that other pods' allocations cause, so evicting pods could undo them.
PREEMPTION_MAY_HELP = frozenset(
    {Rejection.IN_USE, Rejection.COUNTERS, Rejection.COMPATIBILITY_GROUPS, Rejection.CAPACITY}
)


@dataclass
class Reason:
    """Why one request (or subrequest) of one claim could not be satisfied on the node."""

    claim: str  # "ns/name"
    request: str
    subrequest: str | None
    needed: int
    considered: int
    rejected: dict[Rejection, int] = field(default_factory=dict)
    in_use_by: dict[str, int] = field(default_factory=dict)
    message: str = ""

    @property
    def matching(self) -> int:
        """Devices that passed every per-device check."""
        return self.considered - sum(v for k, v in self.rejected.items() if k != Rejection.CONSTRAINT)

    def for_claims(self, renames: Mapping[str, str]) -> Reason | None:
        """This reason about other claims with identical specs: `renames` maps each old claim key
        ("ns/name") to the new one. None for a reason about several claims, whose message names them
        inside its text too. The messages of allocator/reasons.py name the claim only before their
        first ": " ("claim NAME: ..."); claim names cannot contain a colon."""
        if "," in self.claim:
            return None
        if "/" in self.claim:  # the claim's key, as its message names it
            key = name = renames.get(self.claim)
        else:  # a claim without a namespace: named by its name
            names = {old.split("/", 1)[1]: new.split("/", 1)[1] for old, new in renames.items()}
            name = key = names.get(self.claim)
        head, sep, rest = self.message.partition(": ")
        if key is None or name is None or not sep or not head.startswith("claim "):
            return None
        # Built directly (dataclasses.replace is several times slower, and a filter carries failures
        # over for every full node); the count dicts are shared, as nothing changes them once built.
        return Reason(key, self.request, self.subrequest, self.needed, self.considered, self.rejected,
                      self.in_use_by, f"claim {name}: {rest}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "claim": self.claim,
            "request": self.request,
            "subrequest": self.subrequest,
            "needed": self.needed,
            "considered": self.considered,
            "rejected": {str(key): count for key, count in self.rejected.items()},
            "inUseBy": dict(self.in_use_by),
            "message": self.message,
        }


class AllocationOutcome:
    """Result of one allocate() call.

    ``reasons`` of a failure are worked out on first access (a filter pass over many nodes rarely
    needs them); read them before changing the inventory or allocated state the allocation used.
    An outcome moved to a twin node (likeness.MovedOutcome) builds its ``allocations`` on first access:
    one is made for every node of a cold filter, and most are never read.
    """

    __slots__ = (
        "_allocations", "_explain", "_reasons", "_rejection_keys", "steps", "subrequest_ranks", "success"
    )

    def __init__(
        self,
        *,
        success: bool,
        allocations: list[dict[str, Any]] | None,
        reasons: list[Reason] | Callable[[], list[Reason]],
        steps: int,
        subrequest_ranks: list[dict[str, int]],
    ) -> None:
        """`allocations` None: a subclass builds them when first read."""
        self.success = success
        self._allocations = allocations
        self.steps = steps
        self.subrequest_ranks = subrequest_ranks
        self._rejection_keys: frozenset[Rejection] | None = None
        if callable(reasons):
            self._reasons: list[Reason] | None = None
            self._explain: Callable[[], list[Reason]] | None = reasons
        else:
            self._reasons, self._explain = reasons, None

    @property
    def allocations(self) -> list[dict[str, Any]]:
        assert self._allocations is not None
        return self._allocations

    def result_pools(self) -> set[tuple[str, str]]:
        """The (driver, pool) of every device the allocations take (built by the allocator, so every
        one has its devices' results)."""
        return {(result["driver"], result["pool"])
                for allocation in self.allocations for result in allocation["devices"]["results"]}

    def result_count(self) -> int:
        """How many devices the allocations take."""
        return sum(len(allocation["devices"]["results"]) for allocation in self.allocations)

    @property
    def explanation(self) -> object | None:
        """What a failure's reasons are worked out from (allocator.reasons.Explanation), until they are."""
        return self._explain

    @property
    def reasons(self) -> list[Reason]:
        if self._reasons is None:
            assert self._explain is not None
            self._reasons = self._explain()
            self._explain = None
        return self._reasons

    def rejection_keys(self) -> frozenset[Rejection]:
        """The rejections that turned away at least one device, over all reasons;
        worked out once (the scheduler asks for every node a cached failure is reused on)."""
        if self._rejection_keys is None:
            self._rejection_keys = frozenset(
                key for reason in self.reasons for key, count in reason.rejected.items() if count > 0)
        return self._rejection_keys

    def for_claims(self, renames: Mapping[str, str]) -> AllocationOutcome | None:
        """A failure's outcome for other claims with identical specs (see Reason.for_claims), or None
        when a reason cannot be carried over."""
        assert not self.success, "successful outcomes name no claim and are shared as they are"
        reasons = [reason.for_claims(renames) for reason in self.reasons]
        if any(reason is None for reason in reasons):
            return None
        kept = [r for r in reasons if r is not None]
        carried = AllocationOutcome(success=False, allocations=[], reasons=kept, steps=self.steps,
                                    subrequest_ranks=[])
        carried._rejection_keys = self._rejection_keys  # the counts are shared, so are their keys
        return carried

    def summary(self) -> str:
        if self.success:
            return f"allocated {len(self.allocations)} claim(s)"
        if not self.reasons:
            return "cannot allocate all claims"
        return "; ".join(r.message for r in self.reasons)

    def __repr__(self) -> str:
        return (
            f"AllocationOutcome(success={self.success}, steps={self.steps}, allocations={self.allocations!r})"
        )
