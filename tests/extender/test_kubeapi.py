"""KubeClient against the in-process fake API server over real loopback HTTP (also checks the fake)."""

from __future__ import annotations

import asyncio
import base64
import ssl
from pathlib import Path

import aiohttp
import pytest
import yaml
from fakeapi import FakeApiServer
from tls_material import TLSFiles, write_ca_and_certs

from extender.kube.client import (
    ApiError,
    KubeClient,
    KubeConfigError,
    ReusedAuth,
    bearer_header,
    ssl_context_from,
)

CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"


def claim(name: str) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}}


def with_rv(obj: dict, rv: str) -> dict:
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": rv}}


ALLOCATION = {"devices": {"results": [{"request": "gpu", "driver": "d", "pool": "p", "device": "dev-0"}]}}


async def collect(events: object, count: int) -> list[dict]:
    out: list[dict] = []
    async for event in events:  # type: ignore[attr-defined]
        out.append(event)
        if len(out) == count:
            break
    return out


async def test_create_get_update_with_resource_versions(kube: KubeClient) -> None:
    created = await kube.create(CLAIMS, claim("a"))
    assert created["metadata"]["uid"]
    rv = created["metadata"]["resourceVersion"]
    fetched = await kube.get(f"{CLAIMS}/a")
    assert fetched == created

    created["metadata"]["labels"] = {"x": "y"}
    updated = await kube.update(f"{CLAIMS}/a", created)
    assert int(updated["metadata"]["resourceVersion"]) > int(rv)

    with pytest.raises(ApiError) as err:   # the original version is stale now
        await kube.update(f"{CLAIMS}/a", with_rv(created, rv))
    assert err.value.conflict and err.value.reason == "Conflict"
    assert "the object has been modified" in err.value.message
    assert err.value.body["kind"] == "Status"


async def test_not_found_and_already_exists(kube: KubeClient) -> None:
    with pytest.raises(ApiError) as err:
        await kube.get(f"{CLAIMS}/missing")
    assert err.value.not_found and err.value.reason == "NotFound"
    assert err.value.message == 'resourceclaims.resource.k8s.io "missing" not found'
    await kube.create(CLAIMS, claim("a"))
    with pytest.raises(ApiError) as err:
        await kube.create(CLAIMS, claim("a"))
    assert err.value.status == 409 and err.value.reason == "AlreadyExists"


async def test_status_subresource_is_separate_from_the_main_resource(kube: KubeClient) -> None:
    created = await kube.create(CLAIMS, claim("a"))
    with_status = {**created, "status": {"allocation": ALLOCATION}}
    main = await kube.update(f"{CLAIMS}/a", with_status)
    assert "status" not in main, "main resource update must ignore status"

    main["metadata"]["finalizers"] = ["f"]
    main["status"] = {"allocation": ALLOCATION}
    status_written = await kube.update(f"{CLAIMS}/a/status", main)
    assert status_written["status"]["allocation"] == ALLOCATION
    assert "finalizers" not in status_written["metadata"], "status update must ignore metadata changes"


async def test_claim_status_validation(kube: KubeClient) -> None:
    created = await kube.create(CLAIMS, claim("a"))
    reserved = [{"resource": "pods", "name": f"p{i}", "uid": f"u{i}"} for i in range(257)]
    with pytest.raises(ApiError) as err:
        await kube.update(f"{CLAIMS}/a/status", {**created, "status": {"allocation": ALLOCATION,
                                                                       "reservedFor": reserved}})
    assert err.value.status == 422 and "must have at most 256 items" in err.value.message
    with pytest.raises(ApiError) as err:
        await kube.update(f"{CLAIMS}/a/status", {**created, "status": {"reservedFor": reserved[:1]}})
    assert err.value.status == 422
    full = {"allocation": ALLOCATION, "reservedFor": reserved[:256]}
    allocated = await kube.update(f"{CLAIMS}/a/status", {**created, "status": full})
    other = {"devices": {"results": [{**ALLOCATION["devices"]["results"][0], "device": "dev-1"}]}}
    with pytest.raises(ApiError) as err:
        await kube.update(f"{CLAIMS}/a/status", {**allocated, "status": {"allocation": other}})
    assert err.value.status == 422 and "immutable" in err.value.message


