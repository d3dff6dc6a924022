"""The README's samples cannot go stale: every `$ curl ...` in "What the debug endpoints answer" is run,
with its pipes, by bash against `dra-extender serve --snapshot examples/cluster` (the options the
command line gives, a fresh server for each, as the README says), and its output compared with what
the README shows: exactly, or as JSON where the README shows JSON reformatted for width."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from extender.cli import build_parser
from extender.commands.serve import example_nodes, example_pod
from extender.flags import serve_options
from extender.wiring import App

REPO = Path(__file__).resolve().parents[2]
SECTION = "## What the debug endpoints answer"
README_DEBUG = "http://127.0.0.1:8889"
README_EXTENDER = "http://127.0.0.1:8888"
TOOLS = ("bash", "curl", "grep", "head")
pytestmark = pytest.mark.skipif(any(shutil.which(tool) is None for tool in TOOLS),
                                reason=f"the samples run with {', '.join(TOOLS)}")


def samples() -> list[tuple[str, str]]:
    """(command, output shown) of every `$ ` line in the section's code blocks."""
    text = (REPO / "README.md").read_text().split(SECTION, 1)[1].split("\n## ", 1)[0]
    found = []
    for block in re.findall(r"```\n(.*?)```", text, re.S):
        parts = re.split(r"^\$ (.*)\n", block, flags=re.M)
        found.extend((command, shown) for command, shown in zip(parts[1::2], parts[2::2], strict=True))
    return found


def test_the_section_has_the_samples_the_readme_promises() -> None:
    commands = [command for command, _ in samples()]
    for path in ("/debug/explain", "/scheduler/filter", "/debug/state", "/debug/snapshot", "/metrics"):
        assert any(path in command for command in commands), path


class Served:
    """`serve --snapshot examples/cluster` on ephemeral ports, on a loop of its own."""

    def __init__(self) -> None:
        args = build_parser().parse_args(["serve", "--snapshot", str(REPO / "examples" / "cluster"),
                                          "--extender-port", "0", "--debug-port", "0"])
        self.app = App(serve_options(args))
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.app.__aenter__(), self.loop).result(60)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.app.__aexit__(None, None, None), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def served() -> Iterator[Served]:
    server = Served()
    yield server
    server.close()


def _bodies(served: Served, where: Path) -> None:
    """The filter bodies the README names: what serve's banner prints for the example pod, all of its
    nodes and only node-2 and node-3."""
    cache = served.app.cluster.cache
    pod = example_pod(cache.valid_objects("Pod"))
    nodes, _ = example_nodes(cache)
    for name, offered in (("a100-job-args.json", nodes), ("a100-job-node-2-3.json", ["node-2", "node-3"])):
        (where / name).write_bytes(orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": offered}))


def _same(shown: str, printed: str) -> bool:
    if shown.lstrip().startswith("{"):
        return bool(orjson.loads(shown) == orjson.loads(printed))
    return shown == printed


@pytest.mark.parametrize(("command", "shown"), samples(), ids=lambda value: value.split("\n")[0][:60])
def test_each_sample_prints_what_the_readme_shows(command: str, shown: str, served: Served,
                                                  tmp_path: Path) -> None:
    _bodies(served, tmp_path)
    urls: dict[str, Any] = served.app.server.urls
    extender = urls["extender"].removesuffix("/scheduler")
    run = command.replace(README_DEBUG, urls["debug"]).replace(README_EXTENDER, extender)
    # Every command of a pipe must succeed, but curl, whose output head cuts short, cannot.
    pipefail = [] if "| head" in command else ["-o", "pipefail"]
    result = subprocess.run(["bash", *pipefail, "-c", run], capture_output=True, text=True,
                            cwd=tmp_path, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert _same(shown, result.stdout), f"README shows:\n{shown}\nthe server printed:\n{result.stdout}"
