"""Build every release artifact into dist/ and check each one (`make dist`; CI's release workflow runs
the same). dist/ is emptied first. Nothing is pushed.

- dra_extender-<v>-py3-none-any.whl and dra_extender-<v>.tar.gz (`python -m build`): each is installed
  into a fresh virtualenv, where `dra-extender --version` and `kubectl-dra --version` must print <v>.
- dra-extender-<v>.tgz (`helm package`): chart version and appVersion <v>, `helm lint --strict`, and
  `helm template` runs image tag <v>.
- kubectl-dra-v<v>.tar.gz and krew/dra.yaml: the krew archive (a launcher and the wheel) and the
  manifest rendered from .krew.yaml for it; krew's validate-krew-manifest accepts the manifest, and
  `krew install --manifest --archive` into a scratch KREW_ROOT gives a kubectl-dra printing <v>.
- dra-extender-image-<v>.tar: the Dockerfile built with VERSION=<v> by docker, podman or buildah where
  one works; its `dra-extender --version` (docker, podman) or version label (buildah) must say <v>.
  Without a working builder this step is skipped, saying why.
- completion/bash/dra-extender and completion/zsh/_dra-extender: shell completion generated from the
  CLI's parser (release/completion.py); the bash script must parse (`bash -n`).
- .github/workflows/release.yml passes actionlint.
- SHA256SUMS of the artifacts.

    python release/dist.py [--tag vX.Y.Z]   # --tag: fail unless it names the version being built
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Iterator, Sequence
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
DIST = REPO / "dist"
CHART = REPO / "deploy" / "helm" / "dra-extender"
KREW_TEMPLATE = REPO / ".krew.yaml"
LAUNCHER = REPO / "release" / "krew_launcher.py"
WORKFLOW = REPO / ".github" / "workflows" / "release.yml"
KUBE_VERSION = "1.37.1"
# Installing into a fresh virtualenv downloads the dependencies: minutes on a slow link, never hours.
INSTALL_TIMEOUT_S = 900
IMAGE_TIMEOUT_S = 1800

# The Go tools (helm, krew, actionlint) come from the tests' builder, into the tests' cache.
sys.path[:0] = [str(REPO / "tests" / "deploy"), str(REPO / "tests" / "e2e"), str(REPO / "release")]
from build_control_plane import BuildUnavailable  # noqa: E402
from go_tools import ACTIONLINT, HELM, KREW  # noqa: E402


class CheckFailed(RuntimeError):
    pass


def log(message: str) -> None:
    print(f"[dist] {message}", flush=True)


def run(command: Sequence[str | Path], *, timeout: float = 300, cwd: Path = REPO,
        env: dict[str, str] | None = None) -> str:
    """Run a command; its stdout, or CheckFailed with the end of its output."""
    argv = [str(c) for c in command]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env,
                            check=False)
    if result.returncode != 0:
        raise CheckFailed(f"`{' '.join(argv)}` exited {result.returncode}:\n"
                          f"{(result.stdout + result.stderr)[-3000:]}")
    return result.stdout


def project_version() -> str:
    version: str = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    return version


def expect_version(printed: str, version: str, what: str) -> None:
    if not printed.startswith(f"dra-extender {version} "):
        raise CheckFailed(f"{what} printed {printed.strip()!r}, expected dra-extender {version}")
    log(f"  {what}: {printed.strip()}")


@contextlib.contextmanager
def scratch(prefix: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix=f"dra-extender-{prefix}-") as directory:
        yield Path(directory)


# ---- Python packages ------------------------------------------------------------------------------


def build_python() -> tuple[Path, Path]:
    log("python -m build: sdist and wheel")
    run([sys.executable, "-m", "build", "--outdir", DIST, REPO], timeout=INSTALL_TIMEOUT_S)
    [wheel] = DIST.glob("dra_extender-*.whl")
    [sdist] = DIST.glob("dra_extender-*.tar.gz")
    return wheel, sdist


def check_python_package(artifact: Path, version: str) -> None:
    log(f"installing {artifact.name} into a fresh virtualenv")
    with scratch("venv") as env_dir:
        run([sys.executable, "-m", "venv", env_dir])
        run([env_dir / "bin" / "python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             artifact], timeout=INSTALL_TIMEOUT_S)
        for script in ("dra-extender", "kubectl-dra"):
            expect_version(run([env_dir / "bin" / script, "--version"]), version, f"{script} --version")


# ---- Helm chart -----------------------------------------------------------------------------------


CHART_FILES = ("Chart.yaml", "values.yaml", "values.schema.json", "README.md", "templates/NOTES.txt",
               "templates/tests/readyz.yaml", "files/readyz-check.py")


def package_chart(helm: Path, version: str) -> Path:
    log("helm package")
    run([helm, "package", CHART, "--destination", DIST])
    package = DIST / f"dra-extender-{version}.tgz"
    if not package.is_file():
        raise CheckFailed(f"helm package did not write {package.name}: is Chart.yaml's version {version}?")
    meta = yaml.safe_load(run([helm, "show", "chart", package]))
    if (meta["version"], meta["appVersion"]) != (version, version):
        raise CheckFailed(f"Chart.yaml: version {meta['version']}, appVersion {meta['appVersion']}; "
                          f"pyproject.toml says {version}")
    with tarfile.open(package) as archive:
        names = set(archive.getnames())
    missing = [f for f in CHART_FILES if f"dra-extender/{f}" not in names]
    if missing:
        raise CheckFailed(f"{package.name} lacks {missing} (.helmignore?)")
    for mode in ("second-scheduler", "scheduler-config"):
        run([helm, "lint", "--strict", package, "--set", f"mode={mode}", "--kube-version", KUBE_VERSION])
    rendered = run([helm, "template", "dra-extender", package, "--kube-version", KUBE_VERSION])
    images = set(re.findall(r"image: \"?([^\"\s]+)", rendered))
    if f"dra-extender:{version}" not in images:
        raise CheckFailed(f"the packaged chart runs {sorted(images)}, not dra-extender:{version}")
    log(f"  {package.name}: chart and app version {version}, lint clean, image dra-extender:{version}")
    return package


# ---- krew -----------------------------------------------------------------------------------------


_ADD_URI_AND_SHA = re.compile(r'\{\{\s*addURIAndSha\s+"(?P<uri>[^"]+)"\s+\.TagName\s*\}\}')
_TAG = re.compile(r"\{\{\s*\.TagName\s*\}\}")


def render_krew_manifest(template: str, tag: str, archive: Path) -> str:
    """What krew-release-bot makes of .krew.yaml for `tag`, with `archive`'s sha256."""
    sha256 = hashlib.sha256(archive.read_bytes()).hexdigest()

    def uri_and_sha(match: re.Match[str]) -> str:
        uri = _TAG.sub(tag, match.group("uri"))
        if not uri.endswith("/" + archive.name):
            raise CheckFailed(f".krew.yaml downloads {uri}, but the archive is {archive.name}")
        return f"uri: {uri}\n    sha256: {sha256}"

    text, count = _ADD_URI_AND_SHA.subn(uri_and_sha, template)
    if count != 1:
        raise CheckFailed(f".krew.yaml must call addURIAndSha once, found {count}")
    return _TAG.sub(tag, text)


