"""Write the chart's README.md from its values.yaml: the comment block right above each key is that
key's documentation, its type comes from values.schema.json, its default from values.yaml.

    python deploy/helm/chart_readme.py          # rewrite deploy/helm/dra-extender/README.md
    python deploy/helm/chart_readme.py --check  # exit 1 if the committed README is not what this writes

A key with a comment is one row (its sub-keys, if any, are shown in its default); a key without one
must be a mapping whose keys have comments. A key that is neither is an error naming it, so every
value is documented.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parent / "dra-extender"
README = CHART / "README.md"

_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z][\w.-]*):(?:\s|$)")
_COMMENT = re.compile(r"^(?P<indent> *)#(?: (?P<text>.*))?$")


class ValuesError(ValueError):
    pass


@dataclass(frozen=True)
class Row:
    path: str
    type: str
    default: str
    description: str


def key_comments(values_text: str) -> dict[str, str]:
    """Dotted key path -> the comment block right above it (empty when there is none)."""
    comments: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    pending: list[str] = []
    for number, line in enumerate(values_text.splitlines(), start=1):
        if not line.strip():
            pending = []
            continue
        comment = _COMMENT.match(line)
        if comment:
            pending.append(comment.group("text") or "")
            continue
        key = _KEY.match(line)
        if key is None:
            if line.startswith((" ", "-")):  # a list item or a continued value: not a key
                pending = []
                continue
            raise ValuesError(f"values.yaml line {number}: cannot read a key in {line!r}")
        indent = len(key.group("indent"))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([*(name for _, name in stack), key.group("key")])
        comments[path] = " ".join(pending).strip()
        stack.append((indent, key.group("key")))
        pending = []
    return comments


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = schema["$defs"][node["$ref"].removeprefix("#/$defs/")]
    return node


def _schema_at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    node = schema
    for name in path.split("."):
        properties = _resolve(schema, node).get("properties") or {}
        if name not in properties:
            raise ValuesError(f"values.schema.json has no {path!r} (values.yaml has it)")
        node = properties[name]
    return _resolve(schema, node)


def type_text(schema: dict[str, Any], node: dict[str, Any]) -> str:
    if "enum" in node:
        return " \\| ".join(f"`{value}`" for value in node["enum"])
    kinds = node.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    names = []
    for kind in kinds:
        if kind == "array":
            names.append(f"list of {type_text(schema, _resolve(schema, node['items']))}")
        elif kind == "object" and isinstance(node.get("additionalProperties"), dict):
            names.append(f"map of {type_text(schema, _resolve(schema, node['additionalProperties']))}")
        else:
            names.append(str(kind))
    return " or ".join(names)


def _default(value: Any) -> str:
    return "`" + json.dumps(value, separators=(", ", ": ")) + "`" if value is not None else "(empty)"


def rows(values_text: str, schema: dict[str, Any]) -> list[Row]:
    comments = key_comments(values_text)
    values = yaml.safe_load(values_text)
    out: list[Row] = []

    def visit(path: str, value: Any) -> None:
        description = comments.get(path, "")
        children = [f"{path}.{k}" for k in value] if isinstance(value, dict) else []
        if description:
            documented = [child for child in children if comments.get(child)]
            if documented:
                raise ValuesError(f"{path} has a comment, and so do its keys {documented}: keep one")
            out.append(Row(path, type_text(schema, _schema_at(schema, path)), _default(value), description))
        elif children:
            for key, child in value.items():
                visit(f"{path}.{key}", child)
        else:
            raise ValuesError(f"values.yaml: {path} has no comment above it")

    for key, value in values.items():
        visit(key, value)
    return out


def render(chart: Path = CHART) -> str:
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    schema = json.loads((chart / "values.schema.json").read_text())
    kubernetes = meta["kubeVersion"].removeprefix(">=").removesuffix("-0")
    table = "\n".join(
        f"| `{row.path}` | {row.type} | {row.default} | {row.description.replace('|', chr(92) + '|')} |"
        for row in rows((chart / "values.yaml").read_text(), schema)
    )
    return f"""<!-- Generated by deploy/helm/chart_readme.py from values.yaml: edit those, not this file. -->
# {meta["name"]} {meta["version"]}

{" ".join(meta["description"].split())}

Application version {meta["appVersion"]}; Kubernetes {kubernetes} or later.

## Install

From a checkout of the repository (or the packaged chart, `dra-extender-{meta["version"]}.tgz`):

```
helm install dra-extender deploy/helm/dra-extender -n dra-extender --create-namespace \\
  --set image.repository=$REGISTRY/dra-extender
kubectl label namespace dra-extender pod-security.kubernetes.io/enforce=restricted
helm test dra-extender -n dra-extender
```

`helm install` stores its release in the namespace before it creates anything, so the chart cannot
create that namespace with its Pod Security label: `--create-namespace` creates it bare, and the
`kubectl label` line enforces the restricted profile, which the extender's pods meet (NOTES.txt
repeats the command while the label is missing). The default certificate source is cert-manager;
without it, `--set certificates.source=self-signed`. More: docs/operations.md in the repository,
section "Helm".

## Values

values.schema.json refuses keys not listed here and values of the wrong type.

| Key | Type | Default | Description |
|---|---|---|---|
{table}
"""


def main(argv: list[str]) -> int:
    if argv not in ([], ["--check"]):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        text = render()
    except ValuesError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    if argv:
        if not README.exists() or README.read_text() != text:
            print(f"{README} is not what {Path(__file__).name} writes: run it", file=sys.stderr)
            return 1
        return 0
    README.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
