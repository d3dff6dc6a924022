"""Rules the extender, its controllers and the webhook share, kept in one place so they cannot drift:
the reservedFor limit, the duration grammar of every duration flag, the scoring annotation."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Mapping
from typing import Any

# Upstream's limit on a ResourceClaim's status.reservedFor (ResourceClaimReservedForMaxSize in the API).
RESERVED_FOR_MAX = 256

# Device placement policies of prioritize (extender.plugin.scoring); a pod picks one with the annotation.
SCORING_POLICIES = ("binpack", "spread", "none")
DEFAULT_SCORING_POLICY = "binpack"
SCORING_ANNOTATION = "dra-extender.io/scoring"

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


def annotated_scoring_policy(pod: Mapping[str, Any]) -> object:
    """The pod's scoring annotation as written (None without one); not checked."""
    meta = pod.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    return annotations.get(SCORING_ANNOTATION) if isinstance(annotations, dict) else None


def scoring_annotation_problem(pod: Mapping[str, Any]) -> str:
    """Why the pod's scoring annotation is ignored ("" when it is absent or valid)."""
    chosen = annotated_scoring_policy(pod)
    if chosen is None or chosen in SCORING_POLICIES:
        return ""
    return (f"{SCORING_ANNOTATION}={chosen!r} is unknown ({', '.join(SCORING_POLICIES)}): "
            "the default policy applies")
