"""The fast backend: Google's CEL runtime (cel-cpp) through cel-expr-python.

Environment shape. Instead of one ``device`` variable of type dyn (which makes the type checker
reject comprehensions over attribute maps, python-libraries.md C1), the device's fields are
declared as qualified variables ``device.driver``, ``device.attributes`` (map(string, map(string,
dyn))), ``device.capacity`` and ``device.allowMultipleAllocations``. CEL resolves ``device.x`` to
them, so ``device.foo`` is an undeclared reference at compile time, as upstream.

One environment serves every option set, so one activation per device serves every selector;
the option-gated names (``allowMultipleAllocations``, ``includes``) are rejected before
compilation when their feature is off.

Unknown domains (C4): upstream's attribute and capacity maps answer an unknown domain with an
empty map. cel-cpp cannot do that with eagerly converted data, so lookups
``device.attributes[d]`` are compiled as ``device.attributes[?d].orValue({})`` (same for
capacity and for ``device.attributes.d``). The user's own text is type-checked first so error
messages point into what they wrote.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Mapping
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings

from allocator.cel import celexpr_conversions, celexpr_format, celexpr_net, celexpr_time, folding
from allocator.cel import celexpr_library as library
from allocator.cel.backend import (
    AttributeValue,
    CELCompileError,
    CELDevice,
    CELRuntimeError,
    CompileOptions,
    DeferToOtherEngine,
    attribute_result,
)
from allocator.cel.celexpr_typing import QUANTITY, SEMVER, static_type, walk
from allocator.cel.celexpr_typing import check as check_opaque_types
from allocator.cel.celpy_check import (
    CIDR,
    DOUBLE,
    DURATION,
    DYN,
    IP,
    STRING,
    TIMESTAMP,
    Checker,
    Type,
    type_name,
)
from allocator.cel.parser import (
    Call,
    Comprehension,
    Literal,
    Node,
    Token,
    is_empty_list_membership,
    parse,
    qualified_name,
)
from allocator.cel.parser import tokenize as _tokenize_uncached
from allocator.quantity import Quantity
from allocator.semver import Semver

T = cel.Type

_DOMAIN_MAP = T.Map(T.STRING, T.Map(T.STRING, T.DYN))
_VARIABLES = {
    "device.driver": T.STRING,
    "device.attributes": _DOMAIN_MAP,
    "device.capacity": _DOMAIN_MAP,
    "device.allowMultipleAllocations": T.BOOL,
}
_EXTENSIONS_CONFIG = """
extensions:
  - name: sets
  - name: two-var-comprehensions
"""

_ERROR_PREFIX = re.compile(r"^[A-Z_]+: ")
_CHECKER_ERROR = re.compile(r"ERROR: <input>:\d+:\d+: ([^\n]*)")
# cel-cpp's checker lacks cel-go's cross-type numeric comparison overloads (1 < 2.5), and some
# releases reject dyn comprehension ranges; for those errors alone the expression is well typed
# under upstream rules, so it is compiled without the checker (the runtime handles both).
_CHECKER_GAPS = re.compile(
    r"found no matching overload for '_(?:<|<=|>|>=)_' applied to "
    r"'\((?:int|uint|double), (?:int|uint|double)\)'"
    r"|cannot be the range of a comprehension"
)
_APPLIED_TYPES = re.compile(r"found no matching overload for '[^']*' applied to '\((.*)\)'")
_NUMERIC_KIND = re.compile(r"\b(?:int|uint|double)\b")


def _numeric_kinds_only(problem: str) -> bool:
    """A consequence of the same gap: without cel-go's cross-type comparisons cel-cpp binds a free
    type another way (``[].filter(x, x >= 0.5)`` is a list(double) there, a list(int) in cel-go), so an
    overload then finds arguments that differ only in their numeric kinds, and the checker's later
    errors are about the *error* type. The shared checker, which runs after, judges such an
    expression by cel-go's rules."""
    if "*error*" in problem:
        return True
    applied = _APPLIED_TYPES.search(problem)
    if applied is None:
        return False
    arguments, depth, start = [], 0, 0
    text = applied.group(1)
    for i, char in enumerate(text + ","):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            arguments.append(_NUMERIC_KIND.sub("number", text[start:i].strip()))
            start = i + 1
    return len(arguments) > 1 and len(set(arguments)) == 1


