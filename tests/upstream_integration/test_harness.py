"""harness.py without running Go: test2json events as the Go tool writes them, the comparison with the
committed lists, and the patch of upstream's dra.go."""

from __future__ import annotations

from pathlib import Path

import harness
import orjson
import pytest
from build_control_plane import find_go
from cryptography import x509

from allocator.features import DEFAULT_GATES

PACKAGE = "default"


def event(action: str, test: str | None = None, **fields: object) -> bytes:
    body: dict[str, object] = {"Time": "2026-12-06T04:37:43.344411425Z", "Action": action, "Package": PACKAGE}
    if test is not None:
        body["Test"] = test
    return orjson.dumps({**body, **fields})


def output(test: str | None, text: str) -> bytes:
    return event("output", test, Output=text + "\n")


# Shaped as `go tool test2json -t -p default default.test -test.v=test2json` prints a run of two
# parallel leaves, one of them starting the scheduler.
PASSING_RUN = [
    event("start"),
    output(None, '  I1206 04:37:43.240132    2981 etcd.go:197] "etcd output" level="warn"'),
    event("run", "TestDRA"),
    output("TestDRA", "=== RUN   TestDRA"),
    event("run", "TestDRA/default"),
    output("TestDRA/default", "=== RUN   TestDRA/default"),
    event("run", "TestDRA/default/Pod"),
    event("pause", "TestDRA/default/Pod"),
    event("run", "TestDRA/default/UsesAllResources"),
    event("pause", "TestDRA/default/UsesAllResources"),
    event("cont", "TestDRA/default/Pod"),
    event("cont", "TestDRA/default/UsesAllResources"),
    output("TestDRA/default/UsesAllResources", f"    dra.go:561: {harness.SCHEDULER_MARKER}"),
    event("pass", "TestDRA/default/Pod", Elapsed=0.03),
    event("pass", "TestDRA/default/UsesAllResources", Elapsed=26.33),
    event("pass", "TestDRA/default", Elapsed=4.07),
    event("pass", "TestDRA", Elapsed=30.4),
    event("pass", Elapsed=31.708),
]


def test_leaves_their_status_and_whether_they_use_the_scheduler() -> None:
    leaves, own_failures, package_output = harness.parse_events(PASSING_RUN)
    assert {name: (r.status, r.seconds, r.uses_scheduler) for name, r in leaves.items()} == {
        "TestDRA/default/Pod": ("pass", 0.03, False),
        "TestDRA/default/UsesAllResources": ("pass", 26.33, True),
    }
    assert own_failures == {}
    assert package_output == ['  I1206 04:37:43.240132    2981 etcd.go:197] "etcd output" level="warn"']


def test_a_marker_in_a_parent_counts_for_its_sub_tests() -> None:
    events = [
        event("run", "TestDRA/all/PodGroup"),
        output("TestDRA/all/PodGroup", f"    dra.go:561: {harness.SCHEDULER_MARKER}"),
        event("run", "TestDRA/all/PodGroup/gang"),
        event("pass", "TestDRA/all/PodGroup/gang", Elapsed=1.0),
        event("pass", "TestDRA/all/PodGroup", Elapsed=1.0),
    ]
    leaves, _, _ = harness.parse_events(events)
    assert leaves["TestDRA/all/PodGroup/gang"].uses_scheduler


def test_a_binary_that_dies_leaves_its_running_tests_without_result() -> None:
    events = [
        *PASSING_RUN[2:8],
        output("TestDRA/default/Pod", "panic: test timed out after 1m0s"),
        output(None, "FAIL\tdefault\t60.010s"),
        event("fail", Elapsed=60.01),
    ]
    leaves, own_failures, package_output = harness.parse_events(events)
    assert leaves["TestDRA/default/Pod"].status == "none"
    assert leaves["TestDRA/default/Pod"].output[-1] == "panic: test timed out after 1m0s"
    assert own_failures == {}  # its sub-tests have no result either: they explain it
    assert package_output == ["FAIL\tdefault\t60.010s"]


