"""The command-line flags of `serve`, `explain` and `simulate`: each group's flags take their defaults
and help texts from an instance of its options class (extender.options), and `*_options(args)` maps
parsed flags onto it.

    options = serve_options(parser.parse_args())
"""

from __future__ import annotations

import argparse
import dataclasses

from allocator import FeatureGates
from common.claimrefs import WORKLOAD_CLAIMS
from common.httpguard import HttpLimits
from common.rules import (
    RESERVED_FOR_MAX,
    SCORING_POLICIES,
    parse_duration,
    parse_positive_duration,
)
from extender.controllers import (
    CONTROLLER_NAMES,
    ControllerOptions,
    check_names,
)
from extender.http.server import DEFAULT_PREFIX
from extender.kube.client import DEFAULT_REQUEST_TIMEOUT_S
from extender.options import (
    CONTROLLERS,
    LEADER,
    NETWORK,
    SCHEDULER,
    WEBHOOK,
    LeaderOptions,
    NetworkOptions,
    OptionsError,
    SchedulerOptions,
    ServeOptions,
    SourceOptions,
    WebhookOptions,
    parse_features,
)
from extender.plugin.verdicts import REASONS_CHOICES

SNAPSHOT_HELP = ("read the cluster from a directory or file of YAML/JSON objects (examples/cluster, the "
                 "output of GET /debug/snapshot) instead of an API server")


def add_snapshot_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *,
                          required: bool = False) -> None:
    parser.add_argument("--snapshot", metavar="DIR", required=required, help=SNAPSHOT_HELP)


def request_timeout(text: str) -> float | None:
    """kubectl's --request-timeout: a duration, or 0 for no limit."""
    seconds = parse_duration(text)
    return seconds or None


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("cluster source (in a pod its service account, else the kubeconfig)")
    group.add_argument("--kubeconfig", metavar="FILE",
                       help="kubeconfig file (default: $KUBECONFIG, else ~/.kube/config when not in a pod)")
    group.add_argument("--context", metavar="NAME",
                       help="kubeconfig context to use (default: its current context)")
    group.add_argument(
        "--request-timeout", type=request_timeout, default=DEFAULT_REQUEST_TIMEOUT_S, metavar="DURATION",
        help="longest wait for one API server answer, e.g. 10s, 1m; 0 waits as long as it takes "
        f"(default {DEFAULT_REQUEST_TIMEOUT_S:g}s)",
    )
    add_snapshot_argument(group)
    add_feature_gates_argument(group)


def add_feature_gates_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--feature-gates",
        default="",
        metavar="NAME=true|false,...",
        help="overrides of the Kubernetes 1.37 feature-gate defaults, as kube-scheduler has them",
    )


def features_of(args: argparse.Namespace) -> FeatureGates:
    try:
        return parse_features(args.feature_gates)
    except ValueError as error:
        raise OptionsError(f"--feature-gates: {error}") from None


def source_options(args: argparse.Namespace) -> SourceOptions:
    """Refuses the combination of sources before reading --feature-gates."""
    source = SourceOptions(kubeconfig=args.kubeconfig, context=args.context, snapshot=args.snapshot,
                           request_timeout_s=args.request_timeout)
    return dataclasses.replace(source, features=features_of(args))


def add_scoring_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--scoring",
        choices=SCORING_POLICIES,
        default=SCHEDULER.scoring,
        help="device placement policy for prioritize; pods override it with the annotation "
        f"dra-extender.io/scoring (default {SCHEDULER.scoring})",
    )


