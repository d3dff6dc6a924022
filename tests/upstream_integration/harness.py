"""Upstream's own DRA integration suite with DRA Extender as kube-scheduler's DRA.

Kubernetes ships ``test/integration/dra`` (packages ``default``, ``ga``, ``all``, ``api``): an API server,
etcd, the ResourceClaim controller and kube-scheduler run in the test process, and each sub-test checks
what the in-tree DynamicResources plugin does. This harness runs those packages unchanged except for
the scheduler's start-up:

- At build time the test packages are copied from the Go module cache (the release pinned by
  tests/e2e/go.mod) into a module of their own that reuses tests/e2e's go.mod and go.sum, so the
  compiled packages come from the control plane's build cache. Nothing of upstream is committed.
- ``dra.go`` gets a small patch (:data:`PATCHES`): every kube-scheduler a test starts first goes
  through ``go/dra_extender.go``, which starts ``dra-extender serve`` against that test's API server and
  configures the scheduler as deploy/ does (DynamicResources disabled through multiPoint, our
  extender for filter, prioritize, preempt and bind); the extender stops with the scheduler.
- The test binaries run under ``go tool test2json`` (what ``go test -json`` does) and the results of
  the leaf sub-tests are read from its events.

``--scheduler in-tree`` builds the same packages with only the marker that records which tests start a
scheduler, i.e. upstream's own set-up: its passing sub-tests are the ones that count
(in_tree_passing.txt); expectations.yaml lists those we do not pass yet, with the reason.

    python tests/upstream_integration/harness.py run --packages default,ga      # with DRA Extender
    python tests/upstream_integration/harness.py run --scheduler in-tree --json in-tree.json
    python tests/upstream_integration/harness.py table ours.json in-tree.json   # the summary table
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import yaml

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
sys.path.insert(0, str(REPO_ROOT / "tests" / "e2e"))

import build_control_plane  # noqa: E402
from build_control_plane import BuildUnavailable, cache_root, find_go  # noqa: E402
from e2e_cluster import DEPLOY, DRA_EXTENDER, deployed_requeue_flag, extender_supports  # noqa: E402

from allocator.features import DEFAULT_GATES  # noqa: E402
from webhook.certs import generate_ca, generate_client_cert, generate_serving_cert, write_pem  # noqa: E402

__all__ = ["PACKAGES", "BuildUnavailable", "PackageRun", "Result", "build", "run_package"]

PACKAGES = ("default", "ga", "all", "api")
SCHEDULERS = ("extender", "in-tree")
UPSTREAM_PACKAGE = "k8s.io/kubernetes/test/integration/dra"
MODULE = "dra-extender/upstream-integration"
LOCAL_MODULE = "dra-extender/upstream-dra"
HOOK = HERE / "go" / "dra_extender.go"
SCHEDULER_CONFIG = DEPLOY / "components" / "scheduler-config" / "kube-scheduler-config.yaml"
IN_TREE_PASSING = HERE / "in_tree_passing.txt"
EXPECTATIONS = HERE / "expectations.yaml"

# The last lines of each test's output kept in the results (the events file has all).
OUTPUT_LINES_KEPT = 300

# Logged by a test each time it asks for the scheduler: the leaves below such a test depend on it.
SCHEDULER_MARKER = "upstream-integration: this test uses the scheduler"

# DynamicResources plugin arg -> the dra-extender flag with the same meaning, passed when the test sets
# the arg and `serve --help` lists the flag. filterTimeout bounds one node's device search.
ARG_FLAGS = {"filterTimeout": "--node-timeout", "bindingTimeout": "--binding-timeout"}


@dataclasses.dataclass(frozen=True)
class Patch:
    """Insert `text` before `anchor`, which must occur exactly once in the file."""

    file: str
    anchor: str
    text: str
    schedulers: tuple[str, ...] = SCHEDULERS


PATCHES = (
    Patch(
        "dra.go",
        "\tscheduler := value.(*schedulerSingleton)\n\tscheduler.start(tCtx, config)\n",
        f'\ttCtx.Log("{SCHEDULER_MARKER}")\n',
    ),
    Patch(
        "dra.go",
        "\tusageCount      int\n\tinformerFactory informers.SharedInformerFactory\n",
        "\tdraExtender     *draExtenderProcess\n",
        ("extender",),
    ),
    Patch(
        "dra.go",
        "\tcfg := newSchedulerComponentConfig(schedulerCtx, config)\n",
        "\tscheduler.draExtender, config = startDRAExtender(schedulerCtx, config)\n",
        ("extender",),
    ),
    Patch(
        "dra.go",
        "\tif scheduler.informerFactory != nil {\n\t\tscheduler.informerFactory.Shutdown()\n\t}\n",
        "\tscheduler.draExtender.stop(scheduler.rootCtx)\n",
        ("extender",),
    ),
)


def _log(message: str) -> None:
    print(f"[upstream-integration] {message}", flush=True)


def _go() -> str:
    go = find_go()
    if go is None:
        raise BuildUnavailable(
            "no Go toolchain on PATH (or /usr/local/go/bin/go): cannot build upstream's tests"
        )
    return go


def _go_env() -> dict[str, str]:
    # As build_control_plane: the same settings make the same build cache entries.
    return dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=readonly", GOTOOLCHAIN="local")


def module_cache(go: str) -> Path:
    done = subprocess.run(
        [go, "env", "GOMODCACHE"], capture_output=True, text=True, check=True, env=_go_env()
    )
    return Path(done.stdout.strip())


def upstream_source(go: str) -> Path:
    """test/integration/dra of the pinned release in the module cache (filled by the control plane build)."""
    source = module_cache(go) / f"k8s.io/kubernetes@{build_control_plane.kubernetes_version()}"
    return source / "test" / "integration" / "dra"


def patched(text: str, file: str, scheduler: str) -> str:
    for patch in PATCHES:
        if patch.file != file or scheduler not in patch.schedulers:
            continue
        count = text.count(patch.anchor)
        if count != 1:
            raise RuntimeError(
                f"upstream's {file} changed: the patch anchor {patch.anchor!r} occurs {count} times, not once"
            )
        text = text.replace(patch.anchor, patch.text + patch.anchor)
    return text


def prepare_module(dest: Path, source: Path, scheduler: str) -> None:
    """At `dest`: a module with tests/e2e's requirements (so the build list, and with it the build cache,
    is the control plane's) that requires a local module (dra/) holding a patched copy of `source`,
    upstream's dra package and its four test packages."""
    go_mod = build_control_plane.GO_MOD.read_text()
    go_mod, count = re.subn(r"^module \S+", f"module {MODULE}", go_mod, count=1, flags=re.MULTILINE)
    if count != 1:
        raise RuntimeError(f"{build_control_plane.GO_MOD}: no module line")
    go_mod += f"\nrequire {LOCAL_MODULE} v0.0.0\n\nreplace {LOCAL_MODULE} => ./dra\n"
    (dest / "go.mod").write_text(go_mod)
    shutil.copyfile(build_control_plane.GO_SUM, dest / "go.sum")
    go_version = re.search(r"^go \S+", go_mod, re.MULTILINE)
    assert go_version is not None
    (dest / "dra").mkdir()
    # No requirements of its own: its imports resolve in the wrapper's build list.
    (dest / "dra" / "go.mod").write_text(f"module {LOCAL_MODULE}\n\n{go_version.group(0)}\n")
    for folder in (source, *(source / name for name in PACKAGES)):
        target = dest / "dra" / folder.relative_to(source)
        target.mkdir(parents=True, exist_ok=True)
        for file in folder.glob("*.go"):
            text = file.read_text().replace(f'"{UPSTREAM_PACKAGE}"', f'"{LOCAL_MODULE}"')
            (target / file.name).write_text(patched(text, file.name, scheduler) if folder == source else text)
    if scheduler == "extender":
        shutil.copyfile(HOOK, dest / "dra" / HOOK.name)


