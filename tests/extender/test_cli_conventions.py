"""What every `dra-extender` command shares: `-o text|json|yaml` (with `--format` as an alias), exit
codes 0 fits/ok, 1 does not fit or problems, 2 usage/error, examples in each --help, NAME alone meaning
the default namespace or `-n`, and `kubectl dra` as the same program."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import yaml

from extender.cli import build_parser, main

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "cluster"
PRINTING_COMMANDS = ("explain", "simulate", "allocate", "check", "certs", "version")


def _subparsers() -> dict[str, object]:
    parser = build_parser()
    [action] = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    return dict(action.choices)  # type: ignore[attr-defined]


@pytest.mark.parametrize("command", PRINTING_COMMANDS)
def test_every_printing_command_takes_kubectls_output_flag(command: str) -> None:
    sub = _subparsers()[command]
    [output] = [a for a in sub._actions if a.dest == "output"]  # type: ignore[attr-defined]
    assert {"-o", "--output", "--format"} <= set(output.option_strings)
    for form in ("text", "json", "yaml", "jsonpath={.a}"):
        assert output.type(form) == form
    for bad in ("xml", "jsonpath={range .a}", "jsonpath={.a"):
        with pytest.raises(argparse.ArgumentTypeError):
            output.type(bad)


@pytest.mark.parametrize("command", [*PRINTING_COMMANDS, "serve"])
def test_every_help_has_examples_and_the_exit_codes(command: str) -> None:
    text = _subparsers()[command].format_help()  # type: ignore[attr-defined]
    assert "examples:\n  " in text and "exit codes (every command):" in text
    assert f"dra-extender {command}" in text


def test_top_level_help_states_the_exit_codes() -> None:
    assert "2  usage error" in build_parser().format_help()


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["explain", "x", "-o", "xml"])
    assert exited.value.code == 2
    assert main([]) == 2
    capsys.readouterr()


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["explain", "a100-job"], 0),                              # fits node-1
        (["explain", "a100-job", "--node", "node-2"], 1),          # fits no node offered
        (["explain", "nobody"], 2),                                # no such pod
        (["explain", "a100-job", "-n", "team-a"], 2),              # not in that namespace
    ],
)
def test_explain_exit_codes(argv: list[str], code: int, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*argv, "--snapshot", str(EXAMPLES)]) == code
    capsys.readouterr()


def test_explain_of_a_pod_whose_claim_is_missing_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    meta = {"name": "orphan", "namespace": "default", "uid": "u-1"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
           "spec": {"containers": [{"name": "c", "image": "x"}],
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": "nowhere"}]}}
    shutil.copytree(EXAMPLES, tmp_path / "cluster")
    (tmp_path / "cluster" / "orphan.yaml").write_text(yaml.safe_dump(pod))
    assert main(["explain", "orphan", "--snapshot", str(tmp_path / "cluster")]) == 1
    assert 'could not find ResourceClaim "default/nowhere"' in capsys.readouterr().out


@pytest.mark.parametrize("form", ["json", "yaml"])
def test_explain_prints_the_same_document_in_json_and_yaml(
    form: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["explain", "default/a100-job", "--snapshot", str(EXAMPLES), "-o", "json"]) == 0
    as_json = orjson.loads(capsys.readouterr().out)
    assert main(["explain", "a100-job", "--snapshot", str(EXAMPLES), "-o", form]) == 0
    out = capsys.readouterr().out
    assert (orjson.loads(out) if form == "json" else yaml.safe_load(out)) == as_json


def test_explain_names_claims_namespace_slash_name_everywhere(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "a100-job", "--snapshot", str(EXAMPLES)]) == 0
    out = capsys.readouterr().out
    claim_lines = [line for line in out.splitlines() if line.startswith("  claim ")]
    assert claim_lines and all("default/a100-80gb" in line for line in claim_lines), out
    assert main(["explain", "a100-job", "--snapshot", str(EXAMPLES), "-o", "json"]) == 0
    report = orjson.loads(capsys.readouterr().out)
    named = [c["claim"] for c in report["claims"]]
    named += [a["claim"] for node in report["nodes"] for a in node["allocation"]]
    named += [r["claim"] for node in report["nodes"] for r in node["requests"]]
    assert set(named) == {"default/a100-80gb"}


def test_check_prints_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(EXAMPLES), "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["ok"] is True


def test_allocate_takes_a_bare_name_in_the_default_namespace(capsys: pytest.CaptureFixture[str]) -> None:
    allocate = ["allocate", "-f", str(EXAMPLES), "--claim", "a100-80gb"]
    assert main([*allocate, "--node", "node-1", "-o", "json"]) == 0
    [claim] = orjson.loads(capsys.readouterr().out)["claims"]
    assert (claim["namespace"], claim["name"]) == ("default", "a100-80gb")
    assert main([*allocate, "--node", "node-2", "-n", "default"]) == 1
    assert "do not fit" in capsys.readouterr().out


def _kubectl() -> str | None:
    sys.path.insert(0, str(REPO / "tests" / "deploy"))
    from deploy_manifests import find_kubectl

    return find_kubectl()


def test_kubectl_runs_the_installed_plugin(tmp_path: Path) -> None:
    """kubectl's plugin convention: an executable `kubectl-dra` on PATH is `kubectl dra`."""
    plugin = Path(sys.executable).parent / "kubectl-dra"
    assert plugin.is_file(), "kubectl-dra console script not installed (pip install -e .)"
    kubectl = _kubectl()
    env = dict(os.environ, PATH=f"{plugin.parent}{os.pathsep}{os.environ.get('PATH', '')}",
               KUBECONFIG=str(tmp_path / "none"))
    if kubectl is None:  # the plugin itself still answers as `kubectl dra`
        result = subprocess.run([str(plugin), "explain", "--help"], capture_output=True, text=True, env=env,
                                check=False)
        assert result.returncode == 0 and result.stdout.startswith("usage: kubectl dra explain")
        pytest.skip("kubectl is not installed: checked kubectl-dra alone, not kubectl's plugin lookup")
    result = subprocess.run(
        [kubectl, "dra", "explain", "a100-job", "-n", "default", "--snapshot", str(EXAMPLES), "-o", "json"],
        capture_output=True, text=True, env=env, check=False, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert orjson.loads(result.stdout)["pod"] == "default/a100-job"
    assert shutil.which("kubectl-dra", path=env["PATH"]) == str(plugin)