async def test_delete_with_finalizer_sets_deletion_timestamp(kube: KubeClient) -> None:
    body = claim("a")
    body["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    await kube.create(CLAIMS, body)
    deleting = await kube.delete(f"{CLAIMS}/a")
    assert deleting["metadata"]["deletionTimestamp"]
    deleting["metadata"]["finalizers"] = []
    await kube.update(f"{CLAIMS}/a", deleting)
    with pytest.raises(ApiError) as err:
        await kube.get(f"{CLAIMS}/a")
    assert err.value.not_found


async def test_delete_preconditions(kube: KubeClient) -> None:
    created = await kube.create(CLAIMS, claim("a"))
    with pytest.raises(ApiError) as err:
        await kube.delete(f"{CLAIMS}/a", preconditions={"uid": "someone-else"})
    assert err.value.conflict
    await kube.delete(f"{CLAIMS}/a", preconditions={"uid": created["metadata"]["uid"]})
    assert (await kube.list(CLAIMS))["items"] == []


async def test_merge_patch(kube: KubeClient) -> None:
    await kube.create(CLAIMS, claim("a"))
    patched = await kube.patch(f"{CLAIMS}/a", {"metadata": {"labels": {"a": "b"}}})
    assert patched["metadata"]["labels"] == {"a": "b"}
    patched = await kube.patch(f"{CLAIMS}/a", {"metadata": {"labels": None}})
    assert "labels" not in patched["metadata"]


async def test_pod_binding(kube: KubeClient) -> None:
    pod = await kube.create("/api/v1/namespaces/default/pods",
                            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}})
    binding = {"apiVersion": "v1", "kind": "Binding",
               "metadata": {"name": "p", "namespace": "default", "uid": pod["metadata"]["uid"]},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"}}
    await kube.create("/api/v1/namespaces/default/pods/p/binding", binding)
    assert (await kube.get("/api/v1/namespaces/default/pods/p"))["spec"]["nodeName"] == "node-1"
    with pytest.raises(ApiError) as err:
        await kube.create("/api/v1/namespaces/default/pods/p/binding", binding)
    assert err.value.conflict and "already assigned" in err.value.message


async def test_list_items_carry_no_type_meta_and_list_has_resource_version(
        kube: KubeClient, fake_api: FakeApiServer) -> None:
    await kube.create(CLAIMS, claim("a"))
    listed = await kube.list("/apis/resource.k8s.io/v1/resourceclaims")
    assert listed["kind"] == "ResourceClaimList"
    assert listed["metadata"]["resourceVersion"] == str(fake_api.resource_version)
    assert [item["metadata"]["name"] for item in listed["items"]] == ["a"]
    assert "kind" not in listed["items"][0]


async def test_pages_reads_a_page_once_the_caller_is_done_with_the_one_before(
        kube: KubeClient, fake_api: FakeApiServer) -> None:
    for index in range(5):
        await kube.create(CLAIMS, claim(f"c{index}"))
    names: list[str] = []
    async for listing in kube.pages(CLAIMS, limit=2):
        names += [item["metadata"]["name"] for item in listing["items"]]
        await asyncio.sleep(0.01)
        assert fake_api.requests["list resourceclaims"] == (len(names) + 1) // 2
    assert names == [f"c{index}" for index in range(5)] and fake_api.requests["list resourceclaims"] == 3
    whole = [listing async for listing in kube.pages(CLAIMS, limit=None)]
    assert len(whole) == 1 and len(whole[0]["items"]) == 5


async def test_pages_of_large_objects_ask_for_fewer_of_them(kube: KubeClient,
                                                             fake_api: FakeApiServer) -> None:
    for index in range(7):
        bulky = claim(f"c{index}")
        bulky["metadata"]["annotations"] = {"example.com/note": "x" * 1000}
        await kube.create(CLAIMS, bulky)
    sizes: list[int] = []
    names: list[str] = []
    async for listing in kube.pages(CLAIMS, limit=4, page_bytes=2500):
        sizes.append(len(listing["items"]))
        names += [item["metadata"]["name"] for item in listing["items"]]
    # About 1.2 KB an object: after the first page of 4, pages of about 2 (never 0, never over the limit).
    assert sizes[0] == 4 and all(1 <= size <= 2 for size in sizes[1:]) and sum(sizes) == 7
    assert names == [f"c{index}" for index in range(7)]
    roomy = [len(listing["items"]) async for listing in kube.pages(CLAIMS, limit=4, page_bytes=1 << 20)]
    assert roomy == [4, 3]


async def test_injected_failures(kube: KubeClient, fake_api: FakeApiServer) -> None:
    created = await kube.create(CLAIMS, claim("a"))
    fake_api.fail_next("update", "resourceclaims", subresource="status", count=2, status=500)
    for _ in range(2):
        with pytest.raises(ApiError) as err:
            await kube.update(f"{CLAIMS}/a/status", created)
        assert err.value.status == 500 and err.value.reason == "InternalError"
    await kube.update(f"{CLAIMS}/a", created)   # main resource was never affected
    written = await kube.update(f"{CLAIMS}/a/status", {**created, "status": {"allocation": ALLOCATION}})
    assert written["status"]["allocation"] == ALLOCATION


async def test_watch_streams_events_from_a_resource_version(kube: KubeClient) -> None:
    first = await kube.create(CLAIMS, claim("a"))
    listed = await kube.list(CLAIMS)
    events = kube.watch(CLAIMS, listed["metadata"]["resourceVersion"], timeout_seconds=30)
    task = asyncio.ensure_future(collect(events, 3))
    await asyncio.sleep(0.05)
    await kube.create(CLAIMS, claim("b"))
    await kube.update(f"{CLAIMS}/a", {**first, "metadata": {**first["metadata"], "labels": {"x": "1"}}})
    await kube.delete(f"{CLAIMS}/b")
    got = await asyncio.wait_for(task, 30)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in got] == [
        ("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
    assert got[0]["object"]["kind"] == "ResourceClaim"


async def test_watch_replays_history_after_the_given_version(kube: KubeClient) -> None:
    first = await kube.create(CLAIMS, claim("a"))
    await kube.create(CLAIMS, claim("b"))
    got = await asyncio.wait_for(collect(kube.watch(CLAIMS, first["metadata"]["resourceVersion"]), 1), 30)
    assert got[0]["type"] == "ADDED" and got[0]["object"]["metadata"]["name"] == "b"


async def test_watch_bookmarks_and_server_timeout(kube: KubeClient) -> None:
    await kube.create(CLAIMS, claim("a"))
    got = [e async for e in kube.watch(CLAIMS, "0", timeout_seconds=1)]
    assert got[0]["type"] == "ADDED"            # RV 0: current state first
    assert got[-1]["type"] == "BOOKMARK"
    assert got[-1]["object"]["metadata"]["resourceVersion"]


async def test_watch_too_old_version_raises_gone(kube: KubeClient, fake_api: FakeApiServer) -> None:
    first = await kube.create(CLAIMS, claim("a"))
    await kube.create(CLAIMS, claim("b"))
    fake_api.expire_history()
    with pytest.raises(ApiError) as err:
        await collect(kube.watch(CLAIMS, first["metadata"]["resourceVersion"]), 1)
    assert err.value.gone and "too old resource version" in err.value.message


async def test_watch_dropped_connection_raises(kube: KubeClient, fake_api: FakeApiServer) -> None:
    async def consume() -> None:
        async for _ in kube.watch(CLAIMS, str(fake_api.resource_version), timeout_seconds=30):
            pass

    task = asyncio.ensure_future(consume())
    deadline = asyncio.get_running_loop().time() + 30   # bounds a hang only: CI machines may be loaded
    while not fake_api.open_watches and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
    assert fake_api.close_watches() == 1
    with pytest.raises(aiohttp.ClientError):
        await asyncio.wait_for(task, 30)


async def test_watch_handles_objects_larger_than_a_chunk(kube: KubeClient) -> None:
    big = claim("big")
    big["metadata"]["annotations"] = {"blob": "x" * 300_000}
    await kube.create(CLAIMS, big)
    got = await asyncio.wait_for(collect(kube.watch(CLAIMS, "0"), 1), 30)
    assert got[0]["object"]["metadata"]["annotations"]["blob"] == "x" * 300_000


async def test_bearer_token_is_sent(fake_api: FakeApiServer) -> None:
    seen: list[str | None] = []
    fake_api.intercept(lambda request: seen.append(request.verb))
    client = KubeClient.for_url(fake_api.url, token="secret")
    assert client._headers()["Authorization"] == "Bearer secret"
    await client.list(CLAIMS)
    await client.close()
    assert seen == ["list"]


def test_credentials_from_a_kubernetes_configuration() -> None:
    from kubernetes import client

    cfg = client.Configuration()
    cfg.verify_ssl = False
    context = ssl_context_from(cfg)
    assert context.verify_mode == ssl.CERT_NONE and not context.check_hostname
    assert bearer_header(cfg) is None
    cfg.api_key = {"BearerToken": "tok"}
    cfg.api_key_prefix = {"BearerToken": "Bearer"}
    assert bearer_header(cfg) == "Bearer tok"


async def test_connect_reads_a_kubeconfig(tmp_path: object, fake_api: FakeApiServer) -> None:
    path = tmp_path / "kubeconfig"  # type: ignore[operator]
    path.write_text(f"""
apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster: {{server: "{fake_api.url}"}}
users:
- name: me
  user: {{token: kubeconfig-token}}
contexts:
- name: other
  context: {{cluster: fake, user: me}}
current-context: missing
""")
    client = await KubeClient.connect(kubeconfig=str(path), context="other")
    try:
        assert client.base_url == fake_api.url
        assert client._headers()["Authorization"] == "Bearer kubeconfig-token"
        assert (await client.list(CLAIMS))["items"] == []
    finally:
        await client.close()


def server_tls(files: TLSFiles, *, client_certs: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(files.server_cert, files.server_key)
    if client_certs:
        context.load_verify_locations(files.ca)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def b64(path: str) -> str:
    return base64.b64encode(Path(path).read_bytes()).decode()


async def test_connect_with_kubeconfig_mtls_and_token(tmp_path: Path) -> None:
    files = write_ca_and_certs(tmp_path)
    fake = FakeApiServer(token="kc-token")
    url = await fake.start(ssl_context=server_tls(files, client_certs=True))
    kubeconfig = tmp_path / "config"
    user = {"token": "kc-token", "client-certificate-data": b64(files.client_cert),
            "client-key-data": b64(files.client_key)}
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": url,
                                                  "certificate-authority-data": b64(files.ca)}}],
        "users": [{"name": "me", "user": user}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "me"}}]}))
    client = await KubeClient.connect(kubeconfig=str(kubeconfig))
    try:
        assert url.startswith("https://")
        assert (await client.list(CLAIMS))["kind"] == "ResourceClaimList"
    finally:
        await client.close()
        await fake.stop()


