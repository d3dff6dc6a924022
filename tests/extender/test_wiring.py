"""extender.wiring: typed options (one frozen class per component, defaults written once), the flags that
fill them, and the refusal of every combination that cannot run."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest

from allocator import FeatureGates
from common.httpguard import HttpLimits
from extender.cli import build_parser
from extender.controllers import ControllerOptions
from extender.flags import serve_options
from extender.kube.objects_io import load_objects
from extender.options import (
    LeaderOptions,
    NetworkOptions,
    OptionsError,
    SchedulerOptions,
    ServeOptions,
    SourceOptions,
    WebhookOptions,
)
from extender.state.cache import ClusterCache
from extender.wiring import Cluster, build_scheduler, lease_namespace

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "cluster"


PARSER = build_parser()


def parsed(*flags: str) -> ServeOptions:
    return serve_options(PARSER.parse_args(["serve", *flags]))


def test_the_flags_defaults_are_the_options_defaults() -> None:
    assert parsed() == ServeOptions()
    assert parsed("--snapshot", "dir") == ServeOptions(source=SourceOptions(snapshot="dir"))


def test_every_serve_flag_lands_in_its_options_field() -> None:
    options = parsed(
        "--kubeconfig", "kc", "--context", "ctx", "--feature-gates", "DRAWorkloadResourceClaims=true",
        "--bind-address", "0.0.0.0", "--extender-bind-address", "::", "--extender-allow-unauthenticated",
        "--extender-port", "1", "--debug-port", "2",
        "--extender-tls-cert-file", "e.crt", "--extender-tls-private-key-file", "e.key",
        "--extender-client-ca-file", "ca.crt", "--max-request-bytes", "3", "--max-connections", "4",
        "--idle-timeout", "5s", "--debug-from-anywhere",
        "--scoring", "spread", "--filter-holds-devices", "--no-filter-cache", "--hold-timeout", "1m",
        "--node-timeout", "250ms", "--filter-timeout", "2", "--reasons", "detailed",
        "--requeue-claim", "ns/requeue",
        "--scheduler-names", "dra-scheduler, gpu",
        "--webhook-port", "6", "--tls-cert-file", "w.crt", "--tls-private-key-file", "w.key",
        "--reserved-for-limit", "7",
        "--controllers", "taint-eviction,driver-loss", "--taint-eviction-workers", "8",
        "--driver-loss-grace-period", "9s", "--evict-on-driver-loss", "--leader-elect",
        "--leader-elect-namespace", "ns", "--leader-elect-lease-name", "lease", "--no-leader-elect-verbs",
        "--leader-elect-lease-duration", "30s", "--leader-elect-renew-deadline", "20",
        "--leader-elect-retry-period", "3s",
    )
    assert options == ServeOptions(
        source=SourceOptions(kubeconfig="kc", context="ctx",
                             features=FeatureGates({"DRAWorkloadResourceClaims": True})),
        network=NetworkOptions(
            bind_address="0.0.0.0", extender_bind_address="::", extender_allow_unauthenticated=True,
            extender_port=1, debug_port=2, extender_tls_cert_file="e.crt",
            extender_tls_private_key_file="e.key", extender_client_ca_file="ca.crt",
            limits=HttpLimits(max_request_bytes=3, max_connections=4, idle_timeout_s=5.0),
            debug_from_anywhere=True),
        scheduler=SchedulerOptions(scoring="spread", hold_devices=True, hold_timeout_s=60.0,
                                   node_timeout_s=0.25, filter_timeout_s=2.0, filter_cache=False,
                                   reasons="detailed", requeue_claim="ns/requeue",
                                   scheduler_names=("dra-scheduler", "gpu")),
        webhook=WebhookOptions(port=6, tls_cert_file="w.crt", tls_private_key_file="w.key",
                               reserved_for_limit=7),
        controllers=ControllerOptions(names=("taint-eviction", "driver-loss"), workers=8,
                                      driver_loss_grace_period=9.0, evict_on_driver_loss=True,
                                      leader_elect=True, workload_claims=True),
        leader=LeaderOptions(enabled=True, verbs=False, namespace="ns", name="lease", lease_duration_s=30.0,
                             renew_deadline_s=20.0, retry_period_s=3.0),
    )


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: SourceOptions(snapshot="s", kubeconfig="k"), "--snapshot cannot be combined"),
        (lambda: SourceOptions(snapshot="s", context="c"), "--snapshot cannot be combined"),
        (lambda: NetworkOptions(extender_tls_cert_file="c"), "go together"),
        (lambda: NetworkOptions(extender_tls_private_key_file="k"), "go together"),
        (lambda: NetworkOptions(extender_client_ca_file="ca"), "plain HTTP"),
        (lambda: NetworkOptions(extender_bind_address="0.0.0.0"), "--extender-allow-unauthenticated"),
        (lambda: NetworkOptions(extender_bind_address="", extender_tls_cert_file="c",
                                extender_tls_private_key_file="k"), "--extender-client-ca-file"),
        (lambda: SchedulerOptions(scheduler_names=()), "--scheduler-names"),
        (lambda: SchedulerOptions(scheduler_names=("a", " ")), "--scheduler-names"),
        (lambda: WebhookOptions(tls_cert_file="c"), "--tls-cert-file and --tls-private-key-file"),
        (lambda: WebhookOptions(tls_private_key_file="k"), "--tls-cert-file and --tls-private-key-file"),
        (lambda: WebhookOptions(reserved_for_limit=0), "--reserved-for-limit"),
        (lambda: WebhookOptions(reserved_for_limit=257), "--reserved-for-limit"),
        (lambda: SchedulerOptions(scoring="tightest"), "--scoring"),
        (lambda: SchedulerOptions(node_timeout_s=0), "--node-timeout"),
        (lambda: SchedulerOptions(filter_timeout_s=-1), "--filter-timeout"),
        (lambda: SchedulerOptions(hold_timeout_s=float("nan")), "--hold-timeout"),
        (lambda: SchedulerOptions(reasons="verbose"), "--reasons"),
        (lambda: SchedulerOptions(requeue_claim="no-namespace"), "--requeue-claim: expected NAMESPACE/NAME"),
        (lambda: LeaderOptions(renew_deadline_s=20.0), "--leader-elect-lease-duration > --leader-elect-"),
        (lambda: LeaderOptions(retry_period_s=10.0), "--leader-elect-lease-duration > --leader-elect-"),
        (lambda: LeaderOptions(name=""), "--leader-elect-lease-name"),
    ],
)
def test_options_refuse_what_cannot_run_naming_the_flags(make: object, message: str) -> None:
    with pytest.raises(OptionsError, match=message):
        make()  # type: ignore[operator]


def test_the_lease_namespace_is_the_pods_own_or_serve_refuses(tmp_path: Path) -> None:
    account = tmp_path / "namespace"
    elect = LeaderOptions(enabled=True)
    assert lease_namespace(LeaderOptions(enabled=True, namespace="given"), {}, str(account)) == "given"
    assert lease_namespace(elect, {"POD_NAMESPACE": "from-downward-api"}, str(account)) == "from-downward-api"
    account.write_text("from-service-account\n")
    assert lease_namespace(elect, {}, str(account)) == "from-service-account"
    account.unlink()
    with pytest.raises(OptionsError, match="--leader-elect: no --leader-elect-namespace, and not in a pod"):
        lease_namespace(elect, {}, str(account))


def test_options_are_frozen() -> None:
    for options in (SourceOptions(), NetworkOptions(), SchedulerOptions(), WebhookOptions(), ServeOptions()):
        with pytest.raises(dataclasses.FrozenInstanceError):
            options.port = 1  # type: ignore[misc, attr-defined]


# Flags whose combinations have rules: every subset either gives options or an OptionsError naming a flag.
COMBINED_FLAGS = (
    ("--snapshot", "s"), ("--kubeconfig", "k"), ("--context", "c"),
    ("--extender-tls-cert-file", "e.crt"), ("--extender-tls-private-key-file", "e.key"),
    ("--extender-client-ca-file", "ca.crt"), ("--extender-bind-address", "0.0.0.0"),
    ("--extender-allow-unauthenticated",),
    ("--tls-cert-file", "w.crt"), ("--tls-private-key-file", "w.key"),
    ("--controllers", "taint-eviction"), ("--evict-on-driver-loss",),
)


def test_every_combination_of_the_related_flags_runs_or_is_refused_by_name() -> None:
    refused = 0
    for size in range(len(COMBINED_FLAGS) + 1):
        for chosen in itertools.combinations(COMBINED_FLAGS, size):
            flags = [part for flag in chosen for part in flag]
            try:
                parsed(*flags)
            except OptionsError as error:
                refused += 1
                assert str(error).startswith("--"), (flags, str(error))
    assert 0 < refused < 2 ** len(COMBINED_FLAGS)


def test_explain_and_simulate_build_the_scheduler_serve_builds_by_default() -> None:
    cluster = Cluster(ClusterCache.from_objects(load_objects([EXAMPLES]), FeatureGates()))
    default = build_scheduler(cluster)
    served = build_scheduler(cluster, parsed("--snapshot", str(EXAMPLES)).scheduler)
    for scheduler in (default, served):
        assert (scheduler.node_deadline_s, scheduler.filter_deadline_s) == (1.0, 3.0)
        assert not scheduler.hold_devices
        assert scheduler.filter_cache is not None
    uncached = build_scheduler(cluster, SchedulerOptions(filter_cache=False, hold_devices=True))
    assert uncached.filter_cache is None and uncached.hold_devices


LOOPBACK = ("127.0.0.1", "127.0.0.53", "::1", "[::1]", "localhost", "::ffff:127.0.0.1")
NOT_LOOPBACK = ("0.0.0.0", "::", "", "10.0.0.7", "::ffff:10.0.0.7", "fe80::1%eth0", "dra-extender.example",
                "localhost.example")


@pytest.mark.parametrize("address", LOOPBACK)
def test_verbs_on_loopback_need_no_client_certificates(address: str) -> None:
    options = NetworkOptions(extender_bind_address=address)
    assert not options.verbs_unauthenticated


@pytest.mark.parametrize("address", NOT_LOOPBACK)
def test_verbs_on_another_address_need_client_certificates_or_the_explicit_flag(address: str) -> None:
    with pytest.raises(OptionsError, match="is not a loopback address"):
        NetworkOptions(extender_bind_address=address)
    tls = {"extender_tls_cert_file": "c", "extender_tls_private_key_file": "k"}
    with pytest.raises(OptionsError, match="--extender-client-ca-file is not set"):
        NetworkOptions(extender_bind_address=address, **tls)
    assert not NetworkOptions(extender_bind_address=address, extender_client_ca_file="ca",
                              **tls).verbs_unauthenticated
    assert NetworkOptions(extender_bind_address=address,
                          extender_allow_unauthenticated=True).verbs_unauthenticated


def test_the_debug_and_webhook_address_does_not_move_the_verbs() -> None:
    options = parsed("--bind-address", "0.0.0.0")
    assert options.network.extender_bind_address == "127.0.0.1" and not options.network.verbs_unauthenticated
