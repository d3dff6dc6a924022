"""Routes an AdmissionReview body to the rule for its resource and operation; answers (HTTP status, body).

Transport-free so the server, the tests and the benchmark share it. dryRun requests are evaluated like any
other: none of the rules has side effects.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import orjson
from prometheus_client import REGISTRY

from allocator import FeatureGates
from common.claimrefs import WORKLOAD_CLAIMS
from common.rules import RESERVED_FOR_MAX
from webhook.claim_status import validate_claim_status
from webhook.derived import derived_check
from webhook.lookup import ClusterLookup
from webhook.metrics import WebhookMetrics
from webhook.pods import validate_pod_create
from webhook.review import AdmissionRequest, Decision, MalformedReview, parse_review, review_response
from webhook.selectors import Compiler, validate_selectors
from webhook.taint_rules import validate_taint_rule
from webhook.tolerations import copy_tolerations

log = logging.getLogger(__name__)

Webhook = Literal["mutate", "validate"]
RESOURCE_GROUP = "resource.k8s.io"
# The metric label of every resource no rule handles.
OTHER_RESOURCE = "other"


@dataclass(frozen=True, slots=True)
class Rule:
    evaluate: Callable[[AdmissionRequest], Decision]
    # What a bug inside the rule answers: the same choice as the failurePolicy recommended for the webhook
    # (fail open where the API server's own validation remains, closed where skipping the rule hurts).
    fail_open: bool


def cel_compiler(features: FeatureGates) -> Compiler:
    """Compiles with the allocator's engine, imported on first use so the webhook starts without it."""
    consumable_capacity = features.enabled("DRAConsumableCapacity")
    list_type_attributes = features.enabled("DRAListTypeAttributes")

    def compile_selector(expression: str) -> object:
        from allocator import cel

        options = cel.CompileOptions(
            consumable_capacity=consumable_capacity, list_type_attributes=list_type_attributes
        )
        return cel.compile(expression, options)

    return compile_selector


class AdmissionHandler:
    def __init__(
        self,
        lookup: ClusterLookup,
        *,
        reserved_for_limit: int = RESERVED_FOR_MAX,
        features: FeatureGates | None = None,
        compile_selector: Compiler | None = None,
        metrics: WebhookMetrics | None = None,
    ) -> None:
        if reserved_for_limit < 1:
            raise ValueError(f"reserved_for_limit must be at least 1, got {reserved_for_limit}")
        compiler = compile_selector or cel_compiler(features or FeatureGates())
        self.lookup = lookup
        self.metrics = metrics if metrics is not None else WebhookMetrics.on(REGISTRY)
        workload_claims = (features or FeatureGates()).enabled(WORKLOAD_CLAIMS)
        status_rule = Rule(lambda r: validate_claim_status(r, lookup, reserved_for_limit), fail_open=True)
        check_derived = derived_check(features or FeatureGates())
        selector_rule = Rule(lambda r: validate_selectors(r, lookup, compiler, check_derived), fail_open=True)
        taint_rule = Rule(lambda r: validate_taint_rule(r, lookup), fail_open=False)
        self._rules: dict[tuple[Webhook, str, str, str], Rule] = {
            ("mutate", RESOURCE_GROUP, "resourceclaims/status", "UPDATE"): Rule(
                copy_tolerations, fail_open=False
            ),
            ("validate", RESOURCE_GROUP, "resourceclaims/status", "UPDATE"): status_rule,
            ("validate", "", "pods", "CREATE"): Rule(
                lambda r: validate_pod_create(r, lookup, reserved_for_limit=reserved_for_limit,
                                              workload_claims=workload_claims),
                fail_open=True
            ),
            ("validate", RESOURCE_GROUP, "resourceclaims", "CREATE"): selector_rule,
            ("validate", RESOURCE_GROUP, "resourceclaimtemplates", "CREATE"): selector_rule,
            ("validate", RESOURCE_GROUP, "devicetaintrules", "CREATE"): taint_rule,
            ("validate", RESOURCE_GROUP, "devicetaintrules", "UPDATE"): taint_rule,
        }
        self._labelled_resources = {(group, resource) for _, group, resource, _ in self._rules}

    def handle(self, webhook: Webhook, body: bytes) -> tuple[int, bytes]:
        started = time.perf_counter()
        try:
            return self._answer(webhook, body)
        finally:
            self.metrics.latency.labels(webhook).observe(time.perf_counter() - started)

    def _answer(self, webhook: Webhook, body: bytes) -> tuple[int, bytes]:
        try:
            request = parse_review(body)
        except MalformedReview as err:
            self.metrics.decisions.labels(webhook, "", "", "malformed").inc()
            return 400, orjson.dumps({"error": f"malformed AdmissionReview: {err}"})
        try:
            decision, outcome = self._decide(webhook, request)
        except MalformedReview as err:
            resource = self._resource_label(request)
            self.metrics.decisions.labels(webhook, request.operation, resource, "malformed").inc()
            return 400, orjson.dumps({"error": f"malformed AdmissionReview (uid {request.uid}): {err}"})
        resource = self._resource_label(request)
        self.metrics.decisions.labels(webhook, request.operation, resource, outcome).inc()
        return 200, review_response(request.uid, decision)

    def _resource_label(self, request: AdmissionRequest) -> str:
        """The resource for the metric label, from a closed set: a review names whatever resource its
        sender likes, and every new label value is a time series kept until the process exits."""
        if (request.group, request.resource_key) in self._labelled_resources:
            return request.resource_key
        return OTHER_RESOURCE

    def _decide(self, webhook: Webhook, request: AdmissionRequest) -> tuple[Decision, str]:
        rule = self._rules.get((webhook, request.group, request.resource_key, request.operation))
        if rule is None:
            return Decision(), "allowed"
        try:
            decision = rule.evaluate(request)
        except MalformedReview:
            raise
        except Exception:
            log.exception(
                "%s webhook: rule for %s %s failed (uid %s)",
                webhook,
                request.operation,
                request.resource_key,
                request.uid,
            )
            if rule.fail_open:
                return Decision(warnings=["dra-extender webhook: internal error, check skipped"]), "error"
            return Decision.deny(
                "dra-extender webhook: internal error", code=500, reason="InternalError"
            ), "error"
        if not decision.allowed:
            log.warning(
                "%s webhook denied %s %s %s/%s (uid %s, user %s%s): %s",
                webhook,
                request.operation,
                request.resource_key,
                request.namespace,
                request.name,
                request.uid,
                request.username,
                ", dry run" if request.dry_run else "",
                decision.message,
            )
        return decision, decision.outcome
