"""`dra-extender check -f DIR`: lint a snapshot of DRA objects.

Loads every object, reports the invalid ones, compiles every CEL selector and prints, per DeviceClass
and per claim request, which devices match. Users keep it to test selectors against a snapshot of
their cluster before applying a claim. Fields behind a gate (--feature-gates, the API server's) are
checked as the API server checks them with the gate on, and dropped with a warning while it is off:
for example a request's derivedAttributes (DRADerivedAttributes: compiled, and evaluated on the devices
the request matches) and a slice's skipNodeOperations (DRAOptionalNodeOperations). Capacity request
policies are checked as the API server checks new slices, in milli units for fractional ranges when
DRAFractionalCapacityRange is on.
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from allocator import (
    FeatureGates,
    InvalidObjectError,
    ResourceSlice,
    cel,
    claim_problems,
    parse_object,
    request_policy_problems,
)
from common.objects import metadata_of
from common.rules import scoring_annotation_problem
from extender.commands import output
from extender.kube.objects_io import ObjectLoadError, load_objects

MAX_LISTED_ERRORS = 3


@dataclass(frozen=True)
class DeviceRef:
    driver: str
    pool: str
    device: str
    node: str | None
    view: cel.CELDevice

    @property
    def label(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


@dataclass
class MatchReport:
    """Which devices one list of selectors (a class, or a class plus a request) accepts."""

    subject: str
    selectors: list[str]
    matching: list[DeviceRef] = field(default_factory=list)
    compile_errors: list[str] = field(default_factory=list)
    runtime_errors: list[str] = field(default_factory=list)
    runtime_error_count: int = 0

    def runtime_error(self, message: str) -> None:
        self.runtime_error_count += 1
        if len(self.runtime_errors) < MAX_LISTED_ERRORS:
            self.runtime_errors.append(message)

    @property
    def ok(self) -> bool:
        return not self.compile_errors and not self.runtime_error_count

    def to_dict(self) -> dict[str, Any]:
        return {
            "subject": self.subject,
            "selectors": self.selectors,
            "matchingDevices": [
                {"driver": d.driver, "pool": d.pool, "device": d.device, "node": d.node}
                for d in self.matching
            ],
            "compileErrors": self.compile_errors,
            "runtimeErrors": self.runtime_errors,
            "runtimeErrorCount": self.runtime_error_count,
        }


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "check",
        help="validate a directory of DRA objects and show which devices each class and request matches",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=output.examples(
            "dra-extender check -f examples/cluster",
            "dra-extender check -f my-claims.yaml -f snapshot/ -o json",
            "kubectl get resourceslices,deviceclasses -o yaml | dra-extender check -f -",
        ) + "\n  (1: invalid objects, selectors that do not compile or fail at run time)",
    )
    parser.add_argument(
        "-f", "--filename", dest="files", action="append", default=[], metavar="FILE",
        help="YAML/JSON file or directory of objects (repeatable; '-' reads stdin)",
    )
    parser.add_argument("paths", nargs="*", metavar="PATH",
                        help="more files or directories, as -f (the older spelling)")
    output.add_output_argument(parser)
    parser.add_argument(
        "--list-type-attributes",
        action="store_true",
        help="evaluate selectors with list-type attributes enabled (DRAListTypeAttributes)",
    )
    parser.add_argument(
        "--feature-gates",
        default="",
        metavar="NAME=true|false,...",
        help="the API server's gates, for fields behind them (default: the Kubernetes 1.37 defaults)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    paths = [*args.files, *args.paths]
    if not paths:
        return output.error("name the objects to check with -f FILE (or a directory)")
    try:
        raw_objects = load_objects(paths)
    except ObjectLoadError as exc:
        return output.error(str(exc))
    try:
        gates = FeatureGates.parse(args.feature_gates)
    except ValueError as exc:
        return output.error(f"--feature-gates: {exc}")
    options = cel.CompileOptions(consumable_capacity=True, list_type_attributes=args.list_type_attributes)
    report = build_report(raw_objects, options, gates)
    output.write(report, args.output, render_text)
    return output.EXIT_OK if report["ok"] else output.EXIT_PROBLEMS


def build_report(
    raw_objects: Iterable[dict[str, Any]], options: cel.CompileOptions, gates: FeatureGates | None = None
) -> dict[str, Any]:
    gates = gates or FeatureGates()
    counts: dict[str, int] = {}
    invalid: list[str] = []
    warnings: list[str] = []
    classes: dict[str, dict[str, Any]] = {}
    slices: list[dict[str, Any]] = []
    claims: list[dict[str, Any]] = []
    for raw in raw_objects:
        kind = raw.get("kind", "<no kind>")
        if kind == "ResourceSlice":
            raw = _drop_disabled_fields(raw, gates, warnings)
            raw = _drop_gated(raw, gates, "DRAOptionalNodeOperations", _skip_node_operations_fields, warnings)
        elif kind in ("ResourceClaim", "ResourceClaimTemplate"):
            raw = _drop_gated(raw, gates, "DRADerivedAttributes", _derived_attributes_fields, warnings)
        try:
            parsed = parse_object(raw)
        except InvalidObjectError as exc:
            invalid.append(str(exc))
            continue
        if parsed is None:
            # Kinds the allocator does not model: templates are linted like the claims made from them.
            if kind in ("Pod", "ResourceClaimTemplate"):
                counts[kind] = counts.get(kind, 0) + 1
            if kind == "ResourceClaimTemplate":
                claims.append(_claim_from_template(raw))
            if kind == "Pod":
                invalid.extend(_pod_problems(raw))
            continue
        counts[kind] = counts.get(kind, 0) + 1
        if kind == "DeviceClass":
            classes[raw["metadata"]["name"]] = raw
        elif isinstance(parsed, ResourceSlice):
            slices.append(raw)
            invalid.extend(_skip_node_operations_problems(raw))
            invalid.extend(_request_policy_problems(parsed, gates))
        elif kind == "ResourceClaim":
            claims.append(raw)

    for raw in claims:
        meta = raw["metadata"]
        owner = f"{raw['kind']} {meta.get('namespace', '')}/{meta['name']}"
        devices_spec = (raw.get("spec") or {}).get("devices")
        if not isinstance(devices_spec, dict):
            continue  # a template's spec is not parsed: nothing to read
        problems = claim_problems(devices_spec, "spec.devices", options,
                                  lists_allowed=options.list_type_attributes)
        invalid.extend(f"{owner}: {problem}" for problem in problems)
    devices, device_errors = _devices(slices)
    invalid.extend(device_errors)
    class_reports = [
        _match(f"DeviceClass {name}", _selectors(spec_of(raw)), devices, options)
        for name, raw in sorted(classes.items())
    ]
    request_reports = list(_request_reports(claims, classes, devices, options))
    ok = not invalid and all(r.ok for r in class_reports + request_reports)
    return {
        "ok": ok,
        "counts": counts,
        "devices": len(devices),
        "invalidObjects": invalid,
        "warnings": warnings,
        "deviceClasses": [r.to_dict() for r in class_reports],
        "requests": [r.to_dict() for r in request_reports],
    }


def _drop_disabled_fields(raw: dict[str, Any], gates: FeatureGates, warnings: list[str]) -> dict[str, Any]:
    """What the API server does with a new slice: fields behind a gate that is off are dropped, not
    validated. Returns the slice as stored (a copy when something was dropped)."""
    if gates.enabled("DRADeviceCompatibilityGroups"):
        return raw  # validated by parse_object, with the API server's error texts
    stored = copy.deepcopy(raw)
    spec = stored.get("spec")
    devices = spec.get("devices") if isinstance(spec, dict) else None
    dropped = []
    for i, device in enumerate(devices if isinstance(devices, list) else []):
        uses = device.get("consumesCounters") if isinstance(device, dict) else None
        for j, use in enumerate(uses if isinstance(uses, list) else []):
            if isinstance(use, dict) and use.pop("compatibilityGroups", None):
                dropped.append(f"spec.devices[{i}].consumesCounters[{j}].compatibilityGroups")
    if not dropped:
        return raw
    meta = raw.get("metadata")
    name = meta.get("name", "<unnamed>") if isinstance(meta, dict) else "<unnamed>"
    warnings.append(
        f"ResourceSlice {name}: {', '.join(dropped)}: dropped, DRADeviceCompatibilityGroups is off (the API "
        "server drops them from new slices; the scheduler ignores a stored slice that has them, and its "
        "pool with it)"
    )
    return stored


def _pod_problems(raw: dict[str, Any]) -> list[str]:
    """What our own annotations on a pod get wrong (the scheduler would fall back silently)."""
    meta = metadata_of(raw)
    problem = scoring_annotation_problem(raw)
    return [f"Pod {meta.get('namespace', '')}/{meta.get('name', '')}: {problem}"] if problem else []


def _drop_gated(
    raw: dict[str, Any],
    gates: FeatureGates,
    gate: str,
    fields: Callable[[dict[str, Any]], Iterator[tuple[dict[str, Any], str, str]]],
    warnings: list[str],
) -> dict[str, Any]:
    """``raw`` as the API server stores a new object while ``gate`` is off: without the ``fields``
    (mapping, key, path) behind it, with a warning naming them; unchanged while the gate is on."""
    if gates.enabled(gate) or not any(True for _ in fields(raw)):
        return raw
    stored = copy.deepcopy(raw)
    dropped = []
    for mapping, key, path in fields(stored):
        del mapping[key]
        dropped.append(path)
    meta = raw.get("metadata")
    name = meta.get("name", "<unnamed>") if isinstance(meta, dict) else "<unnamed>"
    warnings.append(f"{raw.get('kind')} {name}: {', '.join(dropped)}: dropped, {gate} is off (the API "
                    "server drops them from new objects)")
    return stored


def _skip_node_operations_fields(raw: dict[str, Any]) -> Iterator[tuple[dict[str, Any], str, str]]:
    spec = raw.get("spec")
    if isinstance(spec, dict) and "skipNodeOperations" in spec:
        yield spec, "skipNodeOperations", "spec.skipNodeOperations"


def _derived_attributes_fields(raw: dict[str, Any]) -> Iterator[tuple[dict[str, Any], str, str]]:
    spec, path = raw.get("spec"), "spec"
    if raw.get("kind") == "ResourceClaimTemplate" and isinstance(spec, dict):
        spec, path = spec.get("spec"), "spec.spec"
    devices = spec.get("devices") if isinstance(spec, dict) else None
    requests = devices.get("requests") if isinstance(devices, dict) else None
    for i, request in enumerate(requests if isinstance(requests, list) else []):
        if not isinstance(request, dict):
            continue
        bodies = [(request.get("exactly"), f"{path}.devices.requests[{i}].exactly")]
        subs = request.get("firstAvailable")
        bodies += [(sub, f"{path}.devices.requests[{i}].firstAvailable[{j}]")
                   for j, sub in enumerate(subs if isinstance(subs, list) else [])]
        for body, where in bodies:
            if isinstance(body, dict) and "derivedAttributes" in body:
                yield body, "derivedAttributes", f"{where}.derivedAttributes"


SKIP_NODE_OPERATIONS = ("NodePrepareResources", "NodeUnprepareResources", "*")


def _skip_node_operations_problems(raw: dict[str, Any]) -> list[str]:
    """The API server's checks of spec.skipNodeOperations (DRAOptionalNodeOperations)."""
    skipped = spec_of(raw).get("skipNodeOperations") or []
    where = f"ResourceSlice {raw['metadata']['name']}: spec.skipNodeOperations"
    supported = ", ".join(map(repr, SKIP_NODE_OPERATIONS))
    problems = [
        f"{where}: Unsupported value: {value!r}: supported values: {supported}"
        for value in skipped
        if value not in SKIP_NODE_OPERATIONS
    ]
    if len(set(map(str, skipped))) != len(skipped):
        problems.append(f"{where}: Duplicate value: each operation may be listed once")
    if "NodePrepareResources" in skipped and not {"NodeUnprepareResources", "*"} & set(skipped):
        problems.append(f"{where}: Invalid value: NodePrepareResources cannot be skipped unless "
                        "NodeUnprepareResources is also skipped")
    return problems


