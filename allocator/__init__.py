"""DRA structured allocator: object model, pool gathering and device search (pure library, no I/O)."""

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
from allocator.state import AllocatedState

__all__ = [
    "DEFAULT_GATES",
    "AllocatedState",
    "AllocationError",
    "AllocationOutcome",
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
]