def add_scheduler_arguments(parser: argparse.ArgumentParser) -> None:
    sched = parser.add_argument_group("scheduling")
    add_scoring_argument(sched)
    add_reasons_argument(sched)
    sched.add_argument(
        "--filter-holds-devices",
        action="store_true",
        help="filter returns one chosen node and holds its devices until bind or --hold-timeout",
    )
    sched.add_argument(
        "--no-filter-cache",
        dest="filter_cache",
        action="store_false",
        help="recompute every node on every filter instead of reusing outcomes while the node's pools "
        "are unchanged",
    )
    sched.add_argument(
        "--requeue-claim",
        metavar="NAMESPACE/NAME",
        default=SCHEDULER.requeue_claim,
        help="a ResourceClaim of our own (created when missing, never allocated) that we update when a "
        "ResourceSlice or DeviceTaintRule changes while pods we found no node for wait: kube-scheduler "
        "retries the pods an extender rejected on ResourceClaim events, not on ResourceSlice ones, so "
        "without it such a pod waits for an unrelated event or up to podMaxInUnschedulablePodsDuration "
        "(5 minutes). Needs create and update of resourceclaims there (deploy/ sets "
        "dra-extender/dra-extender-requeue; default: off)",
    )
    sched.add_argument(
        "--scheduler-names",
        type=scheduler_names,
        default=SCHEDULER.scheduler_names,
        metavar="NAMES",
        help="comma-separated schedulerName values of the pods bind takes: the profiles of the "
        "kube-scheduler that calls this extender (its extenders serve every profile). bind refuses a pod "
        f"of any other scheduler (default {','.join(SCHEDULER.scheduler_names)}; a pod that names none "
        "has it)",
    )
    sched.add_argument(
        "--hold-timeout",
        type=parse_positive_duration,
        default=SCHEDULER.hold_timeout_s,
        help="how long a filter hold lasts without a bind (plain seconds or a Go duration such as 90s, 5m; "
        f"default {SCHEDULER.hold_timeout_s:g})",
    )
    sched.add_argument(
        "--node-timeout",
        type=parse_positive_duration,
        default=SCHEDULER.node_timeout_s,
        help="seconds one node's device search may run (filter, bind, explain), as the in-tree plugin's "
        "filterTimeout; a node that takes longer is 'timed out', not 'does not fit'. The search holds the "
        "event loop meanwhile "
        f"(default {SCHEDULER.node_timeout_s:g})",
    )
    sched.add_argument(
        "--filter-timeout",
        type=parse_positive_duration,
        default=SCHEDULER.filter_timeout_s,
        help="seconds one filter (and prioritize, preempt) may spend on all its nodes together; nodes not "
        "checked by then count as timed out. Keep it below kube-scheduler's extender httpTimeout (5 s "
        "unless set; deploy/ sets 10 s) minus --node-timeout. Timed-out nodes are resolvable failures "
        "when another node fits; when none fits, filter answers with an Error (with --reasons=upstream, the "
        "in-tree plugin's 'node NAME: timed out trying to allocate devices') and kube-scheduler retries the "
        f"pod after its backoff (default {SCHEDULER.filter_timeout_s:g})",
    )
    sched.add_argument(
        "--binding-timeout",
        type=parse_positive_duration,
        default=SCHEDULER.binding_timeout_s,
        help="how long a pod may wait for the binding conditions of its devices "
        "(DRADeviceBindingConditions), counted from the claim's allocationTimestamp, as the in-tree "
        "plugin's bindingTimeout: then the claim is deallocated and the pod scheduled again, as when a "
        f"binding failure condition turns True (default {SCHEDULER.binding_timeout_s:g})",
    )
    sched.add_argument(
        "--bind-wait",
        type=parse_positive_duration,
        default=SCHEDULER.bind_wait_s,
        help="how long one bind call waits for device binding conditions before it answers kube-scheduler "
        "with an error naming what is awaited; kube-scheduler retries the pod after its backoff while the "
        "claims stay allocated and reserved for it. Keep it below kube-scheduler's extender httpTimeout "
        f"(5 s unless set; deploy/ sets 10 s) minus a few seconds for bind's writes (default "
        f"{SCHEDULER.bind_wait_s:g})",
    )