def _request_policy_problems(parsed: ResourceSlice, gates: FeatureGates) -> list[str]:
    """The API server's checks of capacity requestPolicy (DRAFractionalCapacityRange: milli units)."""
    fractional = gates.enabled("DRAFractionalCapacityRange")
    return [
        f"ResourceSlice {parsed.name}: {problem}"
        for i, device in enumerate(parsed.devices)
        for problem in request_policy_problems(device, f"spec.devices[{i}]", fractional=fractional)
    ]


def spec_of(raw: dict[str, Any]) -> dict[str, Any]:
    return raw.get("spec") or {}


def _claim_from_template(raw: dict[str, Any]) -> dict[str, Any]:
    meta = raw.get("metadata", {})
    return {
        "kind": "ResourceClaimTemplate",
        "metadata": meta,
        "spec": (raw.get("spec") or {}).get("spec") or {},
    }


def _selectors(spec: dict[str, Any]) -> list[str]:
    return [(s.get("cel") or {}).get("expression", "") for s in spec.get("selectors") or []]


def _devices(slices: list[dict[str, Any]]) -> tuple[list[DeviceRef], list[str]]:
    """Devices of each pool's newest generation, ordered like the allocator: driver, pool, slice name."""
    newest: dict[tuple[str, str], int] = {}
    for raw in slices:
        spec = raw["spec"]
        key = (spec["driver"], spec["pool"]["name"])
        newest[key] = max(newest.get(key, 0), int(spec["pool"].get("generation", 0)))
    ordered = sorted(
        slices, key=lambda r: (r["spec"]["driver"], r["spec"]["pool"]["name"], r["metadata"]["name"])
    )
    devices: list[DeviceRef] = []
    errors: list[str] = []
    for raw in ordered:
        spec = raw["spec"]
        pool = spec["pool"]
        if int(pool.get("generation", 0)) != newest[(spec["driver"], pool["name"])]:
            continue
        meta = raw["metadata"]
        for device in spec.get("devices") or []:
            try:
                view = cel.make_device(
                    spec["driver"],
                    device.get("attributes") or {},
                    device.get("capacity") or {},
                    device.get("allowMultipleAllocations"),
                    memo_key=(meta.get("uid") or meta["name"], meta.get("generation", 0), device["name"]),
                )
            except ValueError as exc:
                errors.append(f"ResourceSlice {meta['name']}: device {device.get('name')}: {exc}")
                continue
            node = device.get("nodeName") or spec.get("nodeName")
            devices.append(DeviceRef(spec["driver"], pool["name"], device["name"], node, view))
    return devices, errors


