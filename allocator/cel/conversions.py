"""cel-go's type conversions from strings and of doubles, for both engines.

cel-go converts with Go's strconv: ``int()`` and ``uint()`` read plain decimal digits (a sign only for
int: no blanks, underscores, other bases or other scripts' digits), ``double()`` reads Go's float
syntax (underscores between digits, hexadecimal mantissas with a ``p`` exponent, ``inf``, ``infinity``
and ``nan`` in any case) and fails where the value overflows, ``bool()`` takes only the twelve spellings
of strconv.ParseBool, and ``string()`` of a double prints it as ``%g`` does. Python's parsers and
cel-cpp's are more or less lenient in each of these, so the engines call these instead.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

INT64_MIN, INT64_MAX, UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1
TRUE_TEXTS = frozenset({"1", "t", "T", "TRUE", "true", "True"})
FALSE_TEXTS = frozenset({"0", "f", "F", "FALSE", "false", "False"})

_DIGITS = re.compile(r"[0-9]+")
_DECIMAL_FLOAT = re.compile(r"[+-]?(?:[0-9_]+\.?[0-9_]*|\.[0-9_]+)(?:[eE][+-]?[0-9][0-9_]*)?")
_HEX_FLOAT = re.compile(r"[+-]?0[xX](?:[0-9a-fA-F_]+\.?[0-9a-fA-F_]*|\.[0-9a-fA-F_]+)[pP][+-]?[0-9][0-9_]*")
_SPECIAL = re.compile(r"(?i)[+-]?inf(?:inity)?|nan")


class ConversionError(ValueError):
    """A conversion cel-go fails; the message is cel-go's."""


def conversion_error(source: str, target: str) -> ConversionError:
    return ConversionError(f"type conversion error from '{source}' to '{target}'")


def parse_int(text: str) -> int:
    digits = text[1:] if text[:1] in ("+", "-") else text
    if _DIGITS.fullmatch(digits) is None:
        raise conversion_error("string", "int")
    value = int(text)
    if not INT64_MIN <= value <= INT64_MAX:
        raise conversion_error("string", "int")
    return value


def parse_uint(text: str) -> int:
    if _DIGITS.fullmatch(text) is None or int(text) > UINT64_MAX:
        raise conversion_error("string", "uint")
    return int(text)


def parse_bool(text: str) -> bool:
    if text in TRUE_TEXTS:
        return True
    if text in FALSE_TEXTS:
        return False
    raise conversion_error("string", "bool")


def parse_double(text: str) -> float:
    if _SPECIAL.fullmatch(text):
        return float(text)  # Python reads every spelling Go does (and "+nan", which the pattern excludes)
    hexadecimal = _HEX_FLOAT.fullmatch(text) is not None
    if not (hexadecimal or _DECIMAL_FLOAT.fullmatch(text)) or not _digits_in_mantissa(text, hexadecimal) \
            or ("_" in text and not _underscores_separate_digits(text, hexadecimal)):
        raise conversion_error("string", "double")
    plain = text.replace("_", "")
    try:
        value = float.fromhex(plain) if hexadecimal else float(plain)
    except OverflowError:
        raise conversion_error("string", "double") from None
    if math.isinf(value):  # beyond the largest double: strconv reports a range error
        raise conversion_error("string", "double")
    return value


def _digits_in_mantissa(text: str, hexadecimal: bool) -> bool:
    mantissa = re.split("[pP]" if hexadecimal else "[eE]", text.lstrip("+-"))[0]
    if hexadecimal:
        mantissa = mantissa[2:]
    return any(c not in "._" for c in mantissa)


def _underscores_separate_digits(text: str, hexadecimal: bool) -> bool:
    """Go's rule: an underscore must come between two digits, or between the base prefix and a digit."""
    body = text.lstrip("+-")
    previous = "^"  # start; "0" a digit or the prefix, "_" an underscore, "!" anything else
    if hexadecimal:
        body, previous = body[2:], "0"
    for char in body:
        if char.isdigit() or (hexadecimal and char in "abcdefABCDEF"):
            previous = "0"
        elif char == "_":
            if previous != "0":
                return False
            previous = "_"
        elif previous == "_":
            return False
        else:
            previous = "!"
    return previous != "_"


def format_double(value: float) -> str:
    """Go's ``%g`` of a double: the shortest digits that read back as the value, in exponent form
    from an exponent of -5 down or 6 up."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    if value == 0:
        return sign + "0"
    _, digit_tuple, exponent = Decimal(repr(abs(value))).normalize().as_tuple()
    digits = "".join(map(str, digit_tuple))
    point = len(digits) + int(exponent)  # the value is 0.<digits> * 10**point
    power = point - 1
    if power < -4 or power >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if power < 0 else '+'}{abs(power):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return f"{sign}{digits[:point]}.{digits[point:]}"


def double_to_uint(value: float) -> int:
    if math.isinf(value) or math.isnan(value) or value < 0 or value >= 2.0**64:
        raise ConversionError("unsigned integer overflow")
    return int(value)
