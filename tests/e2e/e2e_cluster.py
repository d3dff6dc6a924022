"""A real control plane on loopback for the end-to-end tests.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler (built by build_control_plane.py),
plus `dra-extender serve` as kube-scheduler's filter/prioritize/bind extender and as the admission
webhook. There is no kubelet: tests create Nodes and ResourceSlices through the API as a driver
would. Every component logs to <work dir>/logs/<name>.log.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import build_control_plane
import orjson
import pytest
import urllib3
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from e2e_api import Api, ApiStatusError, wait_for

from webhook.certs import KeyPair, generate_ca, generate_serving_cert, write_pem

REPO_ROOT = Path(__file__).resolve().parents[2]
DRA_EXTENDER = Path(sys.executable).with_name("dra-extender")
DEPLOY = REPO_ROOT / "deploy"
# The extender's identity comes from deploy/, as an operator installs it: the base and the eviction
# controller component (the fixture runs `--controllers=taint-eviction`). Only these kinds are applied;
# the Deployment, Services and webhooks of the base are replaced by the processes started here.
EXTENDER_IDENTITY_SOURCES = ("base", "components/eviction-controller")
IDENTITY_KINDS = frozenset(
    {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
)
# The Service name `dra-extender certs --service` is given in docs/operations.md, and its namespace.
EXTENDER_SERVICE, EXTENDER_NAMESPACE = "dra-extender-webhook", "dra-extender"
# Longer than any run; a TokenRequest is not renewed by the fixture.
EXTENDER_TOKEN_SECONDS = 48 * 3600

# Pods rejected by an extender wait in kube-scheduler's unschedulable queue for this long at most
# (default 5 minutes); short, so pods waiting for freed devices are retried within the tests' timeouts.
UNSCHEDULABLE_RETRY = "5s"
# The tests that read why a pod is pending in kube-scheduler's FailedScheduling events want our per-node
# words there (the default, upstream's, are checked by test_e2e_requeue.py).
DETAILED_REASONS = "--reasons=detailed"
# The shared plane's --binding-timeout: short, so test_e2e_binding_conditions.py sees it pass (no other
# test publishes devices with binding conditions).
BINDING_TIMEOUT_S = 10.0
BINDING_TIMEOUT = f"--binding-timeout={BINDING_TIMEOUT_S:g}"
# Written into the extenders' logs around a kube-apiserver restart (see ControlPlane.restart_apiserver).
RBAC_LOADING = "===== kube-apiserver restarting, RBAC loading:"
RBAC_LOADED = "===== kube-apiserver ready, RBAC loaded:"


def deployed_requeue_flag() -> str:
    """The --requeue-claim argument of deploy/base's Deployment."""
    deployment = yaml.safe_load((DEPLOY / "base" / "deployment.yaml").read_text())
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    [flag] = [arg for arg in args if arg.startswith("--requeue-claim=")]
    return str(flag)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def client_cert(ca: KeyPair, user: str, groups: tuple[str, ...] = ()) -> KeyPair:
    """A client certificate: the apiserver reads the user from CN and the groups from O."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
        + [x509.NameAttribute(NameOID.COMMON_NAME, user)]
    )
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    return KeyPair(certificate, key)


@dataclass
class Credentials:
    cert_file: Path
    key_file: Path
    kubeconfig: Path


@dataclass
class Component:
    name: str
    args: list[str]
    log_file: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = self.log_file.open("ab")
        log.write(f"\n===== start {time.strftime('%H:%M:%S')}: {' '.join(self.args)}\n".encode())
        log.flush()
        # A process group of its own, so stopping it never signals pytest.
        self.process = subprocess.Popen(
            self.args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout_s: float = 15.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(5)

    def tail(self, lines: int = 60) -> str:
        if not self.log_file.exists():
            return "(no log)"
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])


# The NamespaceLifecycle admission plugin's refusal of a write into a namespace being deleted.
TERMINATING = "because it is being terminated"


@dataclass
class ControlPlane:
    bin_dir: Path
    work: Path
    # "extender": DynamicResources disabled, dra-extender as filter/prioritize/bind extender;
    # "in-tree": kube-scheduler's own DynamicResources plugin and no extender (the benchmark's baseline).
    scheduler_mode: str = "extender"
    webhooks: bool = True
    # Extra command-line flags per component name ("kube-apiserver", "kube-scheduler", ...), for the
    # tests that need feature gates or API versions the shared control plane does not enable.
    extra_args: dict[str, list[str]] = field(default_factory=dict)
    # kube-scheduler's --pod-max-in-unschedulable-pods-duration (None: its default, 5 minutes, as in
    # deploy/) and KubeSchedulerConfiguration fields replacing the fixture's (e.g. its short backoff).
    unschedulable_retry: str | None = UNSCHEDULABLE_RETRY
    scheduler_config: dict[str, Any] = field(default_factory=dict)
    components: dict[str, Component] = field(default_factory=dict)
    api: Api | None = None

    def __post_init__(self) -> None:
        self.pki = self.work / "pki"
        self.logs = self.work / "logs"
        self.pki.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        self.etcd_port, self.etcd_peer_port, self.apiserver_port = free_port(), free_port(), free_port()
        self.extender_port, self.debug_port, self.webhook_port = free_port(), free_port(), free_port()
        self.server = f"https://127.0.0.1:{self.apiserver_port}"
        self.extender_flags: list[str] = []
        # Where kube-scheduler and kube-apiserver call the extender and the webhook: these ports, unless
        # a test puts something in between (the HA test's stand-in for a Service).
        self.extender_url_port, self.webhook_url_port = self.extender_port, self.webhook_port

    # ----- certificates and kubeconfigs -----

    def _write_pki(self) -> None:
        self.ca = generate_ca("dra-extender-e2e-ca")
        self.ca_file = self.pki / "ca.crt"
        write_pem(self.ca_file, self.ca.certificate_pem())
        serving = generate_serving_cert(self.ca, ["localhost", "kubernetes"], ["127.0.0.1"])
        self.serving_cert, self.serving_key = self.pki / "serving.crt", self.pki / "serving.key"
        write_pem(self.serving_cert, serving.certificate_pem())
        write_pem(self.serving_key, serving.key_pem(), private=True)
        sa_key = ec.generate_private_key(ec.SECP256R1())
        self.sa_key_file = self.pki / "sa.key"
        write_pem(
            self.sa_key_file,
            sa_key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            ),
            private=True,
        )
        self.sa_pub_file = self.pki / "sa.pub"
        write_pem(
            self.sa_pub_file,
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        )
        self._write_extender_pki()
        self.admin = self._credentials("admin", "admin", ("system:masters",))
        self.scheduler_creds = self._credentials("scheduler", "system:kube-scheduler")
        # The controller manager runs as an admin: its own RBAC is not what these tests are about.
        self.controller_creds = self._credentials(
            "controller-manager", "system:kube-controller-manager", ("system:masters",)
        )

    def _write_extender_pki(self) -> None:
        """The extender port's mutual TLS, made as docs/operations.md tells an operator without
        cert-manager: `dra-extender certs` writes the CA and the serving certificate, `certs --client`
        kube-scheduler's client certificate from that CA."""
        self.extender_pki = self.pki / "extender"
        for args in (["--service", EXTENDER_SERVICE, "--namespace", EXTENDER_NAMESPACE],
                     ["--client", "--name", "kube-scheduler"]):
            subprocess.run([str(DRA_EXTENDER), "certs", *args, "--out", str(self.extender_pki)],
                           check=True, capture_output=True, timeout=60)

    def extender_client_files(self) -> tuple[str, str]:
        """kube-scheduler's client certificate and key for the extender port."""
        return str(self.extender_pki / "client.crt"), str(self.extender_pki / "client.key")

    @property
    def extender_server_name(self) -> str:
        """The name the extender's serving certificate is valid for (tlsConfig.serverName)."""
        return f"{EXTENDER_SERVICE}.{EXTENDER_NAMESPACE}.svc"

    def _credentials(self, name: str, user: str, groups: tuple[str, ...] = ()) -> Credentials:
        pair = client_cert(self.ca, user, groups)
        cert_file, key_file = self.pki / f"{name}.crt", self.pki / f"{name}.key"
        write_pem(cert_file, pair.certificate_pem())
        write_pem(key_file, pair.key_pem(), private=True)
        user = {"client-certificate": str(cert_file), "client-key": str(key_file)}
        return Credentials(cert_file, key_file, self._write_kubeconfig(name, user))

    def _write_kubeconfig(self, name: str, user: dict[str, str], server: str | None = None) -> Path:
        kubeconfig = self.work / f"{name}.kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "e2e",
                            "cluster": {"server": server or self.server,
                                        "certificate-authority": str(self.ca_file)},
                        }
                    ],
                    "users": [{"name": name, "user": user}],
                    "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": name}}],
                    "current-context": "e2e",
                }
            )
        )
        kubeconfig.chmod(0o600)
        return kubeconfig

    # ----- components -----

    def _component(self, name: str, args: list[str]) -> Component:
        component = Component(name, [*args, *self.extra_args.get(name, [])], self.logs / f"{name}.log")
        self.components[name] = component
        component.start()
        return component

    def _bin(self, name: str) -> str:
        return str(self.bin_dir / name)

    def _start_etcd(self) -> None:
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        self._component(
            "etcd",
            [
                self._bin("etcd"),
                "--name=e2e",
                f"--data-dir={self.work / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=e2e={peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
                "--quota-backend-bytes=2147483648",
            ],
        )
        http = urllib3.PoolManager(retries=False, timeout=2)

        def healthy() -> bool:
            self._check_alive("etcd")
            try:
                return http.request("GET", f"{client}/health").status == 200
            except urllib3.exceptions.HTTPError:
                return False

        wait_for("etcd /health", healthy, timeout_s=60)

    def _start_apiserver(self) -> None:
        self._component(
            "kube-apiserver",
            [
                self._bin("kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.apiserver_port}",
                f"--tls-cert-file={self.serving_cert}",
                f"--tls-private-key-file={self.serving_key}",
                f"--client-ca-file={self.ca_file}",
                f"--service-account-key-file={self.sa_pub_file}",
                f"--service-account-signing-key-file={self.sa_key_file}",
                "--service-account-issuer=https://kubernetes.default.svc",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--authorization-mode=Node,RBAC",
                # The kubernetes Service may not point at loopback; nothing here needs its endpoints.
                "--endpoint-reconciler-type=none",
                "--runtime-config=resource.k8s.io/v1=true",
                # Pods need no service account here, so new namespaces need not wait for "default".
                "--disable-admission-plugins=ServiceAccount",
                "--enable-priority-and-fairness=false",
                "--profiling=false",
                "--v=1",
            ],
        )
        self.api = Api(self.server, str(self.ca_file), str(self.admin.cert_file), str(self.admin.key_file))
        api = self.api

        def ready() -> bool:
            self._check_alive("kube-apiserver")
            try:
                api.request("GET", "/readyz")
                return True
            except (ApiStatusError, urllib3.exceptions.HTTPError):
                return False

        wait_for("kube-apiserver /readyz", ready, timeout_s=120, interval_s=0.5)

    def _start_controller_manager(self) -> None:
        self._component(
            "kube-controller-manager",
            [
                self._bin("kube-controller-manager"),
                f"--kubeconfig={self.controller_creds.kubeconfig}",
                "--leader-elect=false",
                "--secure-port=0",
                f"--service-account-private-key-file={self.sa_key_file}",
                f"--root-ca-file={self.ca_file}",
                # The node lifecycle controller would taint every kubelet-less node unreachable, and the
                # in-tree device taint eviction would do the job the taint test expects of dra-extender.
                "--controllers=*,-node-lifecycle-controller,-device-taint-eviction-controller",
                # The default 20 QPS throttles claim creation for template pods to ~10 pods/s. Each
                # controller has its own client at this rate; the resourceclaim controller makes 2 calls
                # per template pod (claim create, pod status apply) and about 2 more when it is deleted
                # (reservedFor and finalizer), so 300 QPS could cap both set-ups' steady state near
                # 75 pods/s and hide the difference between them: scheduler_perf's limits instead.
                "--kube-api-qps=5000",
                "--kube-api-burst=5000",
                "--v=1",
            ],
        )

    def _start_scheduler(self) -> None:
        config: dict[str, Any] = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {
                "kubeconfig": str(self.scheduler_creds.kubeconfig),
                # Upstream scheduler_perf's client limits (test/integration/scheduler_perf/util.go). The
                # in-tree DRA path makes 4 calls per pod through this client (nominatedNodeName patch
                # before PreBind, claim finalizer update, claim status update, binding), so 200 QPS
                # capped the in-tree set-up at exactly 50 pods/s; with the extender, the extender
                # binds and kube-scheduler makes none of these calls.
                "qps": 5000,
                "burst": 5000,
            },
            "leaderElection": {"leaderElect": False},
            "podInitialBackoffSeconds": 1,
            "podMaxBackoffSeconds": 2,
        }
        if self.scheduler_mode == "extender":
            config["profiles"] = [
                {
                    "schedulerName": "default-scheduler",
                    "plugins": {"multiPoint": {"disabled": [{"name": "DynamicResources"}]}},
                }
            ]
            config["extenders"] = [
                {
                    "urlPrefix": f"https://127.0.0.1:{self.extender_url_port}/scheduler",
                    "filterVerb": "filter",
                    "prioritizeVerb": "prioritize",
                    "weight": 1,
                    "bindVerb": "bind",
                    "enableHTTPS": True,
                    # As deploy/components/scheduler-config/kube-scheduler-config.yaml: the extender's
                    # CA, the name its certificate is issued for, and kube-scheduler's client pair.
                    "tlsConfig": {
                        "caFile": str(self.extender_pki / "ca.crt"),
                        "serverName": self.extender_server_name,
                        "certFile": self.extender_client_files()[0],
                        "keyFile": self.extender_client_files()[1],
                    },
                    "nodeCacheCapable": True,
                    "httpTimeout": "10s",
                    "ignorable": False,
                }
            ]
        config.update(self.scheduler_config)
        config_file = self.work / "scheduler-config.yaml"
        config_file.write_text(yaml.safe_dump(config))
        retry = ([f"--pod-max-in-unschedulable-pods-duration={self.unschedulable_retry}"]
                 if self.unschedulable_retry else [])
        self._component(
            "kube-scheduler",
            [self._bin("kube-scheduler"), f"--config={config_file}", "--secure-port=0", *retry, "--v=2"],
        )

    def start_extender(self, extra_flags: list[str] | None = None) -> None:
        """(Re)start `dra-extender serve`: extender on mutual TLS, webhook, debug port; wait until ready."""
        if extra_flags is not None:
            self.extender_flags = extra_flags
        self.start_replica("dra-extender", (self.extender_port, self.debug_port, self.webhook_port),
                           self.extender_flags)

    def start_replica(self, name: str, ports: tuple[int, int, int], flags: list[str], *,
                      wait_ready: bool = True) -> None:
        """Start a `dra-extender serve` component called `name` on (extender, debug, webhook) `ports`; wait
        until its /readyz answers 200 (`wait_ready`), or else until its cache is synced (a standby)."""
        extender_port, debug_port, webhook_port = ports
        self._component(
            name,
            [
                str(DRA_EXTENDER),
                "serve",
                f"--kubeconfig={self.extender_kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--extender-port={extender_port}",
                f"--debug-port={debug_port}",
                f"--webhook-port={webhook_port}",
                f"--extender-tls-cert-file={self.extender_pki / 'tls.crt'}",
                f"--extender-tls-private-key-file={self.extender_pki / 'tls.key'}",
                f"--extender-client-ca-file={self.extender_pki / 'ca.crt'}",
                f"--tls-cert-file={self.serving_cert}",
                f"--tls-private-key-file={self.serving_key}",
                "--log-level=info",
                *flags,
            ],
        )
        http = urllib3.PoolManager(retries=False, timeout=2)

        def ready() -> bool:
            self._check_alive(name)
            try:
                answer = http.request("GET", f"http://127.0.0.1:{debug_port}/readyz")
            except urllib3.exceptions.HTTPError:
                return False
            return answer.status == 200 or (not wait_ready and b"cluster cache not synced" not in answer.data)

        wait_for(f"{name} /readyz", ready, timeout_s=60, interval_s=0.1)

    def point_extender_at(self, server: str) -> None:
        """Make the extender's kubeconfig (same token) name another API server address (a proxy); used by
        the extenders started from now on."""
        token = yaml.safe_load(self.extender_kubeconfig.read_text())["users"][0]["user"]["token"]
        self.extender_kubeconfig = self._write_kubeconfig("extender", {"token": token}, server)

    def stop_extender(self, *, hard: bool = False) -> None:
        component = self.components["dra-extender"]
        if hard:
            component.kill()
        else:
            component.stop()

    def restart_apiserver(self, *, hard: bool = True, down_s: float = 0.0) -> None:
        """Stop kube-apiserver (kill -9 with `hard`), wait `down_s`, start it again with the same flags and
        wait until it is ready and authorizes the extender again. Until then it refuses requests it has
        no RBAC rules for yet: the extenders' logs get markers around that window, whose "forbidden"
        lines forbidden_requests() does not count."""
        self._mark_extender_logs(RBAC_LOADING)
        component = self.components["kube-apiserver"]
        component.kill() if hard else component.stop()
        time.sleep(down_s)
        component.start()
        assert self.api is not None
        api = self.api

        def ready() -> bool:
            self._check_alive("kube-apiserver")
            try:
                api.request("GET", "/readyz")
                # The extender's own identity is authorized again (RBAC loaded from etcd).
                review = api.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", {
                    "spec": {"user": self.extender_user, "resourceAttributes": {
                        "verb": "list", "group": "resource.k8s.io", "resource": "resourceclaims"}}})
                return bool(review.get("status", {}).get("allowed"))
            except (ApiStatusError, urllib3.exceptions.HTTPError):
                return False

        wait_for("kube-apiserver ready again", ready, timeout_s=120, interval_s=0.2)
        time.sleep(1.0)  # requests refused just before the check was allowed are logged meanwhile
        self._mark_extender_logs(RBAC_LOADED)

    def _mark_extender_logs(self, marker: str) -> None:
        for component in self.components.values():
            if component.args and component.args[0] == str(DRA_EXTENDER):
                with component.log_file.open("a") as log:
                    log.write(f"{marker} {time.strftime('%H:%M:%S')}\n")

    def debug_state(self) -> dict:
        http = urllib3.PoolManager(retries=False, timeout=5)
        return orjson.loads(http.request("GET", f"http://127.0.0.1:{self.debug_port}/debug/state").data)

    def _check_alive(self, name: str) -> None:
        component = self.components[name]
        if not component.running():
            raise RuntimeError(
                f"{name} exited (code {component.process.returncode if component.process else '?'}):\n"
                f"{component.tail(40)}"
            )

    # ----- cluster objects the fixture owns -----

    def kubectl(
        self, *args: str, kubeconfig: Path | None = None, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """The kubectl built with the control plane, as the admin unless another kubeconfig is given."""
        return subprocess.run(
            [self._bin("kubectl"), f"--kubeconfig={kubeconfig or self.admin.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def _install_extender_identity(self) -> None:
        """Namespace, ServiceAccount and RBAC rendered from deploy/, and a kubeconfig holding a token
        issued to that ServiceAccount through the TokenRequest API (what a projected token gives a pod)."""
        assert self.api is not None
        identity: list[dict[str, Any]] = []
        for source in EXTENDER_IDENTITY_SOURCES:
            rendered = self.kubectl("kustomize", str(DEPLOY / source))
            if rendered.returncode != 0:
                raise RuntimeError(f"kubectl kustomize deploy/{source}: {rendered.stderr}")
            identity += [d for d in yaml.safe_load_all(rendered.stdout) if d and d["kind"] in IDENTITY_KINDS]
        applied = self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(identity))
        if applied.returncode != 0:
            raise RuntimeError(f"applying the extender's RBAC from deploy/: {applied.stderr}")
        accounts = [d["metadata"] for d in identity if d["kind"] == "ServiceAccount"]
        if len(accounts) != 1:
            raise RuntimeError(f"deploy/ must define one ServiceAccount, found {len(accounts)}")
        namespace, name = accounts[0]["namespace"], accounts[0]["name"]
        self.extender_user = f"system:serviceaccount:{namespace}:{name}"
        token_request = self.api.create(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": EXTENDER_TOKEN_SECONDS},
            },
        )
        self.extender_kubeconfig = self._write_kubeconfig(
            "extender", {"token": token_request["status"]["token"]}
        )

    def extender_logs(self) -> list[Component]:
        return [c for c in self.components.values() if c.args and c.args[0] == str(DRA_EXTENDER)]

    def forbidden_requests(self) -> list[str]:
        """Lines of the extenders' logs about requests the API server refused (403 Forbidden), except while
        a restarted kube-apiserver was still loading its RBAC rules (restart_apiserver's markers), and
        for the admission refusal of a write into a namespace a test is deleting (a bind racing the
        clean-up), which no RBAC rule could have allowed."""
        refused = []
        for component in self.extender_logs():
            if not component.log_file.exists():
                continue
            loading = False
            for line in component.log_file.read_text(errors="replace").splitlines():
                if line.startswith(RBAC_LOADING):
                    loading = True
                elif line.startswith(RBAC_LOADED):
                    loading = False
                elif "forbidden" in line.lower() and not loading and TERMINATING not in line:
                    refused.append(line)
        return refused

    def _install_webhooks(self) -> None:
        assert self.api is not None
        ca_bundle = base64.b64encode(self.ca.certificate_pem()).decode()

        def hook(name: str, path: str, rules: list[dict]) -> dict:
            return {
                "name": name,
                "clientConfig": {
                    "url": f"https://127.0.0.1:{self.webhook_url_port}{path}",
                    "caBundle": ca_bundle,
                },
                "rules": rules,
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "timeoutSeconds": 5,
                "admissionReviewVersions": ["v1"],
            }

        claim_status = {
            "apiGroups": ["resource.k8s.io"],
            "apiVersions": ["v1"],
            "resources": ["resourceclaims/status"],
            "operations": ["UPDATE"],
        }
        self.api.create(
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
            {
                "metadata": {"name": "dra-extender"},
                "webhooks": [hook("claim-status.mutate.dra-extender.io", "/webhook/mutate", [claim_status])],
            },
        )
        self.api.create(
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            {
                "metadata": {"name": "dra-extender"},
                "webhooks": [
                    hook(
                        "validate.dra-extender.io",
                        "/webhook/validate",
                        [
                            claim_status,
                            {
                                "apiGroups": [""],
                                "apiVersions": ["v1"],
                                "resources": ["pods"],
                                "operations": ["CREATE"],
                            },
                            {
                                "apiGroups": ["resource.k8s.io"],
                                "apiVersions": ["v1"],
                                "resources": ["resourceclaims", "resourceclaimtemplates"],
                                "operations": ["CREATE"],
                            },
                        ],
                    )
                ],
            },
        )

    # ----- lifecycle -----

    def start(self, extender_flags: list[str]) -> None:
        self._write_pki()
        self._start_etcd()
        self._start_apiserver()
        runs_extender = self.scheduler_mode == "extender" or self.webhooks
        if runs_extender:
            self._install_extender_identity()
        if self.webhooks:
            self._install_webhooks()
        self._start_controller_manager()
        if runs_extender:
            self.start_extender(extender_flags)
        self._start_scheduler()
        assert self.api is not None
        wait_for(
            "the default namespace", lambda: self.api.get_or_none("/api/v1/namespaces/default"), timeout_s=60
        )

    def stop(self) -> None:
        replicas = [c.name for c in self.extender_logs() if c.name != "dra-extender"]
        for name in ("kube-scheduler", "dra-extender", *replicas, "kube-controller-manager", "kube-apiserver",
                     "etcd"):
            if name in self.components:
                self.components[name].stop()
        if self.api is not None:
            self.api.close()
        shutil.rmtree(self.work / "etcd", ignore_errors=True)

    def log_tails(self, lines: int = 60) -> str:
        parts = []
        for name, component in self.components.items():
            parts.append(f"----- {name} ({component.log_file}) -----\n{component.tail(lines)}")
        return "\n".join(parts)


@contextlib.contextmanager
def running(plane: ControlPlane, extender_flags: list[str]) -> Iterator[ControlPlane]:
    """Start `plane` (printing the logs' tails if that fails), stop it afterwards, and fail if the API
    server refused any of the extender's requests meanwhile: the run used the deployed RBAC, so a
    refused call means a missing rule."""
    try:
        plane.start(extender_flags)
    except BaseException:
        print(plane.log_tails())
        plane.stop()
        raise
    yield plane
    plane.stop()
    refused = plane.forbidden_requests()
    assert not refused, "the API server refused the extender's requests:\n" + "\n".join(refused[:20])


def control_plane_binaries() -> Path:
    """The directory of the built Kubernetes binaries (built now if missing); skips the calling test or
    fixture when they cannot be built, i.e. without a Go toolchain."""
    try:
        return build_control_plane.ensure_built()
    except build_control_plane.BuildUnavailable as missing:
        pytest.skip(f"end-to-end tests need the Kubernetes binaries: {missing}")


@contextlib.contextmanager
def own_control_plane(
    work: Path, extra_args: dict[str, list[str]], extender_flags: list[str], **settings: Any
) -> Iterator[ControlPlane]:
    """A running control plane of a test module's own, for flags the shared one does not have (feature
    gates, API versions, `settings` of ControlPlane); skips the module when the Kubernetes binaries
    cannot be built."""
    plane = ControlPlane(control_plane_binaries(), work, extra_args=extra_args, **settings)
    with running(plane, extender_flags):
        yield plane


def extender_supports(flag: str) -> bool:
    """Whether `dra-extender serve --help` lists a flag."""
    help_text = subprocess.run(
        [str(DRA_EXTENDER), "serve", "--help"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return flag in help_text