def krew_archive(wheel: Path, tag: str) -> Path:
    archive = DIST / f"kubectl-dra-{tag}.tar.gz"
    with tarfile.open(archive, "w:gz") as out:
        launcher = tarfile.TarInfo("kubectl-dra")
        data = LAUNCHER.read_bytes()
        launcher.size, launcher.mode, launcher.mtime = len(data), 0o755, int(time.time())
        out.addfile(launcher, io.BytesIO(data))
        out.add(wheel, arcname=wheel.name)
    return archive


def check_krew(manifest: Path, archive: Path, version: str) -> None:
    krew = KREW.ensure_built()
    log(f"validate-krew-manifest {manifest.relative_to(REPO)}")
    run([KREW.path("validate-krew-manifest"), "-manifest", manifest, "-skip-install"])
    with scratch("krew") as root:
        log("krew install --manifest --archive (a scratch KREW_ROOT), then kubectl-dra's first run")
        env = {"KREW_ROOT": str(root), "PATH": "/usr/bin:/bin", "HOME": str(root)}
        run([krew, "install", f"--manifest={manifest}", f"--archive={archive}"], env=env)
        installed = root / "bin" / "kubectl-dra"
        expect_version(run([installed, "--version"], timeout=INSTALL_TIMEOUT_S), version,
                       "kubectl-dra --version (krew)")