# compile() tokenizes the same text at several stages; the token lists are only read
tokenize = functools.lru_cache(maxsize=256)(_tokenize_uncached)

_SORT_BY_INPUT = "__sortBy_input__"
_MISSING_KEY = re.compile(r'Key not found in map : "?([^"]*)"?')
_APPLIED_TO = re.compile(r"applied to '\([^']*\)'")
_RENAMED_BACK = {new: old for old, new in library.RENAMED_MEMBER_FUNCTIONS.items()}


class CelExprBackend:
    name = "cel-expr"

    def __init__(self) -> None:
        self._env = cel.NewEnv(
            config=cel.NewEnvConfigFromYaml(_EXTENSIONS_CONFIG),
            variables=_VARIABLES,
            functions=library.function_declarations(),
            extensions=[ext_strings.ExtStrings(2), ext_optional.ExtOptional(), ext_bindings.ExtBindings()],
        )
        self._lock = threading.Lock()  # compile is rare; the binding's thread safety is unproven there

    def compile(self, expression: str, options: CompileOptions) -> CelExprProgram:
        program, result_type, tree = self._compile(expression, options)
        if result_type not in (T.BOOL, T.DYN):
            raise CELCompileError(f"must evaluate to bool or the unknown type, not {_type_name(result_type)}",
                                  expression)
        if result_type == T.DYN and _uses_format_results(tree):
            # cel-cpp sees validate() and format.named() as dyn; the shared checker knows their types
            known = _result_type_name(result_type, tree, expression, options)
            if known not in ("bool", DYN):
                raise CELCompileError(f"must evaluate to bool or the unknown type, not {known}", expression)
        return program

    def compile_value(self, expression: str, options: CompileOptions) -> tuple[CelExprProgram, str]:
        program, result_type, tree = self._compile(expression, options)
        return program, _result_type_name(result_type, tree, expression, options)

    def _compile(self, expression: str, options: CompileOptions) -> tuple[CelExprProgram, Any, Node]:
        tokens = tokenize(expression)
        _reject_disabled_features(tokens, options)
        tree = parse(expression)
        checked_text = _same_length_rewrites(expression, tokens)
        expanded = _with_macro_expansions(checked_text)
        with self._lock:
            compiled, unchecked = self._compile_checked(expanded, expression)
        checker = _NetStrings(expression, options, optional_map_entries=True)
        checker.check(tree)  # compile() checks the result
        check_opaque_types(expression, tree)
        folding.check(tree, expression)
        with self._lock:
            result_type = compiled.return_type()
            # the renames keep every length, so the tree's positions hold until a macro is expanded
            renames = checker.renames(tokenize(checked_text))
            renamed = _apply(checked_text, renames)
            executable = _with_macro_expansions(renamed) if renames else expanded
            executable = _with_tree_rewrites(executable, tree if executable == renamed else parse(executable))
            checked_text = expanded
            executable = _with_constant_values(_with_domain_defaults(executable, tokenize(executable)))
            executable = _with_time_wrappers(_with_canonical_time_literals(executable))
            if executable != checked_text:
                compiled = self._env.compile(executable, disable_check=unchecked)
        return CelExprProgram(compiled, _selects_optionally(tokens), unchecked), result_type, tree

    def _compile_checked(self, text: str, expression: str) -> tuple[Any, bool]:
        """``text`` (the user's ``expression`` after same-length rewrites) compiled, and whether the
        type checker had to be skipped."""
        try:
            return self._env.compile(text), False
        except RuntimeError as err:
            message = str(err)
            problems = _CHECKER_ERROR.findall(message)
            if problems and all(_CHECKER_GAPS.search(p) or _numeric_kinds_only(p) for p in problems):
                return self._env.compile(text, disable_check=True), True
            raise CELCompileError(_user_message(message), expression) from None

    def activation(self, device: CELDevice) -> Any:
        return self._env.Activation({
            "device.driver": device.driver,
            "device.attributes": {domain: _encoded(values) for domain, values in device.attributes.items()},
            "device.capacity": {domain: {ident: library.encode_quantity(q) for ident, q in values.items()}
                                for domain, values in device.capacity.items()},
            "device.allowMultipleAllocations": device.allow_multiple_allocations,
        })


