"""Rules the extender, its controllers and the webhook share, kept in one place so they cannot drift.

A leaf module: it imports nothing from extender/ or webhook/, so both may use it.
"""

from __future__ import annotations

import argparse
import math
import re

# Upstream's limit on a ResourceClaim's status.reservedFor (ResourceClaimReservedForMaxSize in the API).
RESERVED_FOR_MAX = 256

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s)")
_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration(text: str) -> float:
    """Go-style duration ("5m", "90s", "1h30m", "250ms") or plain seconds ("30", "0.5"), to seconds.

    The argparse type of every duration flag that may be zero; ArgumentTypeError names bad text."""
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        parts = _DURATION.findall(text)
        if not parts or "".join(number + unit for number, unit in parts) != text:
            raise argparse.ArgumentTypeError(
                f"invalid duration {text!r} (examples: 300, 90s, 5m, 1h30m)"
            ) from None
        seconds = sum(float(number) * _UNIT[unit] for number, unit in parts)
    if not math.isfinite(seconds):  # float() also reads "nan" and "inf"
        raise argparse.ArgumentTypeError(f"duration must be finite: {text!r}")
    if seconds < 0:
        raise argparse.ArgumentTypeError(f"duration must not be negative: {text!r}")
    return seconds


def parse_positive_duration(text: str) -> float:
    """parse_duration for flags where zero makes no sense (timeouts)."""
    seconds = parse_duration(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return seconds
