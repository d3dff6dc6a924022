"""What an operator's tooling expects of any kube component: /livez beside /healthz and /readyz (with
`?verbose`), process_* and python_* series and a build_info on /metrics, cumulative counts as counters,
RFC 3339 log timestamps with a zone and key/value fields in both log formats, and `--v N`."""

from __future__ import annotations

import argparse
import datetime
import io
import logging
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from test_server import EXAMPLES, get

from extender.commands import output
from extender.http.server import ExtenderServer
from extender.options import NetworkOptions, ServeOptions, SourceOptions
from extender.wiring import App, build_info


async def test_livez_and_verbose_probes(example: ExtenderServer) -> None:
    debug = example.urls["debug"]
    assert await get(debug + "/livez") == (200, "ok\n")
    assert await get(debug + "/livez?verbose") == (200, "[+]ping ok\nlivez check passed\n")
    assert await get(debug + "/readyz?verbose") == (
        200, "[+]ping ok\n[+]informer-sync ok\n[+]leader-election ok\nreadyz check passed\n")
    example.cache.ready = False
    assert await get(debug + "/readyz?verbose") == (
        503, "[+]ping ok\n[-]informer-sync failed\n[+]leader-election ok\nreadyz check failed\n")
    assert (await get(debug + "/livez"))[0] == 200  # a cluster slow to list is no reason to restart


def _types(exposition: str) -> dict[str, str]:
    return {parts[2]: parts[3] for line in exposition.splitlines()
            if line.startswith("# TYPE ") and len(parts := line.split()) == 4}


async def test_metrics_have_process_python_and_counters(example: ExtenderServer) -> None:
    status, text = await get(example.urls["debug"] + "/metrics")
    assert status == 200
    types = _types(text)
    for name, kind in (("process_cpu_seconds_total", "counter"), ("process_resident_memory_bytes", "gauge"),
                       ("process_start_time_seconds", "gauge"), ("python_info", "gauge"),
                       ("python_gc_collections_total", "counter"), ("dra_extender_build_info", "gauge"),
                       ("dra_extender_watch_restarts_total", "counter"),
                       ("dra_extender_bind_write_conflicts_total", "counter")):
        assert types.get(name) == kind, name
    assert "dra_extender_bind_write_conflicts_total 0.0" in text


async def test_serve_labels_build_info_with_what_version_prints() -> None:
    options = ServeOptions(source=SourceOptions(snapshot=str(EXAMPLES)),
                           network=NetworkOptions(extender_port=0, debug_port=0))
    async with App(options) as app:
        _, text = await get(app.server.urls["debug"] + "/metrics")
    info = build_info()
    line = next(line for line in text.splitlines() if line.startswith("dra_extender_build_info{"))
    for name in ("version", "cel_backend", "event_loop"):
        assert f'{name}="{info[name]}"' in line
    assert info["version"] != "" and line.endswith(" 1.0")


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    root = logging.getLogger()
    before = root.handlers[:], root.level
    yield stream
    root.handlers[:], level = before
    root.setLevel(level)


def _log_to(stream: io.StringIO, form: str) -> logging.Logger:
    output.configure_logging("info", form)
    handler = logging.getLogger().handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(stream)
    return logging.getLogger("dra-extender")


def _has_zone(stamp: str) -> bool:
    return datetime.datetime.fromisoformat(stamp).tzinfo is not None and "T" in stamp


def test_json_logs_carry_rfc3339_times_and_fields(captured: io.StringIO) -> None:
    log = _log_to(captured, "json")
    log.info("bind failed: %s", "gone", extra={"verb": "bind", "pod": "a/p", "node": "n1", "duration": 0.25})
    entry = orjson.loads(captured.getvalue())
    assert _has_zone(entry["ts"])
    assert entry | {"ts": ""} == {"ts": "", "level": "info", "logger": "dra-extender",
                                  "msg": "bind failed: gone", "verb": "bind", "pod": "a/p", "node": "n1",
                                  "duration": 0.25}


def test_text_logs_carry_rfc3339_times_and_fields(captured: io.StringIO) -> None:
    log = _log_to(captured, "text")
    log.warning("claim %s stuck", "a/c", extra={"claim": "a/c", "reason": "two words", "node": 'q"x'})
    stamp, rest = captured.getvalue().rstrip("\n").split(" ", 1)
    assert _has_zone(stamp)
    assert rest == 'WARNING dra-extender: claim a/c stuck claim=a/c reason="two words" node="q\\"x"'


@pytest.mark.parametrize(("argv", "level"), [
    ([], "warning"), (["--v", "0"], "info"), (["-v", "2"], "info"), (["--v=4"], "debug"),
    (["-v", "9"], "debug"),
    (["--v", "4", "--log-level", "error"], "error"), (["--log-level", "error", "--v", "4"], "debug"),
])
def test_v_is_the_log_level_as_kube_components_take_it(argv: list[str], level: str) -> None:
    parser = argparse.ArgumentParser()
    output.add_logging_arguments(parser, default_level="warning")
    assert parser.parse_args(argv).log_level == level


@pytest.mark.parametrize("bad", ["-1", "high"])
def test_v_refuses_what_is_no_verbosity(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    output.add_logging_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--v", bad])
    assert "--v" in capsys.readouterr().err


def test_the_deployment_probes_liveness_on_livez() -> None:
    deployment = (Path(__file__).resolve().parents[2] / "deploy" / "base" / "deployment.yaml").read_text()
    assert "path: /livez" in deployment and "path: /healthz" not in deployment


async def test_serve_exports_the_headroom_of_the_shapes_it_was_given() -> None:
    options = ServeOptions(source=SourceOptions(snapshot=str(EXAMPLES)),
                           network=NetworkOptions(extender_port=0, debug_port=0),
                           headroom=("gpu.example.com", "gpu.example.com:4", "template:default/one-gpu",
                                     "nope"))
    async with App(options) as app:
        _, text = await get(app.server.urls["debug"] + "/metrics")
        _, page = await get(app.server.urls["debug"] + "/debug/ui")
    lines = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
             if line.startswith("dra_extender_headroom_")}
    assert lines['dra_extender_headroom_pods{shape="gpu.example.com"}'] == 18
    assert lines['dra_extender_headroom_pods{shape="gpu.example.com:4"}'] == 4
    assert lines['dra_extender_headroom_pods{shape="template:default/one-gpu"}'] == 18
    assert lines['dra_extender_headroom_pods{shape="nope"}'] == -1
    assert lines['dra_extender_headroom_stranded_devices{reason="counters",shape="gpu.example.com"}'] == 8
    assert 'data-shape="gpu.example.com:4"' in page and "DeviceClass nope not found" in page


def test_a_headroom_shape_that_cannot_be_read_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="--headroom 'gpu:x'"):
        ServeOptions(headroom=("gpu:x",))
