"""RBAC in deploy/ grants exactly the API calls the code makes: every call covered, no rule unused.

The calls are listed by hand in API_CALLS, and that table is itself checked against the source: every
KubeClient call site in extender/ and webhook/ is found by walking the syntax tree, its path is
resolved from the string constants, f-strings and attributes that build it, and the resulting
(verb, group, resource) must be in the table (and every table entry must come from a call site). A new
API call without a table entry and a rule makes these tests fail.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from deploy_manifests import (
    DEPLOY,
    NAMESPACE,
    REPO_ROOT,
    SERVICE_ACCOUNT,
    find,
    load_docs,
)

from extender.kube.informer import DEFAULT_KINDS, POD_GROUPS
from extender.options import LEADER

SOURCE_PACKAGES = ("common", "extender", "webhook")
# The client itself: its methods are the calls, not call sites.
CLIENT_MODULE = "extender/kube/client.py"
CLIENT_METHODS = {"get", "list", "pages", "watch", "create", "update", "patch", "delete"}
CLIENT_NAMES = {"client", "_client"}
CONTROLLERS_PREFIX = "extender/controllers/"
# Modules under CONTROLLERS_PREFIX whose calls every replica makes, controllers or not: their rules are
# in the base ClusterRole.
BASE_MODULES = frozenset({"extender/kube/events.py"})


@dataclass(frozen=True, order=True)
class Permission:
    verb: str
    group: str
    resource: str  # with "/subresource" where there is one

    def __str__(self) -> str:
        return f"{self.verb} {self.group or 'core'}/{self.resource}"


P = Permission
# (module, permission): what each module asks of the API server. Written by hand; checked below.
API_CALLS: set[tuple[str, Permission]] = {
    # cluster cache: list + watch of every kind it holds
    *{("extender/kube/informer.py", P(verb, group, resource))
      for verb in ("list", "watch")
      for group, resource in (("", "nodes"), ("", "pods"), ("resource.k8s.io", "deviceclasses"),
                              ("resource.k8s.io", "resourceslices"), ("resource.k8s.io", "resourceclaims"),
                              ("resource.k8s.io", "resourceclaimtemplates"),
                              ("resource.k8s.io", "devicetaintrules"),
                              # only with --feature-gates=DRAWorkloadResourceClaims=true
                              ("scheduling.k8s.io", "podgroups"))},
    # bind: re-read on conflict, finalizer, allocation + reservation, Binding, pod check after a 409
    ("extender/plugin/claimwriter.py", P("get", "resource.k8s.io", "resourceclaims")),
    # the fence before the first allocation: every claim, read from the API server
    ("extender/plugin/claimwriter.py", P("list", "resource.k8s.io", "resourceclaims")),
    ("extender/plugin/claimwriter.py", P("update", "resource.k8s.io", "resourceclaims")),
    ("extender/plugin/claimwriter.py", P("update", "resource.k8s.io", "resourceclaims/status")),
    ("extender/plugin/claimwriter.py", P("update", "resource.k8s.io", "resourceclaims/binding")),
    ("extender/plugin/claimwriter.py", P("create", "", "pods/binding")),
    ("extender/plugin/claimwriter.py", P("get", "", "pods")),
    # extended resources backed by DRA: the pod's special claim, its removal, extendedResourceClaimStatus
    ("extender/plugin/claimwriter.py", P("create", "resource.k8s.io", "resourceclaims")),
    ("extender/plugin/claimwriter.py", P("delete", "resource.k8s.io", "resourceclaims")),
    ("extender/plugin/claimwriter.py", P("patch", "", "pods/status")),
    # --requeue-claim: our own claim, updated (created when missing) to have kube-scheduler retry pods
    ("extender/plugin/requeue.py", P("update", "resource.k8s.io", "resourceclaims")),
    ("extender/plugin/requeue.py", P("create", "resource.k8s.io", "resourceclaims")),
    # pod Events: the scheduler's DRAExplanation, the controllers' evictions and driver loss
    ("extender/kube/events.py", P("create", "", "events")),
    # eviction: re-read, DisruptionTarget condition, delete with UID precondition
    ("extender/controllers/evictor.py", P("get", "", "pods")),
    ("extender/controllers/evictor.py", P("patch", "", "pods/status")),
    ("extender/controllers/evictor.py", P("delete", "", "pods")),
    ("extender/controllers/taint_eviction.py", P("patch", "resource.k8s.io", "devicetaintrules/status")),
    # events: the eviction controllers', and the repair's of a pod bound without its devices (base)
    ("extender/kube/events.py", P("create", "", "events")),
    # --leader-elect: the Lease (a namespaced Role of the base)
    ("extender/kube/leader.py", P("get", "coordination.k8s.io", "leases")),
    ("extender/kube/leader.py", P("create", "coordination.k8s.io", "leases")),
    ("extender/kube/leader.py", P("update", "coordination.k8s.io", "leases")),
    *(USER_CALLS := {
        # Made only by the commands a person runs (explain, headroom) with their own credentials, never by
        # serve: the access check (every authenticated user may create SelfSubjectAccessReviews, through
        # system:basic-user) and explain's read of the one pod it explains.
        ("extender/kube/access.py", P("create", "authorization.k8s.io", "selfsubjectaccessreviews")),
        ("extender/wiring.py", P("get", "", "pods")),
    }),
}


# ---- call sites in the source -----------------------------------------------------------------------


@dataclass(frozen=True)
class CallSite:
    module: str
    line: int
    method: str
    path: str | None  # URL template with {} for unknown parts; None when it cannot be resolved

    def __str__(self) -> str:
        return f"{self.module}:{self.line} {self.method}({self.path or '?'})"


def _source_files() -> Iterator[Path]:
    for package in SOURCE_PACKAGES:
        yield from sorted((REPO_ROOT / package).rglob("*.py"))


def _is_client_call(node: ast.AST) -> bool:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return False
    receiver = node.func.value
    name = receiver.attr if isinstance(receiver, ast.Attribute) else getattr(receiver, "id", None)
    return node.func.attr in CLIENT_METHODS and name in CLIENT_NAMES


class _PathResolver:
    """Turns the expression that builds a URL path into a template (unknown parts become {})."""

    def __init__(self, tree: ast.Module) -> None:
        self.constants: dict[str, ast.expr] = {}
        self.attributes: dict[str, ast.expr] = {}
        self.path_methods: dict[str, ast.expr] = {}
        for node in tree.body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)):
                self.constants[node.targets[0].id] = node.value
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                        and target.value.id == "self"):
                    self.attributes[target.attr] = node.value
            if isinstance(node, ast.FunctionDef) and node.name == "path":
                returns = [n for n in ast.walk(node) if isinstance(n, ast.Return) and n.value is not None]
                if len(returns) == 1:
                    self.path_methods["path"] = returns[0].value

    def resolve(self, node: ast.expr, depth: int = 0) -> str | None:
        if depth > 10:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr):
            parts = []
            for value in node.values:
                if isinstance(value, ast.Constant):
                    parts.append(str(value.value))
                else:
                    assert isinstance(value, ast.FormattedValue)
                    inner = self.resolve(value.value, depth + 1)
                    parts.append(inner if inner is not None and inner.startswith("/") else "{}")
            return "".join(parts)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.resolve(node.left, depth + 1), self.resolve(node.right, depth + 1)
            return left + right if left is not None and right is not None else None
        if isinstance(node, ast.Name) and node.id in self.constants:
            return self.resolve(self.constants[node.id], depth + 1)
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
                and node.attr in self.attributes):
            return self.resolve(self.attributes[node.attr], depth + 1)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "format":
                template = self.resolve(node.func.value, depth + 1)
                return _blank_fields(template) if template is not None else None
            if node.func.attr in self.path_methods and not node.args:
                return self.resolve(self.path_methods[node.func.attr], depth + 1)
        return None


def _blank_fields(template: str) -> str:
    out, depth = [], 0
    for char in template:
        if char == "{":
            depth += 1
            if depth == 1:
                out.append("{}")
        elif char == "}":
            depth -= 1
        elif depth == 0:
            out.append(char)
    return "".join(out)


def sites_in(source: str, module: str) -> list[CallSite]:
    tree = ast.parse(source, filename=module)
    resolver = _PathResolver(tree)
    sites = []
    for node in ast.walk(tree):
        if _is_client_call(node):
            assert isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            path = resolver.resolve(node.args[0]) if node.args else None
            sites.append(CallSite(module, node.lineno, node.func.attr, path))
    return sites


@cache
def call_sites() -> tuple[CallSite, ...]:
    sites = []
    for file in _source_files():
        module = file.relative_to(REPO_ROOT).as_posix()
        if module != CLIENT_MODULE:
            sites.extend(sites_in(file.read_text(), module))
    return tuple(sites)


def permission_for(method: str, path: str) -> Permission:
    """What RBAC checks for a request: verb from the method and whether a name is given."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    if parts[0] == "api":
        group, rest = "", parts[2:]
    elif parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        raise AssertionError(f"not an API path: {path}")
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    resource, named = rest[0], len(rest) > 1
    subresource = rest[2] if len(rest) > 2 else None
    verb = {
        "get": "get" if named else "list",
        "list": "list",
        "pages": "list",
        "watch": "watch",
        "create": "create",
        "update": "update",
        "patch": "patch",
        "delete": "delete" if named else "deletecollection",
    }[method]
    return Permission(verb, group, f"{resource}/{subresource}" if subresource else resource)


