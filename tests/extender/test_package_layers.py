"""The packages' import directions, read from the source: allocator <- common <- webhook <- extender's
commands, with extender's other modules on common and allocator. A cycle between extender and webhook
(each importing the other's internals) is what this keeps from coming back."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("allocator", "common", "extender", "webhook")
# Which of our packages each package may import (anywhere in a module, also inside functions).
ALLOWED = {
    "allocator": set(),
    "common": set(),
    "webhook": {"allocator", "common"},
    "extender": {"allocator", "common", "webhook"},
}
# The only extender modules that may import the webhook: the composition roots that start or configure it.
WEBHOOK_USERS = ("extender/commands/", "extender/wiring.py")


def imported_packages(path: Path) -> set[str]:
    """Our top-level packages `path` imports, at module level or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found.update(name.split(".")[0] for name in names if name.split(".")[0] in PACKAGES)
    return found


def modules(package: str) -> list[Path]:
    return sorted((REPO_ROOT / package).rglob("*.py"))


def package_graph() -> dict[str, set[str]]:
    return {
        package: set().union(*(imported_packages(path) for path in modules(package))) - {package}
        for package in PACKAGES
    }


def test_the_reader_finds_imports_in_function_bodies(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("import os\nfrom common import rules\n\ndef f():\n    import webhook.server\n")
    assert imported_packages(source) == {"common", "webhook"}


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_imports_only_what_it_may(package: str) -> None:
    for path in modules(package):
        wrong = imported_packages(path) - ALLOWED[package] - {package}
        assert not wrong, f"{path.relative_to(REPO_ROOT)} imports {sorted(wrong)}"


def test_only_the_composition_roots_of_extender_import_the_webhook() -> None:
    users = [str(path.relative_to(REPO_ROOT))
             for path in modules("extender") if "webhook" in imported_packages(path)]
    assert users, "the serve and certs commands compose the webhook"
    assert [user for user in users if not user.startswith(WEBHOOK_USERS)] == []


def test_packages_import_each_other_without_a_cycle() -> None:
    graph = package_graph()

    def reaches(start: str, goal: str, seen: frozenset[str] = frozenset()) -> bool:
        return any(after == goal or (after not in seen and reaches(after, goal, seen | {after}))
                   for after in graph[start])

    assert [package for package in PACKAGES if reaches(package, package)] == []
