"""Credentials read without the kubernetes package: kubeconfig files as kubectl merges them, the pod's
service account, and the hand-over to the package for exec plugins."""

from __future__ import annotations

import base64
import ssl
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from fakeapi import FakeApiServer
from tls_material import write_ca_and_certs

from extender.kube import credentials
from extender.kube.client import KubeClient

CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"


def kubeconfig(path: Path, *, clusters: list[dict], users: list[dict], contexts: list[dict],
               current: str | None = None) -> Path:
    document: dict = {"apiVersion": "v1", "kind": "Config", "clusters": clusters, "users": users,
                      "contexts": contexts}
    if current is not None:
        document["current-context"] = current
    path.write_text(yaml.safe_dump(document))
    return path


def context(name: str, cluster: str, user: str) -> dict:
    return {"name": name, "context": {"cluster": cluster, "user": user}}


def test_kubeconfig_files_merge_as_kubectl_does(tmp_path: Path) -> None:
    files = write_ca_and_certs(tmp_path)
    first, second = tmp_path / "one", tmp_path / "two"
    first.mkdir()
    second.mkdir()
    (second / "ca.crt").write_bytes(Path(files.ca).read_bytes())
    kubeconfig(first / "config", current="dev",
               clusters=[{"name": "shared", "cluster": {"server": "https://first:6443/"}}],
               users=[{"name": "me", "user": {"token": "first-token"}}],
               contexts=[context("dev", "shared", "me")])
    # A later file neither overrides names nor current-context; a relative CA path is its own file's.
    kubeconfig(second / "config", current="prod",
               clusters=[{"name": "shared", "cluster": {"server": "https://second:6443"}},
                         {"name": "prod", "cluster": {"server": "https://prod:6443",
                                                      "certificate-authority": "ca.crt",
                                                      "tls-server-name": "api.prod"}}],
               users=[{"name": "me", "user": {"token": "second-token"}}],
               contexts=[context("prod", "prod", "me")])
    environ = {"KUBECONFIG": f"{first / 'config'}:{tmp_path / 'missing'}:{second / 'config'}"}
    dev = credentials.from_kubeconfig(environ=environ)
    assert dev.host == "https://first:6443"
    assert dev.authorization is not None and dev.authorization() == "Bearer first-token"
    prod = credentials.from_kubeconfig(context="prod", environ=environ)
    assert prod.host == "https://prod:6443" and prod.server_hostname == "api.prod"
    assert prod.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert prod.ssl_context.get_ca_certs(), "the CA of the second file was loaded"


