"""The command line as kubectl users expect it: -n from the kubeconfig context, -A for lists, a refusal
that ends the command at once and names what is missing, explain reading one pod's objects only,
--request-timeout, -o jsonpath/name/wide (jsonpath checked against kubectl itself where it is
installed), a `version` command, one meaning per flag, and help text on every flag."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from fakeapi import ApiRequest, FakeApiServer

from extender.cli import build_parser, main
from extender.commands import jsonpath
from extender.kube.access import Need, describe, needs_of_path
from extender.kube.objects_io import load_objects

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "cluster"


# ---- a fake API server on its own loop (main() runs asyncio.run itself) ----------------------------

class ThreadedApi:
    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.fake = FakeApiServer()
        self.fake.seed(objects)
        self.requests: list[tuple[str, str]] = []
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.fake.intercept(self._record)
        self.url = self.call(self.fake.start())

    def _record(self, request: ApiRequest) -> None:
        self.requests.append((request.verb, request.resource.plural))

    def call(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(30)

    def close(self) -> None:
        self.call(self.fake.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def _in_namespace(objects: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    """The example cluster with its namespaced objects moved to `namespace`."""
    moved = []
    for raw in objects:
        raw = json.loads(json.dumps(raw))
        if raw["kind"] in ("Pod", "ResourceClaim", "ResourceClaimTemplate"):
            raw["metadata"]["namespace"] = namespace
        moved.append(raw)
    return moved


@pytest.fixture
def api() -> Iterator[ThreadedApi]:
    served = ThreadedApi(_in_namespace(load_objects([EXAMPLES]), "team-a"))
    yield served
    served.close()


def _kubeconfig(tmp_path: Path, url: str, namespace: str | None) -> Path:
    context: dict[str, Any] = {"cluster": "fake", "user": "me"}
    if namespace is not None:
        context["namespace"] = namespace
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": "me", "user": {"token": "t"}}],
        "contexts": [{"name": "fake", "context": context}],
    }))
    return path


def test_a_name_alone_is_in_the_contexts_namespace(api: ThreadedApi, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = str(_kubeconfig(tmp_path, api.url, "team-a"))
    assert main(["explain", "a100-job", "--kubeconfig", kubeconfig, "-o", "json"]) == 0
    assert orjson.loads(capsys.readouterr().out)["pod"] == "team-a/a100-job"
    # -n still wins, as with kubectl
    assert main(["explain", "a100-job", "--kubeconfig", kubeconfig, "-n", "default"]) == 2
    assert "pod default/a100-job not found" in capsys.readouterr().err
    without = str(_kubeconfig(tmp_path, api.url, None))
    assert main(["explain", "a100-job", "--kubeconfig", without]) == 2
    assert "pod default/a100-job not found" in capsys.readouterr().err


def test_explain_reads_only_what_one_pod_needs(api: ThreadedApi, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = str(_kubeconfig(tmp_path, api.url, "team-a"))
    assert main(["explain", "a100-job", "--kubeconfig", kubeconfig]) == 0
    assert "fits 1 of 3 node(s)" in capsys.readouterr().out
    assert ("get", "pods") in api.requests
    assert ("list", "pods") not in api.requests and ("watch", "pods") not in api.requests
    assert not any(verb == "watch" for verb, _ in api.requests)


def test_a_list_of_every_namespace_and_the_forms_of_a_list(api: ThreadedApi, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = str(_kubeconfig(tmp_path, api.url, "default"))
    assert main(["explain", "--kubeconfig", kubeconfig]) == 0
    assert capsys.readouterr().out == "no pending pod uses devices in namespace default\n"
    assert main(["explain", "-A", "--kubeconfig", kubeconfig]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAMESPACE", "NAME", "FITS", "REASON"]
    assert lines[1].split()[:3] == ["team-a", "a100-job", "1/3"]
    assert main(["explain", "-n", "team-a", "--kubeconfig", kubeconfig, "-o", "wide"]) == 0
    wide = capsys.readouterr().out.splitlines()
    assert wide[0].split() == ["NAME", "FITS", "CLAIMS", "NODES", "REASON"]
    assert wide[1].split()[:4] == ["a100-job", "1/3", "team-a/a100-80gb", "node-1"]
    assert main(["explain", "-A", "--kubeconfig", kubeconfig, "-o", "name"]) == 0
    assert "pod/a100-job" in capsys.readouterr().out.splitlines()
    assert main(["explain", "-A", "--kubeconfig", kubeconfig,
                 "-o", "jsonpath={.pods[?(@.fittingNodes<3)].pod}"]) == 0
    assert capsys.readouterr().out == "team-a/a100-job"
    assert main(["explain", "a100-job", "-A"]) == 2
    assert "-A lists pods" in capsys.readouterr().err


def test_a_refusal_ends_the_command_at_once(api: ThreadedApi, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Where the API server does not answer access reviews (this fake), the first 403 of the lists."""
    api.fake.fail_next("list", "resourceslices", status=403, count=100,
                       message='resourceslices.resource.k8s.io is forbidden: User "me" cannot list resource '
                       '"resourceslices" in API group "resource.k8s.io" at the cluster scope')
    started = time.monotonic()
    assert main(["explain", "-A", "--kubeconfig", str(_kubeconfig(tmp_path, api.url, None))]) == 2
    assert time.monotonic() - started < 5
    error = capsys.readouterr().err
    assert error.startswith("error: cannot read the cluster: refused: ResourceSlice: 403"), error
    assert 'cannot list resource "resourceslices" in API group "resource.k8s.io"' in error


