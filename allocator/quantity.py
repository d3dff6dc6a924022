"""Kubernetes resource quantities (apimachinery ``resource.Quantity``), exact and immutable.

Values are held as an integer number of nano-units: parsing rounds any finer fraction away from
zero to the next nano-unit, exactly as ``resource.ParseQuantity`` does, so every quantity a user
can write is representable and sums stay exact.
"""

from __future__ import annotations

import functools
import re
from fractions import Fraction
from typing import Literal

Format = Literal["DecimalSI", "BinarySI", "DecimalExponent"]
FORMATS: tuple[Format, ...] = ("DecimalSI", "BinarySI", "DecimalExponent")

NANO = 10**9
# Upstream accepts any int32 exponent; values are exact integers here, so absurd exponents
# ("1e2000000000") are refused instead of building enormous numbers.
MAX_EXPONENT = 1000
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIX_BY_EXPONENT = {exponent: suffix for suffix, exponent in _DECIMAL_SUFFIXES.items()}
_BINARY_SUFFIXES = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}  # powers of 1024
_BINARY_SUFFIX_BY_POWER = {power: suffix for suffix, power in _BINARY_SUFFIXES.items()}

# sign, integer digits, fraction digits (either part may be empty, not both), suffix
_SYNTAX = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*(?:[+-]?[0-9]+)?)")
_EXPONENT_SUFFIX = re.compile(r"[eE]([+-]?[0-9]+)")


def _round_away_from_zero(value: Fraction) -> int:
    whole = value.numerator // value.denominator if value >= 0 else -((-value.numerator) // value.denominator)
    return whole if whole == value else whole + (1 if value > 0 else -1)


@functools.total_ordering
class Quantity:
    """An exact Kubernetes quantity plus the suffix family it was written in."""

    __slots__ = ("_format", "_nanos")

    def __init__(self, nanos: int, format: Format = "DecimalSI") -> None:
        if format not in FORMATS:
            raise ValueError(f"unknown quantity format {format!r}; expected one of {', '.join(FORMATS)}")
        self._nanos = nanos
        self._format: Format = format

    @classmethod
    def parse(cls, text: str) -> Quantity:
        """Parse Kubernetes quantity syntax ("80Gi", "100m", "1.5", "1e3", "5E", "-1")."""
        if not isinstance(text, str):
            raise ValueError(f"quantity must be a string, got {type(text).__name__}")
        match = _SYNTAX.fullmatch(text)
        if match is None or not (match.group(2) or match.group(3)):
            raise ValueError(f"invalid quantity {text!r}: quantities must match the regular expression "
                             r"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
        sign, whole, fraction, suffix = match.groups()
        fraction = fraction or ""
        # value = digits / 10**len(fraction) * numerator / denominator, in exact integers
        digits = int((whole or "0") + fraction)
        numerator, denominator = NANO, 10 ** len(fraction)
        format: Format
        if suffix in _DECIMAL_SUFFIXES:
            format, power = "DecimalSI", _DECIMAL_SUFFIXES[suffix]
        elif suffix in _BINARY_SUFFIXES:
            format, power = "BinarySI", 0
            numerator *= 1024 ** _BINARY_SUFFIXES[suffix]
        elif (exponent := _EXPONENT_SUFFIX.fullmatch(suffix)) is not None:
            format, power = "DecimalExponent", int(exponent.group(1))
            if abs(power) > MAX_EXPONENT:
                raise ValueError(f"invalid quantity {text!r}: exponent beyond ±{MAX_EXPONENT}")
        else:
            raise ValueError(f"invalid quantity {text!r}: unable to parse quantity's suffix {suffix!r}")
        if power >= 0:
            numerator *= 10**power
        else:
            denominator *= 10**-power
        nanos = -(-(digits * numerator) // denominator)  # rounds up: parsing rounds away from zero
        if format == "BinarySI":
            # Kubernetes caps binary quantities at the int64 range and prints tiny ones as decimals.
            nanos = min(nanos, INT64_MAX * NANO)
            if nanos < NANO:
                format = "DecimalSI"
        return cls(-nanos if sign == "-" else nanos, format)

    @classmethod
    def from_fraction(cls, value: Fraction | int, format: Format = "DecimalSI") -> Quantity:
        """Build a quantity from an exact number (rounded away from zero to nano-units, as parsing does)."""
        return cls(_round_away_from_zero(Fraction(value) * NANO), format)

    @property
    def value(self) -> Fraction:
        return Fraction(self._nanos, NANO)

    @property
    def nanos(self) -> int:
        return self._nanos

    @property
    def format(self) -> Format:
        return self._format

    def milli_value(self) -> int:
        """ceil(|q| * 1000) with q's sign, like Quantity.MilliValue()."""
        return _round_away_from_zero(Fraction(self._nanos, 10**6))

    def is_integer(self) -> bool:
        """True when as_integer() succeeds (whole number within int64)."""
        return self._nanos % NANO == 0 and INT64_MIN <= self._nanos // NANO <= INT64_MAX

    def as_integer(self) -> int:
        if not self.is_integer():
            raise ValueError(f"cannot convert quantity {self} to integer")
        return self._nanos // NANO

    def as_approximate_float(self) -> float:
        try:
            return self._nanos / NANO
        except OverflowError:
            return float("inf") if self._nanos > 0 else float("-inf")

    def sign(self) -> int:
        return (self._nanos > 0) - (self._nanos < 0)

    def __add__(self, other: object) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity(self._nanos + other._nanos, self._format)

    def __sub__(self, other: object) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity(self._nanos - other._nanos, self._format)

    def __neg__(self) -> Quantity:
        return Quantity(-self._nanos, self._format)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._nanos == other._nanos

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._nanos < other._nanos

    def __hash__(self) -> int:
        return hash(("Quantity", self._nanos))

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"

    def __str__(self) -> str:
        nanos = self._nanos
        if nanos == 0:
            return "0"
        format = self._format
        if format == "BinarySI" and (-1024 * NANO < nanos < 1024 * NANO or nanos % NANO):
            format = "DecimalSI"
        if format == "BinarySI":
            return _binary_string(nanos // NANO)
        return _decimal_string(nanos, format)


def _binary_string(value: int) -> str:
    power = 0
    while power < 6 and value % 1024 == 0:
        value //= 1024
        power += 1
    return f"{value}{_BINARY_SUFFIX_BY_POWER.get(power, '')}"


def _decimal_string(nanos: int, format: Format) -> str:
    mantissa, exponent = nanos, -9
    while mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    remainder = exponent % 3  # move the exponent down to a multiple of three
    mantissa *= 10**remainder
    exponent -= remainder
    if format == "DecimalExponent":
        return f"{mantissa}e{exponent}" if exponent else str(mantissa)
    if exponent > 18:
        # Upstream drops the suffix for DecimalSI values beyond exa (printing a wrong number);
        # we deliberately keep the value right by staying at the largest suffix.
        mantissa *= 10 ** (exponent - 18)
        exponent = 18
    return f"{mantissa}{_DECIMAL_SUFFIX_BY_EXPONENT[exponent]}"
