"""The upstream side of the differential tests: build tests/conformance/upstream (a small Go program
over k8s.io/dynamic-resource-allocation, pinned in its go.mod) and talk to it in JSON lines.

The binary goes to the same per-machine cache as the e2e control plane
(``~/.cache/dra-extender/conformance-upstream-<hash>/upstream``), keyed by a hash of the program's
go.mod, go.sum and source, and is reused while that hash is unchanged. Without a Go toolchain
nothing is built and :class:`BuildUnavailable` says so; the tests then skip with that message.

    python tests/conformance/upstream_runner.py          # build if needed, print the binary's path
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

PROGRAM_DIR = Path(__file__).resolve().parent / "upstream"
sys.path.insert(0, str(PROGRAM_DIR.parent.parent / "e2e"))

from build_control_plane import BuildUnavailable, cache_root, find_go  # noqa: E402

BINARY = "upstream"
SOURCES = ("go.mod", "go.sum", "main.go")

__all__ = ["BuildUnavailable", "Upstream", "binary_path", "ensure_built"]


def binary_path() -> Path:
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update((PROGRAM_DIR / name).read_bytes())
    return cache_root() / f"conformance-upstream-{digest.hexdigest()[:12]}" / BINARY


def ensure_built() -> Path:
    """The built program, compiling it first if needed (about a minute the first time)."""
    target = binary_path()
    if target.is_file():
        return target
    go = find_go()
    if go is None:
        raise BuildUnavailable(
            "no Go toolchain on PATH (or /usr/local/go/bin/go): "
            "cannot build the upstream reference for the differential tests"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=readonly", GOTOOLCHAIN="local")
    with tempfile.TemporaryDirectory(dir=target.parent) as staging:
        built = Path(staging) / BINARY
        done = subprocess.run(
            [go, "build", "-trimpath", "-o", str(built), "."],
            cwd=PROGRAM_DIR,
            env=env,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"building {PROGRAM_DIR} failed:\n{done.stderr[-4000:]}")
        built.replace(target)  # atomic: a concurrent build just replaces an identical file
    return target


class Upstream:
    """One long-running upstream process; ``ask`` sends a question and returns its answer."""

    def __init__(self, binary: Path | None = None) -> None:
        self._process = subprocess.Popen(
            [str(binary or ensure_built())], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
        )

    def ask(self, question: dict[str, Any]) -> dict[str, Any]:
        stdin, stdout = self._process.stdin, self._process.stdout
        assert stdin is not None and stdout is not None
        stdin.write(orjson.dumps(question) + b"\n")
        line = stdout.readline()
        if not line:
            raise RuntimeError(f"the upstream program exited (code {self._process.wait()})")
        answer: dict[str, Any] = orjson.loads(line)
        return answer

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(timeout=10)

    def __enter__(self) -> Upstream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main() -> int:
    try:
        print(ensure_built())
    except BuildUnavailable as missing:
        print(f"SKIPPED: {missing}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