async def test_connect_in_cluster_rotates_the_service_account_token(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from extender.kube import credentials

    files = write_ca_and_certs(tmp_path)
    fake = FakeApiServer(token="first")
    url = await fake.start(ssl_context=server_tls(files, client_certs=False))
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("first\n")
    (account / "ca.crt").write_bytes(Path(files.ca).read_bytes())
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", url.rsplit(":", 1)[1])
    monkeypatch.setattr(credentials, "SERVICE_ACCOUNT_DIR", account)
    client = await KubeClient.connect()
    try:
        assert client.base_url == url
        assert (await client.list(CLAIMS))["items"] == []
        (account / "token").write_text("second")   # the kubelet rotated the projected token
        fake._token = "second"
        # Answered 401 with the header read before: read again and sent once more.
        assert (await client.list(CLAIMS))["items"] == []
        assert client._headers()["Authorization"] == "Bearer second"
    finally:
        await client.close()
        await fake.stop()


async def test_unauthorized_is_an_api_error(fake_api: FakeApiServer) -> None:
    fake = FakeApiServer(token="right")
    await fake.start()
    client = KubeClient.for_url(fake.url, token="wrong")
    try:
        with pytest.raises(ApiError) as err:
            await client.list(CLAIMS)
        assert err.value.status == 401 and err.value.reason == "Unauthorized"
    finally:
        await client.close()
        await fake.stop()


def test_reused_auth_reads_the_header_again_after_its_window_or_when_forgotten() -> None:
    reads: list[str] = []
    now = [0.0]

    def read() -> str:
        reads.append("read")
        return f"Bearer t{len(reads)}"

    auth = ReusedAuth(read, reuse_s=10.0, clock=lambda: now[0])
    assert auth() == auth() == "Bearer t1"
    now[0] = 9.9
    assert auth() == "Bearer t1" and len(reads) == 1
    now[0] = 10.0
    assert auth() == "Bearer t2"
    auth.forget()
    assert auth() == "Bearer t3"


async def test_a_401_reads_the_rotated_token_and_sends_the_request_again() -> None:
    fake = FakeApiServer(token="second")
    await fake.start()
    token = ["first"]   # the header source has not seen the rotation yet
    client = KubeClient(fake.url, auth=ReusedAuth(lambda: f"Bearer {token[0]}"))
    try:
        assert client._headers()["Authorization"] == "Bearer first"   # read and kept for 10 s
        token[0] = "second"
        assert (await client.list(CLAIMS))["items"] == []   # 401, read again, sent again
        fake._token = "third"
        with pytest.raises(ApiError) as err:   # still refused after the fresh read: the 401 stands
            await client.list(CLAIMS)
        assert err.value.status == 401
    finally:
        await client.close()
        await fake.stop()


async def test_silent_watch_times_out(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api._bookmark_interval = 10.0   # nothing at all is sent for longer than the inactivity limit
    with pytest.raises(aiohttp.ServerTimeoutError):
        await asyncio.wait_for(
            collect(kube.watch(CLAIMS, str(fake_api.resource_version), inactivity_timeout_s=0.3), 1), 30)


async def test_fake_generate_name_no_op_updates_and_pod_status(kube: KubeClient,
                                                                fake_api: FakeApiServer) -> None:
    created = await kube.create(CLAIMS, {**claim(""), "metadata": {"generateName": "worker-gpu-"}})
    assert created["metadata"]["name"].startswith("worker-gpu-") and len(created["metadata"]["name"]) == 16
    version = fake_api.resource_version
    same = await kube.update(f"{CLAIMS}/{created['metadata']['name']}", created)
    assert same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert fake_api.resource_version == version, "a no-op update neither bumps nor emits"

    pods = "/api/v1/namespaces/default/pods"
    pod = await kube.create(pods, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {},
                                   "status": {"phase": "Pending"}})
    updated = await kube.update(f"{pods}/p", {**pod, "status": {"phase": "Running"}})
    assert updated["status"] == {"phase": "Pending"}, "pods/status is separate too"


async def test_fake_leases_and_events(kube: KubeClient) -> None:
    leases = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
    lease = await kube.create(leases, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                       "metadata": {"name": "dra-extender"}, "spec": {"holderIdentity": "a"}})
    await kube.update(f"{leases}/dra-extender", {**lease, "spec": {"holderIdentity": "b"}})
    with pytest.raises(ApiError) as err:   # a second candidate with the old version loses
        await kube.update(f"{leases}/dra-extender", {**lease, "spec": {"holderIdentity": "c"}})
    assert err.value.conflict
    event = await kube.create("/api/v1/namespaces/default/events", {
        "apiVersion": "v1", "kind": "Event", "metadata": {"generateName": "p."}, "reason": "Test"})
    assert event["metadata"]["namespace"] == "default" and event["reason"] == "Test"


