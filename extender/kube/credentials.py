"""Where the API server is and how to authenticate to it, read without the `kubernetes` package.

Importing that package loads its ~850 generated model modules and every API class: about 40 MB of
resident memory that the serve process never uses. The common sources are read here instead:

- in a pod: the service account (KUBERNETES_SERVICE_HOST/PORT, the projected token, re-read as the
  kubelet rotates it, and the cluster CA);
- a kubeconfig (`--kubeconfig`, else every file of $KUBECONFIG merged as kubectl does, else
  ~/.kube/config): server, CA (file or data), insecure-skip-tls-verify, tls-server-name, and a user
  with a token, a token file, a client certificate and key (files or data), or a username and
  password.

A kubeconfig user with an `exec` plugin or an `auth-provider` raises `NeedsKubernetesPackage`: the
caller then loads that kubeconfig with the `kubernetes` package, which runs the plugin and refreshes
what it returns.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class CredentialsError(Exception):
    """The source exists but cannot be used (missing key, unknown context, unreadable file)."""


class NeedsKubernetesPackage(CredentialsError):
    """The kubeconfig's user authenticates through a plugin that only the kubernetes package runs."""


@dataclass(frozen=True)
class Credentials:
    host: str
    ssl_context: ssl.SSLContext
    # The Authorization header value; called again now and then (tokens rotate), so read lazily.
    authorization: Callable[[], str | None] | None = None
    server_hostname: str | None = None
    # The namespace of a NAME given alone, as kubectl takes it: the context's, or the pod's own.
    namespace: str = "default"


def in_cluster(environ: Mapping[str, str] = os.environ, account_dir: Path | None = None) -> Credentials:
    """The pod's service account. The token is read from its file on every call of `authorization`
    (the caller spaces the calls out), so a token the kubelet rotated is picked up."""
    account_dir = account_dir or SERVICE_ACCOUNT_DIR
    host, port = environ.get("KUBERNETES_SERVICE_HOST", ""), environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise CredentialsError("KUBERNETES_SERVICE_HOST/PORT are not set")
    token_file, ca_file = account_dir / "token", account_dir / "ca.crt"
    if not token_file.is_file():
        raise CredentialsError(f"no service account token at {token_file}")
    if not ca_file.is_file() or not ca_file.read_bytes().strip():
        raise CredentialsError(f"no cluster CA at {ca_file}")
    if ":" in host:   # an IPv6 address
        host = f"[{host}]"
    namespace_file = account_dir / "namespace"
    namespace = environ.get("POD_NAMESPACE") or (
        namespace_file.read_text().strip() if namespace_file.is_file() else "")
    return Credentials(f"https://{host}:{port}", ssl.create_default_context(cafile=str(ca_file)),
                       authorization=lambda: _bearer(token_file.read_text().strip()),
                       namespace=namespace or "default")


def kubeconfig_paths(path: str | None, environ: Mapping[str, str] = os.environ) -> list[Path]:
    if path:
        return [Path(path).expanduser()]
    listed = [Path(entry).expanduser() for entry in environ.get("KUBECONFIG", "").split(os.pathsep) if entry]
    return listed or [Path("~/.kube/config").expanduser()]


def from_kubeconfig(path: str | None = None, context: str | None = None,
                    environ: Mapping[str, str] = os.environ) -> Credentials:
    """The credentials of `context` (else the current context) in the kubeconfig."""
    config = _merged(kubeconfig_paths(path, environ))
    name = context or config["current-context"]
    if not name:
        raise CredentialsError("no context given and no current-context set")
    selected = _named(config, "contexts", "context", name, what="context")
    cluster = _named(config, "clusters", "cluster", selected.get("cluster"), what="cluster")
    user = _named(config, "users", "user", selected.get("user"), what="user") if selected.get("user") else {}
    base = config["bases"].get(("clusters", selected.get("cluster")), Path.cwd())
    user_base = config["bases"].get(("users", selected.get("user")), Path.cwd())
    if "exec" in user or "auth-provider" in user:
        raise NeedsKubernetesPackage("the user authenticates through an exec plugin or an auth-provider")
    server = cluster.get("server")
    if not isinstance(server, str) or not server:
        raise CredentialsError(f"cluster {selected.get('cluster')!r} has no server")
    context_ssl = ssl.create_default_context()
    ca = _file_or_data(cluster, "certificate-authority", base)
    if ca is not None:
        context_ssl.load_verify_locations(cadata=ca.decode())
    if cluster.get("insecure-skip-tls-verify"):
        context_ssl.check_hostname = False
        context_ssl.verify_mode = ssl.CERT_NONE
    certificate = _file_or_data(user, "client-certificate", user_base)
    key = _file_or_data(user, "client-key", user_base)
    if (certificate is None) != (key is None):
        raise CredentialsError("the user has a client certificate without a key, or a key without one")
    if certificate is not None and key is not None:
        _load_cert_chain(context_ssl, certificate, key)
    namespace = selected.get("namespace")
    return Credentials(server.rstrip("/"), context_ssl, authorization=_user_authorization(user, user_base),
                       server_hostname=cluster.get("tls-server-name") or None,
                       namespace=namespace if isinstance(namespace, str) and namespace else "default")