_RENAMED_CALLS = {"string", "int", "uint", "double", "bool", "getMilliseconds", "duration", "timestamp"}
# conversions whose literal arguments are rewritten instead (_with_canonical_time_literals)
_LITERALS_REWRITTEN = {"duration", "timestamp"}
_WRAPPERS = {**celexpr_time.WRAPPERS, **celexpr_conversions.WRAPPERS}


class _NetStrings(Checker):
    """The checker, noting the calls cel-cpp would answer differently from cel-go for the type of
    their argument: ``string(x)`` of an IP address or CIDR (cel-cpp would convert their bytes
    encoding), and the duration and timestamp conversions of celexpr_time. They are renamed."""

    _RENAMES = {
        ("string", IP): celexpr_net.TO_STRING, ("string", CIDR): celexpr_net.TO_STRING,
        ("string", DURATION): celexpr_time.STRING_OF_DURATION,
        ("string", TIMESTAMP): celexpr_time.STRING_OF_TIMESTAMP,
        ("int", DURATION): celexpr_time.INT, ("getMilliseconds", DURATION): celexpr_time.MILLISECONDS,
        # a string only known at run time (literals are canonicalised instead)
        ("duration", STRING): celexpr_time.PARSE_DURATION, ("duration", DYN): celexpr_time.PARSE_DURATION,
        ("timestamp", STRING): celexpr_time.PARSE_TIMESTAMP, ("timestamp", DYN): celexpr_time.PARSE_TIMESTAMP,
        # Go's rules for strings (celexpr_conversions)
        **{(name, kind): renamed for kind in (STRING, DYN) for name, renamed in (
            ("int", celexpr_conversions.INT), ("uint", celexpr_conversions.UINT),
            ("double", celexpr_conversions.DOUBLE), ("bool", celexpr_conversions.BOOL))},
        ("string", DOUBLE): celexpr_conversions.STRING_OF_DOUBLE,
    }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.found: list[tuple[int, str, str]] = []  # (position, old name, new name)
        # A node's type, by identity: call() asks for its argument's type before checking the call,
        # which would otherwise check nested conversions (string(string(...))) exponentially often.
        # Scopes are lexical, so a node has one type.
        self.types: dict[int, Type] = {}

    def check(self, node: Node) -> Type:
        known = self.types.get(id(node))
        if known is None:
            known = self.types[id(node)] = super().check(node)
        return known

    def call(self, node: Call) -> Type:
        subject = node.target if node.function == "getMilliseconds" else (
            node.args[0] if node.target is None and len(node.args) == 1 else None)
        if isinstance(subject, Literal) and node.function in _LITERALS_REWRITTEN:
            subject = None
        if node.function in _RENAMED_CALLS and subject is not None:
            new = self._RENAMES.get((node.function, self.resolve(self.check(subject))))  # type: ignore[arg-type]
            if new is not None:
                self.found.append((node.pos, node.function, new))
        return super().call(node)

    def renames(self, tokens: list[Token]) -> list[tuple[int, int, str]]:
        """Same-length edits: each noted call's name replaced."""
        edits = []
        for position, old, new in self.found:
            name = next((t for t in tokens if t.pos >= position and t.kind == "ident" and t.text == old),
                        None)
            if name is not None:
                edits.append((name.pos, name.pos + len(old), new))
        return edits


# What cel-expr-python says of a Python function's result it cannot convert to a CEL value.
_CANNOT_CARRY = "Non-CEL value type"
# What cel-cpp says of `device` in a program compiled without its checker.
_UNRESOLVED_DEVICE = 'No value with name "device" found in Activation'
# cel-cpp fails a map literal that repeats a key, where cel-go keeps the last entry: celpy does that.
_REPEATED_KEY = "duplicate key in map"


