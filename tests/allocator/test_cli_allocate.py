"""`dra-extender allocate`, run in-process on small fixtures and on the bundled example cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from extender.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "cluster"

CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu"},
    "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]},
}
NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a", "labels": {"zone": "z1"}}}


def make_slice(node: str = "node-a", devices: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpus"},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": f"gpu-{i}", "attributes": {"model": {"string": "A100" if i else "T4"}}}
                for i in range(devices)
            ],
        },
    }


def make_claim(
    name: str,
    count: int = 1,
    *,
    selector: str | None = None,
    allocated: list[str] | None = None,
    namespace: str = "default",
) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    claim: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": exactly}]}},
    }
    if allocated:
        results = [
            {"request": "gpus", "driver": "gpu.example.com", "pool": "node-a", "device": d} for d in allocated
        ]
        claim["status"] = {"allocation": {"devices": {"results": results}}}
    return claim


def write_yaml(path: Path, *objects: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump_all(objects))
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["allocate", *args])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code, out, _ = run_cli(capsys, *args, "-o", "json")
    return code, orjson.loads(out)


def devices_of(document: dict[str, Any], index: int = 0) -> list[str]:
    return [r["device"] for r in document["claims"][index]["allocation"]["devices"]["results"]]


@pytest.fixture
def cluster(tmp_path: Path) -> Path:
    return write_yaml(
        tmp_path / "cluster.yaml", CLASS, NODE, make_slice(), make_claim("one"), make_claim("two")
    )


def test_success_prints_allocation_results_in_claim_order(
    capsys: pytest.CaptureFixture[str], cluster: Path
) -> None:
    code, doc = run_json(
        capsys, "-f", str(cluster), "--node", "node-a", "--claim", "default/two", "--claim", "default/one"
    )
    assert code == 0
    assert doc["node"] == "node-a"
    assert [(c["namespace"], c["name"]) for c in doc["claims"]] == [("default", "two"), ("default", "one")]
    # Claims are allocated in --claim order: the first one gets the first device.
    assert devices_of(doc, 0) == ["gpu-0"] and devices_of(doc, 1) == ["gpu-1"]
    allocation = doc["claims"][0]["allocation"]
    assert allocation["devices"]["results"][0] == {
        "request": "gpus",
        "driver": "gpu.example.com",
        "pool": "node-a",
        "device": "gpu-0",
    }
    assert allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["node-a"]


def test_claims_that_do_not_fit_exit_1_with_reasons(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    files = write_yaml(tmp_path / "c.yaml", CLASS, NODE, make_slice(), make_claim("big", 3))
    code, doc = run_json(capsys, "-f", str(files), "--node", "node-a", "--claim", "default/big")
    assert code == 1
    assert doc["node"] == "node-a" and doc["unschedulable"] is True
    [reason] = doc["reasons"]
    assert reason["claim"] == "default/big" and reason["request"] == "gpus"
    assert reason["needed"] == 3 and reason["considered"] == 2


def test_allocated_claims_in_the_input_are_the_allocated_state(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    files = write_yaml(
        tmp_path / "c.yaml",
        CLASS,
        NODE,
        make_slice(),
        make_claim("held", allocated=["gpu-0"]),
        make_claim("new"),
    )
    code, doc = run_json(capsys, "-f", str(files), "--node", "node-a", "--claim", "default/new")
    assert code == 0 and devices_of(doc) == ["gpu-1"]

    code, doc = run_json(capsys, "-f", str(files), "--node", "node-a", "--claim", "default/held")
    assert code == 2 and "already allocated" in doc["error"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--node", "node-b", "--claim", "default/one"], "node 'node-b' is not among the objects"),
        (["--node", "node-a", "--claim", "default/missing"], "ResourceClaim default/missing is not among"),
        (["--node", "node-a", "--claim", "default/one/x"], "expected NAME or NAMESPACE/NAME"),
        (["--node", "node-a", "--claim", "other/one", "-n", "default"], "names namespace 'other'"),
        (["--node", "node-a", "--claim", "default/one", "--feature-gates", "NoSuchGate=true"], "NoSuchGate"),
        (["--node", "node-a", "--claim", "default/one", "--feature-gates", "DRAAdminAccess=maybe"], "maybe"),
    ],
)
def test_hard_errors_exit_2(
    capsys: pytest.CaptureFixture[str], cluster: Path, args: list[str], message: str
) -> None:
    code, doc = run_json(capsys, "-f", str(cluster), *args)
    assert code == 2
    assert message in doc["error"]


def test_malformed_object_names_kind_name_and_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = make_claim("bad")
    bad["spec"]["devices"]["requests"][0]["exactly"]["count"] = "two"
    files = write_yaml(tmp_path / "c.yaml", CLASS, NODE, make_slice(), bad)
    code, doc = run_json(capsys, "-f", str(files), "--node", "node-a", "--claim", "default/bad")
    assert code == 2
    assert "ResourceClaim" in doc["error"] and "bad" in doc["error"] and "count" in doc["error"]


def test_cel_error_is_a_hard_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    files = write_yaml(
        tmp_path / "c.yaml", CLASS, NODE, make_slice(), make_claim("c", selector="device.nope +")
    )
    code, doc = run_json(capsys, "-f", str(files), "--node", "node-a", "--claim", "default/c")
    assert code == 2 and "selector" in doc["error"]


def test_feature_gates_change_the_outcome(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    claim = make_claim("choice")
    claim["spec"]["devices"]["requests"] = [
        {
            "name": "gpus",
            "firstAvailable": [
                {
                    "name": "a100",
                    "deviceClassName": "gpu",
                    "selectors": [
                        {"cel": {"expression": 'device.attributes["gpu.example.com"].model == "A100"'}}
                    ],
                }
            ],
        }
    ]
    files = write_yaml(tmp_path / "c.yaml", CLASS, NODE, make_slice(), claim)
    code, doc = run_json(capsys, "-f", str(files), "--node", "node-a", "--claim", "default/choice")
    assert code == 0 and doc["claims"][0]["allocation"]["devices"]["results"][0]["request"] == "gpus/a100"
    code, doc = run_json(
        capsys,
        "-f",
        str(files),
        "--node",
        "node-a",
        "--claim",
        "default/choice",
        "--feature-gates",
        "DRAPrioritizedList=false",
    )
    assert code == 2 and "DRAPrioritizedList feature is disabled" in doc["error"]


def test_yaml_output(capsys: pytest.CaptureFixture[str], cluster: Path) -> None:
    code, out, _ = run_cli(
        capsys, "-f", str(cluster), "--node", "node-a", "--claim", "default/one", "-o", "yaml"
    )
    assert code == 0
    doc = yaml.safe_load(out)
    assert doc["claims"][0]["name"] == "one" and doc["claims"][0]["allocation"]["devices"]["results"]


def test_text_output_is_a_table(capsys: pytest.CaptureFixture[str], cluster: Path) -> None:
    code, out, _ = run_cli(
        capsys, "-f", str(cluster), "--node", "node-a", "--claim", "default/one", "--claim", "default/two"
    )
    assert code == 0
    lines = out.splitlines()
    assert lines[1].split() == ["CLAIM", "REQUEST", "DEVICES"]
    assert lines[2].split() == ["default/one", "gpus", "gpu.example.com/node-a/gpu-0"]
    assert lines[3].split() == ["default/two", "gpus", "gpu.example.com/node-a/gpu-1"]


def test_text_output_for_errors_and_misfits(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    files = write_yaml(tmp_path / "c.yaml", CLASS, NODE, make_slice(), make_claim("big", 3))
    code, out, _ = run_cli(capsys, "-f", str(files), "--node", "node-a", "--claim", "default/big")
    assert code == 1 and "do not fit on node node-a" in out and "needs 3" in out
    code, out, err = run_cli(capsys, "-f", str(files), "--node", "nowhere", "--claim", "default/big")
    assert code == 2 and out == "" and err.startswith("error: node 'nowhere'")


def test_list_json_directory_and_several_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    directory = tmp_path / "objs"
    directory.mkdir()
    (directory / "a.json").write_bytes(
        orjson.dumps({"apiVersion": "v1", "kind": "List", "items": [CLASS, NODE]})
    )
    write_yaml(directory / "b.yml", make_slice())
    (directory / "ignored.txt").write_text("not: [valid")
    claims = write_yaml(tmp_path / "claims.yaml", make_claim("one"))
    code, doc = run_json(
        capsys, "-f", str(directory), "-f", str(claims), "--node", "node-a", "--claim", "default/one"
    )
    assert code == 0 and devices_of(doc) == ["gpu-0"]


def test_yaml_syntax_error_names_file_and_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: Node\nmetadata:\n  name: [unclosed\n")
    code, doc = run_json(capsys, "-f", str(broken), "--node", "n", "--claim", "default/c")
    assert code == 2 and str(broken) in doc["error"] and "line " in doc["error"]


# --- the bundled example cluster ------------------------------------------------------------------------


def example_devices() -> dict[tuple[str, str], dict[str, Any]]:
    devices = {}
    for doc in yaml.safe_load_all((EXAMPLES / "resourceslices.yaml").read_text()):
        if doc and doc["kind"] == "ResourceSlice":
            for dev in doc["spec"].get("devices", []):
                devices[(doc["spec"]["pool"]["name"], dev["name"])] = dev
    return devices


def test_example_pair_shares_a_pcie_root_and_avoids_devices_in_use(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, doc = run_json(capsys, "-f", str(EXAMPLES), "--node", "node-1", "--claim", "default/gpu-pair")
    assert code == 0
    chosen = devices_of(doc)
    assert len(chosen) == 2
    # The example's "training" claim already holds gpu-0 and gpu-1 on node-1.
    assert not {"gpu-0", "gpu-1"} & set(chosen)
    devices = example_devices()
    roots = {
        devices[("node-1", name)]["attributes"]["resource.kubernetes.io/pcieRoot"]["string"]
        for name in chosen
    }
    assert len(roots) == 1
    # The class's opaque config is passed on, marked as coming from the class; as it applies to every
    # request of the claim, it names none (Kubernetes 1.37).
    [config] = doc["claims"][0]["allocation"]["devices"]["config"]
    assert config["source"] == "FromClass" and "requests" not in config


def test_example_prioritized_list_prefers_a_partition_where_one_exists(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, doc = run_json(capsys, "-f", str(EXAMPLES), "--node", "node-3", "--claim", "default/half-or-full")
    assert code == 0
    [res] = doc["claims"][0]["allocation"]["devices"]["results"]
    assert res["request"] == "gpu/half"
    assert example_devices()[("node-3", res["device"])]["attributes"]["partition"]["string"] == "half"

    code, doc = run_json(capsys, "-f", str(EXAMPLES), "--node", "node-1", "--claim", "default/half-or-full")
    assert code == 0 and doc["claims"][0]["allocation"]["devices"]["results"][0]["request"] == "gpu/full"


def test_example_claims_together_get_distinct_devices(capsys: pytest.CaptureFixture[str]) -> None:
    claims = ["default/single-gpu", "default/gpu-pair", "default/worker-gpu-k8f2x"]
    args = [arg for claim in claims for arg in ("--claim", claim)]
    code, doc = run_json(capsys, "-f", str(EXAMPLES), "--node", "node-2", *args)
    assert code == 0
    chosen = [d for i in range(len(claims)) for d in devices_of(doc, i)]
    assert len(chosen) == 4 == len(set(chosen))


def test_example_selector_that_no_device_on_the_node_matches(capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = run_json(capsys, "-f", str(EXAMPLES), "--node", "node-2", "--claim", "default/a100-80gb")
    assert code == 1
    [reason] = doc["reasons"]
    assert reason["claim"] == "default/a100-80gb"
    assert reason["rejected"] == {"request selector": reason["considered"]}


def test_invalid_pool_only_rules_out_this_node(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # Two slices of one pool list the same device: upstream's node-local "invalid resource pools".
    first, second = make_slice(), make_slice()
    for s in (first, second):
        s["spec"]["pool"]["resourceSliceCount"] = 2
    second["metadata"]["name"] = "node-a-gpus-copy"
    files = write_yaml(tmp_path / "c.yaml", CLASS, NODE, first, second, make_claim("one"))
    code, doc = run_json(capsys, "-f", str(files), "--node", "node-a", "--claim", "default/one")
    assert code == 1 and doc["unschedulable"] is True
    assert doc["reasons"][0]["rejected"] == {"invalid pool": 4}


def partitioned_slices() -> list[dict[str, Any]]:
    """node-a's GPU as two partitions of one counter set: gpu-0 declares "vgpu", gpu-1 "mig"."""
    devices = make_slice(devices=2)
    devices["spec"]["pool"]["resourceSliceCount"] = 2
    for device, group in zip(devices["spec"]["devices"], ("vgpu", "mig"), strict=True):
        device["consumesCounters"] = [
            {"counterSet": "gpu", "counters": {"memory": {"value": "1"}}, "compatibilityGroups": [group]}
        ]
    counters = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "node-a-counters"},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": "node-a",
            "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 2},
            "sharedCounters": [{"name": "gpu", "counters": {"memory": {"value": "2"}}}],
        },
    }
    return [devices, counters]


def test_compatibility_groups_reasons_name_the_gate_and_the_groups(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    files = write_yaml(
        tmp_path / "c.yaml", CLASS, NODE, *partitioned_slices(), make_claim("held", allocated=["gpu-1"]),
        make_claim("new"),
    )
    args = ("-f", str(files), "--node", "node-a", "--claim", "default/new")
    code, out, _ = run_cli(capsys, *args)
    assert code == 1
    assert "2 in pools with compatibility groups (DRADeviceCompatibilityGroups is off)" in out
    code, out, _ = run_cli(capsys, *args, "--feature-gates", "DRADeviceCompatibilityGroups=true")
    assert code == 1
    assert "1 in use, 1 sharing no compatibility group with allocated devices on a counter set" in out
