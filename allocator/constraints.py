"""Claim constraints: matchAttribute and distinctAttribute.

The search adds and removes devices strictly last-in-first-out, so each constraint keeps a stack and a
removal restores exactly the state before the matching add.
"""

from __future__ import annotations

from collections.abc import Callable, Set

from allocator.model import AttributeValue, Device


def lookup_attribute(device: Device, driver: str, name: str) -> AttributeValue | None:
    """Fully-qualified key first; the bare identifier when the name's domain is the device's driver."""
    value = device.attributes.get(name)
    if value is not None:
        return value
    domain, sep, ident = name.partition("/")
    if sep and domain == driver:
        return device.attributes.get(ident)
    return None


class Constraint:
    """Common part: which requests a constraint applies to, and the add/remove stack."""

    __slots__ = ("attribute", "list_semantics", "requests", "stack")

    def __init__(self, requests: Set[str], attribute: str, *, list_semantics: bool) -> None:
        self.requests = requests
        self.attribute = attribute
        self.list_semantics = list_semantics
        self.stack: list[AttributeValue] = []

    def applies(self, request: str, subrequest: str | None) -> bool:
        if not self.requests:
            return True
        if request in self.requests:
            return True
        return subrequest is not None and f"{request}/{subrequest}" in self.requests

    def add(
        self,
        device: Device,
        driver: str,
        request: str,
        subrequest: str | None,
        lookup: Callable[[str], AttributeValue | None] | None = None,
    ) -> bool:
        """Add a device if it keeps the constraint satisfied. ``lookup`` finds the attribute instead of
        the device itself (the request's derived attributes; it may raise AllocationError)."""
        if not self.applies(request, subrequest):
            return True
        attribute = self.attribute
        value = lookup_attribute(device, driver, attribute) if lookup is None else lookup(attribute)
        if value is None:
            return False
        if value.is_list and not value.value and self.list_semantics:
            return False  # an empty list (only derived attributes have one) matches nothing, as upstream
        if value.is_list and not self.list_semantics and self.stack:
            # Without list semantics upstream (1.37.1) takes a list value only as the first device's;
            # any later one cannot be compared as a scalar.
            return False
        if not self.accepts(value):
            return False
        self.stack.append(value)
        return True

    def remove(self, request: str, subrequest: str | None) -> None:
        if self.applies(request, subrequest):
            self.stack.pop()

    def accepts(self, value: AttributeValue) -> bool:
        raise NotImplementedError


class MatchAttribute(Constraint):
    """All devices share the attribute value; with list semantics the value sets share an element."""

    __slots__ = ("intersections",)

    def __init__(self, requests: Set[str], attribute: str, *, list_semantics: bool) -> None:
        super().__init__(requests, attribute, list_semantics=list_semantics)
        # Running intersection after each add. Upstream did not restore it on backtracking (PR #140326);
        # keeping one entry per added device restores it exactly.
        self.intersections: list[frozenset[object]] = []

    def accepts(self, value: AttributeValue) -> bool:
        if not self.stack:
            if self.list_semantics:
                self.intersections.append(value.as_set())
            return True
        first = self.stack[0]
        if not self.list_semantics:
            return value.type == first.type and value.value == first.value
        if value.base_type != first.base_type:
            return False
        narrowed = self.intersections[-1] & value.as_set()
        if not narrowed:
            return False
        self.intersections.append(narrowed)
        return True

    def remove(self, request: str, subrequest: str | None) -> None:
        if self.applies(request, subrequest):
            self.stack.pop()
            if self.list_semantics:
                self.intersections.pop()


class DistinctAttribute(Constraint):
    """Every device has a different value (disjoint value sets with list semantics).

    Deliberate difference from upstream (issue #140438): upstream remembers only the last device per
    request, so one request taking several devices could get duplicates. We compare against every device
    already chosen under this constraint.
    """

    __slots__ = ()

    def accepts(self, value: AttributeValue) -> bool:
        if not self.list_semantics:
            return all(value.type != other.type or value.value != other.value for other in self.stack)
        values = value.as_set()
        return all(
            value.base_type != other.base_type or not (values & other.as_set()) for other in self.stack
        )
