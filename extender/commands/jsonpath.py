"""`-o jsonpath=TEMPLATE`: kubectl's JSONPath templates over a command's JSON document.

The subset kubectl users write: text outside braces as is; inside, `.field` (`.a\\.b` for a key with
a dot; `['a.b']` too, where kubectl prints nothing),
`[N]` (negative from the end), `[A:B]`, `[*]` and `.*`, `..field` (at any depth), filters
`[?(@.path)]` and `[?(@.path OP literal)]` with ==, !=, <, <=, >, >=, `@`, string literals such as
`{"\\n"}`, and `{range EXPR}...{end}`. As `kubectl -o jsonpath`, a missing key prints nothing (an index
past the end too, where kubectl stops with an error), several results of one expression are joined by
a space, strings print bare and lists and objects as JSON.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson


class JSONPathError(ValueError):
    """A template that cannot be parsed; the message says where."""


@dataclass(frozen=True)
class _Text:
    text: str


@dataclass(frozen=True)
class _Expr:
    steps: tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class _Range:
    expr: _Expr
    body: tuple[Any, ...]


_STEP = re.compile(
    r"""\.\.(?P<deep>(?:[A-Za-z0-9_\-$/]|\\\.)+|\*)
      | \.(?P<field>(?:[A-Za-z0-9_\-$/]|\\\.)+|\*)
      | \[\s*'(?P<quoted>[^']*)'\s*\] | \[\s*"(?P<dquoted>[^"]*)"\s*\]
      | \[\s*(?P<index>-?\d+)\s*\]
      | \[\s*(?P<start>-?\d*)\s*:\s*(?P<stop>-?\d*)\s*\]
      | \[\s*\*\s*\]
      | \[\?\(\s*@(?P<path>(?:\.[A-Za-z0-9_\-$]+|\['[^']*'\])+)\s*
           (?:(?P<op>==|!=|<=|>=|<|>)\s*(?P<value>'[^']*'|"[^"]*"|-?\d+(?:\.\d+)?|true|false|null))?\s*\)\]
    """,
    re.VERBOSE,
)


def _parse_expr(text: str, where: int) -> _Expr | _Text:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        try:
            return _Text(orjson.loads('"' + text[1:-1].replace('"', '\\"') + '"'))
        except orjson.JSONDecodeError:
            raise JSONPathError(f"bad string literal {text} at {where}") from None
    if text[:1] in ("$", "@"):
        text = text[1:]
    steps: list[tuple[str, Any]] = []
    position = 0
    while position < len(text):
        match = _STEP.match(text, position)
        if match is None:
            raise JSONPathError(f"cannot parse {text[position:]!r} in {{{text}}} (template offset {where})")
        groups = match.groupdict()
        if groups["deep"] is not None:
            steps.append(("deep", groups["deep"].replace("\\.", ".")))
        elif groups["field"] is not None:
            field = groups["field"].replace("\\.", ".")
            steps.append(("all", None) if field == "*" else ("field", field))
        elif groups["quoted"] is not None or groups["dquoted"] is not None:
            steps.append(("field", groups["quoted"] if groups["quoted"] is not None else groups["dquoted"]))
        elif groups["index"] is not None:
            steps.append(("index", int(groups["index"])))
        elif groups["start"] is not None:
            start, stop = groups["start"], groups["stop"]
            steps.append(("slice", (int(start) if start else None, int(stop) if stop else None)))
        elif groups["path"] is not None:
            path = tuple(_parse_expr(groups["path"], where).steps)  # type: ignore[union-attr]
            value = orjson.loads(groups["value"].replace("'", '"')) if groups["value"] is not None else None
            steps.append(("filter", (path, groups["op"], value)))
        else:
            steps.append(("all", None))
        position = match.end()
    return _Expr(tuple(steps))


def parse(template: str) -> tuple[Any, ...]:
    """The template's parts; raises JSONPathError naming what it cannot read."""
    parts: list[Any] = []
    stack: list[tuple[_Expr, list[Any]]] = []
    position = 0
    for match in re.finditer(r"\{((?:[^{}\"']|\"[^\"]*\"|'[^']*')*)\}", template):
        if match.start() > position:
            parts.append(_Text(template[position:match.start()]))
        inner = match.group(1).strip()
        if inner.startswith("range ") or inner.startswith("range\t"):
            expr = _parse_expr(inner[6:], match.start())
            if not isinstance(expr, _Expr):
                raise JSONPathError(f"range needs a path, got {inner[6:]!r}")
            stack.append((expr, parts))
            parts = []
        elif inner == "end":
            if not stack:
                raise JSONPathError(f"{{end}} without {{range}} at {match.start()}")
            expr, outer = stack.pop()
            outer.append(_Range(expr, tuple(parts)))
            parts = outer
        else:
            parts.append(_parse_expr(inner, match.start()))
        position = match.end()
    rest = template[position:]
    if "{" in rest or "}" in rest:
        raise JSONPathError(f"unbalanced braces in {rest!r}")
    if rest:
        parts.append(_Text(rest))
    if stack:
        raise JSONPathError("{range} without {end}")
    return tuple(parts)


def _children(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, list):
        return list(value)
    return []


def _descendants(value: Any) -> Iterator[Any]:
    yield value
    for child in _children(value):
        yield from _descendants(child)


def _compare(left: Any, op: str, right: Any) -> bool:
    if op == "==":
        return bool(left == right)
    if op == "!=":
        return bool(left != right)
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (left, right))
    if not numbers and not (isinstance(left, str) and isinstance(right, str)):
        return False  # kubectl compares only numbers with numbers and strings with strings
    ordered: dict[str, Any] = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
    return bool(ordered[op](left, right))


def _step(values: list[Any], kind: str, arg: Any) -> list[Any]:
    found: list[Any] = []
    for value in values:
        if kind == "field":
            if isinstance(value, dict) and arg in value:
                found.append(value[arg])
        elif kind == "all":
            found.extend(_children(value))
        elif kind == "index":
            if isinstance(value, list) and -len(value) <= arg < len(value):
                found.append(value[arg])
        elif kind == "slice":
            if isinstance(value, list):
                found.extend(value[arg[0]:arg[1]])
        elif kind == "deep":
            for inner in _descendants(value):
                if arg == "*":
                    found.extend(_children(inner))
                elif isinstance(inner, dict) and arg in inner:
                    found.append(inner[arg])
        elif kind == "filter":
            path, op, expected = arg
            for item in _children(value):
                hits = _evaluate(_Expr(path), item)
                if (op is None and hits) or (op is not None and any(_compare(h, op, expected) for h in hits)):
                    found.append(item)
    return found


def _evaluate(expr: _Expr, current: Any) -> list[Any]:
    values = [current]
    for kind, arg in expr.steps:
        values = _step(values, kind, arg)
    return values


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()  # Go sorts a map's keys


def _render(parts: tuple[Any, ...], current: Any) -> str:
    out: list[str] = []
    for part in parts:
        if isinstance(part, _Text):
            out.append(part.text)
        elif isinstance(part, _Range):
            for item in _evaluate(part.expr, current):
                out.append(_render(part.body, item))
        else:
            out.append(" ".join(_text(value) for value in _evaluate(part, current)))
    return "".join(out)


def render(template: str, document: Any) -> str:
    """`template` filled from `document` (its JSON form), as `kubectl -o jsonpath=` prints it."""
    return _render(parse(template), orjson.loads(orjson.dumps(document)))
