"""Which of the API calls a command needs its user may not make, asked up front and all at once.

A command that lists and watches the cluster would otherwise meet a 403 per kind, retry, and end with
"did not sync" a minute later. Here each (verb, resource, scope) is put to the API server as a
SelfSubjectAccessReview, which every authenticated user may create, in parallel; the answer names
every missing permission the way RBAC rules are written:

    cannot list, watch resourceslices.resource.k8s.io at the cluster scope
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass

from extender.kube.client import ApiError, KubeClient

REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


@dataclass(frozen=True)
class Need:
    """One API call a command makes: `verb` on `resource` (plural) of `group`, in `namespace` or, for
    None, at the cluster scope."""

    verb: str
    resource: str
    group: str = ""
    namespace: str | None = None

    @property
    def qualified(self) -> str:
        return f"{self.resource}.{self.group}" if self.group else self.resource

    @property
    def scope(self) -> str:
        return "at the cluster scope" if self.namespace is None else f"in namespace {self.namespace}"


def needs_of_path(path: str, verbs: Iterable[str], namespace: str | None = None) -> list[Need]:
    """The needs of calling `verbs` on a collection path such as /apis/resource.k8s.io/v1/resourceslices
    or /api/v1/nodes."""
    parts = path.strip("/").split("/")
    group = "" if parts[0] == "api" else parts[1]
    return [Need(verb, parts[-1], group, namespace) for verb in verbs]


class AccessDenied(Exception):
    """The user may not make some of the calls a command needs; the message names each."""

    def __init__(self, missing: list[Need]) -> None:
        super().__init__(describe(missing))
        self.missing = missing


def describe(missing: list[Need]) -> str:
    """One clause per resource and scope, its verbs together, in the order first needed."""
    verbs: dict[tuple[str, str], list[str]] = {}
    for need in missing:
        listed = verbs.setdefault((need.qualified, need.scope), [])
        if need.verb not in listed:
            listed.append(need.verb)
    return "; ".join(f"cannot {', '.join(v)} {resource} {scope}" for (resource, scope), v in verbs.items())


async def _allowed(client: KubeClient, need: Need) -> bool:
    attributes = {"verb": need.verb, "group": need.group, "resource": need.resource}
    if need.namespace is not None:
        attributes["namespace"] = need.namespace
    review = await client.create(REVIEWS, {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attributes},
    })
    return bool((review.get("status") or {}).get("allowed"))


async def missing(client: KubeClient, needs: Iterable[Need]) -> list[Need] | None:
    """The needs the API server denies, in the order given; None when it cannot be asked (the review
    API refused or not served): the calls themselves will then tell."""
    wanted = list(dict.fromkeys(needs))
    try:
        answers = await asyncio.gather(*(_allowed(client, need) for need in wanted))
    except ApiError:
        return None
    return [need for need, allowed in zip(wanted, answers, strict=True) if not allowed]


async def check(client: KubeClient, needs: Iterable[Need]) -> None:
    """Raise AccessDenied naming every need the API server denies."""
    denied = await missing(client, needs)
    if denied:
        raise AccessDenied(denied)
