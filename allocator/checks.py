"""The checks one device goes through for one request: written once, applied by the search and by the
explanation of a failed search, so a check cannot be added to one and forgotten in the other.

Per device and request, in this order (the explanation counts a device under the first that fails):

1. selection (``selection``): binding conditions, class selectors, request selectors, node;
2. admission (``admit``): in use, node operations the node must support, taints, compatibility groups,
   shared counters;
3. claim constraints (the search checks them on the devices chosen together; the explanation
   estimates them over the devices left);
4. capacity (``capacity_fits``).

The search applies the same checks with two shortcuts of its own: it tests "in use" before selection
(so, as upstream, a selector is never evaluated for a device already taken) and caches what cannot
change during a search (``eligible``). A new check goes into one of the steps above, with its
``Rejection`` key.
"""

from __future__ import annotations

from typing import NamedTuple

from allocator import capacity as cap
from allocator import cel
from allocator.compatibility import CompatibilityGroups
from allocator.errors import AllocationError
from allocator.features import EXPERIMENTAL_GATES, FeatureGates
from allocator.model import Node
from allocator.nodes import takes_skipped_node_operations
from allocator.outcome import Rejection
from allocator.pools import DeviceEntry, DeviceKey, Pool
from allocator.quantity import Quantity
from allocator.requestdata import Chosen, RequestData
from allocator.state import AllocatedState
from allocator.taints import untolerated

# Upstream (1.37) compiles selectors in the allocator with the environment for stored expressions,
# which declares every device field whatever the feature gates (allowMultipleAllocations, list-type
# attributes and includes()); only validation of new objects follows the gates.
STORED_EXPRESSIONS = cel.CompileOptions(consumable_capacity=True, list_type_attributes=True)
SHARED = 2  # eligibility of a shareable device: depends on what is allocated in this attempt

Counters = dict[str, dict[str, Quantity]]  # counter set -> counter -> amount
PoolKey = tuple[str, str]  # (driver, pool)
_SELECTORS = ((True, Rejection.CLASS_SELECTOR), (False, Rejection.REQUEST_SELECTOR))  # class ones first


class Switches(NamedTuple):
    """The feature gates the allocator reads, looked up once per Allocator."""

    admin_access: bool
    prioritized_list: bool
    partitionable: bool
    taints: bool
    consumable: bool
    binding_and_status: bool
    list_attributes: bool
    distinct_attribute: bool
    fractional: bool
    derived_attributes: bool
    optional_node_operations: bool
    # Upstream quirk we copy: its allocator variants without the alpha features ignore a slice's
    # skipNodeOperations; the experimental one, picked when any alpha allocator gate is on, refuses
    # those devices unless DRAOptionalNodeOperations is on and the node declares it.
    node_operations_checked: bool
    compatibility_groups: bool

    @classmethod
    def of(cls, gates: FeatureGates) -> Switches:
        consumable = gates.enabled("DRAConsumableCapacity")
        binding_and_status = gates.binding_and_status
        list_attributes = gates.enabled("DRAListTypeAttributes")
        fractional = gates.enabled("DRAFractionalCapacityRange")
        experimental = any(gates.enabled(gate) for gate in EXPERIMENTAL_GATES)
        return cls(
            admin_access=gates.enabled("DRAAdminAccess"),
            prioritized_list=gates.enabled("DRAPrioritizedList"),
            partitionable=gates.enabled("DRAPartitionableDevices"),
            taints=gates.enabled("DRADeviceTaints"),
            consumable=consumable,
            binding_and_status=binding_and_status,
            list_attributes=list_attributes,
            # Upstream's "stable" variant has no distinctAttribute.
            distinct_attribute=not gates.stable_variant,
            fractional=fractional,
            derived_attributes=gates.enabled("DRADerivedAttributes"),
            optional_node_operations=gates.enabled("DRAOptionalNodeOperations"),
            node_operations_checked=experimental,
            compatibility_groups=gates.enabled("DRADeviceCompatibilityGroups"),
        )


