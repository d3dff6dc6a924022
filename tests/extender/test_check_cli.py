"""`dra-extender check`: object validation and selector matching against a snapshot."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import yaml

from extender.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cluster"

GPU_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.example.com"},
    "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]},
}


def gpu_slice(node: str, models: list[str]) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpus", "uid": f"uid-{node}"},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{i}",
                    "attributes": {"model": {"string": model}},
                    "capacity": {"memory": {"value": "40Gi"}},
                }
                for i, model in enumerate(models)
            ],
        },
    }


def claim(name: str, selectors: list[str], class_name: str = "gpu.example.com") -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": class_name,
                            "selectors": [{"cel": {"expression": e}} for e in selectors],
                        },
                    }
                ]
            }
        },
    }


def run_check(
    tmp_path: Path, objects: list[dict], capsys: pytest.CaptureFixture[str], *flags: str
) -> tuple[int, dict]:
    (tmp_path / "objects.yaml").write_text(yaml.safe_dump_all(objects))
    code = main(["check", str(tmp_path), "-o", "json", *flags])
    return code, orjson.loads(capsys.readouterr().out)


def request_entry(report: dict, claim_name: str) -> dict:
    (entry,) = [r for r in report["requests"] if f"/{claim_name}," in r["subject"]]
    return entry


def test_example_cluster_is_valid_and_matches_expected_devices(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["check", str(EXAMPLE), "-o", "json"])
    report = orjson.loads(capsys.readouterr().out)
    assert code == 0, report
    assert report["invalidObjects"] == []
    assert report["devices"] == 28
    a100 = request_entry(report, "a100-80gb")
    assert {d["node"] for d in a100["matchingDevices"]} == {"node-1"}
    assert len(a100["matchingDevices"]) == 8
    halves = next(r for r in report["requests"] if "request gpu/half" in r["subject"])
    assert all(d["device"].endswith(("half-0", "half-1")) for d in halves["matchingDevices"])
    assert len(halves["matchingDevices"]) == 8


def test_text_output_names_nodes_and_devices(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "ResourceClaim default/a100-80gb, request gpu (class gpu.example.com): 8 matching device(s)" in out
    assert "node-1 (pool gpu.example.com/node-1): gpu-0, gpu-1" in out
    assert out.rstrip().endswith("OK: every object is valid and every selector evaluates.")


def test_request_selector_narrows_class_matches(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objects = [
        GPU_CLASS,
        gpu_slice("n1", ["A100", "H100", "A100"]),
        claim("c", ['device.attributes["gpu.example.com"].model == "A100"']),
    ]
    code, report = run_check(tmp_path, objects, capsys)
    assert code == 0
    assert [d["device"] for d in request_entry(report, "c")["matchingDevices"]] == ["gpu-0", "gpu-2"]
    assert len(report["deviceClasses"][0]["matchingDevices"]) == 3


def test_invalid_object_is_reported_and_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = gpu_slice("n1", ["A100"])
    del broken["spec"]["pool"]
    code, report = run_check(tmp_path, [GPU_CLASS, broken], capsys)
    assert code == 1
    assert len(report["invalidObjects"]) == 1
    assert "n1-gpus" in report["invalidObjects"][0] and "pool" in report["invalidObjects"][0]


def test_compile_error_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objects = [GPU_CLASS, gpu_slice("n1", ["A100"]), claim("bad", ["device.attributes[ == 1"])]
    code, report = run_check(tmp_path, objects, capsys)
    assert code == 1
    entry = request_entry(report, "bad")
    assert entry["compileErrors"] and entry["compileErrors"][0].startswith("selector #1:")
    assert entry["matchingDevices"] == []


def test_runtime_error_is_counted_per_device(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objects = [
        GPU_CLASS,
        gpu_slice("n1", ["A100", "H100"]),
        claim("missing", ['device.attributes["gpu.example.com"].family == "x"']),
    ]
    code, report = run_check(tmp_path, objects, capsys)
    assert code == 1
    entry = request_entry(report, "missing")
    assert entry["runtimeErrorCount"] == 2
    assert "no such key" in entry["runtimeErrors"][0]


def test_missing_device_class_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = run_check(tmp_path, [gpu_slice("n1", ["A100"]), claim("c", [], class_name="nope")], capsys)
    assert code == 1
    assert "device class 'nope' does not exist" in request_entry(report, "c")["compileErrors"][0]


def test_unreadable_path_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(tmp_path / "absent.yaml")]) == 2
    assert "absent.yaml" in capsys.readouterr().err


def test_claim_template_selectors_are_linted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    made = claim("tpl", ["device.attributes[ == 1"])
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": made["metadata"], "spec": {"spec": made["spec"]}}
    code, report = run_check(tmp_path, [GPU_CLASS, gpu_slice("n1", ["A100"]), template], capsys)
    assert code == 1
    entry = request_entry(report, "tpl")
    assert entry["subject"].startswith("ResourceClaimTemplate default/tpl")
    assert entry["compileErrors"] and entry["compileErrors"][0].startswith("selector #1:")


def test_unknown_scoring_annotation_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "default",
                        "annotations": {"dra-extender.io/scoring": "pack"}},
           "spec": {"containers": [{"name": "c", "image": "x"}]}}
    code, report = run_check(tmp_path, [GPU_CLASS, gpu_slice("n1", ["A100"]), pod], capsys)
    assert code == 1
    assert report["invalidObjects"] == [
        "Pod default/p: dra-extender.io/scoring='pack' is unknown (binpack, spread, none): "
        "the default policy applies"]


def partitioned_slice(*groups: str) -> dict:
    """A slice of one GPU partition that draws from counter set gpu-0, declaring `groups`."""
    raw = gpu_slice("n1", ["A100"])
    use = {"counterSet": "gpu-0", "counters": {"memory": {"value": "10Gi"}}}
    raw["spec"]["devices"][0]["consumesCounters"] = [{**use, "compatibilityGroups": list(groups)}]
    return raw


def test_compatibility_groups_are_dropped_with_a_warning_while_the_gate_is_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = run_check(tmp_path, [GPU_CLASS, partitioned_slice("Not-A-Label")], capsys)
    assert code == 0, report  # the API server drops the field without validating it
    assert report["invalidObjects"] == []
    (warning,) = report["warnings"]
    assert warning.startswith(
        "ResourceSlice n1-gpus: spec.devices[0].consumesCounters[0].compatibilityGroups: dropped, "
        "DRADeviceCompatibilityGroups is off"
    )
    main(["check", str(tmp_path)])
    assert "Warnings (1):" in capsys.readouterr().out


def test_compatibility_groups_are_validated_when_the_gate_is_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gate = ("--feature-gates", "DRADeviceCompatibilityGroups=true")
    code, report = run_check(tmp_path, [GPU_CLASS, partitioned_slice("mig", "vgpu")], capsys, *gate)
    assert (code, report["warnings"], report["invalidObjects"]) == (0, [], [])
    code, report = run_check(tmp_path, [GPU_CLASS, partitioned_slice("a", "b", "c")], capsys, *gate)
    assert code == 1
    assert report["invalidObjects"] == [
        "ResourceSlice n1-gpus: spec.devices[0].consumesCounters[0].compatibilityGroups: Too many: 3: "
        "must have at most 2 items"
    ]


def test_unknown_feature_gate_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "objects.yaml").write_text(yaml.safe_dump_all([GPU_CLASS]))
    assert main(["check", str(tmp_path), "--feature-gates", "NoSuchGate=true"]) == 2
    assert "--feature-gates: unknown feature gate 'NoSuchGate'" in capsys.readouterr().err


def test_derived_attributes_are_validated_and_evaluated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    derived = claim("derived", [])
    exactly = derived["spec"]["devices"]["requests"][0]["exactly"]
    exactly["derivedAttributes"] = [
        {"name": "derived/family", "expression": 'device.attributes["gpu.example.com"].family'},
        {"name": "derived/unused", "expression": '"x"'},
    ]
    derived["spec"]["devices"]["constraints"] = [{"matchAttribute": "derived/family"}]
    objects = [GPU_CLASS, gpu_slice("n1", ["A100"]), derived]
    code, report = run_check(tmp_path, objects, capsys, "--feature-gates=DRADerivedAttributes=true")
    assert code == 1
    assert report["invalidObjects"] == [
        "ResourceClaim default/derived: spec.devices.requests[0].exactly.derivedAttributes[1].name: Invalid "
        "value: 'derived/unused': must be referenced by at least one matchAttribute or distinctAttribute "
        "constraint targeting this request"
    ]
    (error,) = request_entry(report, "derived")["runtimeErrors"]
    assert error.startswith("device gpu.example.com/n1/gpu-0: derived attribute derived/family: no such key")
    # With the gate off (the 1.37 default) the API server drops them, and so does check, saying so.
    code, report = run_check(tmp_path, objects, capsys)
    assert code == 0 and report["invalidObjects"] == []
    assert report["warnings"] == [
        "ResourceClaim derived: spec.devices.requests[0].exactly.derivedAttributes: dropped, "
        "DRADerivedAttributes is off (the API server drops them from new objects)"
    ]


def test_skip_node_operations_are_validated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    skipping = gpu_slice("n1", ["A100"])
    skipping["spec"]["skipNodeOperations"] = ["NodePrepareResources", "Sometimes"]
    code, report = run_check(
        tmp_path, [GPU_CLASS, skipping], capsys, "--feature-gates=DRAOptionalNodeOperations=true"
    )
    assert code == 1
    assert report["invalidObjects"] == [
        "ResourceSlice n1-gpus: spec.skipNodeOperations: Unsupported value: 'Sometimes': supported values: "
        "'NodePrepareResources', 'NodeUnprepareResources', '*'",
        "ResourceSlice n1-gpus: spec.skipNodeOperations: Invalid value: NodePrepareResources cannot be "
        "skipped unless NodeUnprepareResources is also skipped",
    ]
    code, report = run_check(tmp_path, [GPU_CLASS, skipping], capsys)
    assert code == 0 and report["warnings"] == [
        "ResourceSlice n1-gpus: spec.skipNodeOperations: dropped, DRAOptionalNodeOperations is off (the API "
        "server drops them from new objects)"
    ]


def shared_gpu_slice(policy: dict, capacity: str = "8") -> dict:
    raw = gpu_slice("n1", ["A100"])
    device = raw["spec"]["devices"][0]
    device["allowMultipleAllocations"] = True
    device["capacity"] = {"memory": {"value": capacity, "requestPolicy": policy}}
    return raw


FRACTIONAL_ON = "--feature-gates=DRAFractionalCapacityRange=true"
POLICY = "ResourceSlice n1-gpus: spec.devices[0].capacity[memory].requestPolicy"


def test_fractional_range_is_checked_in_milli_units_with_the_gate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    aligned = shared_gpu_slice({"default": "750m", "validRange": {"min": "500m", "step": "250m", "max": "2"}})
    code, report = run_check(tmp_path, [GPU_CLASS, aligned], capsys, FRACTIONAL_ON)
    assert code == 0, report["invalidObjects"]
    # Off (the 1.37 default), bounds are whole numbers rounded up: min 1, step 1, default 1.
    code, report = run_check(tmp_path, [GPU_CLASS, aligned], capsys)
    assert code == 0, report["invalidObjects"]

    off_step = shared_gpu_slice({"default": "600m", "validRange": {"min": "500m", "step": "250m"}})
    code, report = run_check(tmp_path, [GPU_CLASS, off_step], capsys, FRACTIONAL_ON)
    assert code == 1
    assert report["invalidObjects"] == [
        f'{POLICY}.validRange.step: Invalid value: "600m": value is not a multiple of a given step (250m) '
        "from (500m)"
    ]
    code, report = run_check(tmp_path, [GPU_CLASS, off_step], capsys)
    assert code == 0, report["invalidObjects"]

    finer = shared_gpu_slice({"default": "1", "validRange": {"min": "1", "step": "500u"}})
    code, report = run_check(tmp_path, [GPU_CLASS, finer], capsys, FRACTIONAL_ON)
    assert report["invalidObjects"] == [
        f'{POLICY}.validRange.step: Invalid value: "500u": value cannot be represented as a milli value'
    ]


def test_request_policies_are_checked_as_the_api_server_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policies = [
        {"validRange": {"min": "1"}},
        {"default": "3", "validValues": ["4", "2", "16"]},
        {"default": "9", "validRange": {"min": "2", "max": "12", "step": "7"}},
    ]
    objects = [GPU_CLASS, *(shared_gpu_slice(p) for p in policies)]
    for i, raw in enumerate(objects[1:]):
        raw["metadata"]["name"] = f"s{i}"
    code, report = run_check(tmp_path, objects, capsys)
    assert code == 1
    field = (
        'ResourceSlice {}: spec.devices[0].capacity[memory].requestPolicy.{}: Invalid value: "{}": {}'
    ).format
    assert report["invalidObjects"] == [
        "ResourceSlice s0: spec.devices[0].capacity[memory].requestPolicy.default: Required value: required "
        "when validRange is defined",
        field("s1", "validValues[1]", "2", "values must be sorted in ascending order"),
        field("s1", "validValues[2]", "16", "option is larger than capacity value: 8"),
        field("s1", "validValues", "3", "default value is not valid according to the requestPolicy"),
        field("s2", "validRange.max", "12", "max is larger than capacity value: 8"),
        field("s2", "validRange.step", "7", "one step 9 is larger than capacity value: 8"),
        field("s2", "validRange.step", "12", "value is not a multiple of a given step (7) from (2)"),
    ]
