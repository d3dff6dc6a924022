"""docs/architecture.md walks a pod through filter, prioritize and bind naming modules, files and
functions: every one of them must exist, so the walk cannot drift from the code."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DOC = REPO_ROOT / "docs" / "architecture.md"


def walk_section() -> str:
    text = DOC.read_text()
    start = text.index("## How a pod flows through filter, prioritize and bind")
    return text[start:text.index("### Filter", start)]


def resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if not hasattr(target, name):
                return False
            target = getattr(target, name)
        return True
    return False


def mentioned() -> tuple[list[str], list[str]]:
    names = re.findall(r"`([^`\s]+)`", walk_section())
    files = [name for name in names if name.endswith(".py") and "/" in name]
    dotted = [name for name in names if re.fullmatch(r"(extender|allocator|common|webhook)(\.\w+)+", name)]
    return files, dotted


def test_the_walk_names_code_at_all() -> None:
    files, dotted = mentioned()
    assert len(files) >= 3 and len(dotted) >= 15


def test_every_file_the_walk_names_exists() -> None:
    files, _ = mentioned()
    assert [name for name in files if not (REPO_ROOT / name).is_file()] == []


def test_every_module_class_and_function_the_walk_names_exists() -> None:
    _, dotted = mentioned()
    assert [name for name in dotted if not resolves(name)] == []


def test_a_name_that_is_gone_is_caught() -> None:
    assert resolves("extender.plugin.scheduling.Scheduler.bind")
    assert not resolves("extender.plugin.scheduling.Scheduler.no_such_verb")
    assert not resolves("extender.no_such_room.Scheduler")