def add_reasons_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--reasons",
        choices=REASONS_CHOICES,
        default=SCHEDULER.reasons,
        help="how filter answers for the nodes a pod does not fit: 'upstream' gives the in-tree "
        "DynamicResources plugin's words and statuses, so kube-scheduler's FailedScheduling line reads and "
        "aggregates as with that plugin and preemption is not tried for a node short of devices, and our "
        "explanation goes into a DRAExplanation event of the pod; 'detailed' gives our own reason per node "
        "(counts of devices and why they were turned away) and lets preemption try the nodes where "
        f"evicting pods could free devices (default {SCHEDULER.reasons})",
    )


def scheduler_names(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(","))
    if not all(names):
        raise argparse.ArgumentTypeError(f"an empty name in {text!r}")
    return names


def add_headroom_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("headroom")
    group.add_argument(
        "--headroom", action="append", default=[], metavar="SHAPE",
        help="a pod shape whose headroom /metrics serves (dra_extender_headroom_pods{shape}) and the device "
        "map shows: CLASS[:COUNT] (COUNT devices of a DeviceClass) or template:[NAMESPACE/]NAME (a "
        "ResourceClaimTemplate); repeatable",
    )


def scheduler_options(args: argparse.Namespace) -> SchedulerOptions:
    return SchedulerOptions(
        reasons=args.reasons,
        requeue_claim=args.requeue_claim,
        scoring=args.scoring,
        hold_devices=args.filter_holds_devices,
        hold_timeout_s=args.hold_timeout,
        node_timeout_s=args.node_timeout,
        filter_timeout_s=args.filter_timeout,
        filter_cache=args.filter_cache,
        scheduler_names=args.scheduler_names,
        binding_timeout_s=args.binding_timeout,
        bind_wait_s=args.bind_wait,
    )