def _request_reports(
    claims: list[dict[str, Any]],
    classes: dict[str, dict[str, Any]],
    devices: list[DeviceRef],
    options: cel.CompileOptions,
) -> Iterator[MatchReport]:
    for raw in claims:
        meta = raw["metadata"]
        owner = f"{raw['kind']} {meta.get('namespace', '')}/{meta['name']}"
        for request in ((raw.get("spec") or {}).get("devices") or {}).get("requests") or []:
            if "exactly" in request:
                variants = [(request["name"], request["exactly"])]
            else:
                variants = [
                    (f"{request['name']}/{sub['name']}", sub) for sub in request.get("firstAvailable") or []
                ]
            for name, body in variants:
                class_name = body.get("deviceClassName", "")
                subject = f"{owner}, request {name} (class {class_name})"
                device_class = classes.get(class_name)
                if device_class is None:
                    yield MatchReport(
                        subject, [], compile_errors=[f"device class {class_name!r} does not exist"]
                    )
                    continue
                selectors = _selectors(spec_of(device_class)) + _selectors(body)
                derived = [
                    (d.get("name", ""), d.get("expression", ""))
                    for d in body.get("derivedAttributes") or ()
                    if isinstance(d, dict)
                ]
                yield _match(subject, selectors, devices, options, derived)


