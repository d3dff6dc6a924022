"""Both deploy modes are closed by default, as kustomize and the chart render them. scheduler-config: the
verbs answer only a client certificate of the serving CA, which cert-manager (or the chart's self-signed
set) issues to kube-scheduler, whose configuration presents it. second-scheduler: the verbs listen on
loopback. The rendered container args are then run as `serve` runs them (extender.wiring.App): a client
without the certificate gets no answer, and the network reaches no verb."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import re
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import ExtendedKeyUsageOID
from deploy_manifests import (
    DEPLOY,
    EXTENDER_CONTAINER,
    REPO_ROOT,
    container,
    find,
    find_kubectl,
    render,
    serve_parser,
)
from network_probe import own_address, port_of
from test_helm_chart import helm, helm_template  # noqa: F401 (helm is a fixture)

from common.addresses import is_loopback
from extender.flags import serve_options
from extender.options import ServeOptions, SourceOptions
from extender.wiring import App
from webhook import certs

KUBECTL = find_kubectl()
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl (for `kubectl kustomize`) is not installed")
CLIENT_SECRET = "dra-extender-kube-scheduler-client"
EXAMPLES = REPO_ROOT / "examples" / "cluster"
FILTER = (REPO_ROOT / "tests" / "extender" / "payloads" / "filter_pod_without_claims.json").read_bytes()


def overlay(name: str) -> list[dict[str, Any]]:
    assert KUBECTL is not None
    return render(KUBECTL, DEPLOY / "overlays" / name)


def extender_args(docs: list[dict[str, Any]]) -> list[str]:
    return list(container(find(docs, "Deployment", "dra-extender"), EXTENDER_CONTAINER)["args"])


def served(args: list[str]) -> ServeOptions:
    """What `serve` makes of the args: it would refuse to start here (OptionsError) if they left it open."""
    return serve_options(serve_parser().parse_args(args))


def config_map(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """The one file of ConfigMap `name` (kustomize's generators add a hash to the name), parsed."""
    [found] = [d for d in docs if d["kind"] == "ConfigMap"
               and re.fullmatch(rf"{name}(-[a-z0-9]{{10}})?", d["metadata"]["name"])]
    [text] = found["data"].values()
    loaded: dict[str, Any] = yaml.safe_load(text)
    return loaded


def tls_secret_mount(docs: list[dict[str, Any]]) -> tuple[str, str]:
    """(mount path, Secret name) of the extender's `tls` volume."""
    pod = find(docs, "Deployment", "dra-extender")["spec"]["template"]["spec"]
    mount = {m["name"]: m["mountPath"] for m in container(find(docs, "Deployment", "dra-extender"),
                                                            EXTENDER_CONTAINER)["volumeMounts"]}["tls"]
    secret = {v["name"]: v for v in pod["volumes"]}["tls"]["secret"]["secretName"]
    return mount, secret


def assert_mutual_tls(docs: list[dict[str, Any]]) -> None:
    """scheduler-config mode: verbs on the network with client certificates of the serving CA required,
    kube-scheduler configured to present its own, bind limited to its profiles."""
    options = served(extender_args(docs))
    network = options.network
    assert not is_loopback(network.extender_bind_address) and not network.verbs_unauthenticated
    mount, _ = tls_secret_mount(docs)
    assert (network.extender_tls_cert_file, network.extender_client_ca_file) == (f"{mount}/tls.crt",
                                                                                 f"{mount}/ca.crt")
    config = config_map(docs, "kube-scheduler-config")
    [extender] = config["extenders"]
    tls = extender["tlsConfig"]
    assert extender["enableHTTPS"] and {"caFile", "certFile", "keyFile", "serverName"} <= set(tls)
    assert len({str(Path(tls[key]).parent) for key in ("caFile", "certFile", "keyFile")}) == 1
    assert set(options.scheduler.scheduler_names) == {p["schedulerName"] for p in config["profiles"]}


def assert_loopback_verbs(docs: list[dict[str, Any]]) -> None:
    options = served(extender_args(docs))
    network = options.network
    assert is_loopback(network.extender_bind_address) and not is_loopback(network.bind_address)
    config = config_map(docs, "dra-scheduler-config")
    assert [e["urlPrefix"].split("/")[2].split(":")[0] for e in config["extenders"]] == ["127.0.0.1"]
    assert set(options.scheduler.scheduler_names) == {p["schedulerName"] for p in config["profiles"]}
    assert not [d for d in docs if d["metadata"]["name"] == CLIENT_SECRET]


def assert_cert_manager_issues_the_client_certificate(docs: list[dict[str, Any]]) -> None:
    serving = find(docs, "Certificate", "dra-extender-serving")
    client = find(docs, "Certificate", CLIENT_SECRET)
    assert serving["spec"]["secretName"] == tls_secret_mount(docs)[1]
    assert client["spec"]["issuerRef"] == serving["spec"]["issuerRef"]  # the CA the extender trusts
    assert client["spec"]["secretName"] == CLIENT_SECRET
    assert "client auth" in client["spec"]["usages"] and "server auth" not in client["spec"]["usages"]
    assert "client auth" not in serving["spec"]["usages"]


def test_kustomize_scheduler_config_is_mutual_tls() -> None:
    docs = overlay("scheduler-config")
    assert_mutual_tls(docs)
    assert_cert_manager_issues_the_client_certificate(docs)


def test_kustomize_second_scheduler_keeps_the_verbs_on_loopback() -> None:
    assert_loopback_verbs(overlay("second-scheduler"))


def test_every_overlay_starts_closed() -> None:
    for name in ("cert-manager", "scheduler-config", "second-scheduler"):
        assert not served(extender_args(overlay(name))).network.verbs_unauthenticated, name


def test_chart_scheduler_config_is_mutual_tls_with_every_certificate_source(helm: str) -> None:  # noqa: F811
    docs = helm_template(helm, "mode=scheduler-config")
    assert_mutual_tls(docs)
    assert_cert_manager_issues_the_client_certificate(docs)
    docs = helm_template(helm, "mode=scheduler-config", "certificates.source=self-signed")
    assert_mutual_tls(docs)
    data = {name: find(docs, "Secret", name)["data"] for name in ("dra-extender-tls", CLIENT_SECRET)}
    ca = x509.load_pem_x509_certificate(base64.b64decode(data["dra-extender-tls"]["ca.crt"]))
    client = x509.load_pem_x509_certificate(base64.b64decode(data[CLIENT_SECRET]["tls.crt"]))
    client.verify_directly_issued_by(ca)
    usages = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in usages
    assert data[CLIENT_SECRET]["ca.crt"] == data["dra-extender-tls"]["ca.crt"]
    bundle = base64.b64encode(ca.public_bytes(Encoding.PEM)).decode()
    docs = helm_template(helm, "mode=scheduler-config", "certificates.source=provided",
                         f"certificates.provided.caBundle={bundle}")
    assert_mutual_tls(docs)  # the client certificate comes from `dra-extender certs --client`
    assert not [d for d in docs if d["metadata"]["name"] == CLIENT_SECRET]


def test_chart_second_scheduler_keeps_the_verbs_on_loopback(helm: str) -> None:  # noqa: F811
    for source in ("cert-manager", "self-signed"):
        assert_loopback_verbs(helm_template(helm, "mode=second-scheduler", f"certificates.source={source}"))


# ---- the rendered args, run ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Material:
    directory: Path  # what the Secret volume would hold: tls.crt, tls.key, ca.crt
    client: tuple[str, str]  # kube-scheduler's client certificate and key files


def material(tmp_path: Path) -> Material:
    """The mounted Secret's files (a serving certificate for loopback) and a kube-scheduler client pair,
    from one CA as `dra-extender certs` makes them."""
    ca = certs.generate_ca("test CA")
    serving = certs.generate_serving_cert(ca, ["localhost"], ["127.0.0.1"])
    certs.write_serving_files(tmp_path / "tls", ca, serving)
    client = certs.generate_client_cert(ca, "kube-scheduler")
    certs.write_pem(tmp_path / "client.crt", client.certificate_pem())
    certs.write_pem(tmp_path / "client.key", client.key_pem(), private=True)
    return Material(tmp_path / "tls", (str(tmp_path / "client.crt"), str(tmp_path / "client.key")))


def run_options(docs: list[dict[str, Any]], files: Material) -> ServeOptions:
    """The rendered args with the Secret's files from `files`, the example cluster instead of an API
    server, and ephemeral ports."""
    mount, _ = tls_secret_mount(docs)
    args = [arg.replace(mount, str(files.directory)) for arg in extender_args(docs)]
    options = served(args)
    return dataclasses.replace(
        options, source=SourceOptions(snapshot=str(EXAMPLES)),
        network=dataclasses.replace(options.network, extender_port=0, debug_port=0),
        webhook=dataclasses.replace(options.webhook, port=0))


async def test_rendered_second_scheduler_args_keep_the_verbs_off_the_network(tmp_path: Path) -> None:
    async with App(run_options(overlay("second-scheduler"), material(tmp_path))) as app:
        assert app.server.addresses["extender"] and all(map(is_loopback, app.server.addresses["extender"]))
        assert app.server.addresses["debug"] == ["0.0.0.0"]
        outside = own_address()
        if outside is not None:
            with pytest.raises(ConnectionRefusedError):
                await asyncio.open_connection(outside, port_of(app.server.urls["extender"]))


async def test_rendered_scheduler_config_args_answer_only_kube_schedulers_certificate(tmp_path: Path) -> None:
    files = material(tmp_path)
    options = run_options(overlay("scheduler-config"), files)
    async with App(options) as app, aiohttp.ClientSession() as session:
        url = app.server.urls["extender"] + "/filter"
        headers = {"Content-Type": "application/json"}
        anonymous = ssl.create_default_context(cafile=str(files.directory / "ca.crt"))
        with pytest.raises(aiohttp.ClientError):
            async with session.post(url, data=FILTER, ssl=anonymous, headers=headers) as response:
                await response.read()
        scheduler = ssl.create_default_context(cafile=str(files.directory / "ca.crt"))
        scheduler.load_cert_chain(*files.client)
        async with session.post(url, data=FILTER, ssl=scheduler, headers=headers) as response:
            assert response.status == 200 and (await response.json())["Error"] == ""
