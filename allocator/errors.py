"""Exceptions raised by the allocator package."""

from __future__ import annotations


class InvalidObjectError(ValueError):
    """A Kubernetes object is malformed. The message names kind, object and field path."""

    def __init__(self, kind: str, name: str, field: str, problem: str) -> None:
        self.kind = kind
        self.field = field
        self.problem = problem
        where = f"{kind} {name or '<unnamed>'}"
        super().__init__(f"{where}: {field}: {problem}" if field else f"{where}: {problem}")


class AllocationError(Exception):
    """A hard error: allocation cannot be decided for this input (upstream's wording where it has one)."""


class AllocationTimeout(AllocationError):
    """The search ran past its deadline."""


class NodeAllocationError(AllocationError):
    """An error that concerns only the node being tried (upstream's ErrFailedAllocationOnNode), e.g.
    invalid resource pools: other nodes may still work. ``outcome`` carries the failure reasons."""

    def __init__(self, message: str, outcome: object = None) -> None:
        super().__init__(message)
        self.outcome = outcome
