"""Build the Go tools the chart and release checks run, as a user with only Go could: `go install` of
pinned modules through the Go module proxy: helm (the chart tests, `make dist`), krew and its manifest
validator, actionlint (`make dist`), and promtool (the alert rules' test).

Each goes to the same per-machine cache as the end-to-end control plane
(``~/.cache/dra-extender/<tool>-<version>/bin/``) and is reused when present. Without a Go toolchain
nothing is built and the script says so; the chart tests then skip with the same message.

    python tests/deploy/go_tools.py [helm|krew|actionlint|promtool]          # build if needed, print them
    python tests/deploy/go_tools.py [helm|krew|actionlint|promtool] --print  # only print where they go
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

DONE_STAMP = ".complete"

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from build_control_plane import BuildUnavailable, cache_root, find_go  # noqa: E402


@dataclass(frozen=True)
class GoTool:
    name: str
    version: str
    # The packages (`<module>/cmd/<binary>`) of one module to install, all at `version`.
    packages: tuple[str, ...]

    @property
    def bin_dir(self) -> Path:
        return cache_root() / f"{self.name}-{self.version}" / "bin"

    def path(self, binary: str | None = None) -> Path:
        return self.bin_dir / (binary or self.name)

    def is_built(self) -> bool:
        return (self.bin_dir / DONE_STAMP).is_file() and all(
            self.path(p.rsplit("/", 1)[-1]).is_file() for p in self.packages
        )

    def build(self) -> Path:
        go = find_go()
        if go is None:
            raise BuildUnavailable(f"no Go toolchain on PATH (nor /usr/local/go/bin/go) to build {self.name}")
        target = self.bin_dir
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix="bin-", dir=target.parent))
        env = dict(os.environ, CGO_ENABLED="0", GOTOOLCHAIN="local", GOBIN=str(staging), GOFLAGS="")
        wanted = [f"{package}@{self.version}" for package in self.packages]
        print(f"[{self.name} build] go install {' '.join(wanted)} into {target}", flush=True)
        result = subprocess.run(
            [go, "install", "-trimpath", "-ldflags=-s -w", *wanted],
            env=env, cwd=staging, capture_output=True, text=True, check=False,
        )
        if result.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            raise RuntimeError(
                f"go install of {self.name} failed (exit {result.returncode}):\n{result.stderr[-4000:]}"
            )
        (staging / DONE_STAMP).write_text(f"{self.version}\n")
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
        return self.path()

    def ensure_built(self) -> Path:
        """The tool's main binary, building the tool first if needed."""
        return self.path() if self.is_built() else self.build()


HELM = GoTool("helm", "v3.22.0", ("helm.sh/helm/v3/cmd/helm",))
# v0.4.3 is the newest krew the module proxy serves.
KREW = GoTool("krew", "v0.4.3", ("sigs.k8s.io/krew/cmd/krew", "sigs.k8s.io/krew/cmd/validate-krew-manifest"))
ACTIONLINT = GoTool("actionlint", "v1.7.12", ("github.com/rhysd/actionlint/cmd/actionlint",))
# Prometheus's module is versioned v0.<minor>.<patch> for Prometheus 3.<minor>.<patch>.
PROMTOOL = GoTool("promtool", "v0.316.0", ("github.com/prometheus/prometheus/cmd/promtool",))
TOOLS = {tool.name: tool for tool in (HELM, KREW, ACTIONLINT, PROMTOOL)}


def main(argv: list[str]) -> int:
    names = [a for a in argv if a in TOOLS] or ["helm"]
    flags = [a for a in argv if a not in TOOLS]
    if flags not in ([], ["--print"]):
        print(__doc__, file=sys.stderr)
        return 2
    for name in names:
        tool = TOOLS[name]
        if flags:
            print(tool.path())
            continue
        try:
            print(tool.ensure_built())
        except BuildUnavailable as missing:
            print(f"[{name} build] SKIPPED: {missing}; what needs {name} will be skipped", flush=True)
        except RuntimeError as failed:
            print(f"[{name} build] FAILED: {failed}", flush=True)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