def _match(
    subject: str,
    expressions: list[str],
    devices: list[DeviceRef],
    options: cel.CompileOptions,
    derived: Sequence[tuple[str, str]] = (),
) -> MatchReport:
    """Which devices the selectors accept; the request's derived attributes are evaluated on those,
    as the allocator would (a failure there aborts its search)."""
    report = MatchReport(subject, expressions)
    compiled: list[cel.Selector] = []
    for index, expression in enumerate(expressions):
        try:
            compiled.append(cel.compile(expression, options))
        except cel.CELCompileError as exc:
            report.compile_errors.append(f"selector #{index}: {exc}")
    compiled_derived: list[tuple[str, cel.DerivedExpression]] = []
    for name, expression in derived:
        try:
            compiled_derived.append((name, cel.compile_derived(expression, options)))
        except cel.CELCompileError as exc:
            report.compile_errors.append(f"derived attribute {name}: {exc}")
    if report.compile_errors:
        return report
    for device in devices:
        try:
            if not all(selector.matches(device.view) for selector in compiled):
                continue
        except cel.CELRuntimeError as exc:
            report.runtime_error(f"device {device.label}: {exc}")
            continue
        report.matching.append(device)
        for name, derived_expression in compiled_derived:
            try:
                derived_expression.value(device.view)
            except cel.CELRuntimeError as exc:
                report.runtime_error(f"device {device.label}: derived attribute {name}: {exc}")
    return report