class CelExprProgram:
    __slots__ = ("_compiled", "_optional_selection", "_unchecked")

    def __init__(self, compiled: Any, optional_selection: bool = False, unchecked: bool = False) -> None:
        self._compiled = compiled
        # The user's expression selects with .? or [?: cel-cpp fails that on a value that is no
        # container where cel-go gives an empty optional, so an error is checked by celpy.
        self._optional_selection = optional_selection
        # Compiled without cel-cpp's checker (_CHECKER_GAPS): the device's fields, declared as qualified
        # names, are not resolved then, so an evaluation that reaches one is celpy's.
        self._unchecked = unchecked

    def evaluate(self, activation: object) -> bool:
        result = self._run(activation)
        value = result.value()
        if value.__class__ is bool:
            return value
        if result.type() == T.ERROR:
            raise self._error(str(value))
        raise CELRuntimeError(f"selector must evaluate to a bool, got {_type_name(result.type())} {value!r}")

    def value(self, activation: object) -> AttributeValue:
        result = self._run(activation)
        value = result.value()
        if result.type() == T.ERROR:
            raise self._error(str(value))
        return attribute_result(_native(value, result.type()), _kind_of, _plain)

    def _error(self, message: str) -> Exception:
        if self._optional_selection or (self._unchecked and _UNRESOLVED_DEVICE in message):
            return DeferToOtherEngine(message)
        return CELRuntimeError(_runtime_message(message))

    def _run(self, activation: object) -> Any:
        try:
            return self._compiled.eval(activation)
        except RuntimeError as err:  # cel-expr-python's own failures, not CEL errors
            if _CANNOT_CARRY in str(err) or _REPEATED_KEY in str(err) or self._optional_selection:
                raise DeferToOtherEngine(str(err)) from None
            raise CELRuntimeError(f"cel-expr: {err}") from None


class _Unsigned(int):
    """A uint result: a Python int like an int one, so it is marked to be told apart."""


def _native(value: Any, cel_type: Any) -> object:
    """A result as plain Python values (cel-expr-python hands out list elements as typed accessors)."""
    if cel_type == T.UINT:
        return _Unsigned(value)
    if isinstance(value, list):
        return [_native(item.value(), item.type()) for item in value]
    return value


_KINDS = {bool: "bool", int: "int", _Unsigned: "uint", float: "double", str: "string", list: "list",
          dict: "map", type(None): "null_type"}


def _kind_of(value: object) -> str:
    if isinstance(value, (bytes, bytearray)):
        return library.opaque_kind(value)
    return _KINDS.get(type(value), type(value).__name__)


def _plain(value: object) -> object:
    if isinstance(value, (bytes, bytearray)):
        return library.decode_semver(value)
    return value


def _result_type_name(result_type: Any, tree: Node, expression: str, options: CompileOptions) -> str:
    """cel-go's name for a static result type. Quantities and versions are both bytes to cel-cpp, and
    its checker leaves more results dyn than cel-go's: there our own static check (the celpy
    backend's) tells what it can; else "dyn" (the value decides at run time). A list(dyn) too: cel-go
    types a call that several overloads fit as dyn (``[attr, attr].sort()``), cel-cpp as list(dyn)."""
    if result_type in (T.BYTES, T.DYN, T.List(T.DYN)):
        known = static_type(tree)
        if known in (QUANTITY, SEMVER, "bytes"):
            return known
        try:
            return type_name(Checker(expression, options).result_type(tree))
        except CELCompileError:  # something only cel-cpp accepts: no opinion
            return DYN
    for element in (T.BOOL, T.INT, T.STRING, T.DYN):
        if result_type == T.List(element):
            return f"list({_type_name(element)})"
    if result_type == T.List(T.BYTES):
        return "list(dyn)"
    return _type_name(result_type)


def _encoded(values: Mapping[str, object]) -> dict[str, object]:
    encoded: dict[str, object] = dict(values)  # int, bool and str values pass as they are
    for ident, value in values.items():
        if value.__class__ is Semver:
            encoded[ident] = library.encode_semver(value)
        elif value.__class__ is list:
            encoded[ident] = [library.encode_semver(v) if v.__class__ is Semver else v
                              for v in value]
    return encoded


def _type_name(cel_type: Any) -> str:
    return str(cel_type).lower()


def _user_message(message: str) -> str:
    message = _ERROR_PREFIX.sub("", message)
    for renamed, original in _RENAMED_BACK.items():
        message = message.replace(renamed, original)
    # quantities and versions are bytes to cel-cpp; say what the user knows them as
    return _APPLIED_TO.sub(lambda m: m.group().replace("bytes", "Quantity/Semver"), message)


def _runtime_message(message: str) -> str:
    message = _ERROR_PREFIX.sub("", message)
    missing = _MISSING_KEY.search(message)
    if missing:
        key = missing.group(1)
        return (f"no such key: {key} (guard the lookup with has(...), or use optional chaining "
                f"such as .?{key}.orValue(...))")
    for renamed, original in _RENAMED_BACK.items():
        message = message.replace(renamed, original)
    return message


