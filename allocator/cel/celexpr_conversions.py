"""cel-go's conversions from strings (and of a double to a string) for the cel-expr engine.

cel-cpp reads ``int(" 1")``, ``uint("+1")`` and ``double("1e400")`` where Go's strconv refuses them,
and refuses ``double("1_0")`` and ``bool("T")`` where it reads them (allocator.cel.conversions). The
backend renames ``int``, ``uint``, ``double`` and ``bool`` of a string or dynamic argument (phase
one, same length names, like celexpr_time's) and then wraps the argument in a function of ours that
checks a string by Go's rules and hands cel-cpp a spelling it reads the same way; every other value
passes through unchanged, and what the conversion does not take still finds no overload. A double's
``string()`` is renamed when the argument is statically a double: cel-cpp prints infinities and NaN
as "inf" and "nan", Go as "+Inf", "-Inf" and "NaN".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cel_expr_python import cel

from allocator.cel import conversions

T = cel.Type

# phase one: the renamed conversions (for the checker only) ...
INT, UINT, DOUBLE, BOOL, STRING_OF_DOUBLE = "_ig", "_ug_", "_dbl_g", "_bg_", "_fstr_"
# ... and phase two: the conversion of our checked text
WRAPPERS = {INT: "int(_goIntText(", UINT: "uint(_goUintText(", DOUBLE: "double(_goDoubleText(",
            BOOL: "bool(_goBoolText(", STRING_OF_DOUBLE: "_goDoubleString(double("}


def _text(parse: Callable[[str], Any], spell: Callable[[Any], str]) -> Callable[[str], str]:
    def implementation(text: str) -> str:
        try:
            return spell(parse(text))
        except conversions.ConversionError as err:
            raise ValueError(str(err)) from None

    return implementation


def _same(value: object) -> object:
    return value


def _unreachable(value: object) -> object:
    raise AssertionError("renamed call left in place")


def overloads() -> dict[str, list[Any]]:
    S = T.STRING
    passing = {  # what each conversion takes besides a string, passed on as it is
        "_goIntText": (T.INT, T.UINT, T.DOUBLE, T.TIMESTAMP),
        "_goUintText": (T.UINT, T.INT, T.DOUBLE),
        "_goDoubleText": (T.DOUBLE, T.INT, T.UINT),
        "_goBoolText": (T.BOOL,),
    }
    readers = {
        "_goIntText": _text(conversions.parse_int, str),
        "_goUintText": _text(conversions.parse_uint, str),
        "_goDoubleText": _text(conversions.parse_double, repr),
        "_goBoolText": _text(conversions.parse_bool, lambda value: "true" if value else "false"),
    }
    declared: dict[str, list[Any]] = {
        name: [cel.Overload(f"{name}_string", S, [S], impl=readers[name]),
               *(cel.Overload(f"{name}_{str(kind).lower()}", kind, [kind], impl=_same) for kind in kinds)]
        for name, kinds in passing.items()
    }
    declared["_goDoubleString"] = [cel.Overload("go_double_string", S, [T.DOUBLE],
                                                impl=conversions.format_double)]
    for name, result in ((INT, T.INT), (UINT, T.UINT), (DOUBLE, T.DOUBLE), (BOOL, T.BOOL)):
        declared[name] = [cel.Overload(f"{name}_renamed", result, [S], impl=_unreachable)]
    declared[STRING_OF_DOUBLE] = [cel.Overload("double_to_go_string", S, [T.DOUBLE], impl=_unreachable)]
    return declared