def _with_synthetic(module: str, permission: Permission) -> Iterator[tuple[str, Permission]]:
    yield module, permission
    # Writes of status.allocation / status.reservedFor are also authorized against resourceclaims/binding
    # with the request's verb (api-protocols.md §7.4). Every claim status write of the code sets them.
    if permission.resource == "resourceclaims/status" and permission.verb in ("update", "patch"):
        yield module, Permission(permission.verb, permission.group, "resourceclaims/binding")


def derived_calls() -> set[tuple[str, Permission]]:
    derived: set[tuple[str, Permission]] = set()
    for site in call_sites():
        if (site.module == "extender/kube/informer.py" and site.method in ("list", "pages", "watch")
                and site.path is None):
            # The informer's path is the watched kind's: every kind in DEFAULT_KINDS, and PodGroups
            # with the DRAWorkloadResourceClaims gate.
            for watched in (*DEFAULT_KINDS, POD_GROUPS):
                derived.add((site.module, permission_for(site.method, watched.path)))
            continue
        assert site.path is not None, f"cannot resolve the URL path at {site}; extend the resolver"
        for entry in _with_synthetic(site.module, permission_for(site.method, site.path)):
            derived.add(entry)
    return derived


# ---- rules in the manifests ---------------------------------------------------------------------------


