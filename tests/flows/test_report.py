"""`faultline report` on the real small run, read as a reader would: in Chromium, section by section, its numbers
against the MLflow run's, the PDF's pages, and a screenshot kept beside the report."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, SHARED_PREFECT, faultline, last_json, prefect_api

pytestmark = pytest.mark.browser
SECTIONS = ("summary", "comparison", "dag", "architecture", "complexity", "kernels", "performance", "energy",
            "checklist", "environment")  # fmt: skip


@pytest.fixture(scope="module")
def report(pipeline_run, tmp_path_factory):
    root, summary, _ = pipeline_run
    out = tmp_path_factory.mktemp("report")
    empty = out / "no-bench-results"  # a run without benchmarks: the performance page says what is missing
    empty.mkdir()
    proc = faultline("report", "--run", summary["mlflow_run_id"], "--set", f"paths.root={root}",
                     "--set", f"paths.bench_results={empty}", "--out", str(out), "--json", root=root)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return root, summary, last_json(proc.stdout), out


def test_every_section_is_there_and_its_numbers_are_the_run_s(report):
    from mlflow.tracking import MlflowClient
    from playwright.sync_api import sync_playwright

    root, summary, result, out = report
    run = MlflowClient(f"sqlite:///{root / 'mlflow.db'}").get_run(summary["mlflow_run_id"])
    m = run.data.metrics
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1100, "height": 1400})
        page.goto(Path(result["html"]).as_uri())
        for sid in SECTIONS:
            assert page.locator(f"section#{sid} h2").is_visible(), sid
        rows = page.locator("section#comparison table").first.locator("tr")
        cells = {r.locator("td").first.inner_text(): r.locator("td").all_inner_texts() for r in rows.all()[1:]}
        page.screenshot(path=str(out / "report.png"), full_page=True)
        dag = page.locator("section#dag svg").text_content()
        browser.close()
    assert cells["graph model (GNN)"][1] == f"{m['pr_auc']:.3f}" == f"{summary['metrics']['pr_auc']:.3f}"
    assert cells["tuned tree (XGBoost)"][1] == f"{m['baseline_pr_auc']:.3f}"
    assert cells["threshold rule"][2] == f"{m['rule_roc_auc']:.3f}"
    for stage, st in summary["stages"].items():  # each stage's rows and seconds as its manifest has them
        assert f"{st['seconds']:.1f} s" in dag and f"in {st['rows_in']:,}" in dag, stage
    assert (out / "report.png").stat().st_size > 50_000


def test_what_the_run_lacks_is_named_with_the_command_that_makes_it(report):
    from mlflow.tracking import MlflowClient

    root, summary, result, _ = report
    checked = bool(
        MlflowClient(f"sqlite:///{root / 'mlflow.db'}").list_artifacts(summary["mlflow_run_id"], "checklist")
    )
    text = html.unescape(re.sub(r"<[^>]+>", " ", Path(result["html"]).read_text()))
    assert (
        "No scaling report from this run's kind of host" in text and "faultline bench scaling --profile local" in text
    )
    assert "faultline bench e2e --profile local" in text
    assert "n/a on this host" in text  # energy: a CPU host gives no figure
    if checked:  # the prepared run is shared: its checklist may have been made before this report
        assert "Verdict: " in text and "faultline check --run" not in text
    else:
        assert "faultline check --run " + summary["mlflow_run_id"] in text and "Verdict" not in text
    assert "__global__ void rolling_stats" in text and "__global__ void neighbor_agg" in text
    assert not re.search(r"""(src|href)=["']https?://""", Path(result["html"]).read_text())  # nothing fetched


def test_the_pdf_is_printed_whole(report):
    _, _, result, out = report
    pdf = Path(result["pdf"]).read_bytes()
    assert pdf.startswith(b"%PDF") and result["pages"] >= 3
    assert len(re.findall(rb"/Type\s*/Page(?![a-zA-Z])", pdf)) == result["pages"]
    assert not list(out.glob(".*tmp*"))  # nothing half-written left


def test_a_bad_run_id_is_refused_at_once(pipeline_run, tmp_path):
    root, _, _ = pipeline_run
    proc = faultline("report", "--run", "nope", "--set", f"paths.root={root}", "--json", root=root)
    assert proc.returncode == 2 and "no pipeline run 'nope'" in proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["error"]


def test_the_report_flow_attaches_it_to_the_mlflow_run_and_to_prefect(pipeline_run, tmp_path):
    """The report deployment's flow, with the run id as its trigger passes it (the passed event's resource)."""
    from mlflow.tracking import MlflowClient

    root, summary, _ = pipeline_run
    rid = summary["mlflow_run_id"]
    code = (
        "import json; from flows.report import submission_report; "
        f"print(json.dumps(submission_report(run_id='faultline.run.{rid}', overrides=['paths.root={root}'])))"
    )
    env = {**os.environ, "PREFECT_API_URL": SHARED_PREFECT.start(), "PREFECT_HOME": str(tmp_path / "prefect")}
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = last_json(proc.stdout)
    assert result["run_id"] == rid and Path(result["html"]).parent == Path(root) / "store" / "reports" / rid
    assert result["pages"] >= 3 and Path(result["pdf"]).is_file()
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    assert {a.path for a in client.list_artifacts(rid, "report")} == {"report/report.html", "report/report.pdf"}
    shown = prefect_api("/artifacts/filter", {"artifacts": {"key": {"any_": ["submission-report"]}}})
    assert any(rid in a["data"] for a in shown), shown