def _is(token: Token, text: str) -> bool:
    return token.kind in ("punct", "ident") and token.text == text


def _is_member_call(tokens: list[Token], i: int) -> bool:
    return i > 0 and _is(tokens[i - 1], ".") and i + 1 < len(tokens) and _is(tokens[i + 1], "(")


def _reject_disabled_features(tokens: list[Token], options: CompileOptions) -> None:
    for i, token in enumerate(tokens):
        if token.kind != "ident":
            continue
        if (token.text == "allowMultipleAllocations" and not options.consumable_capacity
                and i >= 2 and _is(tokens[i - 1], ".") and _is(tokens[i - 2], "device")):
            raise CELCompileError("undefined field 'allowMultipleAllocations' (it exists only when the "
                                  "DRAConsumableCapacity feature is enabled)")
        if token.text == "includes" and not options.list_type_attributes and _is_member_call(tokens, i):
            raise CELCompileError("undeclared reference to 'includes' (it exists only when the "
                                  "DRAListTypeAttributes feature is enabled)")


def _selects_optionally(tokens: list[Token]) -> bool:
    return any(token.text == "?" and i > 0 and tokens[i - 1].text in (".", "[")
               for i, token in enumerate(tokens))


def _same_length_rewrites(text: str, tokens: list[Token]) -> str:
    """Renamed member functions, and ``has(device.<field>)`` (always true upstream, where device is
    an object) as a padded ``(true)``; same length, so checker error positions stay right."""
    renames = library.RENAMED_MEMBER_FUNCTIONS
    edits = [(t.pos, t.pos + len(t.text), renames[t.text]) for i, t in enumerate(tokens)
             if t.kind == "ident" and t.text in renames and _is_member_call(tokens, i)]
    # cel-cpp knows the two-variable form only as existsOne, cel-go also as exists_one
    edits += [(t.pos, t.pos + len(t.text), "existsOne ") for i, t in enumerate(tokens)
              if t.text == "exists_one" and _is_member_call(tokens, i)
              and _argument_count(tokens, i + 1) == 3]
    for i in range(len(tokens) - 5):
        window = [t.text for t in tokens[i:i + 6]]
        always_present = f"device.{window[4]}" in _VARIABLES
        if window[:4] == ["has", "(", "device", "."] and window[5] == ")" and always_present:
            start, end = tokens[i].pos, tokens[i + 5].pos + 1
            edits.append((start, end, "(true" + " " * (end - start - 6) + ")"))
    return _apply(text, edits)


def _argument_count(tokens: list[Token], open_index: int) -> int:
    close = _matching_close(tokens, open_index)
    if close is None or close == open_index + 1:
        return 0
    depth = 0
    commas = 0
    for token in tokens[open_index + 1:close]:
        if token.kind == "punct" and token.text in "([{":
            depth += 1
        elif token.kind == "punct" and token.text in ")]}":
            depth -= 1
        elif depth == 0 and _is(token, ","):
            commas += 1
    return commas + 1


def _with_macro_expansions(text: str) -> str:
    """The macros cel-expr lacks, one call at a time (so nested ones expand too), as cel-go expands
    them: ``l.sortBy(e, key)`` binds the list once and orders it by the list of its keys; cel-cpp
    declares transformMap and transformMapEntry but has no run-time ``cel.@mapInsert``, so they
    become a transformList of entries that a function of ours gathers into the map."""
    while True:
        tokens = tokenize(text)
        index_at = {token.pos: i for i, token in enumerate(tokens)}
        calls = [node for node in walk(parse(text))
                 if isinstance(node, Comprehension) and node.macro in _EXPANDED_MACROS]
        if not calls:
            return text
        call = calls[-1]  # the last found is innermost or rightmost: it contains no other
        dot = index_at[call.pos]
        close = _matching_close(tokens, dot + 2)
        assert close is not None  # the text parsed
        start = _operand_start(text, call.target, tokens[dot].pos)
        receiver = text[start:tokens[dot].pos]
        arguments = text[tokens[dot + 2].pos + 1:tokens[close].pos]
        if call.macro == "sortBy":
            bound = _SORT_BY_INPUT
            keys = f"{bound}.map({arguments})"
            expansion = f"cel.bind({bound}, {receiver}, {bound}.{library.SORT_BY_KEYS}({keys}))"
        else:
            last_start = _operand_start(text, call.args[-1], tokens[close].pos)
            head = text[tokens[dot + 2].pos + 1:last_start]
            transform = text[last_start:tokens[close].pos]
            if call.macro == "transformMap":
                transform = f"[{call.var}, {transform}]"
            expansion = f"{_EXPANDED_MACROS[call.macro]}({receiver}.transformList({head}{transform}))"
        text = text[:start] + expansion + text[tokens[close].pos + 1:]


