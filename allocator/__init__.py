"""DRA structured allocator: object model, pool gathering and device search (pure library, no I/O).

Semantics follow upstream Kubernetes' incubating/experimental structured allocator with the
lexicographic pool order. Deliberate differences, each commented where implemented:

- distinctAttribute compares a device against every device already chosen (upstream #140438);
- shared counters are given back on every rejection and when undoing a shareable device (#140436);
- the matchAttribute intersection of list-type attributes is restored on backtracking (#140326);
- counter bookkeeping is keyed by (driver, pool), not by pool name alone;
- a device that still holds shares is not handed out exclusively;
- the search prunes hopeless branches (never changing the answer), so its ``steps`` can be lower
  than upstream's allocateOne count; ``Allocator(..., prune=False)`` reproduces upstream's count.
"""

from allocator.errors import AllocationError, AllocationTimeout, InvalidObjectError, NodeAllocationError
from allocator.features import DEFAULT_GATES, FeatureGates
from allocator.inventory import Inventory
from allocator.model import (
    DeviceClass,
    DeviceTaintRule,
    Node,
    ResourceClaim,
    ResourceSlice,
    parse_object,
)
from allocator.nodes import node_matches_selector
from allocator.outcome import AllocationOutcome, Reason
from allocator.search import Allocator
from allocator.state import AllocatedState, AllocationReading
from allocator.taints import tolerates

__all__ = [
    "DEFAULT_GATES",
    "AllocatedState",
    "AllocationError",
    "AllocationOutcome",
    "AllocationReading",
    "AllocationTimeout",
    "Allocator",
    "DeviceClass",
    "DeviceTaintRule",
    "FeatureGates",
    "InvalidObjectError",
    "Inventory",
    "Node",
    "NodeAllocationError",
    "Reason",
    "ResourceClaim",
    "ResourceSlice",
    "node_matches_selector",
    "parse_object",
    "tolerates",
]
