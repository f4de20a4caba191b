"""Every deployment in prefect.yaml points at a flow that imports: a renamed function or module would otherwise
surface only when a worker picks up a scheduled run."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOYMENTS = yaml.safe_load((REPO / "prefect.yaml").read_text())["deployments"]


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=[d["name"] for d in DEPLOYMENTS])
def test_entrypoint_imports_a_flow(deployment):
    from prefect import Flow

    path, func = deployment["entrypoint"].split(":")
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    flow = getattr(module, func, None)
    assert isinstance(flow, Flow), f"{deployment['name']}: {deployment['entrypoint']} is not a Prefect flow"
    params = set(flow.parameters.properties)
    unknown = set(deployment.get("parameters") or {}) - params
    assert not unknown, f"{deployment['name']}: parameters {sorted(unknown)} are not {func}'s ({sorted(params)})"