_EXPANDED_MACROS = {"sortBy": "", "transformMap": library.MAP_FROM_PAIRS,
                    "transformMapEntry": library.MAP_FROM_ENTRIES}


def _operand_start(text: str, node: Node, end: int) -> int:
    """Where the text of ``node``, which ends before ``end``, begins: its leftmost part, widened to
    the parentheses around it and to the ``cel`` of a ``cel.bind`` (which the parse drops)."""
    start = min(part.pos for part in walk(node))
    while not _balanced(text[start:end]):
        start = text.rindex("(", 0, start)
    if text[start] == ".":  # cel.bind(...): the namespace before the dot
        start = text.rindex("cel", 0, start)
    return start


def _with_domain_defaults(text: str, tokens: list[Token]) -> str:
    edits: list[tuple[int, int, str]] = []
    for i in range(len(tokens) - 4):
        if not (_is(tokens[i], "device") and _is(tokens[i + 1], ".")
                and tokens[i + 2].text in ("attributes", "capacity") and tokens[i + 2].kind == "ident"):
            continue
        if i > 0 and _is(tokens[i - 1], "."):
            continue  # x.device.attributes is not the device variable
        after = tokens[i + 3]
        if _is(after, "[") and not _is(tokens[i + 4], "?"):
            close = _matching_close(tokens, i + 3)
            if close is not None and _is(tokens[close], "]"):
                edits.append((after.pos + 1, after.pos + 1, "?"))
                edits.append((tokens[close].pos + 1, tokens[close].pos + 1, ".orValue({})"))
        elif (_is(after, ".") and tokens[i + 4].kind == "ident" and not _is(tokens[i + 5], "(")
              and not (i >= 2 and _is(tokens[i - 1], "(") and _is(tokens[i - 2], "has"))):
            name = tokens[i + 4]
            edits.append((after.pos, name.pos + len(name.text), f'[?"{name.text}"].orValue({{}})'))
    return _apply(text, edits)


def _with_constant_values(text: str) -> str:
    """``quantity("40Gi")`` / ``semver("1.2.3")`` on valid literals become their bytes encoding: cel-cpp
    would otherwise call into Python on every evaluation (invalid literals stay, failing at run time
    as upstream)."""
    tokens = tokenize(text)
    edits = []
    for i in range(len(tokens) - 3):
        call, open_, literal, close = tokens[i:i + 4]
        if (call.kind == "ident" and call.text in _CONSTANT_FUNCTIONS and _is(open_, "(")
                and literal.kind == "string" and _is(close, ")") and not (i > 0 and _is(tokens[i - 1], "."))):
            try:
                encoded = _CONSTANT_FUNCTIONS[call.text](literal.value)
            except ValueError:
                continue
            escaped = "".join(chr(b) if 0x20 <= b <= 0x7E else f"\\x{b:02x}" for b in encoded)
            edits.append((call.pos, close.pos + 1, f'b"{escaped}"'))
    return _apply(text, edits)


def _with_time_wrappers(text: str) -> str:
    """Phase two of celexpr_time's renames: ``_dstr_(x)`` becomes ``_goDuration(string(x))``, etc."""
    tokens = tokenize(text)
    edits = []
    for i, token in enumerate(tokens[:-1]):
        wrapper = _WRAPPERS.get(token.text) if token.kind == "ident" else None
        close = _matching_close(tokens, i + 1) if wrapper and _is(tokens[i + 1], "(") else None
        if wrapper is not None and close is not None:
            edits.append((token.pos, tokens[i + 1].pos + 1, wrapper))
            edits.append((tokens[close].pos + 1, tokens[close].pos + 1, ")"))
    return _apply(text, edits)


