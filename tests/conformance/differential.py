"""Run one world (or one CEL question) on our implementation and on upstream's, and say how the
answers differ (None when they agree).

Agreement means: the same outcome kind (allocated / unschedulable / error), and when allocated the
same results per claim (devices, requests, admin access, tolerations, binding conditions, consumed
capacity, node selector; share IDs are random on both sides and only compared for presence). Error
texts only need the same class (CEL compile error, CEL runtime error, missing class, other).

Where upstream has a bug we fixed on purpose (allocator/__init__.py lists them), the harness does not
count the divergence as ours: :data:`KNOWN_DIFFERENCES` recognises each, and the tests say so.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import orjson

from allocator import (
    AllocatedState,
    AllocationError,
    AllocationTimeout,
    Allocator,
    DeviceClass,
    FeatureGates,
    InvalidObjectError,
    Inventory,
    Node,
    NodeAllocationError,
    ResourceClaim,
    ResourceSlice,
    cel,
)
from allocator.cel.cost import MAX_COST
from allocator.quantity import Quantity

Obj = dict[str, Any]
SHARE_ID = "<share-id>"


@dataclass(frozen=True)
class Verdict:
    kind: str  # allocated | unschedulable | error | invalid | timeout
    results: tuple[bytes, ...] = ()  # one canonical JSON text per claim, in claim order
    error: str = ""

    @property
    def error_class(self) -> str:
        text = self.error
        if "CEL compile error" in text or "compilation failed" in text:
            return "cel-compile"
        if "CEL runtime error" in text:
            return "cel-runtime"
        if "not found" in text and "class" in text:
            return "missing-class"
        return "other"


@contextmanager
def cel_engine(name: str) -> Iterator[None]:
    """Make the allocator compile with CEL engine ``name`` for the duration."""
    saved = cel.configured_engine_name()
    cel.use_engine(name)
    try:
        yield
    finally:
        cel.use_engine(saved)


def run_ours(world: Obj, deadline_s: float = 10.0, *, prune: bool = True) -> Verdict:
    try:
        inventory = Inventory()
        for raw in world["classes"]:
            inventory.upsert_class(DeviceClass.from_api(raw))
        for raw in world["slices"]:
            inventory.upsert_slice(ResourceSlice.from_api(raw))
        state = AllocatedState()
        for raw in world["allocatedClaims"]:
            state.add_claim(ResourceClaim.from_api(raw))
        claims = [ResourceClaim.from_api(raw) for raw in world["claims"]]
        allocator = Allocator(
            inventory, state, FeatureGates(world["gates"]), deadline_s=deadline_s, prune=prune
        )
        outcome = allocator.allocate(Node.from_api(world["node"]), claims)
    except InvalidObjectError as exc:
        return Verdict("invalid", error=str(exc))
    except NodeAllocationError as exc:
        return Verdict("unschedulable", error=str(exc))
    except AllocationTimeout as exc:
        return Verdict("timeout", error=str(exc))
    except AllocationError as exc:
        return Verdict("error", error=str(exc))
    if not outcome.success:
        return Verdict("unschedulable", error=outcome.summary())
    return Verdict("allocated", tuple(canonical(a) for a in outcome.allocations))


def run_upstream(ask: Callable[[Obj], Obj], world: Obj) -> Verdict:
    answer = ask({"mode": "allocate", **world})
    kind = answer["outcome"]
    if kind != "allocated":
        return Verdict(kind, error=answer.get("error", ""))
    return Verdict(kind, tuple(canonical(a) for a in answer.get("results") or []))


def _prune(value: Any) -> Any:
    """Drop empty fields, as JSON with omitempty does."""
    if isinstance(value, dict):
        pruned = {k: _prune(v) for k, v in value.items()}
        return {k: v for k, v in pruned.items() if v not in (None, [], {}, False)}
    if isinstance(value, list):
        return [_prune(v) for v in value]
    return value


# Go's Quantity cannot print a DecimalSI value from 1e21 on (no suffix past "E": 1e21 comes out as
# "1"), so the upstream program prints those in exponent form; they are compared by value.
_BEYOND_SUFFIXES = Quantity.parse("1e21")


def _printed_quantity(text: str) -> str:
    quantity = Quantity.parse(text)
    if abs(quantity.value) >= _BEYOND_SUFFIXES.value:
        return str(quantity.value)
    return str(quantity)


def canonical(allocation: Obj) -> bytes:
    allocation = _prune(copy.deepcopy(allocation))
    allocation.pop("allocationTimestamp", None)
    for result in allocation.get("devices", {}).get("results", []):
        if "shareID" in result:
            result["shareID"] = SHARE_ID
        if "consumedCapacity" in result:
            result["consumedCapacity"] = {
                k: _printed_quantity(v) for k, v in result["consumedCapacity"].items()
            }
    for term in allocation.get("nodeSelector", {}).get("nodeSelectorTerms", []):
        for key in ("matchExpressions", "matchFields"):
            if key in term:
                term[key] = sorted(
                    ({**r, "values": sorted(r.get("values", []))} for r in term[key]),
                    key=lambda r: orjson.dumps(r, option=orjson.OPT_SORT_KEYS),
                )
    return orjson.dumps(allocation, option=orjson.OPT_SORT_KEYS)


def difference(ours: Verdict, theirs: Verdict) -> str | None:
    if ours.kind != theirs.kind:
        return (
            f"outcome: ours {ours.kind} ({ours.error[:300]}), upstream {theirs.kind} ({theirs.error[:300]})"
        )
    if ours.kind == "allocated" and ours.results != theirs.results:
        return (
            "results differ:\n  ours     "
            + "\n           ".join(r.decode() for r in ours.results)
            + "\n  upstream "
            + "\n           ".join(r.decode() for r in theirs.results)
        )
    if ours.kind == "error" and ours.error_class != theirs.error_class:
        return (
            f"error class: ours {ours.error_class} ({ours.error}), "
            f"upstream {theirs.error_class} ({theirs.error})"
        )
    return None


# --- deliberate differences ----------------------------------------------------------------------
# Each recogniser gets the world and both verdicts and returns True when the divergence is one we
# chose (see allocator/__init__.py); the differential tests then count it as known, not as a bug.
# The upstream bugs we used to fix on our own (distinctAttribute #140438, counters rollback #140436,
# list intersection #140326) are fixed in 1.37.1: the ported cases that pin them now agree.

# Features only upstream's "incubating" and "experimental" variants support; with none of them on,
# upstream picks its "stable" variant, which walks pools in the order the slices were listed.
_BEYOND_STABLE = (
    "DRAConsumableCapacity",
    "DRAListTypeAttributes",
    "DRAFractionalCapacityRange",
    "DRADerivedAttributes",
    "DRAOptionalNodeOperations",
    "DRADeviceCompatibilityGroups",
)


def _upstream_picks_stable(world: Obj) -> bool:
    gates = world["gates"]
    binding = gates.get("DRADeviceBindingConditions", False) and gates.get(
        "DRAResourceClaimDeviceStatus", False
    )
    return not binding and not any(gates.get(gate, False) for gate in _BEYOND_STABLE)


def _held_by_shares(world: Obj) -> set[tuple[str, str, str]]:
    return {
        (result["driver"], result["pool"], result["device"])
        for raw in world["allocatedClaims"]
        for result in raw["status"]["allocation"]["devices"]["results"]
        if result.get("shareID")
    }


def _upstream_took_a_shared_device_whole(world: Obj, ours: Verdict, theirs: Verdict) -> bool:
    """Upstream's allocation gives a device exclusively while an allocated claim holds a share of it
    (left from when the device allowed multiple allocations); ours counts the device as in use."""
    held = _held_by_shares(world)
    if not held or theirs.kind != "allocated":
        return False
    return any(
        "shareID" not in result
        and not result.get("adminAccess")
        and (result["driver"], result["pool"], result["device"]) in held
        for text in theirs.results
        for result in orjson.loads(text).get("devices", {}).get("results", [])
    )


_CONSTRAINT_ERROR = re.compile(r"cannot add device (.+) because a claim constraint would not be satisfied")
# A selector (or capacity check) that failed on one device: "selector #0 on device d/p/n: ...".
_DEVICE_CHECK_ERROR = re.compile(r"(?:selector #\d+ on|checking capacity for) device (\S+?):")


def _device_id(text: str) -> tuple[str, str, str] | None:
    if text.count("/") < 2:
        return None
    driver, rest = text.split("/", 1)
    pool, device = rest.rsplit("/", 1)  # pool names may hold slashes, driver and device names not
    return driver, pool, device


def _held_by_shares_only(world: Obj, device_id: tuple[str, str, str] | None) -> bool:
    """An allocated claim holds a share of the device, which (now) cannot be shared: upstream does
    not count it as in use, we do."""
    if device_id is None or device_id not in _held_by_shares(world):
        return False
    driver, pool, device = device_id
    consumable = world["gates"].get("DRAConsumableCapacity", False)
    return not any(
        consumable and raw.get("allowMultipleAllocations")
        for s in world["slices"]
        if s["spec"]["driver"] == driver and s["spec"]["pool"]["name"] == pool
        for raw in s["spec"].get("devices", [])
        if raw["name"] == device
    )


def _upstream_tried_a_shared_device_for_all(world: Obj, ours: Verdict, theirs: Verdict) -> bool:
    """The same, for an "all" request: upstream takes the device among all of them and stops with the
    error a failing constraint gives, on that device or on one added after it (whose attribute then
    disagrees with the shared device's); ours counts it as in use, so the request cannot have all."""
    found = _CONSTRAINT_ERROR.search(theirs.error) if ours.kind == "unschedulable" else None
    if found is None or theirs.kind != "error":
        return False
    return any(_held_by_shares_only(world, device) for device in _held_by_shares(world))


def _upstream_checked_a_shared_device(world: Obj, ours: Verdict, theirs: Verdict) -> bool:
    """The same, for a request's selectors: upstream's search looks at the device (it is free there)
    and stops with the error a selector or capacity check raises on it; ours never looks at it."""
    found = _DEVICE_CHECK_ERROR.search(theirs.error) if ours.kind == "unschedulable" else None
    if found is None or theirs.kind != "error":
        return False
    return _held_by_shares_only(world, _device_id(found.group(1)))


KNOWN_DIFFERENCES: dict[str, Callable[[Obj, Verdict, Verdict], bool]] = {
    # Not a semantic difference: one side ran out of its 10 s (the scheduler's DRA filter timeout).
    # Without pruning our search takes the same allocateOne steps as upstream's, about five times
    # slower in Python; with pruning it often finishes where Go gives up.
    "search deadline": lambda w, o, t: (o.kind == "timeout") != (t.kind == "timeout"),
    # We always search pools and slices in lexicographic order; upstream's stable variant (only with
    # non-default gates) follows the order of its slice list, which is not defined.
    "pool order of upstream's stable variant": lambda w, o, t: (
        _upstream_picks_stable(w) and {o.kind, t.kind} <= {"allocated", "unschedulable"}
    ),
    # Upstream only counts exclusive allocations as in use, so it hands out a device whose shares are
    # still allocated (after the device stopped allowing multiple allocations, or with
    # DRAConsumableCapacity turned off); we keep it for its sharers. So upstream may stop with an
    # error only that device raises where we are unschedulable: a selector that fails on it, or for
    # an "all" request a constraint it fails.
    "device that still holds shares": lambda w, o, t: (
        _upstream_took_a_shared_device_whole(w, o, t)
        or _upstream_tried_a_shared_device_for_all(w, o, t)
        or _upstream_checked_a_shared_device(w, o, t)
    ),
}


def known_difference(world: Obj, ours: Verdict, theirs: Verdict) -> str | None:
    for name, recognises in KNOWN_DIFFERENCES.items():
        if recognises(world, ours, theirs):
            return name
    return None


# --- CEL ----------------------------------------------------------------------------------------


def question_options(question: Obj) -> cel.CompileOptions:
    """Validation of new objects declares only what the features enable; the allocator compiles as
    upstream does for stored expressions, with everything declared (allocator.checks)."""
    if not question.get("newExpressions"):
        return cel.CompileOptions(consumable_capacity=True, list_type_attributes=True)
    return cel.CompileOptions(
        consumable_capacity=question.get("consumableCapacity", False),
        list_type_attributes=question.get("listTypeAttributes", False),
    )


def cel_ours(engine: str, question: Obj) -> str:
    """compile_error | runtime_error | true | false, like the upstream program's outcome; for a derived
    attribute's expression "value:" and the attribute's JSON instead of true or false."""
    options = question_options(question)
    device = question["device"]
    view = cel.make_device(
        device["driver"],
        device.get("attributes"),
        device.get("capacity"),
        device.get("allowMultipleAllocations"),
    )
    if question.get("derived"):
        # Lists are always allowed for stored expressions, for new ones with list-type attributes.
        lists = not question.get("newExpressions") or bool(question.get("listTypeAttributes"))
        try:
            engine_ = cel.get_engine(engine)
            derived = engine_.compile_derived(question["expression"], options, lists_allowed=lists)
        except cel.CELCompileError:
            return "compile_error"
        try:
            return "value:" + attribute_json(derived.value(view))
        except cel.CELRuntimeError:
            return "runtime_error"
    try:
        selector = cel.get_engine(engine).compile(question["expression"], options)
    except cel.CELCompileError:
        return "compile_error"
    try:
        return "true" if selector.matches(view) else "false"
    except cel.CELRuntimeError:
        return "runtime_error"


def attribute_json(value: cel.AttributeValue | Obj) -> str:
    """A derived value (ours) or a DeviceAttribute (upstream's JSON) in one canonical form; empty
    lists are left out, as upstream's JSON does."""
    if not isinstance(value, dict):
        from allocator.derived import attribute_value

        attribute = attribute_value(value)
        items = attribute.value
        value = {attribute.type: list(items) if attribute.is_list else items}
    present = {kind: item for kind, item in value.items() if item != []}
    return orjson.dumps(present, option=orjson.OPT_SORT_KEYS).decode()


def upstream_cost(answer: Obj) -> int:
    """cel-go's estimate: the upstream program leaves out 2**64 - 1, which it gives for an estimate
    without bound and for an expression that did not compile (then 0 here)."""
    if "maxCost" in answer:
        return int(answer["maxCost"])
    return 0 if answer["outcome"] == "compile_error" else MAX_COST


def cel_upstream(ask: Callable[[Obj], Obj], question: Obj) -> tuple[str, Obj]:
    """Upstream's outcome. For a new selector an estimated cost over the limit counts as a compile
    error, because the API server rejects it (an estimate without bound too); upstream's allocator
    does not estimate stored ones."""
    answer = ask({"mode": "cel", **question})
    kind = answer["outcome"]
    if kind == "value":
        kind = "value:" + attribute_json(answer.get("attribute") or {})
    over_limit = upstream_cost(answer) > cel.DEFAULT_COST_LIMIT
    if kind != "compile_error" and over_limit and question.get("newExpressions"):
        kind = "compile_error"
    return kind, answer


# Open CEL divergences we know of and have not fixed yet (each is named in the report of the campaign
# and in docs/architecture.md); anything else fails the tests.
def _cost_over_limit_on_one_side(engine: str, question: Obj, ours: str, answer: Obj) -> bool:
    from allocator.cel.cost import estimate_cost

    options = question_options(question)
    try:
        our_cost = estimate_cost(question["expression"], options)
    except cel.CELError:
        return False
    limit = cel.DEFAULT_COST_LIMIT
    if not question.get("newExpressions"):  # upstream's allocator does not estimate at all
        return ours == "compile_error" and our_cost > limit and answer["outcome"] != "compile_error"
    return (our_cost > limit) != (upstream_cost(answer) > limit)


_INFINITE_OR_NAN_BEHIND_DYN = re.compile(r'string\(dyn\([^()]*double\("(?:[+-]?inf|-?Infinity|NaN)"\)')

KNOWN_CEL_DIFFERENCES: dict[str, Callable[[str, Obj, str, Obj], bool]] = {
    # Deliberate: we estimate the cost of every selector when compiling it, also in the allocator,
    # where upstream only stops a stored selector at run time. Such a selector cannot have passed the
    # API server's validation: our estimator follows cel-go's and the Kubernetes library's rules
    # (tests/cel/test_cost.py has cel-go's figures), and on 1,500 random selectors it was over the
    # limit exactly where cel-go's was. For a new selector one side over and the other not remains
    # possible where cel-go's estimate itself fails (a split() of a join() result: no cost at all),
    # and where ours is lower: cel-go sizes an optional's orValue() result as unbounded, so
    # `a.?s.orValue("x") + a.?s.orValue("x")` is over the limit there and costs 17 here (open; the API
    # server refuses such a claim before our webhook sees it).
    "cost estimate": _cost_over_limit_on_one_side,
    # cel-go's Quantity keeps the sum of two milli quantities in milli units (resource.Quantity's
    # int64Amount with a negative scale, or its inf.Dec form), and asInteger() and isInteger() then
    # fail even for a whole number (quantity("500m").add(quantity("500m")), also sub, and the same for
    # quantity("1000m") or quantity("1.5Gi") as parsed). Ours hold exact values: copying this would
    # mean carrying Go's representation with every quantity, device capacities included.
    "asInteger of a milli sum": lambda e, q, o, a: (
        a.get("error") == "cannot convert value to integer"
        and (".add(" in q["expression"] or ".sub(" in q["expression"])
    ),
    # cel-expr only: the Kubernetes Semver, Quantity, IP, CIDR, URL and format fail == with a value of another
    # type when they are on the left ("no such overload"; celpy does this, see celpy_library.go_equal).
    # cel-cpp compares its bytes encoding natively, and knowing that a dynamic left operand (an attribute) is
    # an opaque value takes a test on every attribute comparison, the common selector; so cel-expr
    # answers false there. Equality with an add()/sub() result is copied in both engines.
    "opaque value equality": lambda e, q, o, a: (
        e == "cel-expr"
        and (o in ("true", "false") or o.startswith("value:"))  # a derived attribute's value, same thing
        and a["outcome"] == "runtime_error"
        and a.get("error") == "no such overload"
    ),
    # cel-expr only: cel-cpp's timestamps keep no UTC offset, so string() of one written with an offset
    # other than Z prints it in UTC, where cel-go keeps the offset (allocator.cel.celexpr_time).
    "offset of a timestamp in string()": lambda e, q, o, a: (
        e == "cel-expr"
        and "string(" in q["expression"]
        and re.search(r'timestamp\("[^"]*[+-]\d\d:\d\d"\)', q["expression"]) is not None
        and o != a["outcome"]
    ),
    # cel-expr only: cel-go fails an ordering (<, <=, >, >=) with a NaN operand, cel-cpp answers false
    # (celpy copies it). A NaN only comes from double("NaN") and from arithmetic on infinities; copying
    # it would take every ordering of a double or dynamic value (attribute comparisons) through Python.
    "ordering of NaN": lambda e, q, o, a: (
        e == "cel-expr" and a["outcome"] == "runtime_error"
        and a.get("error") == "NaN values cannot be ordered"
    ),
    # cel-expr only: string() of a double prints an infinity or NaN as cel-go does ("+Inf", "NaN") where
    # the checker knows the argument is a double (celexpr_conversions); behind a dyn(), cel-cpp's own
    # "inf" and "nan" remain, since copying that would take every string() of an attribute through Python.
    "string() of an infinite or NaN double behind dyn()": lambda e, q, o, a: (
        e == "cel-expr"
        and _INFINITE_OR_NAN_BEHIND_DYN.search(q["expression"]) is not None
        and o != a["outcome"]
    ),
}


def known_cel_difference(engine: str, question: Obj, ours: str, answer: Obj) -> str | None:
    for name, recognises in KNOWN_CEL_DIFFERENCES.items():
        if recognises(engine, question, ours, answer):
            return name
    return None
