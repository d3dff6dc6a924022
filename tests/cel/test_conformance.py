"""Every case of the shared CEL tables, on both engines."""

from __future__ import annotations

import importlib.util

import cases_core
import pytest
from case import CelCase

from allocator import cel

TABLES = [cases_core]
if importlib.util.find_spec("cases_libraries") is not None:
    import cases_libraries

    TABLES.append(cases_libraries)
if importlib.util.find_spec("cases_network") is not None:
    import cases_network

    TABLES.append(cases_network)
if importlib.util.find_spec("cases_format") is not None:
    import cases_format

    TABLES.append(cases_format)
if importlib.util.find_spec("cases_time") is not None:
    import cases_time

    TABLES.append(cases_time)
if importlib.util.find_spec("cases_lists_ext") is not None:
    import cases_lists_ext

    TABLES.append(cases_lists_ext)

if importlib.util.find_spec("cases_folding") is not None:
    import cases_folding

    TABLES.append(cases_folding)

ALL_CASES: list[CelCase] = [case for table in TABLES for case in table.CASES]

ENGINES = [
    pytest.param("celpy", id="celpy"),
    pytest.param("cel-expr", id="cel-expr", marks=pytest.mark.skipif(
        not cel.cel_expr_available(), reason="cel-expr-python is not installed")),
]


def test_case_names_are_unique() -> None:
    names = [case.name for case in ALL_CASES]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


@pytest.mark.parametrize("engine_name", ENGINES)
@pytest.mark.parametrize("case", ALL_CASES, ids=lambda case: case.name)
def test_case(engine_name: str, case: CelCase) -> None:
    engine = cel.get_engine(engine_name)
    device = cel.make_device(**case.device)
    if case.expect == "compile_error":
        with pytest.raises(cel.CELCompileError):
            engine.compile(case.expression, case.options)
        return
    selector = engine.compile(case.expression, case.options)
    if case.expect == "runtime_error":
        with pytest.raises(cel.CELRuntimeError):
            selector.matches(device)
        return
    assert selector.matches(device) is case.expect
