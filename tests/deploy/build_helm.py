"""Build the `helm` the chart tests run, as a user with only Go could: `go install` of the pinned module
`helm.sh/helm/v3/cmd/helm` through the Go module proxy.

The binary goes to the same per-machine cache as the end-to-end control plane
(``~/.cache/dra-extender/helm-<version>/bin/helm``) and is reused when present. Without a Go toolchain
nothing is built and the script says so; the chart tests then skip with the same message.

    python tests/deploy/build_helm.py          # build if needed, print the binary
    python tests/deploy/build_helm.py --print  # only print where the binary goes
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HELM_MODULE = "helm.sh/helm/v3"
HELM_VERSION = "v3.22.0"
DONE_STAMP = ".complete"

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from build_control_plane import BuildUnavailable, cache_root, find_go  # noqa: E402


def helm_path() -> Path:
    return cache_root() / f"helm-{HELM_VERSION}" / "bin" / "helm"


def is_built() -> bool:
    path = helm_path()
    return path.is_file() and (path.parent / DONE_STAMP).is_file()


def build() -> Path:
    go = find_go()
    if go is None:
        raise BuildUnavailable("no Go toolchain on PATH (or /usr/local/go/bin/go): cannot build helm")
    target = helm_path().parent
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="bin-", dir=target.parent))
    env = dict(os.environ, CGO_ENABLED="0", GOTOOLCHAIN="local", GOBIN=str(staging), GOFLAGS="")
    print(f"[helm build] go install {HELM_MODULE}/cmd/helm@{HELM_VERSION} into {target}", flush=True)
    result = subprocess.run(
        [go, "install", "-trimpath", "-ldflags=-s -w", f"{HELM_MODULE}/cmd/helm@{HELM_VERSION}"],
        env=env, cwd=staging, capture_output=True, text=True, check=False,
    )
    if result.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise RuntimeError(f"go install of helm failed (exit {result.returncode}):\n{result.stderr[-4000:]}")
    (staging / DONE_STAMP).write_text(f"{HELM_VERSION}\n")
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
    return helm_path()


def ensure_built() -> Path:
    """The helm binary, building it first if needed."""
    return helm_path() if is_built() else build()


def main(argv: list[str]) -> int:
    if argv not in ([], ["--print"]):
        print(__doc__, file=sys.stderr)
        return 2
    if argv:
        print(helm_path())
        return 0
    try:
        print(ensure_built())
    except BuildUnavailable as missing:
        print(f"[helm build] SKIPPED: {missing}; the Helm chart tests will be skipped", flush=True)
    except RuntimeError as failed:
        print(f"[helm build] FAILED: {failed}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
