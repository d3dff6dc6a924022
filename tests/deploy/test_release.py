"""What `make dist` builds agrees on one version, and its inputs are well-formed: the krew manifest
template renders to a manifest krew accepts, the release workflow publishes what release/dist.py
writes. `make dist` itself builds and checks the artifacts (it installs packages from PyPI, so it is not
part of the test suite)."""

from __future__ import annotations

import hashlib
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_manifests import DEPLOY, REPO_ROOT, find, load_docs
from go_tools import ACTIONLINT, KREW

sys.path.insert(0, str(REPO_ROOT / "release"))
import dist

VERSION = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
TAG = f"v{VERSION}"


def test_one_version_everywhere() -> None:
    chart = yaml.safe_load((DEPLOY / "helm" / "dra-extender" / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (VERSION, VERSION)
    deployment = find(load_docs(DEPLOY / "base" / "deployment.yaml"), "Deployment", "dra-extender")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == f"dra-extender:{VERSION}"
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    assert re.findall(r"^ARG VERSION=(\S+)$", dockerfile, re.MULTILINE) == [VERSION]
    assert importlib.metadata.version("dra-extender") == VERSION, "reinstall: `make .venv/.installed`"
    from extender.cli import version_text

    assert version_text().startswith(f"dra-extender {VERSION} ")


def test_changelog_has_a_section_for_the_version() -> None:
    headings = re.findall(r"^## \[([^]]+)\]", (REPO_ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert headings[0] == "Unreleased"
    assert headings[1] == VERSION, "the newest released section must be the version being built"


@pytest.fixture
def krew_manifest(tmp_path: Path) -> tuple[Path, Path, dict[str, Any]]:
    archive = tmp_path / f"kubectl-dra-{TAG}.tar.gz"
    archive.write_bytes(b"not really an archive")
    manifest = tmp_path / "dra.yaml"
    manifest.write_text(dist.render_krew_manifest((REPO_ROOT / ".krew.yaml").read_text(), TAG, archive))
    return manifest, archive, yaml.safe_load(manifest.read_text())


def test_krew_template_renders_the_manifest_of_the_archive(krew_manifest: tuple[Path, Path, dict]) -> None:
    _, archive, manifest = krew_manifest
    assert manifest["metadata"]["name"] == "dra"
    assert manifest["spec"]["version"] == TAG
    [platform] = manifest["spec"]["platforms"]
    assert platform["uri"].endswith(f"/releases/download/{TAG}/{archive.name}")
    assert platform["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert platform["bin"] == "kubectl-dra"
    assert {f["from"] for f in platform["files"]} == {"kubectl-dra", "dra_extender-*.whl"}


def test_krew_template_must_name_the_archive(tmp_path: Path) -> None:
    archive = tmp_path / "something-else.tar.gz"
    archive.write_bytes(b"")
    with pytest.raises(dist.CheckFailed, match="archive is something-else"):
        dist.render_krew_manifest((REPO_ROOT / ".krew.yaml").read_text(), TAG, archive)


def test_krews_validator_accepts_the_manifest(krew_manifest: tuple[Path, Path, dict]) -> None:
    if not KREW.is_built():
        pytest.skip("krew's validator is not built: `python tests/deploy/go_tools.py krew` (make dist does)")
    path, _, _ = krew_manifest
    validator = str(KREW.path("validate-krew-manifest"))
    result = subprocess.run([validator, "-manifest", str(path), "-skip-install"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr


def test_release_workflow_builds_with_make_dist_and_publishes_its_artifacts() -> None:
    workflow = yaml.safe_load(dist.WORKFLOW.read_text())
    # PyYAML reads the key `on` as True.
    assert workflow[True]["push"]["tags"] == ["v[0-9]+.[0-9]+.[0-9]+"]
    jobs = workflow["jobs"]
    assert jobs["dist"]["needs"] == "test" and jobs["publish"]["needs"] == "dist"
    assert {"run": "make test"} in jobs["test"]["steps"]
    assert {"run": 'make dist TAG="${GITHUB_REF_NAME}"'} in jobs["dist"]["steps"]
    [release] = [s for s in jobs["publish"]["steps"] if s.get("uses", "").startswith("softprops/")]
    patterns = release["with"]["files"].split()
    written = [f"dra_extender-{VERSION}-py3-none-any.whl", f"dra_extender-{VERSION}.tar.gz",
               f"dra-extender-{VERSION}.tgz", f"kubectl-dra-{TAG}.tar.gz", "krew/dra.yaml", "SHA256SUMS"]
    for name in written:
        assert any(Path("dist", name).match(pattern) for pattern in patterns), f"{name} is not published"
    scripts = "\n".join(s.get("run", "") for s in jobs["publish"]["steps"])
    assert "dist/dra-extender-image-${VERSION}.tar" in scripts
    assert "dist/dra-extender-${VERSION}.tgz" in scripts


def test_release_workflow_passes_actionlint() -> None:
    if not ACTIONLINT.is_built():
        pytest.skip("actionlint is not built: `python tests/deploy/go_tools.py actionlint` (make dist does)")
    result = subprocess.run([str(ACTIONLINT.path()), "-no-color", str(dist.WORKFLOW)],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dist_refuses_a_tag_that_is_not_the_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert dist.main(["--tag", "v9.9.9"]) == 1
    expected = f"tag v9.9.9 is not version {VERSION} of pyproject.toml: expected {TAG}"
    assert expected in capsys.readouterr().out