async def test_fake_bounded_history_expires_old_versions(kube: KubeClient) -> None:
    fake = FakeApiServer(history_size=3)
    await fake.start()
    client = KubeClient.for_url(fake.url)
    try:
        first = await client.create(CLAIMS, claim("a"))
        for name in "bcde":   # history keeps the events of c, d and e
            await client.create(CLAIMS, claim(name))
        with pytest.raises(ApiError) as err:   # b's event is gone: resuming after a is impossible
            await collect(client.watch(CLAIMS, first["metadata"]["resourceVersion"]), 1)
        assert err.value.gone
        after_b = str(int(first["metadata"]["resourceVersion"]) + 1)
        got = await asyncio.wait_for(collect(client.watch(CLAIMS, after_b), 3), 30)
        assert [e["object"]["metadata"]["name"] for e in got] == ["c", "d", "e"]
    finally:
        await client.close()
        await fake.stop()


async def test_fake_rejects_unknown_paths_and_bad_bodies(kube: KubeClient) -> None:
    with pytest.raises(ApiError) as err:
        await kube.get("/apis/example.com/v1/widgets")
    assert err.value.not_found
    with pytest.raises(ApiError) as err:
        await kube.create(CLAIMS, {"metadata": "not an object"})
    assert err.value.status == 400
    with pytest.raises(ApiError) as err:
        await kube.patch(f"{CLAIMS}/a", [{"op": "add"}], content_type="application/json-patch+json")
    assert err.value.status == 415