class DeviceChecks:
    """The device checks of one allocate() call, and the devices its current attempt is taking
    (which the search changes as it goes, and has given all back when it fails)."""

    __slots__ = (
        "allocated",
        "allocating",
        "allocating_capacity",
        "available_counters",
        "binding_and_status",
        "compatibility",
        "consumable",
        "consumed_counters",
        "fractional",
        "partitionable",
        "skipping_usable",
        "taints",
    )

    def __init__(self, allocated: AllocatedState, switches: Switches, node: Node) -> None:
        self.allocated = allocated
        # Whether devices of slices that skip node operations may be used on this node.
        self.skipping_usable = not switches.node_operations_checked or (
            switches.optional_node_operations and takes_skipped_node_operations(node)
        )
        self.binding_and_status = switches.binding_and_status
        self.consumable = switches.consumable
        self.partitionable = switches.partitionable
        self.taints = switches.taints
        self.fractional = switches.fractional
        # The current attempt. Device key -> claim indices it is being allocated to (exclusive use).
        self.allocating: dict[DeviceKey, list[int]] = {}
        self.allocating_capacity: dict[DeviceKey, dict[str, Quantity]] = {}
        self.available_counters: dict[PoolKey, Counters] = {}  # left over by earlier allocations
        self.consumed_counters: dict[PoolKey, Counters] = {}  # taken by this attempt
        self.compatibility = CompatibilityGroups(allocated) if switches.compatibility_groups else None

    # --- 1. selection -------------------------------------------------------------------------------
    def selection(
        self, rd: RequestData, entry: DeviceEntry, *, errors_reject: bool = False
    ) -> Rejection | None:
        """Why the request cannot select the device at all. A failing selector raises AllocationError,
        unless ``errors_reject``: then it just turns the device away."""
        if entry.device.binding_conditions and not self.binding_and_status:
            return Rejection.BINDING_CONDITIONS
        for for_class, rejection in _SELECTORS:
            try:
                if not self.selectors_match(rd, entry, for_class=for_class):
                    return rejection
            except AllocationError:
                if not errors_reject:
                    raise
                return rejection
        return None if entry.node_ok else Rejection.NODE

    def selectable(self, rd: RequestData, entry: DeviceEntry) -> bool:
        cached = rd.selectable[entry.index]
        if cached is not None:
            return cached
        result = self.selection(rd, entry) is None
        rd.selectable[entry.index] = result
        return result

    def selectors_match(self, rd: RequestData, entry: DeviceEntry, *, for_class: bool) -> bool:
        programs = rd.class_programs if for_class else rd.request_programs
        if programs is None:
            programs = _compile(rd, for_class=for_class)
            if for_class:
                rd.class_programs = programs
            else:
                rd.request_programs = programs
        if not programs:
            return True
        try:
            device = entry.device.cel_device(entry.key[0])
        except ValueError as exc:  # a value the CEL input cannot represent
            raise AllocationError(
                f"{_selector_owner(rd, for_class=for_class)}: selector #0: CEL runtime error: {exc}"
            ) from None
        for i, program in enumerate(programs):
            try:
                if not program.matches(device):
                    return False
            except cel.CELError as exc:
                owner = _selector_owner(rd, for_class=for_class)
                raise AllocationError(f"{owner}: selector #{i}: CEL runtime error: {exc}") from None
        return True

    def eligible(self, rd: RequestData, entry: DeviceEntry) -> int:
        """Everything about a candidate that does not change during the search, cached per request:
        selection and, for an exclusive device, capacity."""
        if not self.selectable(rd, entry):
            result = 0
        elif not self.consumable:
            result = 1
        elif entry.device.allow_multiple_allocations:
            result = 0 if cap.undefined_requests(rd.capacity_requests, entry.device, entry.key[0]) else SHARED
        elif rd.capacity_requests is None and not entry.device.has_request_policies:
            result = 1  # an exclusive device takes its whole capacity, which always fits
        else:
            result = 1 if self.capacity_fits(rd, entry) else 0
        rd.eligible[entry.index] = result
        return result

    # --- 2. admission -------------------------------------------------------------------------------
    def admit(self, chosen: Chosen) -> Rejection | None:
        """Admission of a selectable device, in order; on success its shared counters are taken
        (``release`` gives them back)."""
        rd, entry = chosen.request, chosen.entry
        if self.in_use(rd, entry, multiple=chosen.multiple):
            return Rejection.IN_USE
        if entry.slice.skip_node_operations and not self.skipping_usable:
            return Rejection.NODE_OPERATIONS
        if self.taints and entry.blocking_taints and untolerated(entry.blocking_taints, rd.tolerations):
            return Rejection.TAINT
        if not self.take_compatibility(chosen):
            return Rejection.COMPATIBILITY_GROUPS
        if not self.take_counters(chosen):
            self.release(chosen)
            return Rejection.COUNTERS
        return None

    def in_use(self, rd: RequestData, entry: DeviceEntry, *, multiple: bool) -> bool:
        """Taken for this request: for admin access, only by its own claim in this attempt (a shareable
        device never); otherwise allocated, being allocated, or holding shares it cannot share."""
        key = entry.key
        if rd.admin:
            return not multiple and rd.claim_index in self.allocating.get(key, ())
        if key in self.allocated.devices or self.allocating.get(key):
            return True
        return key in self.allocated.capacity and not self.shareable(entry)

    def shareable(self, entry: DeviceEntry) -> bool:
        # Deliberate difference from upstream, which looks only at exclusive allocations: a device that
        # still holds shares (it allowed multiple allocations before, or DRAConsumableCapacity was turned
        # off) must not be handed out exclusively on top of them.
        return self.consumable and entry.device.allow_multiple_allocations

    def counted_already(self, chosen: Chosen) -> bool:
        """A further share of a device whose counters are already counted (they are not charged, nor
        its compatibility groups checked, again)."""
        key = chosen.entry.key
        return chosen.multiple and (key in self.allocated.capacity or key in self.allocating_capacity)

    def take_compatibility(self, chosen: Chosen) -> bool:
        """DRADeviceCompatibilityGroups: join the groups of the devices drawing from the same counter
        sets (allocated ones and this attempt's), if they have one in common with the device."""
        if (
            self.compatibility is None
            or not chosen.entry.device.consumes_counters
            or not self.partitionable  # the counters turn it away
            or self.counted_already(chosen)
        ):
            return True
        chosen.compatibility = self.compatibility.take(chosen.entry)
        return chosen.compatibility is not None

    def take_counters(self, chosen: Chosen) -> bool:
        """Take the device's shared counters for this attempt, if they suffice."""
        entry = chosen.entry
        device = entry.device
        if not device.consumes_counters:
            return True
        if not self.partitionable:
            return False
        if self.counted_already(chosen):
            return True
        available = self.pool_counters(entry.pool)
        consumed = self._apply_counters(entry, +1)
        for set_name, counters in available.items():
            used = consumed.get(set_name)
            if not used:
                continue
            for counter, limit in counters.items():
                amount = used.get(counter)
                if amount is not None and limit < amount:
                    self._apply_counters(entry, -1)
                    return False
        chosen.counted = True
        return True

    def release(self, chosen: Chosen) -> None:
        if chosen.counted:
            self._apply_counters(chosen.entry, -1)
            chosen.counted = False
        if chosen.compatibility is not None:
            assert self.compatibility is not None, "groups are only taken with the gate on"
            self.compatibility.give_back(chosen.compatibility)
            chosen.compatibility = None

    def pool_counters(self, pool: Pool) -> Counters:
        # Keyed by (driver, pool): two drivers may name their pools alike.
        pool_key = (pool.driver, pool.name)
        available = self.available_counters.get(pool_key)
        if available is None:
            available = {name: dict(counters) for name, counters in pool.counter_sets.items()}
            for device in pool.all_devices():
                if device.consumes_counters and self.allocated.is_allocated(
                    (pool.driver, pool.name, device.name)
                ):
                    for set_name, counters in device.consumes_counters:
                        for counter, value in counters.items():
                            if counter in available.get(set_name, {}):
                                available[set_name][counter] = available[set_name][counter] - value
            self.available_counters[pool_key] = available
        return available

    def _apply_counters(self, entry: DeviceEntry, sign: int) -> Counters:
        pool_key = (entry.pool.driver, entry.pool.name)
        consumed = self.consumed_counters.setdefault(pool_key, {})
        for set_name, counters in entry.device.consumes_counters:
            totals = consumed.setdefault(set_name, {})
            for counter, value in counters.items():
                current = totals.get(counter)
                if sign > 0:
                    totals[counter] = value if current is None else current + value
                else:
                    assert current is not None, "counters are only given back after being taken"
                    totals[counter] = current - value
        return consumed

    # --- 4. capacity --------------------------------------------------------------------------------
    def capacity_fits(self, rd: RequestData, entry: DeviceEntry, *, in_use: bool = True) -> bool:
        """Whether the request fits the device's capacity, minus what is allocated and being allocated
        unless ``in_use`` is off. A request the range arithmetic cannot represent is a hard error."""
        device, driver = entry.device, entry.key[0]
        if cap.undefined_requests(rd.capacity_requests, device, driver):
            return False
        try:
            return cap.fits(
                rd.capacity_requests,
                device,
                driver,
                multiple=device.allow_multiple_allocations,
                already=self.allocated.capacity.get(entry.key) if in_use else None,
                allocating=self.allocating_capacity.get(entry.key) if in_use else None,
                fractional=self.fractional,
            )
        except cap.CapacityError as exc:
            raise AllocationError(
                f"claim {rd.claim_ref}, request {rd.full_name}: checking capacity for device "
                f"{'/'.join(entry.key)}: {exc}"
            ) from None

    # --- all steps, for an explanation -------------------------------------------------------------
    def rejection(self, rd: RequestData, entry: DeviceEntry) -> Rejection | None:
        """The first check (constraints aside) that turns the device away from the request, given what
        is allocated; a check that fails with an error counts the device out."""
        if rd.selectable[entry.index] is not True:  # the search already knows when it is selectable
            why = self.selection(rd, entry, errors_reject=True)
            if why is not None:
                return why
        chosen = Chosen(entry, rd, multiple=self.consumable and entry.device.allow_multiple_allocations)
        why = self.admit(chosen)
        if why is not None:
            return why
        self.release(chosen)
        if self.consumable:
            try:
                if not self.capacity_fits(rd, entry):
                    return Rejection.CAPACITY
            except AllocationError:
                return Rejection.CAPACITY
        return None


def _compile(rd: RequestData, *, for_class: bool) -> list[cel.Selector]:
    owner_object = rd.device_class if for_class else rd.request
    cached = owner_object.compiled.get(STORED_EXPRESSIONS)
    if cached is not None:
        return cached
    programs = []
    for i, expression in enumerate(owner_object.selectors):
        try:
            programs.append(cel.compile(expression or "", STORED_EXPRESSIONS))
        except cel.CELError as exc:
            raise AllocationError(
                f"{_selector_owner(rd, for_class=for_class)}: selector #{i}: CEL compile error: {exc}"
            ) from None
    owner_object.compiled[STORED_EXPRESSIONS] = programs
    return programs


def _selector_owner(rd: RequestData, *, for_class: bool) -> str:
    return f"class {rd.device_class.name}" if for_class else f"claim {rd.claim_ref}"
