"""Validating rule for resourceclaims and resourceclaimtemplates CREATE: CEL selectors our engine can run.

A selector the API server accepts may still be beyond our engine (a function it lacks) or beyond the
scheduler's cost budget; refusing it at creation gives the user the error now instead of a pod pending
forever. Selectors that index an attribute or capacity no device in the cluster has would fail at runtime
(an unknown key is an error in CEL, and errors abort allocation), so they get a warning.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from webhook.claims import claim_selectors
from webhook.derived import DerivedCheck
from webhook.lookup import ClusterLookup
from webhook.review import AdmissionRequest, Decision, mapping

EXPRESSION_MAX_LENGTH = 10 * 1024  # CELSelectorExpressionMaxLength

# Compiles one expression, raising an exception whose message explains why it cannot run.
Compiler = Callable[[str], object]

_STRING = r"""(?:"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)')"""
# device.attributes["domain"].id or device.attributes["domain"]["id"]; `.?id` (optional) does not match.
_INDEXED = re.compile(
    rf"""device\s*\.\s*(attributes|capacity)\s*\[\s*{_STRING}\s*\]\s*"""
    rf"""(?:\.\s*([A-Za-z_][A-Za-z0-9_]*)|\[\s*{_STRING}\s*\])"""
)
_HAS_CALL = re.compile(r"\bhas\s*\(\s*$")


def indexed_names(expression: str) -> Iterator[tuple[str, str]]:
    """(kind, "domain/id") for each attribute or capacity indexed without a has() guard.

    A has() test of the same name anywhere in the expression counts as a guard. This is a lexical scan,
    not a CEL parse: it can miss indirect accesses (e.g. through cel.bind), which only costs a warning.
    """
    matches = []
    guarded = set()
    for match in _INDEXED.finditer(expression):
        kind = match.group(1)
        domain = match.group(2) if match.group(2) is not None else match.group(3)
        ident = match.group(4) or (match.group(5) if match.group(5) is not None else match.group(6))
        name = f"{domain}/{ident}"
        if _HAS_CALL.search(expression, 0, match.start()):
            guarded.add((kind, name))
        else:
            matches.append((kind, name))
    seen = set()
    for item in matches:
        if item not in guarded and item not in seen:
            seen.add(item)
            yield item


def validate_selectors(
    request: AdmissionRequest,
    lookup: ClusterLookup,
    compile_selector: Compiler,
    check_derived: DerivedCheck | None = None,
) -> Decision:
    """Selectors (and, with `check_derived`, derived attributes) of a new claim or template."""
    obj = request.object or {}
    if request.resource == "resourceclaimtemplates":
        spec, path = mapping(mapping(obj.get("spec"), "spec").get("spec"), "spec.spec"), "spec.spec"
    else:
        spec, path = mapping(obj.get("spec"), "spec"), "spec"
    problems: list[str] = []
    warnings: list[str] = []
    check_names = lookup.ready and bool(lookup.attribute_names() or lookup.capacity_names())
    if check_derived is not None:
        problems.extend(check_derived(spec, path))
    for field_path, expression in claim_selectors(spec, path):
        if len(expression) > EXPRESSION_MAX_LENGTH:
            problems.append(
                f"{field_path}: {len(expression)} bytes exceed the limit of {EXPRESSION_MAX_LENGTH} bytes"
            )
            continue
        try:
            compile_selector(expression)
        except Exception as err:  # the engine's compile error (or a crash on odd input) explains itself
            problems.append(f"{field_path}: {_first_line(err)}")
            continue
        if check_names:
            warnings.extend(_missing_name_warnings(field_path, expression, lookup))
    if problems:
        return Decision.deny("; ".join(problems), code=422, reason="Invalid")
    return Decision(warnings=warnings)


def _missing_name_warnings(field_path: str, expression: str, lookup: ClusterLookup) -> Iterator[str]:
    known = {"attributes": lookup.attribute_names(), "capacity": lookup.capacity_names()}
    short_path = field_path.removesuffix(".cel.expression")
    for kind, name in indexed_names(expression):
        if name not in known[kind]:
            noun = "attribute" if kind == "attributes" else "capacity"
            yield f"{short_path}: no device has {noun} {name}; guard it with has()"


def _first_line(err: Exception) -> str:
    """The engine's message without the source excerpt and caret lines it may append."""
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__
