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


# extender's rooms, bottom up: which of its sibling rooms each may import. The composition root (the
# modules at extender's top level, and commands/) may import every room; no room imports it.
ROOMS: dict[str, set[str]] = {
    "kube": set(),
    "state": {"kube"},
    "plugin": {"state", "kube"},
    "http": {"plugin", "state", "kube"},
    "controllers": {"plugin", "state", "kube"},
}
COMPOSITION = "(top level)"
MAX_TOP_LEVEL_MODULES = 8


def room_of(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT / "extender").parts
    return parts[0] if len(parts) > 1 and parts[0] != "commands" else COMPOSITION


def extender_imports(path: Path) -> set[str]:
    """The extender modules `path` imports (dotted names below `extender.`), anywhere in the module."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "extender":
                found.update(alias.name for alias in node.names)
            elif node.module.startswith("extender."):
                module = node.module.removeprefix("extender.")
                # `from extender.http import wire` imports the module http.wire (or a name of http).
                found.update({module, *(f"{module}.{alias.name}" for alias in node.names)})
        elif isinstance(node, ast.Import):
            found.update(alias.name.removeprefix("extender.") for alias in node.names
                         if alias.name.startswith("extender."))
    return found


def test_extender_has_its_rooms_and_a_short_top_level() -> None:
    rooms = {path.name for path in (REPO_ROOT / "extender").iterdir()
             if path.is_dir() and (path / "__init__.py").is_file()}
    assert rooms == {*ROOMS, "commands"}
    top = sorted(path.name for path in (REPO_ROOT / "extender").glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


@pytest.mark.parametrize("room", sorted(ROOMS))
def test_each_room_imports_only_the_rooms_below_it(room: str) -> None:
    for path in sorted((REPO_ROOT / "extender" / room).rglob("*.py")):
        targets = {name.split(".")[0] for name in extender_imports(path)}
        wrong = {target if target in ROOMS or target == "commands" else COMPOSITION
                 for target in targets} - ROOMS[room] - {room}
        assert not wrong, f"{path.relative_to(REPO_ROOT)} imports {sorted(wrong)}"


def test_each_room_says_what_lives_there_and_what_it_may_import() -> None:
    for room in [*ROOMS, "commands"]:
        doc = ast.get_docstring(ast.parse((REPO_ROOT / "extender" / room / "__init__.py").read_text()))
        assert doc and "import" in doc.lower(), f"extender/{room}/__init__.py needs its docstring"


def test_extender_modules_import_each_other_without_a_cycle() -> None:
    def module_name(path: Path) -> str:
        relative = path.relative_to(REPO_ROOT / "extender").with_suffix("")
        parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
        return ".".join(parts)

    names = {module_name(path): path for path in modules("extender")}
    graph = {name: {target for target in extender_imports(path) if target in names and target != name}
             for name, path in names.items()}
    # A package's __init__ importing its own modules is how a package exports; that is no cycle.
    for name in graph:
        graph[name] = {target for target in graph[name] if not name or not target.startswith(name + ".")}
    cycles = []
    for start in graph:
        stack, seen = [(start, [start])], set()
        while stack:
            node, trail = stack.pop()
            for after in graph[node]:
                if after == start:
                    cycles.append(" -> ".join([*trail, start]))
                elif after not in seen:
                    seen.add(after)
                    stack.append((after, [*trail, after]))
    assert cycles == []


def test_the_allocator_reads_no_environment() -> None:
    readers = [str(path.relative_to(REPO_ROOT)) for path in modules("allocator")
               if "os.environ" in path.read_text() or "getenv" in path.read_text()]
    assert readers == []


def test_object_metadata_is_read_through_the_one_accessor() -> None:
    """`metadata_of` (common/objects.py) instead of `x.get("metadata") or {}` written out everywhere."""
    spelled_out = [str(path.relative_to(REPO_ROOT)) for package in PACKAGES for path in modules(package)
                   if '.get("metadata") or {}' in path.read_text()]
    assert spelled_out == []