def _build_key(source: Path, scheduler: str) -> str:
    digest = hashlib.sha256(scheduler.encode())
    for path in (build_control_plane.GO_MOD, build_control_plane.GO_SUM, HOOK):
        digest.update(path.read_bytes())
    digest.update(f"{source}\n{MODULE}\n{LOCAL_MODULE}\n{PATCHES!r}".encode())
    return digest.hexdigest()[:12]


def build(scheduler: str = "extender", packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    """The test binary of each package (built when missing), keyed by package name."""
    if scheduler not in SCHEDULERS:
        raise ValueError(f"scheduler must be one of {', '.join(SCHEDULERS)}, got {scheduler!r}")
    packages = list(packages)
    unknown = sorted(set(packages) - set(PACKAGES))
    if unknown:
        raise ValueError(f"unknown package(s) {', '.join(unknown)}; known: {', '.join(PACKAGES)}")
    go = _go()
    build_control_plane.ensure_built()  # the module cache and the build cache come with it
    source = upstream_source(go)
    if not source.is_dir():
        raise RuntimeError(f"{source} is missing: the control plane build should have downloaded it")
    out = cache_root() / f"upstream-integration-{_build_key(source, scheduler)}" / scheduler
    binaries = {name: out / f"{name}.test" for name in packages}
    missing = [name for name, binary in binaries.items() if not binary.is_file()]
    if not missing:
        return binaries
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    _log(f"compiling {', '.join(missing)} ({scheduler}) into {out}")
    with tempfile.TemporaryDirectory(prefix="module-", dir=out) as module, \
            tempfile.TemporaryDirectory(prefix="bin-", dir=out) as staging:
        prepare_module(Path(module), source, scheduler)
        go_mod = (Path(module) / "go.mod").read_text()
        # -mod=mod: go.sum lacks the hashes of the test-only modules (testify, gomega, goleak, ...);
        # go adds them, downloading what the module cache does not have.
        done = subprocess.run(
            [go, "test", "-c", "-trimpath", "-vet=off", "-mod=mod", "-o", f"{staging}/",
             *(f"{LOCAL_MODULE}/{name}" for name in missing)],
            cwd=module,
            env=_go_env(),
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"compiling upstream's tests failed:\n{done.stderr[-6000:]}")
        if (Path(module) / "go.mod").read_text() != go_mod:
            raise RuntimeError("go changed the requirements of tests/e2e/go.mod: the tests would not run "
                               "against the control plane's module versions")
        for name in missing:
            (Path(staging) / f"{name}.test").replace(binaries[name])
    _log(f"compiled in {time.monotonic() - started:.0f}s")
    return binaries


# ----- running -----


@dataclasses.dataclass
class Result:
    name: str
    status: str  # pass, fail, skip, or none: started but never finished (the binary died)
    seconds: float
    output: list[str]
    uses_scheduler: bool = False


@dataclasses.dataclass
class PackageRun:
    package: str
    scheduler: str
    seconds: float
    exit_code: int
    leaves: dict[str, Result]
    # Non-leaf tests that failed while none of their sub-tests did (their own error, e.g. in cleanup).
    own_failures: dict[str, Result]
    package_output: list[str]
    # CPU time of the test binary and everything it started (etcd, API server, our servers).
    cpu_seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PackageRun:
        results = {key: {name: Result(**value) for name, value in data[key].items()}
                   for key in ("leaves", "own_failures")}
        return cls(**{**data, **results})


def parse_events(lines: Iterable[bytes]) -> tuple[dict[str, Result], dict[str, Result], list[str]]:
    """Leaf results, non-leaf tests failing on their own, and the package's own output, from test2json
    events."""
    tests: dict[str, Result] = {}
    package_output: list[str] = []
    for line in lines:
        if not line.strip():
            continue
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            package_output.append(line.decode(errors="replace").rstrip("\n"))
            continue
        name, action = event.get("Test"), event.get("Action")
        if not name:
            if action == "output":
                package_output.append(event.get("Output", "").rstrip("\n"))
                if len(package_output) > 2 * OUTPUT_LINES_KEPT:
                    del package_output[:-OUTPUT_LINES_KEPT]
            continue
        result = tests.setdefault(name, Result(name, "none", 0.0, []))
        if action == "output":
            text = event.get("Output", "")
            result.output.append(text.rstrip("\n"))
            if len(result.output) > 2 * OUTPUT_LINES_KEPT:
                del result.output[:-OUTPUT_LINES_KEPT]
            if SCHEDULER_MARKER in text:
                result.uses_scheduler = True
        elif action in ("pass", "fail", "skip"):
            result.status = action
            result.seconds = float(event.get("Elapsed", 0.0))
    parents = {name.rsplit("/", 1)[0] for name in tests if "/" in name}
    for name, result in tests.items():
        ancestors = [name[:i] for i, char in enumerate(name) if char == "/"]
        result.uses_scheduler = result.uses_scheduler or any(
            tests[a].uses_scheduler for a in ancestors if a in tests
        )
    leaves = {name: result for name, result in tests.items() if name not in parents}
    failed = {name for name, result in tests.items() if result.status in ("fail", "none")}
    own_failures = {
        name: tests[name]
        for name in failed & parents
        if not any(other.startswith(name + "/") for other in failed)
    }
    return leaves, own_failures, package_output


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def extender_settings(work: Path, extra_flags: list[str]) -> dict[str, Any]:
    """What go/dra_extender.go starts: our server, on TLS, as deploy/ configures kube-scheduler for it."""
    deployed = yaml.safe_load(SCHEDULER_CONFIG.read_text())
    (profile,) = deployed["profiles"]
    (extender,) = deployed["extenders"]
    server_name = extender["tlsConfig"]["serverName"]
    ca = generate_ca("upstream-integration-ca")
    serving = generate_serving_cert(ca, [server_name, "localhost"], ["127.0.0.1"])
    # kube-scheduler's client certificate from the same CA, as deploy/'s mutual TLS has it.
    client = generate_client_cert(ca, "kube-scheduler")
    ca_file, cert_file, key_file = work / "ca.crt", work / "extender.crt", work / "extender.key"
    client_cert_file, client_key_file = work / "scheduler-client.crt", work / "scheduler-client.key"
    write_pem(ca_file, ca.certificate_pem())
    write_pem(cert_file, serving.certificate_pem())
    write_pem(key_file, serving.key_pem(), private=True)
    write_pem(client_cert_file, client.certificate_pem())
    write_pem(client_key_file, client.key_pem(), private=True)
    extender["tlsConfig"] = {"caFile": str(ca_file), "serverName": server_name,
                             "certFile": str(client_cert_file), "keyFile": str(client_key_file)}
    # As deploy/ runs it: the requeue claim in a namespace the hook creates (the test has none of ours).
    requeue = deployed_requeue_flag()
    requeue_namespace = requeue.split("=", 1)[1].split("/", 1)[0]
    return {
        "binary": str(DRA_EXTENDER),
        "workDir": str(work),
        "certFile": str(cert_file),
        "keyFile": str(key_file),
        "plugins": profile["plugins"],
        "extender": extender,
        "featureGates": sorted(DEFAULT_GATES),
        "argFlags": {arg: flag for arg, flag in ARG_FLAGS.items() if extender_supports(flag)},
        "extraFlags": [requeue, f"--extender-client-ca-file={ca_file}", *extra_flags],
        "namespaces": [requeue_namespace],
    }


@contextlib.contextmanager
def _process_group(command: list[str], **kwargs: Any) -> Iterator[subprocess.Popen[bytes]]:
    """Run `command` in a session of its own; whatever it leaves behind (etcd, dra-extender) is
    stopped with it."""
    process = subprocess.Popen(command, start_new_session=True, **kwargs)
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def run_package(
    package: str,
    binary: Path,
    work: Path,
    *,
    scheduler: str = "extender",
    parallel: int = 4,
    timeout: str = "60m",
    run: str | None = None,
    extra_flags: list[str] | None = None,
) -> PackageRun:
    """Run one package's test binary; its events go to <work>/<package>.json and our servers' logs and
    kubeconfigs to <work>/<package>/."""
    go = _go()
    bin_dir = build_control_plane.ensure_built()
    logs = work / package
    logs.mkdir(parents=True, exist_ok=True)
    env = dict(
        _go_env(),
        # framework.EtcdMain starts its own etcd unless one answers at this URL: never share one.
        KUBE_INTEGRATION_ETCD_URL=f"http://127.0.0.1:{free_port()}",
        PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        # Built with -trimpath, the test API server finds its files under TEST_SRCDIR/TEST_WORKSPACE.
        TEST_SRCDIR=str(module_cache(go)),
        TEST_WORKSPACE=".",
    )
    if scheduler == "extender":
        settings = logs / "settings.json"
        settings.write_bytes(orjson.dumps(extender_settings(logs, extra_flags or [])))
        env["DRA_UPSTREAM_SETTINGS"] = str(settings)
    command = [go, "tool", "test2json", "-t", "-p", package, str(binary), "-test.v=test2json",
               f"-test.parallel={parallel}", f"-test.timeout={timeout}"]
    if run:
        command.append(f"-test.run={run}")
    events = work / f"{package}.json"
    started = time.monotonic()
    with events.open("wb") as sink, _process_group(command, cwd=logs, env=env, stdout=sink,
                                                  stderr=subprocess.STDOUT) as process:
        # wait4: the usage of test2json with what it waited for, the test binary and its children.
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = exit_code = os.waitstatus_to_exitcode(status)
    seconds = time.monotonic() - started
    with events.open("rb") as source:
        leaves, own_failures, package_output = parse_events(source)
    result = PackageRun(package, scheduler, seconds, exit_code, leaves, own_failures, package_output,
                        usage.ru_utime + usage.ru_stime)
    statuses = collections.Counter(leaf.status for leaf in leaves.values())
    _log(f"{package} ({scheduler}): {seconds:.0f}s ({result.cpu_seconds:.0f}s CPU), exit {exit_code}, "
         f"leaf sub-tests {dict(statuses)}")
    return result


def run_packages(binaries: dict[str, Path], work: Path, *, concurrent: bool = False,
                 **options: Any) -> list[PackageRun]:
    """run_package for each package, one after the other or all at once."""
    if not concurrent:
        return [run_package(package, binary, work, **options) for package, binary in binaries.items()]
    with ThreadPoolExecutor(max_workers=len(binaries)) as pool:
        futures = [pool.submit(run_package, package, binary, work, **options)
                   for package, binary in binaries.items()]
        return [future.result() for future in futures]


# ----- expectations -----


def read_in_tree_passing(path: Path = IN_TREE_PASSING) -> dict[str, str]:
    """Leaf sub-test -> its package, for the sub-tests that pass with the in-tree plugin."""
    passing: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        package, _, name = line.partition(" ")
        if package not in PACKAGES or not name:
            raise ValueError(f"{path}:{number}: expected '<package> <test name>', got {line!r}")
        passing[name] = package
    return passing


def write_in_tree_passing(runs: Iterable[PackageRun], path: Path = IN_TREE_PASSING) -> None:
    lines = sorted(
        f"{run.package} {name}" for run in runs for name, r in run.leaves.items() if r.status == "pass"
    )
    header = (
        "# Leaf sub-tests of upstream's test/integration/dra that pass with kube-scheduler's in-tree\n"
        "# DynamicResources plugin (harness.py run --scheduler in-tree): the ones that count.\n"
    )
    path.write_text(header + "\n".join(lines) + "\n")


def read_expectations(path: Path = EXPECTATIONS) -> dict[str, str]:
    """Leaf sub-test -> the cause (a key of the file) of its not passing with DRA Extender."""
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of causes")
    expected: dict[str, str] = {}
    for cause, entry in data.items():
        reason = entry.get("reason") if isinstance(entry, dict) else None
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError(f"{path}: cause {cause!r} needs a 'reason' text")
        tests = entry.get("tests")
        if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
            raise ValueError(f"{path}: cause {cause!r} needs a non-empty 'tests' list of names")
        for name in tests:
            if name in expected:
                raise ValueError(f"{path}: {name} is listed under both {expected[name]!r} and {cause!r}")
            expected[name] = cause
    return expected


# Where a failure's report starts in a test's output, and the lines of gomega's dumps worth showing.
FAILURE_START = re.compile(r"FATAL ERROR|ERROR:|Error Trace:|panic:")
FAILURE_DETAIL = re.compile(
    r"^\s*(message:|Substr:|Expected: <string>|s: \"Expected)|to have length|should|expected"
)


def failure_excerpt(result: Result, lines: int = 20) -> str:
    """The start of a test's failure report and the lines of it that say what was expected."""
    output = result.output
    start = next((i for i, line in enumerate(output) if FAILURE_START.search(line)), None)
    if start is None:
        picked = output[-lines:]
    else:
        picked = output[start:start + 4]
        picked += [line for line in output[start + 4:] if FAILURE_DETAIL.search(line) and line not in picked]
    return "\n    ".join(line.strip()[:400] for line in picked[:lines])


def compare(run: PackageRun, in_tree: dict[str, str], expected: dict[str, str]) -> list[str]:
    """What is wrong with a run with DRA Extender, as messages (none: as expected)."""
    problems = []
    counted = sorted(name for name, package in in_tree.items() if package == run.package)
    for name in counted:
        result = run.leaves.get(name)
        status = result.status if result else "not run"
        if name in expected and status == "pass":
            problems.append(f"{name} now passes: remove it from {EXPECTATIONS.name} ({expected[name]})")
        elif name not in expected and status != "pass":
            tail = failure_excerpt(result) if result else ""
            problems.append(f"{name}: {status} (passes in-tree, not in {EXPECTATIONS.name})\n    {tail}")
    for name, result in sorted(run.own_failures.items()):
        tail = failure_excerpt(result)
        problems.append(f"{name} failed on its own (no sub-test failed)\n    {tail}")
    if run.exit_code != 0 and not any(r.status in ("fail", "none") for r in run.leaves.values()) \
            and not run.own_failures:
        tail = "\n    ".join(run.package_output[-25:])
        problems.append(
            f"package {run.package} exited with {run.exit_code} without a failed test\n    {tail}"
        )
    return problems


# ----- reporting -----


def summary_table(ours: list[PackageRun], in_tree: list[PackageRun]) -> str:
    """Markdown: per package, leaves run, passing in-tree, passing with us among those, and times."""
    by_package = {run.package: run for run in in_tree}
    rows = ["| package | leaf sub-tests | pass in-tree | of those using the scheduler | pass with us "
            "| of those using the scheduler | pass only with us | time in-tree | time with us |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    totals = [0] * 6
    for run in ours:
        base = by_package.get(run.package)
        base_pass = {n for n, r in base.leaves.items() if r.status == "pass"} if base else set()
        ours_pass = {n for n, r in run.leaves.items() if r.status == "pass"}
        uses = {n for n, r in run.leaves.items() if r.uses_scheduler}
        counts = [
            len(run.leaves),
            len(base_pass),
            len(base_pass & uses),
            len(base_pass & ours_pass),
            len(base_pass & ours_pass & uses),
            len(ours_pass - base_pass),
        ]
        totals = [a + b for a, b in zip(totals, counts, strict=True)]
        base_time = f"{base.seconds / 60:.1f} min" if base else "-"
        rows.append(f"| {run.package} | " + " | ".join(map(str, counts))
                    + f" | {base_time} | {run.seconds / 60:.1f} min |")
    rows.append("| total | " + " | ".join(map(str, totals)) + " | | |")
    return "\n".join(rows)


def _save(runs: list[PackageRun], path: Path) -> None:
    path.write_bytes(orjson.dumps([run.to_json() for run in runs], option=orjson.OPT_INDENT_2))


def _load(path: Path) -> list[PackageRun]:
    return [PackageRun.from_json(item) for item in orjson.loads(path.read_bytes())]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="build (if needed) and run packages")
    run.add_argument("--packages", default=",".join(PACKAGES), help="comma-separated (default: all four)")
    run.add_argument("--scheduler", choices=SCHEDULERS, default="extender")
    run.add_argument("--parallel", type=int, default=4, help="-test.parallel (default 4)")
    run.add_argument("--concurrent", action="store_true", help="run the packages at the same time")
    run.add_argument("--run", help="-test.run pattern")
    run.add_argument("--work", type=Path, help="folder for events and logs (default: a new temporary one)")
    run.add_argument("--json", type=Path, help="write the results here")
    run.add_argument("--record-in-tree", action="store_true",
                     help=f"with --scheduler in-tree: rewrite {IN_TREE_PASSING.name} from this run")
    run.add_argument("--extender-flag", action="append", default=[], help="extra `serve` flag (repeatable)")
    table = commands.add_parser("table", help="summary table from saved results")
    table.add_argument("ours", type=Path)
    table.add_argument("in_tree", type=Path)
    args = parser.parse_args()

    if args.command == "table":
        print(summary_table(_load(args.ours), _load(args.in_tree)))
        return 0
    packages = [p.strip() for p in args.packages.split(",") if p.strip()]
    binaries = build(args.scheduler, packages)
    work = args.work or Path(tempfile.mkdtemp(prefix="upstream-integration-"))
    work.mkdir(parents=True, exist_ok=True)
    _log(f"events and logs in {work}")
    how = "at once" if args.concurrent else "in turn"
    _log(f"running {', '.join(packages)} ({args.scheduler}, {how})...")
    started = time.monotonic()
    runs = run_packages(binaries, work, concurrent=args.concurrent, scheduler=args.scheduler,
                        parallel=args.parallel, run=args.run, extra_flags=args.extender_flag)
    _log(f"all done in {time.monotonic() - started:.0f}s")
    if args.json:
        _save(runs, args.json)
    if args.record_in_tree:
        if args.scheduler != "in-tree" or set(packages) != set(PACKAGES) or args.run:
            parser.error("--record-in-tree needs --scheduler in-tree, all four packages and no --run")
        write_in_tree_passing(runs)
    problems: list[str] = []
    if args.scheduler == "extender" and not args.run:
        in_tree, expected = read_in_tree_passing(), read_expectations()
        for result in runs:
            problems += compare(result, in_tree, expected)
        print("\n".join(problems) if problems else "as expected: every counted sub-test passes or is listed")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