def test_request_timeout(api: ThreadedApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async def slow(request: ApiRequest) -> None:
        if request.resource.plural == "resourceslices":
            await asyncio.sleep(5)

    api.fake.intercept(slow)
    started = time.monotonic()
    assert main(["explain", "a100-job", "--kubeconfig", str(_kubeconfig(tmp_path, api.url, "team-a")),
                 "--request-timeout", "300ms"]) == 2
    assert time.monotonic() - started < 4
    assert "cannot read the cluster" in capsys.readouterr().err


def test_progress_on_stderr_when_the_sync_takes_more_than_a_second(
        api: ThreadedApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async def slow(request: ApiRequest) -> None:
        if request.resource.plural == "pods" and request.verb == "list":
            await asyncio.sleep(2.5)

    api.fake.intercept(slow)
    assert main(["explain", "-A", "--kubeconfig", str(_kubeconfig(tmp_path, api.url, None))]) == 0
    captured = capsys.readouterr()
    progress = [line for line in captured.err.splitlines() if "reading the cluster" in line]
    assert progress and progress[0].startswith(
        "dra-extender: reading the cluster (1 s): Node 3, Pod 0 so far")
    assert "a100-job" in captured.out


def test_no_progress_when_the_sync_is_quick(api: ThreadedApi, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "-A", "--kubeconfig", str(_kubeconfig(tmp_path, api.url, None))]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("text", "seconds"), [("0", None), ("1m", 60.0), ("2.5", 2.5), ("90s", 90.0)])
def test_request_timeout_reads_as_kubectls(text: str, seconds: float | None) -> None:
    args = build_parser().parse_args(["explain", "x", "--request-timeout", text])
    assert args.request_timeout == seconds


def test_permissions_are_named_as_rbac_writes_them() -> None:
    needs = [*needs_of_path("/apis/resource.k8s.io/v1/resourceslices", ("list", "watch")),
             *needs_of_path("/api/v1/nodes", ("list",)), Need("get", "pods", "", "team-a")]
    assert describe(needs) == ("cannot list, watch resourceslices.resource.k8s.io at the cluster scope; "
                               "cannot list nodes at the cluster scope; cannot get pods in namespace team-a")


# ---- -o jsonpath -------------------------------------------------------------------------------

POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "p", "namespace": "a", "labels": {"x.y/z": "1", "tier": "web"}},
       "spec": {"containers": [
           {"name": "c1", "image": "i1", "ports": [{"containerPort": 80}, {"containerPort": 443}]},
           {"name": "c2", "image": "i2", "ports": [{"containerPort": 8080}]}]}}
TEMPLATES = [
    "{.metadata.name}",
    "{.spec.containers[*].name}",
    "{.spec.containers[0]}",
    "{.spec.containers[-1].image}",
    "{.spec.containers[0:1].name}",
    "{..containerPort}",
    "{.metadata.labels.x\\.y/z}",
    '{.spec.containers[?(@.name=="c2")].image}',
    "{.spec.containers[?(@.ports)].name}",
    "{.spec.containers[*].ports[?(@.containerPort>100)].containerPort}",
    '{range .spec.containers[*]}{.name}{"\\t"}{.image}{"\\n"}{end}',
    "name: {.metadata.name}, missing: {.metadata.nothing}.",
    "{.metadata.labels}",
]


@pytest.mark.parametrize("template", TEMPLATES)
def test_jsonpath_prints_what_kubectl_prints(template: str, tmp_path: Path) -> None:
    ours = jsonpath.render(template, POD)
    kubectl = _kubectl()
    if kubectl is None:
        pytest.skip("kubectl is not installed: checked ours only")
    source = tmp_path / "pod.json"
    source.write_text(json.dumps(POD))
    result = subprocess.run([kubectl, "label", "--local", "-f", str(source), "checked=yes", "-o",
                             f"jsonpath={template}"], capture_output=True, text=True, check=False,
                            env={"KUBECONFIG": str(tmp_path / "none"), "HOME": str(tmp_path)}, timeout=60)
    assert result.returncode == 0, result.stderr
    assert ours == result.stdout.replace(',"checked":"yes"', "").replace('"checked":"yes",', "")


