"""The cache keeps only the Pod fields DRA Extender reads: nothing secret reaches /debug/snapshot, the
startup banner or memory, and what is kept still schedules and replays the same."""

from __future__ import annotations

import copy
from unittest import mock

import orjson
import yaml
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from test_server import EXAMPLES, build_server, get

from allocator import FeatureGates
from extender.commands.serve import example_pod, usage_banner
from extender.http.server import _debug_gate
from extender.kube.objects_io import load_objects
from extender.state.cache import ClusterCache
from extender.state.podtransform import slim_pod

SECRET = "hunter2-do-not-leak"


def loaded_pod() -> dict:
    """The example's pending pod as the API server returns it to a list or watch: everything set."""
    pod = copy.deepcopy(next(o for o in load_objects([EXAMPLES]) if o["kind"] == "Pod"))
    pod["metadata"]["annotations"] = {
        "kubectl.kubernetes.io/last-applied-configuration": f'{{"env": "{SECRET}"}}',
        "dra-extender.io/scoring": "spread",
    }
    pod["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    main = pod["spec"]["containers"][0]
    main.update(env=[{"name": "TOKEN", "value": SECRET}], args=["--password", SECRET], command=["run"],
                livenessProbe={"exec": {"command": [SECRET]}})
    pod["spec"]["initContainers"] = [{"name": "setup", "image": "x", "restartPolicy": "Always",
                                      "env": [{"name": "K", "value": SECRET}],
                                      "resources": {"limits": {"cpu": "1"}}}]
    pod["spec"]["volumes"] = [{"name": "v", "secret": {"secretName": SECRET}}]
    pod["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "message": SECRET}]}
    return pod


def cache_with(pod: dict) -> ClusterCache:
    others = [o for o in load_objects([EXAMPLES])
              if o["kind"] != "Pod" or o["metadata"]["name"] != "inference"]
    return ClusterCache.from_objects([*others, pod], FeatureGates())


def test_slim_pod_keeps_what_is_read_and_drops_the_rest() -> None:
    pod = loaded_pod()
    slim = slim_pod(pod)
    assert SECRET not in orjson.dumps(slim).decode()
    assert slim["metadata"]["annotations"] == {"dra-extender.io/scoring": "spread"}
    assert "managedFields" not in slim["metadata"]
    assert slim["spec"]["resourceClaims"] == pod["spec"]["resourceClaims"]
    assert slim["spec"]["containers"] == [{"name": "main", "resources": {"claims": [{"name": "gpu"}]}}]
    assert slim["spec"]["initContainers"] == [{"name": "setup", "restartPolicy": "Always",
                                               "resources": {"limits": {"cpu": "1"}}}]
    assert slim["status"] == {"phase": "Pending"}
    assert {"uid", "name", "namespace"} <= set(slim["metadata"])
    assert slim_pod(slim) == slim and SECRET in orjson.dumps(pod).decode(), "idempotent, input unchanged"


def test_of_affinity_only_the_required_node_affinity_is_kept() -> None:
    required_key, preferred_key = ("requiredDuringSchedulingIgnoredDuringExecution",
                                   "preferredDuringSchedulingIgnoredDuringExecution")
    required = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                        "values": ["node-1"]}]}]}
    anti = {"podAntiAffinity": {required_key: [{"labelSelector": {"matchLabels": {"app": SECRET}},
                                                "topologyKey": "zone"}]}}
    pod = loaded_pod()
    pod["spec"]["affinity"] = {
        "nodeAffinity": {required_key: required, preferred_key: [{"weight": 1, "preference": {}}]}, **anti}
    slim = slim_pod(pod)
    assert slim["spec"]["affinity"] == {"nodeAffinity": {required_key: required}}
    assert SECRET not in orjson.dumps(slim).decode()
    pod["spec"]["affinity"] = anti
    assert "affinity" not in slim_pod(pod)["spec"]
    pod["spec"]["affinity"] = {"nodeAffinity": {preferred_key: []}}
    assert "affinity" not in slim_pod(pod)["spec"]


def test_malformed_parts_reach_the_cache_unchanged() -> None:
    pod = {"metadata": {"name": "p", "namespace": "d", "uid": "u"}, "spec": {"resourceClaims": 5},
           "status": 3}
    assert slim_pod(pod) == pod
    for affinity in ("any", {"nodeAffinity": 7}):
        assert slim_pod({**pod, "spec": {"affinity": affinity}})["spec"] == {"affinity": affinity}
    cache = ClusterCache.from_objects([{"kind": "Pod", **pod}], FeatureGates())
    assert cache.stats()["invalid"] == {"Pod": 1}


def test_every_way_into_the_cache_slims_pods() -> None:
    cache = cache_with(loaded_pod())
    cache.replace("Pod", [loaded_pod()])  # what the informer does after a list
    cache.apply("Pod", "MODIFIED", {**loaded_pod(), "metadata": {**loaded_pod()["metadata"],
                                                                  "resourceVersion": "99999"}})
    stored = cache.pod("default", "inference")
    assert stored is not None and SECRET not in orjson.dumps(stored).decode()


async def test_snapshot_and_banner_carry_no_secret_and_the_snapshot_replays() -> None:
    pod = loaded_pod()
    server = build_server(cache_with(pod).objects())
    await server.start("127.0.0.1", 0, 0)
    try:
        status, text = await get(server.urls["debug"] + "/debug/snapshot")
        assert status == 200 and SECRET not in text
        banner = usage_banner(server, server.cache, example_pod(server.cache.valid_objects("Pod")))
        assert SECRET not in banner
        replayed = build_server(list(yaml.safe_load_all(text)))
        names = ["node-1", "node-2", "node-3"]
        original = await server.scheduler.filter(pod, names)
        again = await replayed.scheduler.filter(pod, names)
        assert (original.passed, original.failed, original.unresolvable) == (
            again.passed, again.failed, again.unresolvable)
        assert replayed.cache.pod("default", "inference")["metadata"]["annotations"] == {
            "dra-extender.io/scoring": "spread"}
    finally:
        await server.stop()


async def test_debug_pages_answer_only_loopback_by_default() -> None:
    async def page(_: web.Request) -> web.Response:
        return web.Response(text="cluster contents")

    def request_from(address: str, path: str) -> web.Request:
        transport = mock.Mock()
        transport.get_extra_info.side_effect = lambda name, default=None: (
            (address, 40000) if name == "peername" else default)
        return make_mocked_request("GET", path, transport=transport)

    closed, open_ = _debug_gate(False), _debug_gate(True)
    assert (await closed(request_from("10.1.2.3", "/debug/snapshot"), page)).status == 403
    assert (await closed(request_from("10.1.2.3", "/metrics"), page)).status == 200
    assert (await closed(request_from("127.0.0.1", "/debug/snapshot"), page)).status == 200
    assert (await closed(request_from("::1", "/debug/state"), page)).status == 200
    # Listening on "::" (dual stack), port-forward's 127.0.0.1 arrives as an IPv4-mapped address.
    assert (await closed(request_from("::ffff:127.0.0.1", "/debug/ui"), page)).status == 200
    assert (await closed(request_from("::ffff:10.1.2.3", "/debug/ui"), page)).status == 403
    assert (await open_(request_from("10.1.2.3", "/debug/snapshot"), page)).status == 200
