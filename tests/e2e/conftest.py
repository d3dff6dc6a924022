"""Session fixture: a real control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler) with `dra-extender serve` as scheduler extender and admission webhook, running as the
ServiceAccount of deploy/ with its RBAC rules (authorization mode Node,RBAC).

The binaries come from build_control_plane.py (`make test` builds them first; here they are built
if missing). The tests skip only when they cannot be built, i.e. without a Go toolchain.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from e2e_api import Api, temporary_namespace
from e2e_cluster import (
    BINDING_TIMEOUT,
    DETAILED_REASONS,
    ControlPlane,
    control_plane_binaries,
    extender_supports,
    running,
)

CONTROLLERS_FLAG = "--controllers"


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    work = tmp_path_factory.mktemp("control-plane")
    plane = ControlPlane(control_plane_binaries(), work)
    flags = [f"{CONTROLLERS_FLAG}=taint-eviction"] if extender_supports(CONTROLLERS_FLAG) else []
    flags += [DETAILED_REASONS] if extender_supports("--reasons") else []
    flags += [BINDING_TIMEOUT] if extender_supports("--binding-timeout") else []
    with running(plane, flags):
        yield plane


@pytest.fixture(scope="session")
def api(control_plane: ControlPlane) -> Api:
    assert control_plane.api is not None
    return control_plane.api


@pytest.fixture
def namespace(api: Api) -> Iterator[str]:
    """A namespace of the test's own; its pods are force-deleted afterwards (no kubelet confirms)."""
    with temporary_namespace(api) as name:
        yield name


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.failed and "control_plane" in getattr(item, "fixturenames", ()):
        plane = item.funcargs.get("control_plane") if hasattr(item, "funcargs") else None
        if isinstance(plane, ControlPlane):
            report.sections.append(("control plane logs (tails)", plane.log_tails()))
    return report
