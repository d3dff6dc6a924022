"""The CLI end to end: `serve` as a real process (banner, curl-able verbs, SIGTERM), explain, simulate."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yaml

from allocator import FeatureGates
from extender import tuning, wiring
from extender.cli import build_parser, main
from extender.flags import serve_options
from extender.kube.objects_io import load_objects

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "cluster"


def start_serve(*extra: str) -> tuple[subprocess.Popen[str], list[str]]:
    command = [
        sys.executable,
        "-m",
        "extender.cli",
        "serve",
        "--snapshot",
        str(EXAMPLES),
        "--extender-port",
        "0",
        "--debug-port",
        "0",
        *extra,
    ]
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: list[str] = []
    deadline = time.monotonic() + 30
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if "/debug/explain?pod=" in line and line.lstrip().startswith("curl"):
            return process, lines
    process.kill()
    raise AssertionError(
        f"serve printed no banner: {lines} {process.stderr.read() if process.stderr else ''}"
    )


def run_banner_curl(line: str) -> str:
    """Run one printed curl command line the way a user pasting it would."""
    return subprocess.run(
        shlex.split(line.strip()), capture_output=True, text=True, check=True, timeout=30
    ).stdout


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_serve_prints_working_curl_commands_and_stops_on_sigterm() -> None:
    process, lines = start_serve("--scoring", "spread", "--log-format", "json")
    try:
        assert re.match(r"dra-extender: extender verbs at http://127\.0\.0\.1:\d+/scheduler/", lines[0])
        filter_line = next(line for line in lines if "/scheduler/filter" in line and "curl" in line)
        explain_line = next(line for line in lines if "/debug/explain?pod=" in line and "curl" in line)
        result = orjson.loads(run_banner_curl(filter_line))
        assert result["Error"] == "" and isinstance(result["NodeNames"], list) and result["NodeNames"]
        assert run_banner_curl(explain_line).startswith("pod default/")
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=20)
    assert process.returncode == 0
    assert any(
        orjson.loads(line).get("msg") == "shutting down"
        for line in stderr.splitlines()
        if line.startswith("{")
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["serve", "--snapshot", "x", "--kubeconfig", "k"], "--snapshot cannot be combined"),
        (["serve", "--snapshot", "x", "--extender-tls-cert-file", "c"], "go together"),
        (["serve", "--snapshot", "x", "--feature-gates", "NoSuchGate=true"], "--feature-gates"),
        (["serve", "--snapshot", "x", "--extender-client-ca-file", "ca.crt"], "plain HTTP"),
        (["serve", "--snapshot", "x", "--tls-cert-file", "c"], "--tls-cert-file and --tls-private-key"),
        (["serve", "--snapshot", "x", "--tls-private-key-file", "k"], "--tls-cert-file and --tls-"),
        (["explain", "a/b/c", "--snapshot", "x"], "NAME or NAMESPACE/NAME"),
        (["explain", "a/b", "-n", "c", "--snapshot", "x"], "names namespace 'a'"),
        (["explain", "a100-job", "--snapshot", "no-such-dir"], "cannot read the cluster"),
    ],
)
def test_bad_flags_exit_2_with_a_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_serve_refuses_an_unknown_cel_backend(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DRA_EXTENDER_CEL_BACKEND", "bogus")
    assert main(["serve", "--snapshot", str(EXAMPLES), "--extender-port", "0", "--debug-port", "0"]) == 2
    assert "DRA_EXTENDER_CEL_BACKEND" in capsys.readouterr().err


def test_version_names_an_unknown_cel_backend_without_a_traceback() -> None:
    result = subprocess.run([sys.executable, "-m", "extender.cli", "--version"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60,
                            env={**os.environ, "DRA_EXTENDER_CEL_BACKEND": "bogus"})
    assert result.returncode == 2
    assert "DRA_EXTENDER_CEL_BACKEND" in result.stderr and "bogus" in result.stderr
    assert "Traceback" not in result.stderr


def test_serve_reports_a_snapshot_it_cannot_read(tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text("kind: [unclosed\n")
    assert main(["serve", "--snapshot", str(tmp_path), "--extender-port", "0", "--debug-port", "0"]) == 2


def test_explain_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "default/a100-job", "--snapshot", str(EXAMPLES)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("pod default/a100-job: fits 1 of 3 node(s)")
    assert "rejected: request selector" in out
    assert (
        main(
            [
                "explain",
                "default/a100-job",
                "--snapshot",
                str(EXAMPLES),
                "--node",
                "node-1",
                "--format",
                "json",
            ]
        )
        == 0
    )
    report = orjson.loads(capsys.readouterr().out)
    assert [node["node"] for node in report["nodes"]] == ["node-1"] and report["nodes"][0]["fits"]
    assert main(["explain", "default/nobody", "--snapshot", str(EXAMPLES)]) == 2
    assert "pod default/nobody not found" in capsys.readouterr().err


def test_simulate_prints_the_node_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pods = [doc for doc in yaml.safe_load_all((EXAMPLES / "pods.yaml").read_text()) if doc]
    pod = next(doc for doc in pods if doc["metadata"]["name"] == "a100-job")
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(pod))
    assert main(["simulate", "--snapshot", str(EXAMPLES), "-f", str(tmp_path / "pod.yaml")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "pod default/a100-job: fits 1 of 3 node(s)"
    assert lines[1].split() == ["NODE", "FITS", "SCORE", "REASON"]
    assert lines[2].split()[:2] == ["node-1", "yes"]
    assert all(" no " in line and "request gpu: needs 1 device, 0 match" in line for line in lines[3:])

    # A claim given next to the pod replaces the snapshot's claim of the same name.
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "a100-80gb", "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "count": 20}}]
            }
        },
    }
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump_all([pod, claim]))
    assert (
        main(["simulate", "--snapshot", str(EXAMPLES), "--pod", str(tmp_path / "pod.yaml"), "-ojson"]) == 1
    )
    rows = orjson.loads(capsys.readouterr().out)["nodes"]
    assert not any(row["fits"] for row in rows) and all("needs 20 devices" in row["reason"] for row in rows)

    assert main(["simulate", "--snapshot", str(EXAMPLES), "-f", str(EXAMPLES / "pods.yaml")]) == 2
    assert "exactly one Pod" in capsys.readouterr().err


def write_kubeconfig(path: Path, server_url: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "fake",
                "clusters": [{"name": "fake", "cluster": {"server": server_url}}],
                "users": [{"name": "tester", "user": {"token": "secret"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester"}}],
            }
        )
    )
    return path


async def read_banner(task: asyncio.Task[int], capsys: pytest.CaptureFixture[str]) -> str:
    """What `serve` printed up to its explain line (the banner's last). The deadline only bounds a hang."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    out = ""
    while not any(line.lstrip().startswith("curl") and "/debug/explain?pod=" in line
                  for line in out.splitlines()):
        assert not task.done() and loop.time() < deadline, f"serve printed no banner: {out!r}"
        await asyncio.sleep(0.01)
        out += capsys.readouterr().out
    return out


async def test_serve_against_an_api_server_via_kubeconfig(
    fake_api: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from extender.commands import serve as serve_command

    monkeypatch.setattr(tuning, "tune_gc_after_sync", lambda: None)  # keep pytest's own GC as it is
    fake_api.seed(load_objects([EXAMPLES]))
    # The Pod list is answered only once the ports are open, so the cache is sure to sync after that.
    ports_open = asyncio.Event()
    ready_when_printed: list[bool] = []

    class Server(wiring.ExtenderServer):
        async def start(self, *args: Any, **kwargs: Any) -> None:
            await super().start(*args, **kwargs)
            ports_open.set()

    def banner(server: Any, cache: Any, pod: Any, **options: Any) -> str:
        ready_when_printed.append(cache.ready)
        return usage_banner(server, cache, pod, **options)

    async def hold_pod_list(request: Any) -> None:
        if request.verb == "list" and request.resource.plural == "pods":
            await ports_open.wait()

    usage_banner = serve_command.usage_banner
    monkeypatch.setattr(wiring, "ExtenderServer", Server)
    monkeypatch.setattr(serve_command, "usage_banner", banner)
    fake_api.intercept(hold_pod_list)
    args = build_parser().parse_args(
        [
            "serve",
            "--kubeconfig",
            str(write_kubeconfig(tmp_path / "kubeconfig", fake_api.url)),
            "--context",
            "fake",
            "--extender-port",
            "0",
            "--debug-port",
            "0",
            "--controllers",
            "taint-eviction,driver-loss",
            "--requeue-claim",
            "dra-extender/requeue",
        ]
    )
    stop = asyncio.Event()
    task = asyncio.create_task(serve_command.serve(serve_options(args), stop))
    try:
        out = await read_banner(task, capsys)
        # Printed once, after the sync: it names a pending pod with claims and the cluster's nodes.
        assert ready_when_printed == [True]
        assert "try filter for pod default/" in out
        debug = re.search(r"debug at (http://[0-9.:]+)/debug/explain", out).group(1)
        extender = re.search(r"extender verbs at (http://\S+/scheduler)/", out).group(1)
        filter_line = next(line for line in out.splitlines() if "/scheduler/filter" in line)
        printed = orjson.loads(shlex.split(filter_line)[-1])
        assert printed["NodeNames"] == ["node-1", "node-2", "node-3"]
        async with aiohttp.ClientSession() as session:
            async with session.get(debug + "/readyz") as response:
                assert response.status == 200
            pod = fake_api.get_object("Pod", "a100-job", "default")
            body = orjson.dumps({"Pod": pod, "NodeNames": ["node-1", "node-2", "node-3"], "Nodes": None})
            async with session.post(extender + "/filter", data=body,
                                    headers={"Content-Type": "application/json"}) as response:
                assert (await response.json())["NodeNames"] == ["node-1"]
            # No node left: the answer in upstream's words, our explanation as a pod Event, and the pod
            # counted as waiting for devices.
            body = orjson.dumps({"Pod": pod, "NodeNames": ["node-2", "node-3"], "Nodes": None})
            async with session.post(extender + "/filter", data=body,
                                    headers={"Content-Type": "application/json"}) as response:
                assert set((await response.json())["FailedAndUnresolvableNodes"].values()) == {
                    "cannot allocate all claims"}
            async with session.get(debug + "/debug/state") as response:
                state = await response.json()
                assert state["watch"]["ready"] is True and "ResourceClaim" in state["watch"]["kinds"]
                assert state["controllers"]["controllers"] == ["taint-eviction", "driver-loss"]
                assert state["explanations"] == {"written": 1, "rateLimited": 0}
                assert state["requeue"]["claim"] == "dra-extender/requeue"
                assert state["requeue"]["waitingPods"] == 1
        for _ in range(500):
            if fake_api.objects("Event"):
                break
            await asyncio.sleep(0.01)
        [event] = fake_api.objects("Event")
        assert event["reason"] == "DRAExplanation" and event["involvedObject"]["name"] == "a100-job"
    finally:
        stop.set()
        assert await asyncio.wait_for(task, 30) == 0


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
async def test_serve_without_pods_prints_a_curl_template_that_works_once_filled_in(
    fake_api: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from extender.commands import serve as serve_command

    monkeypatch.setattr(tuning, "tune_gc_after_sync", lambda: None)
    objects = load_objects([EXAMPLES])
    fake_api.seed([obj for obj in objects if obj["kind"] != "Pod"])
    pod = next(obj for obj in objects if obj["kind"] == "Pod" and obj["metadata"]["name"] == "a100-job")
    # A kubectl that answers exactly the command the template runs.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "pod.json").write_bytes(orjson.dumps(pod))
    kubectl = bin_dir / "kubectl"
    expected = "get pod -n default a100-job -o json"
    kubectl.write_text(f'#!/bin/sh\n[ "$*" = "{expected}" ] || exit 3\ncat {tmp_path / "pod.json"}\n')
    kubectl.chmod(0o755)
    args = build_parser().parse_args(
        [
            "serve",
            "--kubeconfig",
            str(write_kubeconfig(tmp_path / "kubeconfig", fake_api.url)),
            "--extender-port",
            "0",
            "--debug-port",
            "0",
        ]
    )
    stop = asyncio.Event()
    task = asyncio.create_task(serve_command.serve(serve_options(args), stop))
    try:
        out = await read_banner(task, capsys)
        assert "no pending pod with resource claims yet" in out
        lines = out.splitlines()
        filter_line = next(line for line in lines if "/scheduler/filter" in line).strip()
        explain_line = next(line for line in lines if "/debug/explain?pod=NAMESPACE/NAME" in line)
        assert explain_line.strip().startswith("curl -s 'http://")
        filled = filter_line.replace("NAMESPACE", "default").replace("NAME", "a100-job")
        curl = await asyncio.create_subprocess_exec(
            "bash", "-c", filled, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
        )
        stdout, stderr = await asyncio.wait_for(curl.communicate(), 30)
        assert curl.returncode == 0, stderr
        result = orjson.loads(stdout)
        assert result["Error"] == "" and result["NodeNames"] == ["node-1"]
    finally:
        stop.set()
        assert await asyncio.wait_for(task, 30) == 0


def test_timeout_flags_reach_the_scheduler() -> None:
    from extender.flags import scheduler_options
    from extender.plugin.scheduling import DEFAULT_FILTER_TIMEOUT_S, DEFAULT_NODE_TIMEOUT_S
    from extender.state.cache import ClusterCache
    from extender.wiring import Cluster, build_scheduler

    cluster = Cluster(ClusterCache.from_objects(load_objects([EXAMPLES]), FeatureGates()))
    parser = build_parser()
    defaults = build_scheduler(cluster, scheduler_options(parser.parse_args(["serve", "--snapshot",
                                                                            str(EXAMPLES)])))
    assert (defaults.node_deadline_s, defaults.filter_deadline_s) == (DEFAULT_NODE_TIMEOUT_S,
                                                                     DEFAULT_FILTER_TIMEOUT_S)
    args = parser.parse_args(["serve", "--snapshot", str(EXAMPLES), "--node-timeout", "0.25",
                              "--filter-timeout", "2.5s"])
    scheduler = build_scheduler(cluster, scheduler_options(args))
    assert (scheduler.node_deadline_s, scheduler.filter_deadline_s) == (0.25, 2.5)


@pytest.mark.parametrize("flag", ["--filter-timeout", "--idle-timeout"])
@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", "inf"])
def test_durations_must_be_finite_and_positive(flag: str, value: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["serve", "--snapshot", "x", flag, value])
    assert exit_info.value.code == 2 and flag in capsys.readouterr().err


def test_every_duration_flag_takes_go_durations_and_plain_seconds() -> None:
    parser = build_parser()
    args = parser.parse_args(["serve", "--snapshot", "x", "--hold-timeout", "5m",
                              "--driver-loss-grace-period", "5m", "--idle-timeout", "1m30s",
                              "--node-timeout", "250ms", "--filter-timeout", "3"])
    assert (args.hold_timeout, args.driver_loss_grace_period, args.idle_timeout) == (300.0, 300.0, 90.0)
    assert (args.node_timeout, args.filter_timeout) == (0.25, 3.0)


def test_banner_of_a_large_cluster_names_a_few_nodes_and_says_how_to_ask_about_more() -> None:
    from types import SimpleNamespace

    from extender.commands.serve import BANNER_NODES, example_pod, usage_banner
    from extender.state.cache import ClusterCache

    example = [obj for obj in load_objects([Path(__file__).resolve().parents[2] / "examples" / "cluster"])
               if obj["kind"] != "Node"]
    nodes = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"node-{index:04d}"}}
             for index in range(5000)]
    cache = ClusterCache.from_objects(example + nodes, FeatureGates())
    server = SimpleNamespace(urls={"extender": "http://127.0.0.1:8888/scheduler",
                                   "debug": "http://127.0.0.1:8889"})
    banner = usage_banner(server, cache, example_pod(cache.valid_objects("Pod")))  # type: ignore[arg-type]
    assert len(banner) < 10_000
    filter_line = next(line for line in banner.splitlines() if "/scheduler/filter" in line)
    assert orjson.loads(shlex.split(filter_line)[-1])["NodeNames"] == ["node-0000", "node-0001", "node-0002"]
    assert f"asks about {BANNER_NODES} of the 5000 nodes" in banner and "-d @FILE" in banner