# ---- container image ------------------------------------------------------------------------------


def container_builder() -> tuple[str | None, list[str]]:
    """A working builder's path (docker, podman or buildah), or None and why each is not usable."""
    reasons = []
    for tool in ("docker", "podman", "buildah"):
        path = shutil.which(tool)
        if path is None:
            reasons.append(f"{tool} is not installed")
            continue
        result = subprocess.run([path, "info"], capture_output=True, text=True, timeout=60, check=False)
        if result.returncode == 0:
            return path, reasons
        last = (result.stderr.strip() or result.stdout.strip() or "no output").splitlines()[-1]
        reasons.append(f"{tool} is installed but `{tool} info` fails ({last})")
    return None, reasons


def build_image(version: str) -> Path | None:
    builder, reasons = container_builder()
    if builder is None:
        log("image: SKIPPED, no working container builder: " + "; ".join(reasons)
            + ". Install or start one and run `make dist` again to build and check the image.")
        return None
    name = Path(builder).name
    tag = f"dra-extender:{version}"
    image_tar = DIST / f"dra-extender-image-{version}.tar"
    log(f"image: {name} build --build-arg VERSION={version} -t {tag}")
    if name == "buildah":
        run([builder, "build", "--build-arg", f"VERSION={version}", "-t", tag, REPO], timeout=IMAGE_TIMEOUT_S)
        label = run([builder, "inspect", "--format",
                     '{{index .OCIv1.Config.Labels "org.opencontainers.image.version"}}', tag]).strip()
        if label != version:
            raise CheckFailed(f"image label org.opencontainers.image.version is {label!r}, not {version}")
        run([builder, "push", tag, f"oci-archive:{image_tar}"], timeout=IMAGE_TIMEOUT_S)
    else:
        run([builder, "build", "--build-arg", f"VERSION={version}", "-t", tag, REPO], timeout=IMAGE_TIMEOUT_S)
        printed = run([builder, "run", "--rm", "--entrypoint", "dra-extender", tag, "--version"])
        expect_version(printed, version, "dra-extender --version in the image")
        run([builder, "save", "-o", image_tar, tag], timeout=IMAGE_TIMEOUT_S)
    return image_tar


# ---- the release workflow -------------------------------------------------------------------------


def write_completion() -> None:
    import completion

    log("shell completion for bash and zsh")
    bash, _zsh = completion.write(DIST / "completion")
    if shutil.which("bash"):
        run(["bash", "-n", bash])


def lint_workflow() -> None:
    actionlint = ACTIONLINT.ensure_built()
    log(f"actionlint {WORKFLOW.relative_to(REPO)}")
    run([actionlint, "-no-color", WORKFLOW])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tag", help="the release tag (vX.Y.Z); fail unless it matches pyproject.toml")
    args = parser.parse_args(argv)
    version = project_version()
    tag = f"v{version}"
    try:
        if args.tag is not None and args.tag != tag:
            raise CheckFailed(f"tag {args.tag} is not version {version} of pyproject.toml: expected {tag}")
        shutil.rmtree(DIST, ignore_errors=True)
        DIST.mkdir()
        log(f"version {version}")
        wheel, sdist = build_python()
        for artifact in (wheel, sdist):
            check_python_package(artifact, version)
        write_completion()
        package_chart(HELM.ensure_built(), version)
        archive = krew_archive(wheel, tag)
        manifest = DIST / "krew" / "dra.yaml"
        manifest.parent.mkdir()
        manifest.write_text(render_krew_manifest(KREW_TEMPLATE.read_text(), tag, archive))
        check_krew(manifest, archive, version)
        build_image(version)
        lint_workflow()
    except (CheckFailed, BuildUnavailable, RuntimeError, subprocess.TimeoutExpired) as failed:
        log(f"FAILED: {failed}")
        return 1
    artifacts = sorted(p for p in DIST.rglob("*") if p.is_file())
    (DIST / "SHA256SUMS").write_text("".join(
        f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(DIST)}\n" for p in artifacts
    ))
    log("artifacts:")
    for path in [*artifacts, DIST / "SHA256SUMS"]:
        log(f"  {path.stat().st_size:>10,} bytes  dist/{path.relative_to(DIST)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
