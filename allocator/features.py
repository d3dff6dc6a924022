"""Feature gates that change allocation behaviour, with Kubernetes 1.37 defaults."""

from __future__ import annotations

from collections.abc import Mapping

# Defaults as in the Kubernetes 1.37 versioned feature-gate table.
DEFAULT_GATES: Mapping[str, bool] = {
    "DRAAdminAccess": True,  # GA 1.36
    "DRAPrioritizedList": True,  # GA 1.36
    "DRAPartitionableDevices": True,  # beta 1.36
    "DRADeviceTaints": True,  # GA 1.37
    "DRADeviceTaintRules": True,  # GA 1.37
    "DRAConsumableCapacity": True,  # beta 1.36
    "DRADeviceBindingConditions": True,  # beta 1.36
    "DRAResourceClaimDeviceStatus": True,  # GA 1.37
    "DRAListTypeAttributes": False,  # alpha
    # Beta 1.37, off by default: its on-by-default entry needs --min-compatibility-version=1.37, and a
    # 1.37 component defaults to 1.36 (kube_features.go). On: capacity ranges in milli units.
    "DRAFractionalCapacityRange": False,
    "DRADerivedAttributes": False,  # alpha 1.37: request-scoped attributes computed by CEL for constraints
    "DRAOptionalNodeOperations": False,  # alpha 1.37: devices skipping node operations need a node for it
    # Alpha 1.37: devices drawing from one counter set must share a compatibility group; off, the
    # slices declaring groups are ignored (their pools become incomplete).
    "DRADeviceCompatibilityGroups": False,
    # Beta 1.37, off by default (needs GenericWorkload and scheduling.k8s.io/v1beta1 in the cluster).
    # Read by the servers only (extender.plugin.podgroups): the allocator does not change with it.
    "DRAWorkloadResourceClaims": False,
    # Alpha 1.36, off by default. Read by the servers only (extender.plugin.nodeallocatable: the node
    # allocatable footprint of a pod's devices, checked at filter and written to the pod at bind); the
    # allocator only parses and validates the devices' nodeAllocatableResources.
    "DRANodeAllocatableResources": False,
    # Alpha 1.35, off by default: tolerations with operator Lt/Gt compare a taint's value as an integer.
    # Read by the servers only (extender.plugin.bindchecks, the node taints bind checks); off, such a
    # toleration tolerates nothing, as in kube-scheduler.
    "TaintTolerationComparisonOperators": False,
}

# The gates that make upstream pick its experimental allocator.
EXPERIMENTAL_GATES = ("DRAListTypeAttributes", "DRADerivedAttributes", "DRADeviceCompatibilityGroups",
                      "DRAOptionalNodeOperations")


class FeatureGates:
    """An immutable, hashable set of gate values."""

    __slots__ = ("_hash", "_values")

    def __init__(self, overrides: Mapping[str, bool] | None = None) -> None:
        values = dict(DEFAULT_GATES)
        for name, value in (overrides or {}).items():
            if name not in DEFAULT_GATES:
                known = ", ".join(sorted(DEFAULT_GATES))
                raise ValueError(f"unknown feature gate {name!r} (known: {known})")
            if not isinstance(value, bool):
                raise ValueError(f"feature gate {name}: value must be true or false, got {value!r}")
            values[name] = value
        self._values = values
        self._hash = hash(tuple(sorted(values.items())))

    @classmethod
    def parse(cls, text: str) -> FeatureGates:
        """Parse "Name=true,Other=false" (the --feature-gates syntax)."""
        overrides: dict[str, bool] = {}
        for item in text.split(","):
            item = item.strip()
            if not item:
                continue
            name, sep, raw = item.partition("=")
            name, raw = name.strip(), raw.strip().lower()
            if not sep or raw not in ("true", "false"):
                raise ValueError(f"invalid feature gate setting {item!r}: expected NAME=true|false")
            overrides[name] = raw == "true"
        return cls(overrides)

    def enabled(self, name: str) -> bool:
        try:
            return self._values[name]
        except KeyError:
            raise ValueError(f"unknown feature gate {name!r}") from None

    def with_overrides(self, overrides: Mapping[str, bool]) -> FeatureGates:
        return FeatureGates({**self._values, **overrides})

    def as_dict(self) -> dict[str, bool]:
        return dict(self._values)

    # Derived switches, named like upstream's allocator feature set.
    @property
    def binding_and_status(self) -> bool:
        return self._values["DRADeviceBindingConditions"] and self._values["DRAResourceClaimDeviceStatus"]

    @property
    def stable_variant(self) -> bool:
        """Upstream picks its "stable" allocator: none of the gates only its newer variants handle is on."""
        values = self._values
        return not (
            values["DRAConsumableCapacity"]
            or values["DRAFractionalCapacityRange"]
            or self.binding_and_status
            or any(values[gate] for gate in EXPERIMENTAL_GATES)
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FeatureGates) and self._values == other._values

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        changed = {k: v for k, v in self._values.items() if DEFAULT_GATES[k] != v}
        return f"FeatureGates({changed})"