def test_token_file_is_read_again_and_basic_auth(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("one\n")
    path = kubeconfig(tmp_path / "config", current="a",
                      clusters=[{"name": "c", "cluster": {"server": "https://c",
                                                          "insecure-skip-tls-verify": True}}],
                      users=[{"name": "file", "user": {"tokenFile": "token"}},
                             {"name": "basic", "user": {"username": "ann", "password": "pw"}}],
                      contexts=[context("a", "c", "file"), context("b", "c", "basic")])
    found = credentials.from_kubeconfig(str(path))
    assert found.ssl_context.verify_mode == ssl.CERT_NONE and not found.ssl_context.check_hostname
    assert found.authorization is not None and found.authorization() == "Bearer one"
    (tmp_path / "token").write_text("two")
    assert found.authorization() == "Bearer two"
    basic = credentials.from_kubeconfig(str(path), "b")
    assert basic.authorization is not None
    assert basic.authorization() == "Basic " + base64.b64encode(b"ann:pw").decode()


@pytest.mark.parametrize(("user", "cluster", "wanted"), [
    ({"token": "t"}, {}, "has no server"),
    ({"client-certificate-data": "AAAA"}, {"server": "https://x"}, "without a key"),
    ({"token": "t"}, {"server": "https://x", "certificate-authority-data": "%%%"}, "not base64"),
    ({"token": "t"}, {"server": "https://x", "certificate-authority": "nowhere.crt"}, "nowhere.crt"),
])
def test_unusable_kubeconfig_entries_are_named(tmp_path: Path, user: dict, cluster: dict,
                                                wanted: str) -> None:
    path = kubeconfig(tmp_path / "config", current="a", clusters=[{"name": "c", "cluster": cluster}],
                      users=[{"name": "u", "user": user}], contexts=[context("a", "c", "u")])
    with pytest.raises(credentials.CredentialsError, match=wanted):
        credentials.from_kubeconfig(str(path))


def test_missing_context_cluster_and_file(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "config", clusters=[], users=[], contexts=[context("a", "gone", "u")])
    with pytest.raises(credentials.CredentialsError, match="no context given"):
        credentials.from_kubeconfig(str(path))
    with pytest.raises(credentials.CredentialsError, match="context 'b' not found"):
        credentials.from_kubeconfig(str(path), "b")
    with pytest.raises(credentials.CredentialsError, match="cluster 'gone' not found"):
        credentials.from_kubeconfig(str(path), "a")
    with pytest.raises(credentials.CredentialsError, match="No such file"):
        credentials.from_kubeconfig(str(tmp_path / "absent"))
    (tmp_path / "list").write_text("- 1\n")
    with pytest.raises(credentials.CredentialsError, match="not a kubeconfig"):
        credentials.from_kubeconfig(str(tmp_path / "list"))


def test_in_cluster_needs_the_environment_token_and_ca(tmp_path: Path) -> None:
    with pytest.raises(credentials.CredentialsError, match="KUBERNETES_SERVICE_HOST"):
        credentials.in_cluster({}, tmp_path)
    environ = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(credentials.CredentialsError, match="no service account token"):
        credentials.in_cluster(environ, tmp_path)
    (tmp_path / "token").write_text("tok")
    with pytest.raises(credentials.CredentialsError, match="no cluster CA"):
        credentials.in_cluster(environ, tmp_path)
    (tmp_path / "ca.crt").write_bytes(Path(write_ca_and_certs(tmp_path).ca).read_bytes())
    found = credentials.in_cluster(environ, tmp_path)
    assert found.host == "https://[fd00::1]:443"
    assert found.authorization is not None and found.authorization() == "Bearer tok"


async def test_an_exec_plugin_user_is_loaded_by_the_kubernetes_package(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin.py"
    plugin.write_text(textwrap.dedent("""
        import json
        print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                          "status": {"token": "exec-token"}}))
    """))
    fake = FakeApiServer(token="exec-token")
    url = await fake.start()
    path = kubeconfig(tmp_path / "config", current="a", clusters=[{"name": "c", "cluster": {"server": url}}],
                      users=[{"name": "u", "user": {"exec": {
                          "apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                          "args": [str(plugin)], "interactiveMode": "Never"}}}],
                      contexts=[context("a", "c", "u")])
    with pytest.raises(credentials.NeedsKubernetesPackage):
        credentials.from_kubeconfig(str(path))
    client = await KubeClient.connect(kubeconfig=str(path))
    try:
        assert (await client.list(CLAIMS))["items"] == []
    finally:
        await client.close()
        await fake.stop()


def test_serve_connects_without_importing_the_kubernetes_package(tmp_path: Path) -> None:
    """The package costs about 40 MB of resident memory (issue 17): serve's import of its command and
    a kubeconfig connection must not load it."""
    path = kubeconfig(tmp_path / "config", current="a",
                      clusters=[{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                      users=[{"name": "u", "user": {"token": "t"}}], contexts=[context("a", "c", "u")])
    script = textwrap.dedent(f"""
        import asyncio, sys
        import extender.commands.serve
        from extender.kube.client import KubeClient
        client = asyncio.run(KubeClient.connect(kubeconfig={str(path)!r}))
        assert client.base_url == "https://127.0.0.1:1"
        print(sorted(name for name in sys.modules if name.split(".")[0] == "kubernetes"))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