async def test_connect_without_credentials_says_what_it_tried(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    with pytest.raises(KubeConfigError, match=r"^not in a cluster \(.*\); kubeconfig .*missing: "):
        await KubeClient.connect()
    config = tmp_path / "config"
    config.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    with pytest.raises(KubeConfigError, match="context 'nope'"):
        await KubeClient.connect(kubeconfig=str(config), context="nope")


async def test_request_urls_keep_the_base_urls_path_and_encode_what_needs_it() -> None:
    seen: list[str] = []

    async def record(request: aiohttp.web.Request) -> aiohttp.web.Response:
        seen.append(f"{request.method} {request.raw_path}")
        return aiohttp.web.json_response({"kind": "Status"})

    app = aiohttp.web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        for base in (f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port}/k8s/clusters/c-1/"):
            async with KubeClient.for_url(base) as kube:
                await kube.get(f"{CLAIMS}/a.b-1/status")
                await kube.list("/api/v1/pods", labelSelector="app in (a b)", limit=5)
                await kube.get("/api/v1/namespaces/default/pods/odd name%")
        assert seen == [
            f"GET {CLAIMS}/a.b-1/status",
            "GET /api/v1/pods?labelSelector=app+in+(a+b)&limit=5",
            "GET /api/v1/namespaces/default/pods/odd%20name%25",
            f"GET /k8s/clusters/c-1{CLAIMS}/a.b-1/status",
            "GET /k8s/clusters/c-1/api/v1/pods?labelSelector=app+in+(a+b)&limit=5",
            "GET /k8s/clusters/c-1/api/v1/namespaces/default/pods/odd%20name%25",
        ]
    finally:
        await runner.cleanup()