def test_jsonpath_without_kubectl_reads_the_usual_forms() -> None:
    assert jsonpath.render("{.spec.containers[*].name}", POD) == "c1 c2"
    assert jsonpath.render('{range .spec.containers[*]}{.name}={.image};{end}', POD) == "c1=i1;c2=i2;"
    assert jsonpath.render("{..containerPort}", POD) == "80 443 8080"
    # kubectl prints nothing for a quoted key with dots (write x\.y/z there); ours reads it.
    assert jsonpath.render("{.metadata.labels['x.y/z']}", POD) == "1"
    # kubectl stops with an error at an index past the end; ours prints nothing, as for a missing key.
    assert jsonpath.render("{.spec.containers[5].name}", POD) == ""
    assert jsonpath.render('{.spec.containers[?(@.name=="c2")].ports[0].containerPort}', POD) == "8080"


@pytest.mark.parametrize("bad", ["{.a", "{range .a}", "{end}", "{.a[}", "{.a b}"])
def test_jsonpath_refuses_what_it_cannot_read(bad: str) -> None:
    with pytest.raises(jsonpath.JSONPathError):
        jsonpath.parse(bad)


def _kubectl() -> str | None:
    import sys
    sys.path.insert(0, str(REPO / "tests" / "deploy"))
    from deploy_manifests import find_kubectl

    return find_kubectl()


# ---- version, names of nodes, flags ---------------------------------------------------------------

def test_version_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == 0
    line = capsys.readouterr().out
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == line and line.startswith("dra-extender ")
    assert main(["version", "-o", "json"]) == 0
    info = orjson.loads(capsys.readouterr().out)
    assert set(info) == {"version", "celBackend", "eventLoop"} and info["version"] in line


def test_simulate_names_the_nodes_that_fit(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    [pod] = [raw for raw in load_objects([EXAMPLES]) if raw["kind"] == "Pod"
             and raw["metadata"]["name"] == "a100-job"]
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(pod))
    pod_file = str(tmp_path / "pod.yaml")
    assert main(["simulate", "--snapshot", str(EXAMPLES), "-f", pod_file, "-o", "name"]) == 0
    assert capsys.readouterr().out == "node/node-1\n"
    # The spelling before -f named the pod's file: the command says what it needs now.
    assert main(["simulate", "-f", str(EXAMPLES), "--pod", pod_file]) == 2
    assert "--snapshot DIR" in capsys.readouterr().err


def _parsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {"(top level)": parser, **action.choices}


def test_every_flag_of_every_command_has_help_for_users() -> None:
    missing = []
    for command, parser in _parsers().items():
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            text = action.help or ""
            developer = re.search(r"(?<![\w-])(extender|allocator|common|webhook)\.[a-z_]+", text)
            if len(text) < 12 or text == argparse.SUPPRESS or developer or "TODO" in text:
                missing.append(f"{command} {'/'.join(action.option_strings) or action.dest}: {text!r}")
    assert missing == []


def test_a_flag_means_one_thing_in_every_command() -> None:
    """Each option goes with the same other spelling (-f with --filename, ...) and the same metavar in
    every command; an older spelling may follow as a third."""
    spellings: dict[str, set[tuple[tuple[str, ...], str | None]]] = {}
    for parser in _parsers().values():
        for action in parser._actions:
            names = tuple(action.option_strings)
            canonical = names[:2] if names and len(names[0]) == 2 else names[:1]
            metavar = action.metavar if isinstance(action.metavar, str) else None
            for option in canonical:
                spellings.setdefault(option, set()).add((canonical, metavar))
    assert {option: forms for option, forms in spellings.items() if len(forms) > 1} == {}
    assert spellings["-f"] == {(("-f", "--filename"), "FILE")}
    assert spellings["--snapshot"] == {(("--snapshot",), "DIR")}
    assert spellings["-n"] == {(("-n", "--namespace"), "NAMESPACE")}
    assert spellings["-o"] == {(("-o", "--output"), "FORMAT")}
    assert spellings["-A"] == {(("-A", "--all-namespaces"), None)}


def test_every_parser_parses_its_own_examples() -> None:
    """The examples in each --help are commands this parser accepts."""
    for command, parser in _parsers().items():
        if command == "(top level)":
            continue
        epilog = parser.epilog or ""
        for line in epilog.split("examples:\n", 1)[-1].split("\n\n", 1)[0].splitlines():
            words = line.split("#", 1)[0].split("|")[-1].split()
            if not words or words[0] not in ("dra-extender", "kubectl"):
                continue
            argv = words[2:] if words[0] == "kubectl" else words[1:]
            argv = [word.strip("'") for word in argv]
            assert build_parser().parse_args(argv).command == command, line