def test_a_parent_failing_while_its_sub_tests_pass_is_reported_on_its_own() -> None:
    events = [
        *PASSING_RUN[:-3],
        output("TestDRA/default", "    dra_extender.go:250: dra-extender exited while the scheduler ran"),
        event("fail", "TestDRA/default", Elapsed=4.07),
        event("fail", "TestDRA", Elapsed=30.4),
        event("fail", Elapsed=31.708),
    ]
    leaves, own_failures, _ = harness.parse_events(events)
    assert all(r.status == "pass" for r in leaves.values())
    assert list(own_failures) == ["TestDRA/default"]


def test_lines_that_are_not_json_are_package_output() -> None:
    _, _, package_output = harness.parse_events([b"signal: killed\n", b"\n"])
    assert package_output == ["signal: killed"]


def run_with(statuses: dict[str, str], exit_code: int = 0) -> harness.PackageRun:
    leaves = {
        name: harness.Result(name, status, 1.0, [f"{name} said {status}"])
        for name, status in statuses.items()
    }
    return harness.PackageRun(PACKAGE, "extender", 10.0, exit_code, leaves, {}, [])


IN_TREE = {"TestDRA/default/A": "default", "TestDRA/default/B": "default", "TestDRA/GA/C": "ga"}


def test_compare_accepts_listed_failures_and_unlisted_passes() -> None:
    run = run_with({"TestDRA/default/A": "pass", "TestDRA/default/B": "fail", "TestDRA/default/X": "fail"})
    # X does not pass in-tree: it does not count; C is another package's.
    assert harness.compare(run, IN_TREE, {"TestDRA/default/B": "reasons"}) == []


def test_compare_reports_unlisted_failures_and_listed_passes() -> None:
    run = run_with({"TestDRA/default/A": "fail", "TestDRA/default/B": "pass"}, exit_code=1)
    problems = harness.compare(run, IN_TREE, {"TestDRA/default/B": "reasons"})
    assert len(problems) == 2
    assert problems[0].startswith("TestDRA/default/A: fail (passes in-tree")
    assert "TestDRA/default/A said fail" in problems[0]
    assert problems[1].startswith("TestDRA/default/B now passes: remove it")


def test_compare_reports_a_counted_test_that_did_not_run() -> None:
    problems = harness.compare(run_with({"TestDRA/default/A": "pass"}), IN_TREE, {})
    listed = harness.EXPECTATIONS.name
    assert problems == [f"TestDRA/default/B: not run (passes in-tree, not in {listed})\n    "]


def test_compare_reports_a_failed_exit_without_failed_test() -> None:
    run = run_with({"TestDRA/default/A": "pass", "TestDRA/default/B": "pass"}, exit_code=1)
    run.package_output = ["goleak: Errors on successful test run: found unexpected goroutines"]
    (problem,) = harness.compare(run, IN_TREE, {})
    assert problem.startswith("package default exited with 1 without a failed test")
    assert "found unexpected goroutines" in problem


def test_results_survive_their_json_file(tmp_path: Path) -> None:
    leaves, own, output_lines = harness.parse_events(PASSING_RUN)
    run = harness.PackageRun(PACKAGE, "in-tree", 31.7, 0, leaves, own, output_lines)
    path = tmp_path / "runs.json"
    harness._save([run], path)
    assert harness._load(path) == [run]


