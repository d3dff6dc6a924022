"""A bind whose Binding is refused after its claim writes: another binder wins the race for the pod."""

from __future__ import annotations

from extender.plugin.claimwriter import ClaimWriter
from extender.plugin.scheduling import Scheduler
from extender.state.cache import ClusterCache


def bound_in_cache(cache: ClusterCache, namespace: str, name: str, node: str) -> None:
    """The cached pod bound to `node` by someone else, as the watch would deliver it (a new version)."""
    pod = cache.pod(namespace, name)
    assert pod is not None, f"pod {namespace}/{name} is not cached"
    meta = pod["metadata"]
    version = meta.get("resourceVersion")
    if version is not None:
        meta = {**meta, "resourceVersion": str(int(version) + 1)}
    cache.apply("Pod", "MODIFIED", {**pod, "metadata": meta, "spec": {**pod["spec"], "nodeName": node}})


def bound_elsewhere_at_binding(scheduler: Scheduler, pod_name: str, node: str) -> None:
    """Just before the scheduler's writer (a ClaimWriter on its in-memory store) creates pod `pod_name`'s
    Binding, after bind's own checks and its claim writes, the cached pod gets bound to `node`: the
    Binding is then refused with the API server's 409 "already assigned"."""
    writer = scheduler.writer
    assert isinstance(writer, ClaimWriter)
    store = writer._store
    create_binding = store.bind_pod

    async def bind_pod(namespace: str, name: str, uid: str, target: str) -> None:
        if name == pod_name:
            bound_in_cache(scheduler.cache, namespace, name, node)
        await create_binding(namespace, name, uid, target)

    setattr(store, "bind_pod", bind_pod)  # noqa: B010 (mypy refuses assigning to a method)