def _with_canonical_time_literals(text: str) -> str:
    """Valid ``duration("...")`` / ``timestamp("...")`` literals in the form cel-cpp reads as cel-go
    reads the original (Go's units and fractions, offsets)."""
    tokens = tokenize(text)
    edits = []
    for i in range(len(tokens) - 3):
        call, open_, literal, close = tokens[i:i + 4]
        if (call.kind == "ident" and call.text in ("duration", "timestamp") and _is(open_, "(")
                and literal.kind == "string" and _is(close, ")") and not (i > 0 and _is(tokens[i - 1], "."))):
            canonical = celexpr_time.canonical_literal(call.text, str(literal.value))
            if canonical is not None:
                edits.append((literal.pos, close.pos, f'"{canonical}"'))
    return _apply(text, edits)


_CONSTANT_FUNCTIONS = {
    "quantity": lambda text: library.encode_quantity(Quantity.parse(text)),
    "semver": lambda text: library.encode_semver(Semver.parse(text)),
}


def _matching_close(tokens: list[Token], open_index: int) -> int | None:
    depth = 0
    for j in range(open_index, len(tokens)):
        token = tokens[j]
        if token.kind != "punct":
            continue
        if token.text in "([{":
            depth += 1
        elif token.text in ")]}":
            depth -= 1
            if depth == 0:
                return j
    return None


def _balanced(text: str) -> bool:
    try:
        tokens = tokenize(text)
    except CELCompileError:
        return False
    depth = 0
    for token in tokens:
        if token.kind == "punct" and token.text in "([{":
            depth += 1
        elif token.kind == "punct" and token.text in ")]}":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


_NATIVE_COMPARISONS = {
    "compareTo": "({a} > {b} ? 1 : ({a} < {b} ? -1 : 0))",
    "isGreaterThan": "({a} > {b})",
    "isLessThan": "({a} < {b})",
}


def _with_tree_rewrites(text: str, tree: Node) -> str:
    """The rewrites that need the parse: native quantity comparisons, and memberships in an empty
    list literal. ``tree`` is the parse of the user's text, whose positions ``text`` (after
    same-length rewrites) shares."""
    tokens = tokenize(text)
    index_at = {token.pos: i for i, token in enumerate(tokens)}
    wrappers = [
        *_empty_list_membership_edits(text, tree, tokens, index_at),
        *_arithmetic_equality_edits(text, tree, tokens, index_at),
        *_format_optional_edits(tree, tokens, index_at),
    ]
    # Wrappers only insert around operands; a native comparison they would cut through is left out.
    edits = [
        edit for edit in _native_quantity_comparisons(text, tree, tokens, index_at)
        if not any(edit[0] < at < edit[1] for start, end, _ in wrappers for at in (start, end))
    ]
    return _apply(text, edits + wrappers)


_BELOW_RELATIONS = {"&&", "||", "?", ":", ","}


def _left_operand_start(tokens: list[Token], operator: int) -> int:
    """The text position where the left operand of the relation at token ``operator`` begins:
    relations group to the left, so it reaches back to the nearest operator of lower precedence
    or unmatched opening bracket."""
    depth = 0
    for i in range(operator - 1, -1, -1):
        token = tokens[i]
        if token.kind == "punct" and token.text in ")]}":
            depth += 1
        elif token.kind == "punct" and token.text in "([{":
            if depth == 0:
                return tokens[i + 1].pos
            depth -= 1
        elif depth == 0 and token.kind == "punct" and token.text in _BELOW_RELATIONS:
            if token.text == "?" and i > 0 and tokens[i - 1].text in (".", "["):
                continue  # optional selection .?x / [?x], not a conditional
            return tokens[i + 1].pos
    return tokens[0].pos


def _empty_list_membership_edits(
    text: str, tree: Node, tokens: list[Token], index_at: dict[int, int]
) -> list[tuple[int, int, str]]:
    """``x in []`` becomes ``(false && x in [])``: false without evaluating x, as cel-go's planner
    answers it (parser.is_empty_list_membership), while cel-cpp would evaluate x first."""
    edits = []
    for node in walk(tree):
        if not is_empty_list_membership(node):
            continue
        operator = index_at.get(node.pos)
        if operator is None or not _is(tokens[operator], "in"):
            continue
        close = _matching_close(tokens, operator + 1)
        if close is None:
            continue
        start = _left_operand_start(tokens, operator)
        edits.append((start, start, "(false && "))
        edits.append((tokens[close].pos + 1, tokens[close].pos + 1, ")"))
    return edits


