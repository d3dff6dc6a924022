"""DRA structured allocator: object model, pool gathering and device search (pure library, no I/O).

Semantics follow upstream Kubernetes 1.37.1's structured allocator (k8s.io/dynamic-resource-allocation
v0.37.1, incubating/experimental variants) with the lexicographic pool order; tests/conformance checks
that claim against the released Go code. Deliberate differences, each commented where implemented:

- pool order of upstream's stable variant: we always walk pools and slices in lexicographic order;
  upstream's "stable" variant (picked only when consumable capacity, binding conditions, fractional
  capacity ranges and the alpha allocator gates are all off) follows its slice list order, which is
  not defined;
- DRADeviceCompatibilityGroups: compatibilityGroups are checked when a slice is parsed as the API
  server checks them (at most 2, DNS labels, unique; its error texts), where upstream's allocator
  takes any list; allocated peers that disagree make the starting intersection depend on their order,
  a quirk we copy, except that slices which do not target the node come in name order here and in
  list order (not defined) upstream;
- a device that still holds shares is not handed out exclusively, nor looked at by the search: where
  upstream may try it and stop with an error only that device raises (a selector failing on it, or
  for an "all" request a constraint it fails), ours is unschedulable;
- a selector whose estimated CEL cost exceeds the limit is a compile error here (as when the API
  server validates it); upstream's allocator skips the estimate and stops such a selector at run time;
- the search prunes hopeless branches, so its ``steps`` can be lower than upstream's allocateOne
  count; ``Allocator(..., prune=False)`` reproduces upstream's count. Pruning never skips a hard
  error upstream's search would reach (a failing selector, a capacity request its range arithmetic
  cannot represent): bounds only look as far as the first request that could hit one.

Open CEL differences from cel-go found by the differential campaigns (cost estimates of stored
selectors, milli sums and asInteger, opaque == in cel-expr, cel-expr's UTC string() of a timestamp
written with an offset, cel-expr's ordering of a NaN and string() of an infinite or NaN double behind
dyn()) are listed one by one, with the reason, in tests/conformance/differential.py
(KNOWN_CEL_DIFFERENCES). As cel-go when the program is created, conversions of constants and
constant regular expressions are computed at compile time, so their errors are compile errors
(allocator.cel.folding). Every CEL library
of upstream's environment is implemented. The Kubernetes format library (allocator.cel.formatlib)
copies upstream's quirks: a *Prefix format replaces the last two bytes of a name ending in '-' by
"a", ``datetime`` looks only at the text up to a second 't'.

Upstream quirk we copy: with DRAOptionalNodeOperations off, devices of slices with skipNodeOperations are
usable unless another alpha allocator gate is on (upstream's variants differ; allocator.checks says which).
Derived attribute expressions (DRADerivedAttributes) follow the selectors' cost rule above.

Upstream bugs we used to fix on our own are fixed in 1.37.1 too (distinctAttribute #140438,
counters rollback #140436, list intersection restored on backtracking #140326).
"""

from allocator.derived import claim_problems, has_derived_attributes
from allocator.errors import AllocationError, AllocationTimeout, InvalidObjectError, NodeAllocationError
from allocator.features import DEFAULT_GATES, FeatureGates
from allocator.headroom import NodeHeadroom, Stranded, fill, local_likeness
from allocator.inventory import Inventory
from allocator.likeness import Likeness, declared_features, devices_in_use, likeness, moved_to
from allocator.model import (
    Device,
    DeviceClass,
    DeviceTaintRule,
    Node,
    NodeAllocatableResource,
    ResourceClaim,
    ResourceSlice,
    parse_object,
)
from allocator.nodes import (
    OPTIONAL_NODE_OPERATIONS,
    allocation_skips_node_operations,
    node_matches_selector,
    takes_skipped_node_operations,
)
from allocator.outcome import PREEMPTION_MAY_HELP, AllocationOutcome, Reason, Rejection
from allocator.policies import request_policy_problems
from allocator.pools import NodePools
from allocator.quantity import Quantity
from allocator.reasons import REJECTION_PHRASES
from allocator.search import Allocator
from allocator.state import AllocatedState, AllocationReading, AllocationUse, allocation_use
from allocator.taints import tolerates

__all__ = [
    "DEFAULT_GATES",
    "OPTIONAL_NODE_OPERATIONS",
    "PREEMPTION_MAY_HELP",
    "REJECTION_PHRASES",
    "AllocatedState",
    "AllocationError",
    "AllocationOutcome",
    "AllocationReading",
    "AllocationTimeout",
    "AllocationUse",
    "Allocator",
    "Device",
    "DeviceClass",
    "DeviceTaintRule",
    "FeatureGates",
    "InvalidObjectError",
    "Inventory",
    "Likeness",
    "Node",
    "NodeAllocatableResource",
    "NodeAllocationError",
    "NodeHeadroom",
    "NodePools",
    "Quantity",
    "Reason",
    "Rejection",
    "ResourceClaim",
    "ResourceSlice",
    "Stranded",
    "allocation_skips_node_operations",
    "allocation_use",
    "claim_problems",
    "declared_features",
    "devices_in_use",
    "fill",
    "has_derived_attributes",
    "likeness",
    "local_likeness",
    "moved_to",
    "node_matches_selector",
    "parse_object",
    "request_policy_problems",
    "takes_skipped_node_operations",
    "tolerates",
]
