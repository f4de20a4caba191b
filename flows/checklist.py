"""The pre-submission checklist flow (is this pipeline run fit to hand in?) and the environment doctor."""

from __future__ import annotations

from typing import Any, Literal

from prefect import flow

from tasks.checklist import gather_environment, gather_evidence, publish_checklist
from tasks.core.checklist.checks import CHECKS
from tasks.core.checklist.doctor import DOCTOR_CHECKS
from tasks.core.checklist.report import evaluate
from tasks.core.config import load_config


@flow(name="presubmit_checklist", log_prints=True)
def presubmit_checklist(
    run_id: str | None = None,
    profile: Literal["local", "gpu", "dgx"] = "local",
    overrides: list[str] | None = None,
    probe_nccl: bool = True,
) -> dict[str, Any]:
    """Is a pipeline run fit to hand in? Every check with its evidence and, on failure, the fix.

    Args:
        run_id: the pipeline run: its MLflow run id or its Prefect flow run id; default: the latest pipeline run.
        profile: the profile the run used (where its MLflow store is).
        overrides: config overrides, each section.key=value.
        probe_nccl: run the pairwise NCCL bandwidth probe when there are at least 2 GPUs.
    """
    cfg = load_config(profile, overrides or [])
    report = evaluate(gather_evidence(cfg, run_id, probe_nccl), CHECKS)
    report["files"] = publish_checklist(cfg, report)
    for r in report["checks"]:
        print(f"{r['status'].upper():<5} {r['id']}: {r['evidence']}")
    print(f"verdict: {report['verdict']}")
    if report["verdict"] == "pass":  # what the report deployment's trigger waits for
        from prefect.events import emit_event

        emit_event(
            event="faultline.checklist.passed", resource={"prefect.resource.id": f"faultline.run.{report['run_id']}"}
        )
    return report


@flow(name="environment_doctor", log_prints=True)
def environment_doctor() -> dict[str, Any]:
    """Is this machine ready to run the pipeline? Java/Spark, Horovod's build, GPUs, driver, NCCL, RAPIDS."""
    report = evaluate(gather_environment(), DOCTOR_CHECKS)
    for r in report["checks"]:
        print(f"{r['status'].upper():<5} {r['id']}: {r['evidence']}")
    return report