def expand(rules: Iterable[dict]) -> set[Permission]:
    granted = set()
    for rule in rules:
        assert "nonResourceURLs" not in rule, "the extender calls no non-resource URLs"
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group, resource, verb), f"wildcard in {rule}"
                    granted.add(Permission(verb, group, resource))
    return granted


def _role_of(module: str) -> str:
    return "controllers" if module.startswith(CONTROLLERS_PREFIX) and module not in BASE_MODULES else "base"


def calls_of(role: str) -> set[Permission]:
    """The calls serve makes with the permissions of `role` ("base" or "controllers")."""
    return {p for module, p in API_CALLS - USER_CALLS if _role_of(module) == role}


BASE_RBAC = DEPLOY / "base" / "rbac.yaml"
LEADER_ROLE = "dra-extender-leader"
CONTROLLERS_DIR = DEPLOY / "components" / "eviction-controller"


def _binds_service_account(binding: dict, role_kind: str, role_name: str) -> None:
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind,
                                  "name": role_name}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT,
                                    "namespace": NAMESPACE}]


# ---- tests ------------------------------------------------------------------------------------------------


def test_every_call_site_resolves_to_a_table_entry_and_back() -> None:
    derived = derived_calls()
    missing = sorted(derived - API_CALLS)
    stale = sorted(API_CALLS - derived)
    assert not missing, "API calls in the source without an entry in API_CALLS (and probably no RBAC " \
        "rule): " + ", ".join(f"{m}: {p}" for m, p in missing)
    assert not stale, "API_CALLS entries no call site makes any more: " + ", ".join(
        f"{m}: {p}" for m, p in stale)


def test_the_scanner_sees_the_known_call_sites() -> None:
    # Guards the scanner itself: if it silently found nothing, the comparison above would be vacuous.
    sites = call_sites()
    modules = {site.module for site in sites}
    assert {"extender/kube/informer.py", "extender/plugin/claimwriter.py", "extender/controllers/evictor.py",
            "extender/kube/leader.py", "extender/kube/events.py",
            "extender/controllers/taint_eviction.py"} <= modules
    assert len(sites) >= 14
    assert not [s for s in sites if s.module.startswith("webhook/")], "the webhook reads only the cache"


