"""What every component of `serve`, `explain` and `simulate` is configured with: one frozen options
class per component, whose field defaults are the only place its defaults are written.

A combination that cannot run raises OptionsError (a ValueError) naming the flags when the options are
made, so code building options directly gets the same refusal as the command line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from allocator import FeatureGates
from common.addresses import is_loopback
from common.httpguard import HttpLimits
from common.objects import parse_namespaced_name
from common.rules import (
    DEFAULT_SCORING_POLICY,
    RESERVED_FOR_MAX,
    SCORING_POLICIES,
)
from extender.controllers import (
    ControllerOptions,
)
from extender.kube.client import DEFAULT_REQUEST_TIMEOUT_S
from extender.kube.leader import LEASE_DURATION_S, RENEW_DEADLINE_S, RETRY_PERIOD_S
from extender.plugin.bindchecks import DEFAULT_SCHEDULER
from extender.plugin.bindingconditions import DEFAULT_BIND_WAIT_S, DEFAULT_BINDING_TIMEOUT_S
from extender.plugin.headroom import parse_shape_flag
from extender.plugin.scheduling import (
    DEFAULT_FILTER_TIMEOUT_S,
    DEFAULT_HOLD_TTL_S,
    DEFAULT_NODE_TIMEOUT_S,
)
from extender.plugin.verdicts import REASONS_CHOICES, Words

if TYPE_CHECKING:
    pass


class OptionsError(ValueError):
    """A flag combination that cannot run; the message names the flags."""


def parse_features(text: str) -> FeatureGates:
    return FeatureGates.parse(text) if text else FeatureGates()


@dataclass(frozen=True)
class SourceOptions:
    kubeconfig: str | None = None
    context: str | None = None
    snapshot: str | None = None  # a directory or file of objects instead of an API server
    features: FeatureGates = field(default_factory=FeatureGates)
    request_timeout_s: float | None = DEFAULT_REQUEST_TIMEOUT_S  # per API request; None: no limit

    def __post_init__(self) -> None:
        if self.snapshot and (self.kubeconfig or self.context):
            raise OptionsError("--snapshot cannot be combined with --kubeconfig or --context")
        if self.request_timeout_s is not None and not self.request_timeout_s > 0:
            raise OptionsError("--request-timeout: must be positive or 0 (no limit), "
                               f"got {self.request_timeout_s}")


@dataclass(frozen=True)
class SchedulerOptions:
    scoring: str = DEFAULT_SCORING_POLICY
    hold_devices: bool = False  # --filter-holds-devices
    hold_timeout_s: float = DEFAULT_HOLD_TTL_S
    node_timeout_s: float = DEFAULT_NODE_TIMEOUT_S
    filter_timeout_s: float = DEFAULT_FILTER_TIMEOUT_S
    filter_cache: bool = True
    reasons: str = Words.UPSTREAM.value  # --reasons: the words of failed nodes in filter's answer
    requeue_claim: str = ""  # --requeue-claim NAMESPACE/NAME ("": no nudge)
    binding_timeout_s: float = DEFAULT_BINDING_TIMEOUT_S  # device binding conditions: the plugin's arg
    bind_wait_s: float = DEFAULT_BIND_WAIT_S  # ... and how long one bind call waits for them
    # The schedulerName of the pods bind takes: kube-scheduler's profiles that call us.
    scheduler_names: tuple[str, ...] = (DEFAULT_SCHEDULER,)

    def __post_init__(self) -> None:
        if not self.scheduler_names or not all(name.strip() for name in self.scheduler_names):
            raise OptionsError(f"--scheduler-names: needs at least one name and no empty ones, got "
                               f"{','.join(self.scheduler_names)!r}")
        if self.scoring not in SCORING_POLICIES:
            raise OptionsError(f"--scoring: {self.scoring!r} is not one of {', '.join(SCORING_POLICIES)}")
        if self.reasons not in REASONS_CHOICES:
            raise OptionsError(f"--reasons: {self.reasons!r} is not one of {', '.join(REASONS_CHOICES)}")
        if self.requeue_claim:
            try:
                parse_namespaced_name(self.requeue_claim)
            except ValueError as error:
                raise OptionsError(f"--requeue-claim: {error}") from None
        timeouts = (("--hold-timeout", self.hold_timeout_s), ("--node-timeout", self.node_timeout_s),
                    ("--filter-timeout", self.filter_timeout_s),
                    ("--binding-timeout", self.binding_timeout_s), ("--bind-wait", self.bind_wait_s))
        for flag, seconds in timeouts:
            if not seconds > 0:
                raise OptionsError(f"{flag}: must be positive, got {seconds}")


SCHEDULER = SchedulerOptions()


@dataclass(frozen=True)
class NetworkOptions:
    bind_address: str = "127.0.0.1"  # the debug and webhook ports
    # The verbs, on loopback unless asked: only a kube-scheduler in the same pod needs them there.
    extender_bind_address: str = "127.0.0.1"
    extender_allow_unauthenticated: bool = False
    extender_port: int = 8888
    debug_port: int = 8889
    extender_tls_cert_file: str | None = None
    extender_tls_private_key_file: str | None = None
    extender_client_ca_file: str | None = None
    limits: HttpLimits = field(default_factory=HttpLimits)
    debug_from_anywhere: bool = False

    def __post_init__(self) -> None:
        # TLS fails closed: half a TLS set-up never falls back to plain HTTP.
        if bool(self.extender_tls_cert_file) != bool(self.extender_tls_private_key_file):
            raise OptionsError("--extender-tls-cert-file and --extender-tls-private-key-file go together")
        if self.extender_client_ca_file and not self.extender_tls_cert_file:
            raise OptionsError(
                "--extender-client-ca-file needs --extender-tls-cert-file and "
                "--extender-tls-private-key-file: client certificates are only checked over HTTPS, "
                "and the extender would otherwise serve plain HTTP to anyone")
        if self.verbs_unauthenticated and not self.extender_allow_unauthenticated:
            raise OptionsError(
                f"--extender-bind-address {self.extender_bind_address} is not a loopback address and "
                "--extender-client-ca-file is not set: anyone who reaches the port could call bind, which "
                "writes with dra-extender's rights. Require kube-scheduler's client certificate with "
                "--extender-client-ca-file (and --extender-tls-cert-file, --extender-tls-private-key-file), "
                "listen on 127.0.0.1, or accept the exposure with --extender-allow-unauthenticated")

    @property
    def verbs_unauthenticated(self) -> bool:
        """Whether the verbs answer clients from the network that present no client certificate."""
        return not is_loopback(self.extender_bind_address) and not self.extender_client_ca_file


NETWORK = NetworkOptions()


@dataclass(frozen=True)
class WebhookOptions:
    port: int = 8443
    tls_cert_file: str | None = None
    tls_private_key_file: str | None = None
    reserved_for_limit: int = RESERVED_FOR_MAX

    def __post_init__(self) -> None:
        # Half a TLS set-up never falls back to running without the webhook.
        if bool(self.tls_cert_file) != bool(self.tls_private_key_file):
            raise OptionsError(
                "--tls-cert-file and --tls-private-key-file go together (the admission webhook needs both; "
                "leave both out to run without it)")
        if not 1 <= self.reserved_for_limit <= RESERVED_FOR_MAX:
            raise OptionsError(f"--reserved-for-limit: must be between 1 and {RESERVED_FOR_MAX}, "
                               f"got {self.reserved_for_limit}")

    @property
    def enabled(self) -> bool:
        return bool(self.tls_cert_file and self.tls_private_key_file)


WEBHOOK = WebhookOptions()


CONTROLLERS = ControllerOptions()


@dataclass(frozen=True)
class LeaderOptions:
    """--leader-elect: this replica allocates (answers the extender verbs) and runs the controllers only
    while it holds a coordination.k8s.io Lease, with client-go's default timings."""

    enabled: bool = False
    # With the Lease, the extender verbs too; without (second-scheduler mode, whose kube-scheduler
    # sidecars elect their own leader and each calls only its own extender), only the controllers.
    verbs: bool = True
    namespace: str = ""  # "": the pod's own namespace
    name: str = "dra-extender"
    lease_duration_s: float = LEASE_DURATION_S
    renew_deadline_s: float = RENEW_DEADLINE_S
    retry_period_s: float = RETRY_PERIOD_S
    identity: str = ""  # of this replica in the Lease; "": hostname_random
    # NAMESPACE/NAME of the Lease this pod's kube-scheduler sidecar holds while it is the leader
    # (second-scheduler mode): the verbs allocate only then, after a fence. "": not followed.
    follow_scheduler_lease: str = ""

    def __post_init__(self) -> None:
        if self.follow_scheduler_lease:
            try:
                parse_namespaced_name(self.follow_scheduler_lease)
            except ValueError as error:
                raise OptionsError(f"--follow-scheduler-lease: {error}") from None
            if self.enabled and self.verbs:
                raise OptionsError(
                    "--follow-scheduler-lease and --leader-elect would both decide when the extender verbs "
                    "may allocate: add --no-leader-elect-verbs (second-scheduler mode), or drop one")
        if not self.lease_duration_s > self.renew_deadline_s > self.retry_period_s > 0:
            raise OptionsError(
                "--leader-elect-lease-duration > --leader-elect-renew-deadline > "
                f"--leader-elect-retry-period > 0 must hold, got {self.lease_duration_s:g}, "
                f"{self.renew_deadline_s:g}, {self.retry_period_s:g}")
        if not self.name:
            raise OptionsError("--leader-elect-lease-name: must not be empty")


LEADER = LeaderOptions()


@dataclass(frozen=True)
class ServeOptions:
    source: SourceOptions = field(default_factory=SourceOptions)
    network: NetworkOptions = field(default_factory=NetworkOptions)
    scheduler: SchedulerOptions = field(default_factory=SchedulerOptions)
    webhook: WebhookOptions = field(default_factory=WebhookOptions)
    controllers: ControllerOptions = field(default_factory=ControllerOptions)
    leader: LeaderOptions = field(default_factory=LeaderOptions)
    headroom: tuple[str, ...] = ()  # --headroom shapes for the gauge and the device map

    def __post_init__(self) -> None:
        for text in self.headroom:
            try:
                parse_shape_flag(text)
            except ValueError as error:
                raise OptionsError(str(error)) from None
