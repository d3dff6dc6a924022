"""Upstream's test/integration/dra (Kubernetes release of tests/e2e/go.mod) with DRA Extender as the
scheduler's DRA, through harness.py.

A package fails here when a leaf sub-test that passes with the in-tree plugin (in_tree_passing.txt)
fails with us without being listed in expectations.yaml, or passes although it is listed there.
By default `default` and `ga` run (the README's test command, about 11 min on 2 cores); `all` and
`api` (about 16 min) run in `make upstream-integration`, which CI also runs. DRA_UPSTREAM_PACKAGES
picks any of the four, e.g. DRA_UPSTREAM_PACKAGES=all (`make upstream-integration UPSTREAM_PACKAGES=all`).
"""

from __future__ import annotations

import os
from pathlib import Path

import harness
import pytest

PACKAGES_ENV = "DRA_UPSTREAM_PACKAGES"
DEFAULT_PACKAGES = frozenset({"default", "ga"})


def selected_packages() -> set[str]:
    value = os.environ.get(PACKAGES_ENV)
    if value is None:
        return set(DEFAULT_PACKAGES)
    chosen = {name.strip() for name in value.split(",") if name.strip()}
    unknown = chosen - set(harness.PACKAGES)
    if unknown:
        raise pytest.UsageError(
            f"{PACKAGES_ENV}: unknown package(s) {sorted(unknown)}; known: {', '.join(harness.PACKAGES)}"
        )
    return chosen


@pytest.fixture(scope="module")
def binaries() -> dict[str, Path]:
    chosen = selected_packages()
    if not chosen:
        pytest.skip(f"{PACKAGES_ENV} selects no package")
    try:
        return harness.build("extender", sorted(chosen))
    except harness.BuildUnavailable as missing:
        pytest.skip(f"upstream's DRA integration tests need Go: {missing}")


@pytest.mark.parametrize("package", harness.PACKAGES)
def test_upstream_package(package: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if package not in selected_packages():
        pytest.skip(f"{PACKAGES_ENV} does not select {package}")
    binary = request.getfixturevalue("binaries")[package]
    run = harness.run_package(package, binary, tmp_path)
    problems = harness.compare(run, harness.read_in_tree_passing(), harness.read_expectations())
    print(f"{package}: {run.seconds:.0f}s, {len(run.leaves)} leaf sub-tests; events and logs in {tmp_path}")
    assert not problems, "\n".join(problems)


def test_expectations_name_sub_tests_that_count() -> None:
    """Every listed sub-test passes in-tree: a name that changed or a test that no longer counts must
    leave the list rather than make it look longer than it is."""
    in_tree = harness.read_in_tree_passing()
    stale = sorted(set(harness.read_expectations()) - set(in_tree))
    assert not stale, f"listed in {harness.EXPECTATIONS.name} but not passing in-tree: {stale}"