async def test_the_banner_finds_its_example_pod_a_slice_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    from extender.commands import serve as serve_command
    from extender.state.cache import ClusterCache

    def pod(namespace: str, name: str, node: str = "") -> dict[str, Any]:
        claims = [{"name": "gpu", "resourceClaimName": "claim"}]
        spec = {"nodeName": node, "containers": [{"name": "c", "image": "i"}], "resourceClaims": claims}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
                "spec": spec}

    pods = [pod("b", f"p-{index}") for index in range(7)]
    pods += [pod("a", "bound", node="node-1"), pod("a-b", "x"), pod("a", "z"), pod("a", "y")]
    cache = ClusterCache.from_objects(pods, FeatureGates())
    steps = 0
    real_sleep = asyncio.sleep

    async def counted_sleep(delay: float) -> None:
        nonlocal steps
        steps += 1
        await real_sleep(delay)

    monkeypatch.setattr(serve_command, "BANNER_PODS_PER_STEP", 3)
    monkeypatch.setattr(serve_command.asyncio, "sleep", counted_sleep)
    found = await serve_command.find_example_pod(cache)
    assert found is not None and (found["metadata"]["namespace"], found["metadata"]["name"]) == ("a", "y")
    assert found == serve_command.example_pod(cache.valid_objects("Pod")) and steps == 4
    assert await serve_command.find_example_pod(ClusterCache.from_objects([], FeatureGates())) is None