def render_text(report: dict[str, Any]) -> str:
    lines: list[str] = []
    counts = ", ".join(f"{n} {kind}" for kind, n in sorted(report["counts"].items()))
    lines.append(f"Loaded {counts}; {report['devices']} devices in the newest pool generations.")
    if report["invalidObjects"]:
        lines.append(f"Invalid objects ({len(report['invalidObjects'])}):")
        lines.extend(f"  - {message}" for message in report["invalidObjects"])
    else:
        lines.append("Invalid objects: none.")
    if report["warnings"]:
        lines.append(f"Warnings ({len(report['warnings'])}):")
        lines.extend(f"  - {message}" for message in report["warnings"])
    for title, section in (("Device classes", "deviceClasses"), ("Claim requests", "requests")):
        lines.append("")
        lines.append(f"{title}:")
        for entry in report[section]:
            lines.extend(_render_entry(entry))
    lines.append("")
    lines.append(
        "OK: every object is valid and every selector evaluates."
        if report["ok"]
        else "Problems found (see above)."
    )
    return "\n".join(lines) + "\n"


def _render_entry(entry: dict[str, Any]) -> list[str]:
    matching = entry["matchingDevices"]
    if entry["compileErrors"]:
        out = [f"  {entry['subject']}: selectors do not compile"]
        out.extend(f"      {error}" for error in entry["compileErrors"])
        return out
    out = [f"  {entry['subject']}: {len(matching)} matching device(s)"]
    groups: dict[tuple[str, str], list[str]] = {}
    for device in matching:
        key = (device["node"] or "any node", f"{device['driver']}/{device['pool']}")
        groups.setdefault(key, []).append(device["device"])
    for (node, pool), names in sorted(groups.items()):
        out.append(f"      {node} (pool {pool}): {', '.join(names)}")
    if entry["runtimeErrorCount"]:
        out.append(f"      CEL runtime errors on {entry['runtimeErrorCount']} device(s), for example:")
        out.extend(f"        {error}" for error in entry["runtimeErrors"])
    return out
