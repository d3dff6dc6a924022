"""Build the control plane the end-to-end tests run: kube-apiserver, kube-scheduler,
kube-controller-manager, kubectl and etcd, from the Go modules pinned in tests/e2e/go.mod.

The binaries go to a cache outside the repository, keyed by the Kubernetes version and a hash of
go.sum (``~/.cache/dra-extender/k8s-<version>-<hash>/bin``), and are reused when present, so only
the first run on a machine pays for the build. Without a Go toolchain nothing is built and the
script says so; the e2e tests then skip with the same message.

    python tests/e2e/build_control_plane.py          # build if needed, print the bin folder
    python tests/e2e/build_control_plane.py --print  # only print where the binaries go
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODULE_DIR = Path(__file__).resolve().parent
GO_MOD = MODULE_DIR / "go.mod"
GO_SUM = MODULE_DIR / "go.sum"

# Go package -> binary name `go build -o DIR/` gives it.
PACKAGES = {
    "k8s.io/kubernetes/cmd/kube-apiserver": "kube-apiserver",
    "k8s.io/kubernetes/cmd/kube-scheduler": "kube-scheduler",
    "k8s.io/kubernetes/cmd/kube-controller-manager": "kube-controller-manager",
    "k8s.io/kubernetes/cmd/kubectl": "kubectl",
    "go.etcd.io/etcd/server/v3": "server",
}
BINARIES = ("kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubectl", "etcd")
DONE_STAMP = ".complete"


class BuildUnavailable(RuntimeError):
    """The binaries are not built and cannot be (no Go toolchain)."""


def kubernetes_version() -> str:
    match = re.search(r"^\s*k8s\.io/kubernetes\s+(v\S+)", GO_MOD.read_text(), re.MULTILINE)
    if match is None:
        raise RuntimeError(f"{GO_MOD}: no k8s.io/kubernetes requirement")
    return match.group(1)


def cache_root() -> Path:
    base = os.environ.get("DRA_EXTENDER_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "dra-extender"
    )
    return Path(base)


def bin_dir() -> Path:
    digest = hashlib.sha256(GO_SUM.read_bytes()).hexdigest()[:12]
    return cache_root() / f"k8s-{kubernetes_version()}-{digest}" / "bin"


def is_built(directory: Path) -> bool:
    return (directory / DONE_STAMP).is_file() and all((directory / name).is_file() for name in BINARIES)


def find_go() -> str | None:
    found = shutil.which("go")
    if found:
        return found
    default = Path("/usr/local/go/bin/go")
    return str(default) if default.is_file() else None


def _log(message: str) -> None:
    print(f"[control-plane build] {message}", flush=True)


def _version_ldflags(version: str) -> str:
    major, minor = version.lstrip("v").split(".")[:2]
    stamp = []
    # kubectl version and the apiserver's /version read these; without them they say v0.0.0.
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        stamp += [
            f"-X {package}.gitVersion={version}",
            f"-X {package}.gitMajor={major}",
            f"-X {package}.gitMinor={minor}",
            f"-X {package}.gitTreeState=clean",
        ]
    return " ".join(["-s", "-w", *stamp])


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    # Static binaries, and cgo would only add compile time; the module graph is pinned by go.sum.
    env.update(CGO_ENABLED="0", GOFLAGS="-mod=readonly", GOTOOLCHAIN="local")
    return env


def _count_packages(go: str, env: dict[str, str]) -> int:
    listed = subprocess.run(
        [go, "list", "-deps", "-f", "{{.ImportPath}}", *PACKAGES],
        cwd=MODULE_DIR,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return sum(1 for line in listed.stdout.splitlines() if line.strip())


def build(target: Path) -> None:
    go = find_go()
    if go is None:
        raise BuildUnavailable(
            "no Go toolchain on PATH (or /usr/local/go/bin/go): cannot build the control plane"
        )
    version = kubernetes_version()
    env = _go_env()
    started = time.monotonic()
    _log(f"building Kubernetes {version} (+ etcd) into {target}; the first build takes a while on 2 cores")

    _log("downloading the modules these binaries need (go list -deps)...")
    total = _count_packages(go, env)
    _log(f"modules ready after {time.monotonic() - started:.0f}s")
    _log(f"compiling {total} packages into 5 binaries")

    staging = Path(tempfile.mkdtemp(prefix="bin-", dir=target.parent))
    staging.chmod(0o755)
    command = [
        go,
        "build",
        "-v",
        "-trimpath",
        f"-ldflags={_version_ldflags(version)}",
        "-o",
        f"{staging}/",
        *PACKAGES,
    ]
    process = subprocess.Popen(command, cwd=MODULE_DIR, env=env, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    compiled = 0
    last_report = time.monotonic()
    errors: list[str] = []
    for line in process.stderr:
        line = line.rstrip()
        # -v names each package as it compiles; anything else is an error message.
        if re.fullmatch(r"[\w.\-/~+]+", line):
            compiled += 1
        else:
            errors.append(line)
            print(line, file=sys.stderr, flush=True)
        if time.monotonic() - last_report >= 30:
            last_report = time.monotonic()
            _log(f"{compiled}/{total} packages compiled ({time.monotonic() - started:.0f}s)")
    if process.wait() != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise RuntimeError(f"go build failed (exit {process.returncode}):\n" + "\n".join(errors[-40:]))
    # go build names a main package after its import path without the major-version suffix.
    (staging / PACKAGES["go.etcd.io/etcd/server/v3"]).rename(staging / "etcd")
    (staging / DONE_STAMP).write_text(f"{version}\n")
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
    elapsed = time.monotonic() - started
    sizes = ", ".join(f"{name} {(target / name).stat().st_size / 2**20:.0f} MiB" for name in BINARIES)
    _log(f"done in {elapsed:.0f}s: {sizes}")


def ensure_built() -> Path:
    """The bin folder with every binary, building it first if needed."""
    target = bin_dir()
    if is_built(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    build(target)
    return target


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--print", action="store_true", help="only print the bin folder, build nothing")
    args = parser.parse_args()
    if args.print:
        print(bin_dir())
        return 0
    target = bin_dir()
    if is_built(target):
        _log(f"reusing {target}")
        return 0
    try:
        ensure_built()
    except BuildUnavailable as missing:
        _log(f"SKIPPED: {missing}; the e2e tests will be skipped")
    except (RuntimeError, subprocess.CalledProcessError) as failed:
        _log(f"FAILED: {failed}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
