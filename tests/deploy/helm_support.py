"""Running the chart's helm for the tests (tests/deploy and tests/e2e): the binary go_tools.py builds,
or a skip saying why there is none."""

from __future__ import annotations

import os
import subprocess
from typing import Any

import pytest
from deploy_manifests import DEPLOY

CHART = DEPLOY / "helm" / "dra-extender"
KUBE_VERSION = "1.37.1"
# Every helm call of the tests is bounded; none needs more than a few seconds on a quiet machine.
HELM_TIMEOUT_S = 120


def helm_or_skip() -> str:
    from go_tools import HELM

    return tool_or_skip(HELM)


def tool_or_skip(tool: Any) -> str:
    """A Go tool of go_tools.py, built on first use, or a skip saying why there is none."""
    from go_tools import BuildUnavailable

    try:
        return str(tool.ensure_built())
    except BuildUnavailable as missing:
        pytest.skip(f"{tool.name} is not available: {missing}")
    except RuntimeError as failed:  # e.g. no network to the Go module proxy
        pytest.skip(f"{tool.name} could not be built with `go install`: {str(failed)[:500]}")


def run_helm(
    helm: str, *args: str, kubeconfig: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    command = [helm, *args]
    if kubeconfig is not None:
        command.append(f"--kubeconfig={kubeconfig}")
    return subprocess.run(command, capture_output=True, text=True, timeout=HELM_TIMEOUT_S, check=False,
                          env={**os.environ, **(env or {})})