def port_number(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {value!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0-65535, got {port}")
    return port


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
    if number <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value!r}")
    return number


def add_network_arguments(parser: argparse.ArgumentParser) -> None:
    limits = NETWORK.limits
    net = parser.add_argument_group("network")
    net.add_argument(
        "--bind-address",
        default=NETWORK.bind_address,
        help="address the debug and webhook ports listen on (default "
        f"{NETWORK.bind_address}; use 0.0.0.0 in a cluster)",
    )
    net.add_argument(
        "--extender-bind-address",
        default=NETWORK.extender_bind_address,
        help="address the extender verbs listen on, whatever --bind-address says (default "
        f"{NETWORK.extender_bind_address}: a kube-scheduler in the same pod). Another address needs "
        "--extender-client-ca-file, or serve refuses to start: bind writes with dra-extender's rights",
    )
    net.add_argument(
        "--extender-allow-unauthenticated",
        action="store_true",
        help="start even though the verbs listen on a non-loopback address without "
        "--extender-client-ca-file: anyone who reaches the port can then bind any pending pod to any "
        "node. Logged as a warning at start and exported as dra_extender_verbs_unauthenticated 1",
    )
    net.add_argument(
        "--extender-port",
        type=port_number,
        default=NETWORK.extender_port,
        help=f"scheduler-extender port, verbs under {DEFAULT_PREFIX}/ (default {NETWORK.extender_port})",
    )
    net.add_argument(
        "--debug-port",
        type=port_number,
        default=NETWORK.debug_port,
        help=f"read-only /debug/*, /metrics, /healthz, /readyz (default {NETWORK.debug_port})",
    )
    net.add_argument(
        "--extender-tls-cert-file", help="serve the extender port over HTTPS with this certificate"
    )
    net.add_argument("--extender-tls-private-key-file", help="private key of --extender-tls-cert-file")
    net.add_argument(
        "--extender-client-ca-file",
        help="require extender clients (kube-scheduler) to present a certificate signed by this CA",
    )
    net.add_argument(
        "--max-request-bytes",
        type=positive_int,
        default=limits.max_request_bytes,
        help="largest filter, prioritize or preempt body accepted (413 beyond; bind takes at most 64 KiB). "
        "The default fits a Pod and node names (nodeCacheCapable: true, as deploy/ configures); raise it "
        f"only for full NodeLists (default {limits.max_request_bytes})",
    )
    net.add_argument(
        "--max-connections",
        type=positive_int,
        default=limits.max_connections,
        help="connections each port keeps open at once; more are closed at once (default "
        f"{limits.max_connections}). Keep the ports' sum below the process's file-descriptor limit",
    )
    net.add_argument(
        "--idle-timeout",
        type=parse_positive_duration,
        default=limits.idle_timeout_s,
        help="seconds a connection may stay open without sending a complete request, from when it opens "
        f"or got its last answer (default {limits.idle_timeout_s:g})",
    )
    net.add_argument(
        "--debug-from-anywhere",
        action="store_true",
        help="answer /debug/ pages (pods and claims of the cluster) on every address of the debug port; by "
        "default only loopback connections (kubectl port-forward) get them. /healthz, /readyz and "
        "/metrics answer everyone either way",
    )


def http_limits(args: argparse.Namespace) -> HttpLimits:
    return HttpLimits(
        max_request_bytes=args.max_request_bytes,
        max_connections=args.max_connections,
        idle_timeout_s=args.idle_timeout,
    )


def network_options(args: argparse.Namespace) -> NetworkOptions:
    return NetworkOptions(
        bind_address=args.bind_address,
        extender_bind_address=args.extender_bind_address,
        extender_allow_unauthenticated=args.extender_allow_unauthenticated,
        extender_port=args.extender_port,
        debug_port=args.debug_port,
        extender_tls_cert_file=args.extender_tls_cert_file,
        extender_tls_private_key_file=args.extender_tls_private_key_file,
        extender_client_ca_file=args.extender_client_ca_file,
        limits=http_limits(args),
        debug_from_anywhere=args.debug_from_anywhere,
    )


def reserved_for_limit(value: str) -> int:
    try:
        limit = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
    if not 1 <= limit <= RESERVED_FOR_MAX:
        raise argparse.ArgumentTypeError(f"must be between 1 and {RESERVED_FOR_MAX}, got {limit}")
    return limit


def add_webhook_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("admission webhook")
    group.add_argument(
        "--webhook-port", type=port_number, default=WEBHOOK.port,
        help=f"admission webhook port (TLS, default {WEBHOOK.port})"
    )
    group.add_argument(
        "--tls-cert-file",
        help="serving certificate (PEM) of the webhook; reloaded when it changes. "
        "Without it and --tls-private-key-file the webhook is not served",
    )
    group.add_argument("--tls-private-key-file", help="private key (PEM) of the webhook serving certificate")
    group.add_argument(
        "--reserved-for-limit",
        type=reserved_for_limit,
        default=WEBHOOK.reserved_for_limit,
        help=f"most consumers one ResourceClaim may be reserved for (1-{RESERVED_FOR_MAX}, "
        f"default {WEBHOOK.reserved_for_limit})",
    )


def webhook_options(args: argparse.Namespace) -> WebhookOptions:
    return WebhookOptions(
        port=args.webhook_port,
        tls_cert_file=args.tls_cert_file,
        tls_private_key_file=args.tls_private_key_file,
        reserved_for_limit=args.reserved_for_limit,
    )


def controller_names(text: str) -> tuple[str, ...]:
    try:
        return check_names(text.split(","))
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_controller_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("controllers")
    group.add_argument(
        "--controllers",
        type=controller_names,
        default=CONTROLLERS.names,
        metavar="NAMES",
        help=f"comma-separated controllers to run: {', '.join(CONTROLLER_NAMES)} (default: none)",
    )
    group.add_argument(
        "--taint-eviction-workers",
        type=positive_int,
        default=CONTROLLERS.workers,
        metavar="N",
        help=f"pods evicted concurrently at most (default: {CONTROLLERS.workers})",
    )
    group.add_argument(
        "--driver-loss-grace-period",
        type=parse_duration,
        default=CONTROLLERS.driver_loss_grace_period,
        metavar="DURATION",
        help="how long devices of a pool without ResourceSlices stay reserved (plain seconds or a Go "
        f"duration such as 90s, 5m; default {CONTROLLERS.driver_loss_grace_period:g} s)",
    )
    group.add_argument(
        "--evict-on-driver-loss",
        action="store_true",
        help="evict pods whose devices' driver stayed gone past the grace period",
    )
    add_leader_arguments(parser)


def add_leader_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("leader election (several replicas, one active)")
    group.add_argument(
        "--leader-elect",
        action="store_true",
        help="answer the extender verbs and run the controllers only while holding a coordination.k8s.io "
        "Lease; the other replicas are standbys (not ready, caches warm, webhook served)",
    )
    group.add_argument(
        "--leader-elect-verbs",
        action=argparse.BooleanOptionalAction,
        default=LEADER.verbs,
        help="with --leader-elect, whether the extender verbs wait for the Lease too: "
        "--no-leader-elect-verbs in second-scheduler mode, where each kube-scheduler sidecar, itself "
        "elected, calls only its own extender (default: they do)",
    )
    group.add_argument(
        "--leader-elect-namespace", default=LEADER.namespace, metavar="NS",
        help="namespace of the Lease (default: the pod's own, from $POD_NAMESPACE or the service account; "
        "serve refuses to start with --leader-elect when there is none)")
    group.add_argument("--leader-elect-lease-name", default=LEADER.name, metavar="NAME",
                       help=f"name of the Lease (default {LEADER.name})")
    group.add_argument(
        "--follow-scheduler-lease", default=LEADER.follow_scheduler_lease, metavar="NS/NAME",
        help="second-scheduler mode: the Lease this pod's kube-scheduler sidecar is elected by; the extender "
        "verbs allocate only while a holder of this pod (identity <hostname>_...) keeps renewing it, "
        "after reading every claim and fencing half-written ones (default: not followed)")
    for flag, default, what in (
            ("--leader-elect-lease-duration", LEADER.lease_duration_s,
             "how long a standby waits after the Lease last changed before it takes over"),
            ("--leader-elect-renew-deadline", LEADER.renew_deadline_s,
             "how long the leader keeps acting without renewing; it stops writing at once after"),
            ("--leader-elect-retry-period", LEADER.retry_period_s,
             "how often every replica tries the Lease")):
        group.add_argument(flag, type=parse_positive_duration, default=default, metavar="DURATION",
                           help=f"{what} (client-go's default, {default:g} s)")


def controller_options(args: argparse.Namespace, features: FeatureGates) -> ControllerOptions:
    try:
        return ControllerOptions(
            names=args.controllers,
            workers=args.taint_eviction_workers,
            driver_loss_grace_period=args.driver_loss_grace_period,
            evict_on_driver_loss=args.evict_on_driver_loss,
            leader_elect=args.leader_elect,
            workload_claims=features.enabled(WORKLOAD_CLAIMS),
        )
    except ValueError as error:
        raise OptionsError(str(error)) from None


def leader_options(args: argparse.Namespace) -> LeaderOptions:
    return LeaderOptions(
        enabled=args.leader_elect,
        verbs=args.leader_elect_verbs,
        namespace=args.leader_elect_namespace,
        name=args.leader_elect_lease_name,
        lease_duration_s=args.leader_elect_lease_duration,
        renew_deadline_s=args.leader_elect_renew_deadline,
        retry_period_s=args.leader_elect_retry_period,
        follow_scheduler_lease=args.follow_scheduler_lease,
    )


def serve_options(args: argparse.Namespace) -> ServeOptions:
    """Every component's options from serve's flags; raises OptionsError naming the flags of a
    combination that cannot run (sources, then TLS, then feature gates, then the rest)."""
    source = SourceOptions(kubeconfig=args.kubeconfig, context=args.context, snapshot=args.snapshot,
                           request_timeout_s=args.request_timeout)
    network = network_options(args)
    webhook = webhook_options(args)
    features = features_of(args)
    return ServeOptions(
        source=dataclasses.replace(source, features=features),
        network=network,
        scheduler=scheduler_options(args),
        webhook=webhook,
        controllers=controller_options(args, features),
        headroom=tuple(args.headroom),
        leader=leader_options(args),
    )