async def test_the_collector_is_off_while_the_cache_syncs_and_for_at_most_the_pause(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import gc


    class Watcher:
        def __init__(self) -> None:
            self.synced = asyncio.Event()

        async def wait_ready(self, timeout_s: float | None = None) -> bool:
            try:
                await asyncio.wait_for(self.synced.wait(), timeout_s)
            except TimeoutError:
                return False
            return True

    tuned: list[bool] = []
    monkeypatch.setattr(tuning, "tune_gc_after_sync", lambda: tuned.append(gc.isenabled()))
    assert gc.isenabled()
    watcher = Watcher()
    task = asyncio.create_task(tuning._tune_gc_when_ready(watcher))
    await asyncio.sleep(0.01)
    assert not gc.isenabled()
    watcher.synced.set()
    await task
    assert gc.isenabled() and tuned == [False]   # tuned before the collector is back on

    monkeypatch.setattr(tuning, "SYNC_GC_PAUSE_S", 0.01)   # an API server that never answers
    never = Watcher()
    task = asyncio.create_task(tuning._tune_gc_when_ready(never))
    await asyncio.sleep(0.1)
    assert gc.isenabled() and not task.done()
    task.cancel()


async def test_after_the_sync_the_warmed_node_views_are_frozen_too(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    steps: list[str] = []

    async def warm(cache: Any, filter_cache: Any) -> None:
        steps.append(f"warm, collector on: {gc.isenabled()}")

    monkeypatch.setattr(tuning, "tune_gc_after_sync", lambda: steps.append("tune"))
    monkeypatch.setattr(tuning, "warm_node_views", warm)
    monkeypatch.setattr(gc, "freeze", lambda: steps.append("freeze"))
    gc.enable()
    await tuning.after_sync(None, None)
    assert steps == ["tune", "warm, collector on: False", "freeze"] and gc.isenabled()


async def test_the_node_views_are_warmed_once_the_fence_is_done(monkeypatch: pytest.MonkeyPatch) -> None:
    steps: list[str] = []
    fenced = False

    async def warm(cache: Any, filter_cache: Any) -> None:
        steps.append(f"warm, fenced: {fenced}")

    monkeypatch.setattr(tuning, "tune_gc_after_sync", lambda: None)
    monkeypatch.setattr(tuning, "warm_node_views", warm)
    task = asyncio.create_task(tuning.after_sync(None, None, fenced=lambda: fenced))
    await asyncio.sleep(0.2)
    assert steps == [] and not task.done()
    fenced = True
    await asyncio.wait_for(task, 5)
    assert steps == ["warm, fenced: True"]
    monkeypatch.setattr(tuning, "FENCE_WAIT_S", 0.05)   # a standby: its term never begins
    await asyncio.wait_for(tuning.after_sync(None, None, fenced=lambda: False), 5)
    assert steps[-1] == "warm, fenced: True" and len(steps) == 2


async def test_node_views_warmed_after_the_sync_are_the_ones_filters_use(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from allocator import inventory as inventory_module
    from extender.plugin.filtercache import FilterCache
    from extender.state.assume import AssumeCache
    from extender.state.cache import ClusterCache

    built: list[str] = []
    gather = inventory_module.gather_pools

    def counting_gather(node: Any, *args: Any) -> Any:
        built.append(node.name)
        return gather(node, *args)

    monkeypatch.setattr(inventory_module, "gather_pools", counting_gather)
    monkeypatch.setattr(tuning, "WARM_BATCH", 2)   # several turns of the event loop
    example = Path(__file__).resolve().parents[2] / "examples" / "cluster"
    cache = ClusterCache.from_objects(load_objects([example]), FeatureGates())
    filter_cache = FilterCache(cache, AssumeCache())
    warmed: list[str] = []
    monkeypatch.setattr(filter_cache, "warm", lambda node: warmed.append(node.name))
    await tuning.warm_node_views(cache, filter_cache)
    assert sorted(built) == sorted(warmed) == cache.node_names() == ["node-1", "node-2", "node-3"]
    for name in cache.node_names():
        cache.inventory.node_pools(cache.node(name), cache.features)
    assert len(built) == 3
