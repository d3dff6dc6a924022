"""Part of the claim rule (resourceclaims, resourceclaimtemplates CREATE): derived attributes
(DRADerivedAttributes) as the API server checks them with the gate on, compiled by our own CEL engine.

The API server drops the field while its gate is off, so the webhook sees derived attributes only from
an API server that has it on. With the gate off in dra-extender the claim is denied: the scheduler
would refuse it (upstream's allocator does the same rather than compare something else).
"""

from __future__ import annotations

from collections.abc import Callable

from allocator import FeatureGates, cel, claim_problems, has_derived_attributes
from webhook.review import mapping

DERIVED_GATE = "DRADerivedAttributes"
# Checks the `devices` of a claim spec found at a field path; returns the problems, each naming its field.
DerivedCheck = Callable[[dict, str], list[str]]


def derived_check(features: FeatureGates) -> DerivedCheck:
    enabled = features.enabled(DERIVED_GATE)
    list_types = features.enabled("DRAListTypeAttributes")
    # New expressions: the environment follows the gates, as when the API server validates a new object.
    options = cel.CompileOptions(
        consumable_capacity=features.enabled("DRAConsumableCapacity"), list_type_attributes=list_types
    )

    def check(spec: dict, path: str) -> list[str]:
        devices = mapping(spec.get("devices"), f"{path}.devices")
        if not enabled:
            if has_derived_attributes(devices):
                return [f"{path}.devices: derivedAttributes need the {DERIVED_GATE} feature gate, which "
                        "is off in dra-extender: it would not schedule pods using this claim"]
            return []
        return claim_problems(devices, f"{path}.devices", options, lists_allowed=list_types)

    return check