def test_a_new_call_site_is_resolved_to_its_permission() -> None:
    # What a future change could add; the scanner must see it and name the permission it needs.
    source = """
NODES = "/api/v1/nodes/{name}"

class Patcher:
    def __init__(self, client, ns):
        self._client = client
        self._collection = f"/apis/apps/v1/namespaces/{ns}/deployments"
        self._path = f"{self._collection}/x"

    async def run(self, name, ref):
        await self._client.patch(NODES.format(name=name) + "/status", {})
        await self._client.delete(self._path)
        await self._client.create(ref.path(), {})

class Ref:
    def path(self):
        return f"/api/v1/namespaces/{self.namespace}/configmaps"
"""
    sites = sites_in(source, "extender/new.py")
    assert [permission_for(s.method, s.path or "") for s in sites] == [
        P("patch", "", "nodes/status"), P("delete", "apps", "deployments"), P("create", "", "configmaps")]
    assert not {("extender/new.py", P("patch", "", "nodes/status"))} <= API_CALLS


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("get", "/api/v1/namespaces/{}/pods/{}", P("get", "", "pods")),
        ("list", "/api/v1/pods", P("list", "", "pods")),
        ("create", "/api/v1/namespaces/{}/pods/{}/binding", P("create", "", "pods/binding")),
        ("update", "/apis/resource.k8s.io/v1/namespaces/{}/resourceclaims/{}/status",
         P("update", "resource.k8s.io", "resourceclaims/status")),
        ("patch", "/apis/resource.k8s.io/v1/devicetaintrules/{}/status",
         P("patch", "resource.k8s.io", "devicetaintrules/status")),
        ("create", "/apis/coordination.k8s.io/v1/namespaces/{}/leases",
         P("create", "coordination.k8s.io", "leases")),
        ("get", "/apis/resource.k8s.io/v1/deviceclasses", P("list", "resource.k8s.io", "deviceclasses")),
        ("delete", "/api/v1/namespaces/{}/pods", P("deletecollection", "", "pods")),
    ],
)
def test_permission_for_paths(method: str, path: str, expected: Permission) -> None:
    assert permission_for(method, path) == expected


def test_base_roles_are_exactly_what_the_extender_calls() -> None:
    docs = load_docs(BASE_RBAC)
    granted = expand(find(docs, "ClusterRole", "dra-extender")["rules"])
    needed = {p for p in calls_of("base") if p.resource != "leases"}
    assert not needed - granted, f"calls without a rule: {sorted(map(str, needed - granted))}"
    assert not granted - needed, f"rules no call uses: {sorted(map(str, granted - needed))}"
    _binds_service_account(find(docs, "ClusterRoleBinding", "dra-extender"), "ClusterRole", "dra-extender")
    # The Lease is in the release namespace: a Role, not cluster-wide.
    lease_role = find(docs, "Role", LEADER_ROLE)
    assert lease_role["metadata"]["namespace"] == NAMESPACE
    leases = {p for p in calls_of("base") if p.resource == "leases"}
    assert expand(lease_role["rules"]) == leases
    _binds_service_account(find(docs, "RoleBinding", LEADER_ROLE), "Role", LEADER_ROLE)


def test_eviction_controller_role_is_exactly_what_the_controllers_call() -> None:
    docs = load_docs(CONTROLLERS_DIR / "rbac.yaml")
    granted = expand(find(docs, "ClusterRole", "dra-extender-controllers")["rules"])
    needed = calls_of("controllers")
    assert not needed - granted, f"calls without a rule: {sorted(map(str, needed - granted))}"
    assert not granted - needed, f"rules no call uses: {sorted(map(str, granted - needed))}"
    assert [d["kind"] for d in docs] == ["ClusterRole", "ClusterRoleBinding"]
    _binds_service_account(find(docs, "ClusterRoleBinding", "dra-extender-controllers"), "ClusterRole",
                           "dra-extender-controllers")


def test_lease_rules_name_the_lease_every_replica_uses() -> None:
    lease_role = find(load_docs(BASE_RBAC), "Role", LEADER_ROLE)
    named = [rule for rule in lease_role["rules"] if rule.get("resourceNames")]
    assert named and all(rule["resourceNames"] == [LEADER.name] for rule in named)
    # create cannot be limited by name: the only verb granted without resourceNames.
    unnamed = [rule for rule in lease_role["rules"] if not rule.get("resourceNames")]
    assert [rule["verbs"] for rule in unnamed] == [["create"]]
    # No component moves the Lease elsewhere: its namespace is the pod's own, its name the default.
    for patch in sorted(DEPLOY.glob("components/*/*.yaml")):
        text = patch.read_text()
        assert "--leader-elect-namespace" not in text and "--leader-elect-lease-name" not in text, patch


def test_only_the_eviction_controller_may_delete_pods() -> None:
    base = expand(find(load_docs(BASE_RBAC), "ClusterRole", "dra-extender")["rules"])
    # pods/status patch is in the base since bind writes pod.status.extendedResourceClaimStatus for
    # extended resources backed by DRA (kube-scheduler's own role has it too).
    dangerous = {P("delete", "", "pods"), P("patch", "resource.k8s.io", "devicetaintrules/status")}
    assert not base & dangerous
