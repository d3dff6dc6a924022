"""Reading deploy/ for the tests: kustomization trees, their YAML documents, rendering with kubectl."""

from __future__ import annotations

import argparse
import shutil
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY = REPO_ROOT / "deploy"
NAMESPACE = "dra-extender"
SERVICE_ACCOUNT = "dra-extender"
EXTENDER_CONTAINER = "dra-extender"
OVERLAYS = ("cert-manager", "scheduler-config", "second-scheduler")
COMPONENTS = ("cert-manager", "eviction-controller")


def kustomization_dirs() -> list[Path]:
    return sorted(path.parent for path in DEPLOY.rglob("kustomization.yaml"))


def load_docs(path: Path) -> list[dict[str, Any]]:
    with path.open() as stream:
        return [doc for doc in yaml.safe_load_all(stream) if doc is not None]


def load_one(path: Path) -> dict[str, Any]:
    docs = load_docs(path)
    assert len(docs) == 1, f"{path}: expected one YAML document, found {len(docs)}"
    return docs[0]


def kustomization(directory: Path) -> dict[str, Any]:
    return load_one(directory / "kustomization.yaml")


def referenced_files(directory: Path) -> Iterator[tuple[str, Path]]:
    """(field, path) for every file or directory a kustomization names."""
    spec = kustomization(directory)
    for field in ("resources", "components"):
        for entry in spec.get(field) or []:
            yield field, directory / entry
    for patch in spec.get("patches") or []:
        if "path" in patch:
            yield "patches", directory / patch["path"]
    for generator in spec.get("configMapGenerator") or []:
        for entry in generator.get("files") or []:
            yield "configMapGenerator", directory / entry.split("=", 1)[-1]


def resource_docs(directory: Path) -> list[dict[str, Any]]:
    """The objects a kustomization's own resource files declare (not those of bases it includes)."""
    docs = []
    for field, path in referenced_files(directory):
        if field == "resources" and path.is_file():
            docs.extend(load_docs(path))
    return docs


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    matches = [d for d in docs if d.get("kind") == kind and d.get("metadata", {}).get("name") == name]
    assert len(matches) == 1, f"expected one {kind} {name}, found {len(matches)}"
    return matches[0]


def container(deployment: dict[str, Any], name: str) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    matches = [c for c in containers if c["name"] == name]
    assert len(matches) == 1, f"Deployment {deployment['metadata']['name']}: no container {name}"
    return matches[0]


def json_patch_args(path: Path) -> list[str]:
    """Values a JSON 6902 patch file appends to the first container's args."""
    values = []
    for op in load_one_list(path):
        assert op["op"] == "add" and op["path"] == "/spec/template/spec/containers/0/args/-", (
            f"{path}: only appends to the dra-extender container's args are expected, got {op}"
        )
        values.append(op["value"])
    return values


def load_one_list(path: Path) -> list[dict[str, Any]]:
    with path.open() as stream:
        value = yaml.safe_load(stream)
    assert isinstance(value, list), f"{path}: expected a JSON 6902 patch (a list of operations)"
    return value


@cache
def serve_parser() -> argparse.ArgumentParser:
    """The real `dra-extender serve` argument parser."""
    from extender.cli import build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return subparsers.choices["serve"]


def option_strings(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def flag_name(arg: str) -> str:
    return arg.split("=", 1)[0]


def arg_value(args: list[str], flag: str) -> str:
    values = [a.split("=", 1)[1] for a in args if a.startswith(flag + "=")]
    assert len(values) == 1, f"expected exactly one {flag}=... in {args}"
    return values[0]


# ---- kubectl kustomize --------------------------------------------------------------------------


def find_kubectl() -> str | None:
    """kubectl built for the end-to-end suite if present, else one on PATH."""
    return find_e2e_binary("kubectl") or shutil.which("kubectl")


def find_e2e_binary(name: str) -> str | None:
    e2e_bin = _e2e_bin_dir()
    if e2e_bin is not None and (e2e_bin / name).is_file():
        return str(e2e_bin / name)
    return None


def _e2e_bin_dir() -> Path | None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "build_control_plane_for_deploy", REPO_ROOT / "tests" / "e2e" / "build_control_plane.py"
    )
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        return module.bin_dir()
    except (OSError, SystemExit, AttributeError):
        return None


def render(kubectl: str, directory: Path) -> list[dict[str, Any]]:
    result = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, f"kubectl kustomize {directory} failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc is not None]
