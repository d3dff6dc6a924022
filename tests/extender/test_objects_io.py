"""Loading objects from YAML/JSON files, directories, multi-document files and Lists."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest
import yaml

from extender.kube.objects_io import ObjectLoadError, load_objects, load_snapshot

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"}}
CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu"},
    "spec": {"selectors": [{"cel": {"expression": "true"}}]},
}


def claim(name: str, **meta: str) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, **meta},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}},
    }


def names(objects: list[dict]) -> list[str]:
    return [o["metadata"]["name"] for o in objects]


def test_multi_document_yaml_keeps_order_and_skips_empty_documents(tmp_path: Path) -> None:
    path = tmp_path / "objs.yaml"
    path.write_text("---\n" + yaml.safe_dump(NODE) + "---\n---\n" + yaml.safe_dump(POD))
    assert names(load_objects([path])) == ["n1", "p"]


def test_json_file_and_nested_lists(tmp_path: Path) -> None:
    inner = {"apiVersion": "v1", "kind": "PodList", "items": [POD]}
    path = tmp_path / "objs.json"
    path.write_bytes(orjson.dumps({"apiVersion": "v1", "kind": "List", "items": [NODE, inner, CLASS]}))
    assert names(load_objects([str(path)])) == ["n1", "p", "gpu"]


def test_directory_reads_object_files_sorted_by_name(tmp_path: Path) -> None:
    (tmp_path / "b.yml").write_text(yaml.safe_dump(POD))
    (tmp_path / "a.json").write_bytes(orjson.dumps(NODE))
    (tmp_path / "c.YAML").write_text(yaml.safe_dump(CLASS))
    (tmp_path / "notes.md").write_text("# not objects")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "d.yaml").write_text(yaml.safe_dump(claim("deeper")))
    assert names(load_objects([tmp_path])) == ["n1", "p", "gpu"]


def test_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(yaml.safe_dump(NODE)))
    assert names(load_objects(["-"])) == ["n1"]


def test_timestamps_stay_strings(tmp_path: Path) -> None:
    path = tmp_path / "o.yaml"
    path.write_text("kind: Node\nmetadata:\n  name: n\n  creationTimestamp: 2026-01-02T03:04:05Z\n")
    assert load_objects([path])[0]["metadata"]["creationTimestamp"] == "2026-01-02T03:04:05Z"


@pytest.mark.parametrize(
    ("file_name", "text", "message"),
    [
        ("bad.yaml", "kind: Node\nmetadata:\n  name: [x\n", "bad.yaml: line 4: invalid YAML"),
        ("bad.json", '{\n  "kind": "Node",\n  oops\n}', "bad.json: line 3: invalid JSON"),
        ("scalar.yaml", "just text\n", "document 1: expected a Kubernetes object"),
        ("nokind.yaml", "metadata: {name: x}\n", "document 1: object has no kind"),
        ("items.yaml", "kind: List\nitems: 3\n", "List: items: must be a list"),
        ("item.yaml", "kind: List\nitems: [{kind: Node}, 7]\n", "List item 1: expected a Kubernetes object"),
    ],
)
def test_errors_name_the_file_and_place(tmp_path: Path, file_name: str, text: str, message: str) -> None:
    path = tmp_path / file_name
    path.write_text(text)
    with pytest.raises(ObjectLoadError, match=message.replace("[", r"\[")):
        load_objects([path])


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(ObjectLoadError, match="no such file or directory"):
        load_objects([tmp_path / "absent.yaml"])


def test_snapshot_keeps_allocator_kinds_and_ignores_others(tmp_path: Path) -> None:
    path = tmp_path / "o.yaml"
    path.write_text(yaml.safe_dump_all([NODE, POD, CLASS, claim("c", namespace="ns", uid="u1")]))
    snapshot = load_snapshot([path])
    assert [n.name for n in snapshot.nodes] == ["n1"]
    assert [c.name for c in snapshot.classes] == ["gpu"]
    assert snapshot.claim("ns/c") is not None and snapshot.claim("ns/c").uid == "u1"
    assert snapshot.node("n1") is snapshot.nodes[0] and snapshot.node("n2") is None
    assert snapshot.slices == [] and snapshot.taint_rules == []


def test_snapshot_defaults_claim_namespace_and_uid(tmp_path: Path) -> None:
    path = tmp_path / "o.yaml"
    path.write_text(yaml.safe_dump_all([claim("c"), claim("d", namespace="other")]))
    first, second = load_snapshot([path]).claims
    assert first.key == "default/c" and first.uid
    assert second.key == "other/d" and second.uid and second.uid != first.uid
    # Stable across loads, so repeated runs name the same claims.
    assert load_snapshot([path]).claims[0].uid == first.uid


def test_snapshot_malformed_object_names_kind_name_and_field(tmp_path: Path) -> None:
    bad = claim("broken", namespace="ns")
    bad["spec"]["devices"]["requests"][0]["exactly"]["count"] = "two"
    path = tmp_path / "o.yaml"
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(ObjectLoadError) as info:
        load_snapshot([path])
    assert "ResourceClaim" in str(info.value) and "broken" in str(info.value) and "count" in str(info.value)