def _bearer(token: str) -> str | None:
    return f"Bearer {token}" if token else None


def _user_authorization(user: Mapping[str, Any], base: Path) -> Callable[[], str | None] | None:
    token = user.get("token")
    if isinstance(token, str) and token:
        header = _bearer(token)
        return lambda: header
    token_file = user.get("tokenFile")
    if isinstance(token_file, str) and token_file:
        resolved = base / Path(token_file).expanduser()
        return lambda: _bearer(resolved.read_text().strip())
    username, password = user.get("username"), user.get("password")
    if isinstance(username, str) and username and isinstance(password, str):
        basic = "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()
        return lambda: basic
    return None


def _merged(paths: list[Path]) -> dict[str, Any]:
    """kubectl's merge of several kubeconfig files: the first file to name a cluster, user or context,
    or to set current-context, wins. Relative paths in an entry are relative to its own file."""
    merged: dict[str, Any] = {"current-context": "", "clusters": {}, "contexts": {}, "users": {},
                              "bases": {}}
    read_any = False
    for path in paths:
        try:
            text = path.read_text()
        except FileNotFoundError as err:
            if len(paths) == 1:
                raise CredentialsError(str(err)) from err
            continue
        except OSError as err:
            raise CredentialsError(str(err)) from err
        read_any = True
        try:
            document = yaml.safe_load(text) or {}
        except yaml.YAMLError as err:
            raise CredentialsError(f"{path}: not YAML: {err}") from err
        if not isinstance(document, dict):
            raise CredentialsError(f"{path}: not a kubeconfig (a mapping expected)")
        if not merged["current-context"] and isinstance(document.get("current-context"), str):
            merged["current-context"] = document["current-context"]
        for section in ("clusters", "contexts", "users"):
            for entry in document.get(section) or ():
                name = entry.get("name") if isinstance(entry, dict) else None
                if isinstance(name, str) and name not in merged[section]:
                    merged[section][name] = entry
                    merged["bases"][(section, name)] = path.parent
    if not read_any:
        raise CredentialsError(f"none of {', '.join(map(str, paths))} exists")
    return merged


def _named(config: Mapping[str, Any], section: str, key: str, name: Any, *, what: str) -> dict[str, Any]:
    entry = config[section].get(name) if isinstance(name, str) else None
    if entry is None:
        raise CredentialsError(f"{what} {name!r} not found in the kubeconfig")
    body = entry.get(key)
    if not isinstance(body, dict):
        raise CredentialsError(f"{what} {name!r} has no {key} mapping")
    return body


def _file_or_data(section: Mapping[str, Any], name: str, base: Path) -> bytes | None:
    data = section.get(f"{name}-data")
    if isinstance(data, str) and data:
        try:
            return base64.b64decode(data, validate=True)
        except ValueError as err:
            raise CredentialsError(f"{name}-data is not base64: {err}") from err
    path = section.get(name)
    if isinstance(path, str) and path:
        try:
            return (base / Path(path).expanduser()).read_bytes()
        except OSError as err:
            raise CredentialsError(f"{name}: {err}") from err
    return None


def _load_cert_chain(context: ssl.SSLContext, certificate: bytes, key: bytes) -> None:
    """ssl loads a certificate chain only from files: written to private temporary files, read, and
    removed at once."""
    with tempfile.TemporaryDirectory(prefix="dra-extender-") as directory:
        cert_file, key_file = Path(directory) / "client.crt", Path(directory) / "client.key"
        for target, content in ((cert_file, certificate), (key_file, key)):
            target.touch(mode=0o600)
            target.write_bytes(content)
        try:
            context.load_cert_chain(str(cert_file), str(key_file))
        except ssl.SSLError as err:
            raise CredentialsError(f"client certificate and key: {err}") from err
