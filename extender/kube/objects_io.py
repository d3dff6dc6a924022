"""Loading Kubernetes objects from YAML/JSON files, for the CLI and snapshot mode.

A path is a file or a directory (every .yaml/.yml/.json file directly in it, sorted by name); "-"
reads standard input. A file holds one object, several YAML documents, or a `List` (any kind ending
in "List" with `items`), nested lists included. `load_objects` returns the raw dicts of every kind;
`load_snapshot` keeps the kinds the allocator uses, parsed and validated.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml

from allocator import (
    DeviceClass,
    DeviceTaintRule,
    InvalidObjectError,
    Node,
    ResourceClaim,
    ResourceSlice,
    parse_object,
)

OBJECT_SUFFIXES = (".yaml", ".yml", ".json")
STDIN = "-"
# Namespace that kubectl would apply to a namespaced object written without one.
DEFAULT_NAMESPACE = "default"


class ObjectLoadError(ValueError):
    """A file cannot be read or parsed, or an object in it is malformed. The message names where."""


# libyaml's loader when PyYAML was built with it; a base chosen at run time is Any to the type checker.
class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """Safe YAML loading that keeps timestamps as the strings the API server sends."""


_Loader.add_constructor("tag:yaml.org,2002:timestamp", _Loader.construct_yaml_str)


def load_objects(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Every object in the given files and directories, Lists flattened, in file order."""
    objects: list[dict[str, Any]] = []
    for source, text in _read_sources(paths):
        for index, document in enumerate(_parse_documents(source, text), 1):
            if document is None:
                continue
            objects.extend(_flatten(document, f"{source}: document {index}"))
    return objects


@dataclass
class Snapshot:
    """The objects an allocation needs, parsed; other kinds in the input are ignored."""

    classes: list[DeviceClass] = field(default_factory=list)
    slices: list[ResourceSlice] = field(default_factory=list)
    claims: list[ResourceClaim] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    taint_rules: list[DeviceTaintRule] = field(default_factory=list)

    def node(self, name: str) -> Node | None:
        return next((n for n in self.nodes if n.name == name), None)

    def claim(self, key: str) -> ResourceClaim | None:
        return next((c for c in self.claims if c.key == key), None)


def load_snapshot(paths: Iterable[str | Path]) -> Snapshot:
    """Parse the allocator's kinds from the files; a malformed object raises ObjectLoadError."""
    snapshot = Snapshot()
    buckets: dict[type, list[Any]] = {
        DeviceClass: snapshot.classes,
        ResourceSlice: snapshot.slices,
        ResourceClaim: snapshot.claims,
        Node: snapshot.nodes,
        DeviceTaintRule: snapshot.taint_rules,
    }
    for raw in load_objects(paths):
        if raw.get("kind") == "ResourceClaim":
            raw = _with_claim_defaults(raw)
        try:
            parsed = parse_object(raw)
        except InvalidObjectError as exc:
            raise ObjectLoadError(str(exc)) from exc
        if parsed is not None:
            buckets[type(parsed)].append(parsed)
    return snapshot


def _with_claim_defaults(raw: dict[str, Any]) -> dict[str, Any]:
    """Hand-written claims often lack namespace and uid; supply what the API server would have."""
    meta = raw.get("metadata")
    if not isinstance(meta, dict) or (meta.get("namespace") and meta.get("uid")):
        return raw
    namespace = meta.get("namespace") or DEFAULT_NAMESPACE
    name = meta.get("name") or ""
    uid = meta.get("uid") or str(uuid.uuid5(uuid.NAMESPACE_URL, f"ResourceClaim/{namespace}/{name}"))
    return {**raw, "metadata": {**meta, "namespace": namespace, "uid": uid}}


def _read_sources(paths: Iterable[str | Path]) -> Iterator[tuple[str, str]]:
    for path in paths:
        if str(path) == STDIN:
            yield "<stdin>", sys.stdin.read()
            continue
        path = Path(path)
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in OBJECT_SUFFIXES)
        elif path.exists():
            files = [path]
        else:
            raise ObjectLoadError(f"{path}: no such file or directory")
        for file in files:
            try:
                yield str(file), file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise ObjectLoadError(f"{file}: cannot read: {exc}") from exc


def _parse_documents(source: str, text: str) -> list[Any]:
    if source.lower().endswith(".json"):
        try:
            return [orjson.loads(text)]
        except orjson.JSONDecodeError as exc:
            raise ObjectLoadError(f"{source}: line {exc.lineno}: invalid JSON: {exc.msg}") from exc
    try:
        return list(yaml.load_all(text, Loader=_Loader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}" if mark is not None else "unknown line"
        raise ObjectLoadError(f"{source}: {where}: invalid YAML: {exc.problem or exc.context}") from exc
    except yaml.YAMLError as exc:
        raise ObjectLoadError(f"{source}: invalid YAML: {exc}") from exc


def _flatten(document: Any, where: str) -> Iterator[dict[str, Any]]:
    if not isinstance(document, dict):
        raise ObjectLoadError(
            f"{where}: expected a Kubernetes object (a mapping), got {type(document).__name__}"
        )
    kind = document.get("kind")
    if not isinstance(kind, str) or not kind:
        raise ObjectLoadError(f"{where}: object has no kind")
    if kind.endswith("List") and "items" in document:
        items = document["items"] or []
        if not isinstance(items, list):
            raise ObjectLoadError(f"{where}: {kind}: items: must be a list")
        for index, item in enumerate(items):
            yield from _flatten(item, f"{where}: {kind} item {index}")
        return
    yield document
