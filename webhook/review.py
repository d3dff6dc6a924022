"""AdmissionReview (admission.k8s.io/v1): parsing the request envelope and building the response."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

import orjson

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})
# The API server passes warnings through only up to 256 characters and asks for less than 120.
WARNING_MAX_LENGTH = 119


class MalformedReview(ValueError):
    """The request body is not an AdmissionReview we can evaluate; answered with HTTP 400."""


def mapping(value: Any, path: str) -> dict:
    """`value` as an object; absent (None) reads as empty."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise MalformedReview(f"{path}: expected an object, got {type(value).__name__}")
    return value


def sequence(value: Any, path: str) -> list:
    """`value` as a list; absent (None) reads as empty."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise MalformedReview(f"{path}: expected a list, got {type(value).__name__}")
    return value


def text(value: Any, path: str) -> str:
    """`value` as a string; absent (None) reads as empty."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise MalformedReview(f"{path}: expected a string, got {type(value).__name__}")
    return value


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    uid: str
    operation: str
    group: str
    resource: str
    sub_resource: str
    namespace: str
    name: str
    object: dict | None
    old_object: dict | None
    dry_run: bool
    username: str

    @property
    def resource_key(self) -> str:
        """ "resourceclaims" or "resourceclaims/status": the form webhook rules and metrics use."""
        return f"{self.resource}/{self.sub_resource}" if self.sub_resource else self.resource


def parse_review(body: bytes) -> AdmissionRequest:
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError as err:
        raise MalformedReview(f"body is not JSON: {err}") from None
    if not isinstance(review, dict):
        raise MalformedReview("body: expected an AdmissionReview object")
    if review.get("apiVersion") != API_VERSION or review.get("kind") != KIND:
        raise MalformedReview(
            f"apiVersion/kind must be {API_VERSION}/{KIND}, got "
            f"{review.get('apiVersion')!r}/{review.get('kind')!r}"
        )
    request = review.get("request")
    if not isinstance(request, dict):
        raise MalformedReview("request: missing or not an object")
    uid = text(request.get("uid"), "request.uid")
    if not uid:
        raise MalformedReview("request.uid: missing")
    operation = text(request.get("operation"), "request.operation")
    if operation not in OPERATIONS:
        raise MalformedReview(f"request.operation: {operation!r} is not one of {sorted(OPERATIONS)}")
    resource = mapping(request.get("resource"), "request.resource")
    resource_name = text(resource.get("resource"), "request.resource.resource")
    if not resource_name:
        raise MalformedReview("request.resource.resource: missing")
    obj = request.get("object")
    old = request.get("oldObject")
    if operation in ("CREATE", "UPDATE") and not isinstance(obj, dict):
        raise MalformedReview(f"request.object: {operation} requires the object")
    if operation == "UPDATE" and not isinstance(old, dict):
        raise MalformedReview("request.oldObject: UPDATE requires the old object")
    dry_run = request.get("dryRun")
    if dry_run is not None and not isinstance(dry_run, bool):
        raise MalformedReview("request.dryRun: expected a boolean")
    user = mapping(request.get("userInfo"), "request.userInfo")
    return AdmissionRequest(
        uid=uid,
        operation=operation,
        group=text(resource.get("group"), "request.resource.group"),
        resource=resource_name,
        sub_resource=text(request.get("subResource"), "request.subResource"),
        namespace=text(request.get("namespace"), "request.namespace"),
        name=text(request.get("name"), "request.name"),
        object=obj if isinstance(obj, dict) else None,
        old_object=old if isinstance(old, dict) else None,
        dry_run=bool(dry_run),
        username=text(user.get("username"), "request.userInfo.username"),
    )


def clip_warning(message: str) -> str:
    return message if len(message) <= WARNING_MAX_LENGTH else message[: WARNING_MAX_LENGTH - 1] + "…"


@dataclass(slots=True)
class Decision:
    allowed: bool = True
    message: str = ""
    code: int = 200
    reason: str = ""
    warnings: list[str] = field(default_factory=list)
    patch: list[dict] = field(default_factory=list)

    @classmethod
    def deny(cls, message: str, *, code: int = 403, reason: str = "Forbidden") -> Decision:
        return cls(allowed=False, message=message, code=code, reason=reason)

    @property
    def outcome(self) -> str:
        if not self.allowed:
            return "denied"
        return "patched" if self.patch else "allowed"


# A denial is read by a person in kubectl's output and the API server's log: a few problems say enough.
LISTED_PROBLEMS = 3


def summarize_problems(problems: list[str]) -> str:
    """All problems when there are few; otherwise how many and the first LISTED_PROBLEMS of them."""
    if len(problems) <= LISTED_PROBLEMS + 1:
        return "; ".join(problems)
    return (f"{len(problems)} problems, the first {LISTED_PROBLEMS}: " + "; ".join(problems[:LISTED_PROBLEMS])
            + f"; and {len(problems) - LISTED_PROBLEMS} more")


def review_response(uid: str, decision: Decision) -> bytes:
    response: dict[str, Any] = {"uid": uid, "allowed": decision.allowed}
    if not decision.allowed:
        response["status"] = {
            "code": decision.code,
            "reason": decision.reason,
            "message": decision.message,
        }
    if decision.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(decision.patch)).decode("ascii")
    if decision.warnings:
        response["warnings"] = [clip_warning(w) for w in decision.warnings]
    return orjson.dumps({"apiVersion": API_VERSION, "kind": KIND, "response": response})
