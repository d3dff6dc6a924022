"""A parser for the CEL language (cel-spec grammar) producing a small immutable AST.

Used by the cost estimator (for both engines) and by the cel-python backend, which checks the AST and
re-emits it in the dialect cel-python understands. Macros (has, all, exists, exists_one, map, filter,
cel.bind) are recognised here, like cel-go's parser does, so later stages see them as nodes of their own.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal as TypingLiteral
from typing import TypeGuard

from allocator.cel.backend import CELCompileError

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1

# cel-go limits the nesting depth of the parse tree too. Each level costs about a dozen Python frames
# here (and more in celpy), so the limit keeps well inside Python's default recursion limit.
MAX_NESTING_DEPTH = 50

LiteralKind = TypingLiteral["int", "uint", "double", "string", "bytes", "bool", "null"]


@dataclass(frozen=True, slots=True)
class Node:
    pos: int


@dataclass(frozen=True, slots=True)
class Literal(Node):
    value: object
    kind: LiteralKind


@dataclass(frozen=True, slots=True)
class Ident(Node):
    name: str


@dataclass(frozen=True, slots=True)
class Select(Node):
    operand: Node
    field: str
    optional: bool = False  # `operand.?field`


@dataclass(frozen=True, slots=True)
class Index(Node):
    operand: Node
    index: Node
    optional: bool = False  # `operand[?index]`


@dataclass(frozen=True, slots=True)
class Call(Node):
    """A global call (`target is None`), a member call, or an operator such as `_==_` or `!_`."""

    function: str
    target: Node | None
    args: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class ListExpr(Node):
    elements: tuple[Node, ...]
    optional_indices: tuple[int, ...] = ()  # elements written as `?expr`


@dataclass(frozen=True, slots=True)
class MapEntry:
    key: Node
    value: Node
    optional: bool = False  # `?key: value`


@dataclass(frozen=True, slots=True)
class MapExpr(Node):
    entries: tuple[MapEntry, ...]


@dataclass(frozen=True, slots=True)
class Has(Node):
    select: Select


@dataclass(frozen=True, slots=True)
class Comprehension(Node):
    """A macro over a range: all, exists, exists_one, map, filter, sortBy (on `target`), cel.bind,
    or one of the two-variable transformList, transformMap and transformMapEntry.

    `map` and the transforms have either one argument (the transform) or two (a filter, then the
    transform). `sortBy` has one, the sort key. For `bind`, `target` is the initial value, `var` the
    bound name and `args` the result expression. `var2` is set for the two-variable forms
    (`all(k, v, p)`, `exists`, `exists_one`, which `existsOne` is parsed as, and the transforms).
    """

    macro: str
    target: Node
    var: str
    var2: str | None
    args: tuple[Node, ...]


RESERVED_WORDS = frozenset({
    "as", "break", "const", "continue", "else", "for", "function", "if", "import", "let", "loop",
    "package", "namespace", "return", "var", "void", "while",
})

_TOKEN_RE = re.compile(
    r"""
    (?P<ws>[\t\n\f\r ]+|//[^\n]*)
  | (?P<number>(?:[0-9]+\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+|\.[0-9]+(?:[eE][+-]?[0-9]+)?)
               |0[xX][0-9a-fA-F]+[uU]?|[0-9]+[uU]?)
  | (?P<string>(?:[rR][bB]?|[bB][rR]?)?(?:\"\"\"|'''|"|'))
  | (?P<ident>[_a-zA-Z][_a-zA-Z0-9]*)
  | (?P<punct>==|!=|<=|>=|&&|\|\||[-+*/%!<>?:.,()\[\]{}])
    """,
    re.VERBOSE,
)


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # "number", "string", "ident", "punct", "eof"
    text: str
    pos: int
    value: object = None


def line_column(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return line, column


def _error(text: str, pos: int, message: str) -> CELCompileError:
    line, column = line_column(text, pos)
    return CELCompileError(f"syntax error at {line}:{column}: {message}")


_SIMPLE_ESCAPES = {
    "a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
    "\\": "\\", "'": "'", '"': '"', "`": "`", "?": "?",
}


def _unescape(text: str, body: str, body_pos: int, is_bytes: bool) -> str | bytes:
    """Decode CEL escape sequences; \\x and octal escapes are code points in strings, octets in bytes."""
    chunks: list[bytes | str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            chunks.append(ch.encode() if is_bytes else ch)
            i += 1
            continue
        if i + 1 >= len(body):
            raise _error(text, body_pos + i, "unterminated escape sequence")
        esc = body[i + 1]
        if esc in _SIMPLE_ESCAPES:
            chunks.append(_SIMPLE_ESCAPES[esc].encode() if is_bytes else _SIMPLE_ESCAPES[esc])
            i += 2
            continue
        if esc in "xX" or esc in "uU" or esc in "01234567":
            if esc in "xX":
                digits, base, width = body[i + 2 : i + 4], 16, 2
            elif esc == "u":
                digits, base, width = body[i + 2 : i + 6], 16, 4
            elif esc == "U":
                digits, base, width = body[i + 2 : i + 10], 16, 8
            else:
                digits, base, width = body[i + 1 : i + 4], 8, 3
            valid = set("0123456789abcdefABCDEF" if base == 16 else "01234567")
            if len(digits) != width or not set(digits) <= valid:
                raise _error(text, body_pos + i, f"invalid escape sequence '\\{esc}'")
            code = int(digits, base)
            consumed = (2 if base == 16 else 1) + width
            if is_bytes and esc in "uU":
                raise _error(text, body_pos + i, "unicode escapes are not allowed in bytes literals")
            if is_bytes:
                if code > 255:
                    raise _error(text, body_pos + i, "octal escape out of range")
                chunks.append(bytes([code]))
            else:
                if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                    raise _error(text, body_pos + i, "invalid unicode code point in escape sequence")
                chunks.append(chr(code))
            i += consumed
            continue
        raise _error(text, body_pos + i, f"invalid escape sequence '\\{esc}'")
    if is_bytes:
        return b"".join(c for c in chunks if isinstance(c, bytes))
    return "".join(c for c in chunks if isinstance(c, str))


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN_RE.match(text, pos)
        if match is None:
            raise _error(text, pos, f"unexpected character {text[pos]!r}")
        kind = match.lastgroup
        assert kind is not None
        if kind == "ws":
            pos = match.end()
            continue
        if kind == "string":
            prefix = match.group()
            quote = prefix.lstrip("rRbB")
            flags = prefix[: len(prefix) - len(quote)].lower()
            body_start = match.end()
            end = _find_string_end(text, body_start, quote, raw="r" in flags)
            if end < 0:
                raise _error(text, pos, "unterminated string literal")
            body = text[body_start:end]
            if len(quote) == 1 and ("\n" in body or "\r" in body):
                raise _error(text, pos, "newline in single-quoted string literal")
            is_bytes = "b" in flags
            if "r" in flags:
                value: str | bytes = body.encode() if is_bytes else body
            else:
                value = _unescape(text, body, body_start, is_bytes)
            tokens.append(Token("bytes" if is_bytes else "string", text[pos : end + len(quote)], pos, value))
            pos = end + len(quote)
            continue
        tokens.append(Token(kind, match.group(), pos))
        pos = match.end()
    tokens.append(Token("eof", "", len(text)))
    return tokens


def _find_string_end(text: str, start: int, quote: str, raw: bool) -> int:
    i = start
    while i < len(text):
        if text.startswith(quote, i):
            return i
        if text[i] == "\\" and not raw:
            i += 2
            continue
        i += 1
    return -1


def _number(text: str, token: Token) -> tuple[int | float, LiteralKind]:
    raw = token.text
    if raw[-1] in "uU":
        value = int(raw[:-1], 16) if raw[:2] in ("0x", "0X") else int(raw[:-1])
        if value > UINT64_MAX:
            raise _error(text, token.pos, f"uint literal {raw} out of range")
        return value, "uint"
    if raw[:2] in ("0x", "0X"):
        return int(raw, 16), "int"
    if any(c in raw for c in ".eE"):
        return float(raw), "double"
    return int(raw), "int"


_RELATIONS = {"==": "_==_", "!=": "_!=_", "<": "_<_", "<=": "_<=_", ">": "_>_", ">=": "_>=_", "in": "@in"}
_ADDITIVE = {"+": "_+_", "-": "_-_"}
_MULTIPLICATIVE = {"*": "_*_", "/": "_/_", "%": "_%_"}
_COMPREHENSION_MACROS = {"all": (2, 3), "exists": (2, 3), "exists_one": (2, 3), "existsOne": (3,),
                         "map": (2, 3), "filter": (2,), "sortBy": (2,), "transformList": (3, 4),
                         "transformMap": (3, 4), "transformMapEntry": (3, 4)}
TRANSFORMS = ("transformList", "transformMap", "transformMapEntry")


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.index = 0
        self.depth = 0

    # -- token helpers
    @property
    def token(self) -> Token:
        return self.tokens[self.index]

    def at(self, text: str) -> bool:
        token = self.token
        return token.kind in ("punct", "ident") and token.text == text

    def advance(self) -> Token:
        token = self.token
        if token.kind != "eof":
            self.index += 1
        return token

    def expect(self, text: str) -> Token:
        if not self.at(text):
            raise self.unexpected(f"'{text}'")
        return self.advance()

    def unexpected(self, expected: str) -> CELCompileError:
        token = self.token
        found = "end of input" if token.kind == "eof" else repr(token.text)
        return _error(self.text, token.pos, f"expected {expected}, found {found}")

    def ident(self) -> Token:
        token = self.token
        if token.kind != "ident" or token.text in ("true", "false", "null", "in"):
            raise self.unexpected("an identifier")
        if token.text in RESERVED_WORDS:
            raise _error(self.text, token.pos, f"reserved identifier '{token.text}'")
        return self.advance()

    def nested(self) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING_DEPTH:
            raise _error(self.text, self.token.pos, f"expression nesting exceeds {MAX_NESTING_DEPTH} levels")

    # -- grammar
    def parse(self) -> Node:
        node = self.expr()
        if self.token.kind != "eof":
            raise self.unexpected("end of input")
        return node

    def expr(self) -> Node:
        self.nested()
        cond = self.binary_or()
        if self.at("?"):
            pos = self.advance().pos
            then = self.binary_or()
            self.expect(":")
            otherwise = self.expr()
            cond = Call(pos, "_?_:_", None, (cond, then, otherwise))
        self.depth -= 1
        return cond

    def binary_or(self) -> Node:
        return self.logical_chain("||", "_||_", self.binary_and)

    def binary_and(self) -> Node:
        return self.logical_chain("&&", "_&&_", self.relation)

    def logical_chain(self, symbol: str, function: str, operand: Callable[[], Node]) -> Node:
        # Like cel-go, a chain of && or || becomes a balanced tree, so long chains stay shallow.
        operands = [operand()]
        positions: list[int] = []
        while self.at(symbol):
            positions.append(self.advance().pos)
            operands.append(operand())
        return _balanced(function, operands, positions)

    def relation(self) -> Node:
        node = self.addition()
        while self.token.text in _RELATIONS and self.token.kind in ("punct", "ident"):
            op = self.advance()
            right = self.addition()
            if op.text == "in":
                node = Call(op.pos, "@in", None, (node, right))
            else:
                node = Call(op.pos, _RELATIONS[op.text], None, (node, right))
        return node

    def addition(self) -> Node:
        node = self.multiplication()
        while self.token.kind == "punct" and self.token.text in _ADDITIVE:
            op = self.advance()
            node = Call(op.pos, _ADDITIVE[op.text], None, (node, self.multiplication()))
        return node

    def multiplication(self) -> Node:
        node = self.unary()
        while self.token.kind == "punct" and self.token.text in _MULTIPLICATIVE:
            op = self.advance()
            node = Call(op.pos, _MULTIPLICATIVE[op.text], None, (node, self.unary()))
        return node

    def unary(self) -> Node:
        if not (self.at("!") or self.at("-")):
            return self.member_suffixes(self.primary())
        symbol = self.token.text
        pos = self.token.pos
        count = 0
        while self.at(symbol):
            self.advance()
            count += 1
        if symbol == "-" and count % 2 == 1 and self.token.kind == "number" \
                and not self.token.text.endswith(("u", "U")):
            value, kind = _number(self.text, self.advance())
            if kind == "int" and -value < INT64_MIN:
                raise _error(self.text, pos, f"int literal -{value} out of range")
            return self.member_suffixes(Literal(pos, -value, kind))
        self.nested()
        operand = self.unary()
        self.depth -= 1
        # As in cel-go's parser, an even run of `!` or `-` cancels out: `!!x` and `--x` are `x`.
        if count % 2 == 0:
            return operand
        return Call(pos, "!_" if symbol == "!" else "-_", None, (operand,))

    def member_suffixes(self, node: Node) -> Node:
        while True:
            if self.at("."):
                pos = self.advance().pos
                optional = False
                if self.at("?"):
                    self.advance()
                    optional = True
                name = self.ident().text
                if self.at("(") and not optional:
                    self.advance()
                    args = self.arguments(")")
                    node = self.member_call(pos, node, name, args)
                else:
                    node = Select(pos, node, name, optional)
            elif self.at("["):
                pos = self.advance().pos
                optional = False
                if self.at("?"):
                    self.advance()
                    optional = True
                index = self.expr()
                self.expect("]")
                node = Index(pos, node, index, optional)
            elif self.at("{") and qualified_name(node) is not None:
                raise _error(
                    self.text, self.token.pos,
                    f"message construction '{qualified_name(node)}{{...}}' is not supported: "
                    "no message types are declared in the device selector environment",
                )
            else:
                return node

    def arguments(self, closing: str) -> tuple[Node, ...]:
        args: list[Node] = []
        if not self.at(closing):
            args.append(self.expr())
            while self.at(","):
                self.advance()
                args.append(self.expr())
        self.expect(closing)
        return tuple(args)

    def member_call(self, pos: int, target: Node, name: str, args: tuple[Node, ...]) -> Node:
        arities = _COMPREHENSION_MACROS.get(name)
        if arities and len(args) in arities:
            if name in ("map", "sortBy"):
                if name == "sortBy" and isinstance(target, (Literal, MapExpr)):
                    raise _error(self.text, target.pos, "sortBy can only be applied to a list, identifier, "
                                                        "comprehension, call or select expression")
                return Comprehension(pos, name, target, self.macro_variable(args[0], name), None, args[1:])
            if name == "existsOne":
                name = "exists_one"
            if name in TRANSFORMS:
                first, second = (self.macro_variable(arg, name) for arg in args[:2])
                if first == second:
                    raise _error(self.text, args[1].pos, f"duplicate variable name '{first}' in {name}()")
                return Comprehension(pos, name, target, first, second, args[2:])
            variables = [self.macro_variable(arg, name) for arg in args[:-1]]
            if len(args) == 3:
                if variables[0] == variables[1]:
                    message = f"duplicate variable name '{variables[0]}' in {name}()"
                    raise _error(self.text, args[1].pos, message)
                return Comprehension(pos, name, target, variables[0], variables[1], args[2:])
            return Comprehension(pos, name, target, variables[0], None, args[1:])
        if name == "bind" and isinstance(target, Ident) and target.name == "cel" and len(args) == 3:
            variable = self.macro_variable(args[0], "cel.bind")
            return Comprehension(pos, "bind", args[1], variable, None, (args[2],))
        return Call(pos, name, target, args)

    def macro_variable(self, arg: Node, macro: str) -> str:
        if not isinstance(arg, Ident):
            raise _error(self.text, arg.pos, f"{macro}() variable must be a simple identifier")
        return arg.name

    def primary(self) -> Node:
        token = self.token
        if token.kind == "number":
            value, kind = _number(self.text, self.advance())
            if kind == "int" and value > INT64_MAX:
                raise _error(self.text, token.pos, f"int literal {token.text} out of range")
            return Literal(token.pos, value, kind)
        if token.kind in ("string", "bytes"):
            self.advance()
            return Literal(token.pos, token.value, "bytes" if token.kind == "bytes" else "string")
        if token.kind == "ident":
            if token.text in ("true", "false"):
                self.advance()
                return Literal(token.pos, token.text == "true", "bool")
            if token.text == "null":
                self.advance()
                return Literal(token.pos, None, "null")
            name = self.ident().text
            if self.at("("):
                self.advance()
                args = self.arguments(")")
                if name == "has":
                    if len(args) != 1 or not isinstance(args[0], Select) or args[0].optional:
                        message = "invalid argument to has() macro: expected a field selection"
                        raise _error(self.text, token.pos, message)
                    return Has(token.pos, args[0])
                return Call(token.pos, name, None, args)
            return Ident(token.pos, name)
        if self.at("."):
            # A leading dot names the root scope: `.device` is `device`.
            self.advance()
            return self.primary()
        if self.at("("):
            self.advance()
            node = self.expr()
            self.expect(")")
            return node
        if self.at("["):
            pos = self.advance().pos
            elements: list[Node] = []
            optional_indices: list[int] = []
            while not self.at("]"):
                if self.at("?"):
                    self.advance()
                    optional_indices.append(len(elements))
                elements.append(self.expr())
                if not self.at(","):
                    break
                self.advance()
            self.expect("]")
            return ListExpr(pos, tuple(elements), tuple(optional_indices))
        if self.at("{"):
            pos = self.advance().pos
            entries: list[MapEntry] = []
            while not self.at("}"):
                optional = False
                if self.at("?"):
                    self.advance()
                    optional = True
                key = self.expr()
                self.expect(":")
                entries.append(MapEntry(key, self.expr(), optional))
                if not self.at(","):
                    break
                self.advance()
            self.expect("}")
            return MapExpr(pos, tuple(entries))
        raise self.unexpected("an expression")


def _balanced(function: str, operands: list[Node], positions: list[int]) -> Node:
    if len(operands) == 1:
        return operands[0]
    middle = len(operands) // 2
    left = _balanced(function, operands[:middle], positions[: middle - 1])
    right = _balanced(function, operands[middle:], positions[middle:])
    return Call(positions[middle - 1], function, None, (left, right))


def is_empty_list_membership(node: Node) -> TypeGuard[Call]:
    """``x in []``. cel-go's planner (OptOptimize, which the Kubernetes base environment turns on)
    answers false for membership in a constant empty list without evaluating x, so x's errors never
    surface; both our engines run such a membership as the literal false (after the type check)."""
    return (
        isinstance(node, Call)
        and node.function == "@in"
        and isinstance(node.args[1], ListExpr)
        and not node.args[1].elements
    )


def qualified_name(node: Node) -> str | None:
    """`a.b.c` for a chain of plain field selections on an identifier, else None (namespaced functions)."""
    if isinstance(node, Ident):
        return node.name
    if isinstance(node, Select) and not node.optional:
        prefix = qualified_name(node.operand)
        return None if prefix is None else f"{prefix}.{node.field}"
    return None


def parse(text: str) -> Node:
    """Parse a CEL expression; raises CELCompileError with line:column for syntax errors."""
    if not isinstance(text, str):
        raise CELCompileError(f"expression must be a string, not {type(text).__name__}")
    if not text.strip():
        raise CELCompileError("expression is empty")
    try:
        return _Parser(text).parse()
    except RecursionError:  # only reachable when the caller is already deep in its own stack
        raise CELCompileError("expression is nested too deeply") from None
