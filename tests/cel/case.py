"""The shape shared by every CEL conformance table (cases_core.py, cases_libraries.py).

The test folder has no __init__.py, so the tables import it as `from case import CelCase`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from allocator.cel.backend import CompileOptions

Expectation = bool | Literal["compile_error", "runtime_error"]

# A GPU shaped like the upstream example driver's devices, used when a case gives no device.
DEFAULT_DEVICE: dict[str, Any] = {
    "driver": "gpu.example.com",
    "attributes": {
        "index": {"int": 3},
        "uuid": {"string": "gpu-18db0e85-99e9-c746-8531-ffeb86328b39"},
        "model": {"string": "LATEST-GPU-MODEL"},
        "driverVersion": {"version": "1.2.3"},
        "migCapable": {"bool": True},
        "numa.example.com/node": {"int": 1},
    },
    "capacity": {
        "memory": {"value": "80Gi"},
        "cores": {"value": "108"},
    },
}


@dataclass(frozen=True)
class CelCase:
    name: str
    expression: str
    expect: Expectation
    device: dict[str, Any] = field(default_factory=lambda: DEFAULT_DEVICE)  # kwargs for cel.make_device
    options: CompileOptions = field(default_factory=CompileOptions)