def _arithmetic_equality_edits(
    text: str, tree: Node, tokens: list[Token], index_at: dict[int, int]
) -> list[tuple[int, int, str]]:
    """``x == q.add(...)`` (or ``.sub``, and ``!=``) becomes ``_arithmeticEq(x, q.add(...))``: cel-go's
    equality treats that result as a pointer (celexpr_library.ARITHMETIC_EQUALS), where cel-cpp would
    compare the two encodings."""
    edits = []
    for node in walk(tree):
        if not (isinstance(node, Call) and node.function in ("_==_", "_!=_")):
            continue
        right = node.args[1]
        # add() and sub() exist only as Quantity methods
        if not (isinstance(right, Call) and right.function in ("add", "sub") and right.target is not None):
            continue
        operator, dot = index_at.get(node.pos), index_at.get(right.pos)
        if operator is None or dot is None or not _is(tokens[dot + 2], "("):
            continue
        close = _matching_close(tokens, dot + 2)
        if close is None:
            continue
        start = _left_operand_start(tokens, operator)
        function = library.ARITHMETIC_EQUALS if node.function == "_==_" else library.ARITHMETIC_NOT_EQUALS
        edits.append((start, start, f"{function}("))
        edits.append((tokens[operator].pos, tokens[operator].pos + 2, ","))
        edits.append((tokens[close].pos + 1, tokens[close].pos + 1, ")"))
    return edits


def _uses_format_results(tree: Node) -> bool:
    return any(isinstance(node, Call) and node.target is not None and node.function in ("validate", "named")
               for node in walk(tree))


def _format_optional_edits(tree: Node, tokens: list[Token], index_at: dict[int, int]
                            ) -> list[tuple[int, int, str]]:
    """``f.validate(s)`` and ``format.named(n)`` call their list-returning twins and take ``[?0]``
    of the result: cel-expr-python declares no function returning an optional (celexpr_format)."""
    edits = []
    for node in walk(tree):
        if not (isinstance(node, Call) and node.target is not None and len(node.args) == 1):
            continue
        is_named = node.function == "named" and qualified_name(node.target) == "format"
        if not (is_named or node.function == "validate"):
            continue
        dot = index_at.get(node.pos)
        if dot is None or not _is(tokens[dot + 1], node.function) or not _is(tokens[dot + 2], "("):
            continue
        close = _matching_close(tokens, dot + 2)
        if close is None:
            continue
        name = tokens[dot + 1]
        edits.append((name.pos, name.pos + len(name.text), celexpr_format.RENAMED[node.function]))
        edits.append((tokens[close].pos + 1, tokens[close].pos + 1, "[?0]"))
    return edits


def _native_quantity_comparisons(
    text: str, tree: Node, tokens: list[Token], index_at: dict[int, int]
) -> list[tuple[int, int, str]]:
    """Comparisons of two statically known quantities become bytes comparisons, which the
    order-preserving encoding makes exact; this saves a call into Python per evaluation."""
    edits = []
    for node in walk(tree):
        if not (isinstance(node, Call) and node.function in _NATIVE_COMPARISONS and node.target is not None
                and len(node.args) == 1 and static_type(node.target) == QUANTITY
                and static_type(node.args[0]) == QUANTITY):
            continue
        dot = index_at.get(node.pos)
        if dot is None or not _is(tokens[dot + 2], "("):
            continue
        close = _matching_close(tokens, dot + 2)
        start = min(part.pos for part in walk(node.target))
        receiver = text[start:node.pos]
        if close is None or not _balanced(receiver):
            continue
        argument = text[tokens[dot + 2].pos + 1:tokens[close].pos]
        template = _NATIVE_COMPARISONS[node.function]
        edits.append((start, tokens[close].pos + 1, template.format(a=f"({receiver})", b=f"({argument})")))
    outermost, reached = [], -1
    for edit in sorted(edits, key=lambda e: (e[0], -e[1])):
        if edit[0] >= reached:
            outermost.append(edit)
            reached = edit[1]
    return outermost


def _apply(text: str, edits: list[tuple[int, int, str]]) -> str:
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text
