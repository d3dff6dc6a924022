"""The Kubernetes format library for cel-expr-python.

A format travels through cel-cpp as tagged ``bytes`` (0xFF, "F", the format's name), so that
``==`` of two formats compares their names as upstream does. The rules are formatlib's, shared
with celpy.

cel-expr-python cannot declare a function returning an optional, so ``validate`` and
``format.named`` are declared twice: under their own names returning dyn, for cel-cpp's type
check of the user's text (the shared checker types them as upstream), and under same-length names
returning a list of zero or one result, which the backend calls instead, followed by ``[?0]``:
optional.none() for an empty list, optional.of(the result) otherwise.
"""

from __future__ import annotations

from typing import Any

from cel_expr_python import cel

from allocator.cel import formatlib

T = cel.Type

FORMAT_TAG = b"\xffF"
KINDS = {FORMAT_TAG: formatlib.TYPE_NAME}
# the names the backend calls instead (same length as the originals), then indexes with [?0]
VALIDATE, NAMED = "_fmtvali", "namd_"
RENAMED = {"validate": VALIDATE, "named": NAMED}


class _NoSuchOverload(TypeError):
    def __init__(self, function: str) -> None:
        super().__init__(f"no such overload: {function}")


def _encode(key: str) -> bytes:
    return FORMAT_TAG + key.encode()


def _format(value: object) -> formatlib.NamedFormat:
    if isinstance(value, (bytes, bytearray)) and value[:2] == FORMAT_TAG:
        return formatlib.NamedFormat(bytes(value[2:]).decode())
    raise _NoSuchOverload("validate")


def _validate(value: object, text: str) -> list[list[str]]:
    errors = _format(value).validate(text)
    return [errors] if errors else []


def _named(name: str) -> list[bytes]:
    return [_encode(name)] if formatlib.named(name) is not None else []


def _constant(key: str) -> Any:
    return lambda: _encode(key)


def function_declarations() -> dict[str, list[Any]]:
    B, S = T.BYTES, T.STRING
    return {
        **{f"format.{key}": [cel.Overload(f"format_{key}", B, [], impl=_constant(key))]
           for key in formatlib.FORMATS},
        # for the type check only: the backend always calls the renamed functions
        "validate": [cel.Overload("format_validate", T.DYN, [B, S], is_member=True, impl=_validate)],
        "format.named": [cel.Overload("format_named", T.DYN, [S], impl=_named)],
        VALIDATE: [cel.Overload("format_validate_list", T.List(T.List(S)), [B, S], is_member=True,
                                impl=_validate)],
        f"format.{NAMED}": [cel.Overload("format_named_list", T.List(B), [S], impl=_named)],
    }
