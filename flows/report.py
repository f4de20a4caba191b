"""The submission report flow: a ``report`` deployment, triggered when a run's checklist passes (the
``faultline report`` command does the same work without a Prefect start-up: ``flows/cli_parser.py``)."""

from __future__ import annotations

from typing import Any, Literal

from prefect import flow


@flow(name="submission_report", log_prints=True)
def submission_report(
    run_id: str | None = None,
    profile: Literal["local", "gpu", "dgx"] = "local",
    overrides: list[str] | None = None,
    pdf: bool = True,
) -> dict[str, Any]:
    """The submission document of a pipeline run: one self-contained HTML file and its PDF, under
    ``store/reports/<run id>``, attached to the MLflow run.

    Args:
        run_id: the pipeline run: its MLflow run id or its Prefect flow run id; default: the latest pipeline run.
        profile: the profile the run used (where its MLflow store is).
        overrides: config overrides, each section.key=value.
        pdf: print the PDF too (headless Chromium).
    """
    from tasks.report import write_report

    result = write_report(profile, overrides or [], run_id, None, pdf)
    print(f"report: {result['html']}" + (f"  {result['pdf']} ({result['pages']} pages)" if result["pdf"] else ""))
    return result