def test_summary_table_counts_only_what_passes_in_tree() -> None:
    a, b, c = "TestDRA/default/A", "TestDRA/default/B", "TestDRA/default/C"
    in_tree = run_with({a: "pass", b: "pass", c: "skip"})
    ours = run_with({a: "pass", b: "fail", c: "pass"})
    ours.leaves[b].uses_scheduler = True
    table = harness.summary_table([ours], [in_tree])
    assert "| default | 3 | 2 | 1 | 1 | 0 | 1 |" in table


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cause: {tests: [TestDRA/x]}", "needs a 'reason'"),
        ("cause: {reason: why, tests: []}", "non-empty 'tests'"),
        ("a: {reason: why, tests: [TestDRA/x]}\nb: {reason: other, tests: [TestDRA/x]}", "under both"),
        ("- TestDRA/x", "mapping of causes"),
    ],
)
def test_expectations_file_errors_name_the_problem(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "expectations.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        harness.read_expectations(path)


def test_in_tree_file_errors_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "in_tree_passing.txt"
    path.write_text("# header\ndefault TestDRA/default/Pod\nnowhere TestDRA/x\n")
    with pytest.raises(ValueError, match=r"in_tree_passing.txt:3: expected '<package> <test name>'"):
        harness.read_in_tree_passing(path)


def test_committed_lists_parse() -> None:
    assert harness.read_in_tree_passing()
    harness.read_expectations()


def test_a_patch_whose_anchor_moved_stops_the_build() -> None:
    with pytest.raises(RuntimeError, match="occurs 0 times, not once"):
        harness.patched("package dra\n", "dra.go", "extender")


def test_patches_apply_to_upstream_dra_go() -> None:
    go = find_go()
    if go is None:
        pytest.skip("no Go toolchain: upstream's sources are not in a module cache")
    dra_go = harness.upstream_source(go) / "dra.go"
    if not dra_go.is_file():
        pytest.skip(f"{dra_go} is not downloaded (make e2e-control-plane downloads it)")
    original = dra_go.read_text()
    ours = harness.patched(original, "dra.go", "extender")
    in_tree = harness.patched(original, "dra.go", "in-tree")
    assert "startDRAExtender" in ours and "startDRAExtender" not in in_tree
    assert ours.count(harness.SCHEDULER_MARKER) == in_tree.count(harness.SCHEDULER_MARKER) == 1
    assert len(ours) == len(original) + sum(len(p.text) for p in harness.PATCHES)


def test_settings_configure_the_extender_as_deploy_does(tmp_path: Path) -> None:
    settings = harness.extender_settings(tmp_path, ["--scoring=spread"])
    extender = settings["extender"]
    assert {key: extender[key] for key in ("filterVerb", "prioritizeVerb", "preemptVerb", "bindVerb")} == {
        "filterVerb": "filter", "prioritizeVerb": "prioritize", "preemptVerb": "preempt", "bindVerb": "bind"
    }
    assert extender["nodeCacheCapable"] is True
    assert extender["ignorable"] is False
    assert extender["managedResources"] == []
    assert settings["plugins"] == {"multiPoint": {"disabled": [{"name": "DynamicResources"}]}}
    # The serving certificate is for the name kube-scheduler checks, signed by the CA it trusts.
    ca = x509.load_pem_x509_certificate(Path(extender["tlsConfig"]["caFile"]).read_bytes())
    serving = x509.load_pem_x509_certificate(Path(settings["certFile"]).read_bytes())
    serving.verify_directly_issued_by(ca)
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert extender["tlsConfig"]["serverName"] in names.get_values_for_type(x509.DNSName)
    assert Path(settings["keyFile"]).stat().st_mode & 0o077 == 0
    # Mutual TLS as deploy/'s scheduler-config mode: kube-scheduler presents a client certificate of
    # the CA the server requires.
    client = x509.load_pem_x509_certificate(Path(extender["tlsConfig"]["certFile"]).read_bytes())
    client.verify_directly_issued_by(ca)
    assert Path(extender["tlsConfig"]["keyFile"]).stat().st_mode & 0o077 == 0
    assert f"--extender-client-ca-file={extender['tlsConfig']['caFile']}" in settings["extraFlags"]
    requeue = next(flag for flag in settings["extraFlags"] if flag.startswith("--requeue-claim="))
    assert settings["namespaces"] == [requeue.split("=")[1].split("/")[0]]
    assert settings["extraFlags"][-1] == "--scoring=spread"
    assert set(settings["featureGates"]) == set(DEFAULT_GATES)
    assert settings["argFlags"]["filterTimeout"] == "--node-timeout"
