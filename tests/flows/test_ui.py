"""The real Prefect stack (server, pools, `prefect deploy --all`, a process worker) driven from a headless
Debian Chromium through Playwright, and an interval schedule executed by the worker."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from deployments.stack import Stack
from tasks.core.store import pid_alive

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.spark, pytest.mark.horovod]
CHROMIUM = "/usr/bin/chromium"
FINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}
LOAD_RUNS = 20


def api(stack: Stack, path: str, body: dict | None = None):
    """One request, no retry: on PostgreSQL no 503 ("retry me") may reach a client."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        f"{stack.api}{path}",
        data=data,
        headers={"Content-Type": "application/json"},
        method="POST" if data is not None else "GET",
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


def submit_at_once(stack: Stack, deployment_id: str, n: int) -> list[str]:
    """``n`` flow runs created through the API by ``n`` clients at the same instant; any error status fails."""
    barrier = threading.Barrier(n)

    def create(i: int) -> str:
        barrier.wait()
        return api(stack, f"/deployments/{deployment_id}/create_flow_run", {"name": f"load-{i}"})["id"]

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(create, range(n)))


def _open(page, url: str, until: str = "load") -> None:
    """Open a page on a loaded CI host. The Prefect and MLflow UIs are single-page apps that keep polling, so
    "networkidle" (500 ms without a request) may not come within Playwright's default 30 s: it once failed CI on the
    MLflow run page. Wait for the document, and give the text and role waits that follow 90 s."""
    page.set_default_timeout(90_000)
    page.goto(url, wait_until=until, timeout=120_000)


def wait_for(fn, timeout: float, what: str, every: float = 2.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    if not Path(CHROMIUM).is_file():
        pytest.fail(f"{CHROMIUM} missing: `apt-get install chromium` (.ci/run does)")
    home = tmp_path_factory.mktemp("prefect-stack")
    s = Stack(home / "prefect", store=home / "store", fast_schedules=True)
    try:
        s.start()
        yield s
    finally:
        s.stop()


def test_interval_schedule_runs_on_the_worker(stack):
    dep = api(stack, "/deployments/name/simulate_workload/simulate")
    stack.prefect("deployment", "schedule", "create", "simulate_workload/simulate", "--interval", "10")
    try:

        def done():
            runs = api(stack, "/flow_runs/filter", {"flow_runs": {"deployment_id": {"any_": [dep["id"]]}}})
            return [r for r in runs if r["state_type"] == "COMPLETED" and r["auto_scheduled"]]

        runs = wait_for(done, 240, "a scheduled simulate run to complete")
    finally:
        stack.prefect("deployment", "schedule", "clear", "simulate_workload/simulate", "-y")
    assert runs[0]["parameters"] == {"topology": "topozoo/Abilene", "days": 1}
    assert (Path(stack.store) / "store" / "raw").is_dir()  # the worker's run wrote into the stack's store


def test_manual_run_from_the_custom_run_form(stack):
    from playwright.sync_api import sync_playwright

    dep = api(stack, "/deployments/name/fault_prediction_pipeline/manual")
    replay = api(stack, "/deployments/name/tracking_replay/tracking-replay")
    name = f"ui-{uuid.uuid4().hex[:8]}"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1600})
            _open(page, f"{stack.url}/deployments/deployment/{dep['id']}")
            page.get_by_role("button", name="Run", exact=True).click()
            page.get_by_text("Custom run").click()
            page.wait_for_url("**/run?**")
            page.get_by_text("days (Optional)").wait_for()
            assert page.get_by_text("days of simulated telemetry").count() == 1  # descriptions reach the form
            name_box = page.locator("input[type=text]").first
            name_box.fill(name)
            page.get_by_role("button", name="int", exact=True).click()  # days: None -> int
            page.locator("input[type=number]").fill("1")
            # The form's own URL (".../deployment/<id>/run?...") already matches the deployment page's, so wait for
            # the create request the Submit button sends, not for a navigation: closing the browser before that
            # request left once, in CI, no run at all.
            creates = f"/deployments/{dep['id']}/create_flow_run"
            # the load: 20 runs created at once through the API, then the form submitted while the worker runs them
            load = submit_at_once(stack, replay["id"], LOAD_RUNS)
            with page.expect_response(
                lambda r: r.url.endswith(creates) and r.request.method == "POST", timeout=60_000
            ) as response:
                page.get_by_role("button", name="Submit").click()
            assert response.value.ok, (response.value.status, response.value.text())  # no 503 on PostgreSQL
            created = response.value.json()
            page.wait_for_url(lambda url: "/run?" not in url, timeout=90_000)
            page.screenshot(path=str(shots_dir(stack) / "1-custom-run-submitted.png"))
        finally:
            browser.close()
    assert created["name"] == name, created["name"]
    run_id = created["id"]
    assert [r["id"] for r in api(stack, "/flow_runs/filter", {"flow_runs": {"name": {"any_": [name]}}})] == [run_id]

    run = wait_for(
        lambda: (r := api(stack, f"/flow_runs/{run_id}"))["state_type"] in FINAL and r,
        600,
        "the pipeline run started from the UI",
        every=5,
    )
    assert run["name"] == name and run["deployment_id"] == dep["id"]
    assert run["state_type"] == "COMPLETED", run["state"]
    states = wait_for(lambda: _all_final(stack, load), 300, f"the {LOAD_RUNS} runs of the load", every=5)
    assert states == ["COMPLETED"] * LOAD_RUNS, states
    assert run["parameters"]["days"] == 1 and run["parameters"]["profile"] == "local"
    keys = {a["key"] for a in api(stack, "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [run_id]}}})}
    assert {
        "stage-validate",
        "stage-ingest",
        "stage-features",
        "stage-train",
        "stage-evaluate",
        "final-metrics",
        "training-progress",
        "run-links",
    } <= keys
    summary = json.loads(next((Path(stack.store) / "store" / "runs").glob(f"{run_id}/summary.json")).read_text())
    assert summary["status"] == "completed" and summary["stages"]["ingest"]["rows_in"] > 0
    urls = _follow_run_links(stack, run_id, summary)
    _browse_links_with_the_network_blocked(stack, urls, summary)
    _checklist_triggered_by(stack, run_id, summary)


def _all_final(stack: Stack, ids: list[str]) -> list[str] | None:
    runs = api(stack, "/flow_runs/filter", {"flow_runs": {"id": {"any_": ids}}})
    states = [r["state_type"] for r in runs]
    return states if len(states) == len(ids) and set(states) <= FINAL else None


def shots_dir(stack: Stack) -> Path:
    """Where the browser tests leave their screenshots (``FAULTLINE_SCREENSHOTS``, else under the stack's home)."""
    d = Path(os.environ.get("FAULTLINE_SCREENSHOTS") or Path(stack.home) / "screenshots")
    d.mkdir(parents=True, exist_ok=True)
    return d


def _browse_links_with_the_network_blocked(stack: Stack, urls: dict[str, str], summary: dict) -> None:
    """The run-links' MLflow run page and GX Data Docs in Chromium with every request off 127.0.0.1 refused: both
    show their content; the Data Docs load nothing from the network (their scripts, styles and fonts are vendored),
    and their tables are built (bootstrap-table ran: the index lists the validations)."""
    from playwright.sync_api import sync_playwright

    blocked: list[str] = []

    def local_only(route):
        if route.request.url.startswith("http://127.0.0.1"):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
            ctx.route("**/*", local_only)
            page = ctx.new_page()
            _open(page, urls[f"MLflow run {summary['mlflow_run_id']}"])
            page.get_by_text(summary["mlflow_run_id"]).first.wait_for()
            page.screenshot(path=str(shots_dir(stack) / "2-mlflow-run.png"))
            blocked.clear()
            _open(page, urls["GX Data Docs"], until="networkidle")  # static: every script, style and font requested
            page.locator("div.bootstrap-table table tbody tr").first.wait_for()
            text = page.inner_text("body")
            built = page.evaluate("!!(window.jQuery && window.jQuery.fn.bootstrapTable)")
            rows = page.locator("div.bootstrap-table table tbody tr").count()
            page.screenshot(path=str(shots_dir(stack) / "3-data-docs-offline.png"), full_page=True)
        finally:
            browser.close()
    assert blocked == [], f"the Data Docs still load from the network: {blocked}"
    assert built and rows >= 5 and "kpi_rows" in text, (built, rows, text[:1000])  # a row per suite's validation


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.status, r.read().decode("utf-8", "replace")


def _follow_run_links(stack: Stack, run_id: str, summary: dict) -> dict[str, str]:
    """Every link in the run-links artifact is http and opens: the MLflow run (on the stack's MLflow server, which
    the worker's run logged to), the Prefect flow run, the GX Data Docs (served over http, not file://)."""
    (links,) = api(
        stack, "/artifacts/filter", {"artifacts": {"key": {"any_": ["run-links"]}, "flow_run_id": {"any_": [run_id]}}}
    )
    urls = dict(re.findall(r"\[([^\]]+)\]\((http[^)]+)\)", links["data"]))
    assert "file://" not in links["data"] and "sqlite:" not in links["data"], links["data"]
    assert summary["tracking_uri"] == stack.mlflow_url
    mlflow_run = urls[f"MLflow run {summary['mlflow_run_id']}"]
    assert mlflow_run.startswith(f"{stack.mlflow_url}/#/experiments/"), mlflow_run
    status, body = _get(f"{stack.mlflow_url}/api/2.0/mlflow/runs/get?run_id={summary['mlflow_run_id']}")
    run = json.loads(body)["run"]
    assert status == 200 and run["info"]["status"] == "FINISHED" and run["data"]["metrics"]
    system = [m["key"] for m in run["data"]["metrics"] if m["key"].startswith("system/")]
    assert "system/cpu_utilization_percentage" in system, system  # what the System metrics tab plots
    tags = {t["key"]: t["value"] for t in run["data"]["tags"]}
    assert tags["gx_data_docs"] == urls["GX Data Docs"]
    description = tags["mlflow.note.content"]  # the MLflow run's description: the same links
    assert urls["GX Data Docs"] in description and urls["Prefect flow run"] in description, description
    assert _get(mlflow_run)[0] == 200
    assert urls["Prefect flow run"].startswith(stack.url) and run_id in urls["Prefect flow run"]
    status, page = _get(urls["GX Data Docs"])
    assert status == 200 and "kpi_rows" in page, page[:500]
    return urls


def _screenshot(stack: Stack, url: str, name: str, text: str) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            _open(page, url)
            page.get_by_text(text).first.wait_for()
            page.screenshot(path=str(shots_dir(stack) / name))
        finally:
            browser.close()


def _checklist_triggered_by(stack: Stack, run_id: str, summary: dict) -> None:
    """The `presubmit` deployment's trigger (prefect.yaml) ran the checklist of this pipeline run on its own."""
    dep = api(stack, "/deployments/name/presubmit_checklist/presubmit")

    def triggered():
        runs = api(stack, "/flow_runs/filter", {"flow_runs": {"deployment_id": {"any_": [dep["id"]]}}})
        mine = [r for r in runs if r["parameters"].get("run_id") == f"prefect.flow-run.{run_id}"]
        return [r for r in mine if r["state_type"] in FINAL]

    (run,) = wait_for(triggered, 300, "the checklist run the pipeline run's completion triggers", every=3)
    assert run["state_type"] == "COMPLETED", run["state"]
    _screenshot(stack, f"{stack.url}/runs/flow-run/{run['id']}", "4-checklist-triggered.png", "presubmit")
    status, body = _get(f"{stack.mlflow_url}/api/2.0/mlflow/runs/get?run_id={summary['mlflow_run_id']}")
    tags = {t["key"]: t["value"] for t in json.loads(body)["run"]["data"]["tags"]}
    assert tags.get("checklist_verdict") == "pass", tags


def test_a_rerun_shows_its_stages_as_cached_and_keeps_one_model_version(stack):
    """The same parameters again (the form's run, through the API): every stage is reused and Prefect shows it
    as `Cached`; the registry keeps one version for the identical weights."""
    from playwright.sync_api import sync_playwright

    dep = api(stack, "/deployments/name/fault_prediction_pipeline/manual")
    first = [r for r in api(stack, "/flow_runs/filter", {"flow_runs": {"deployment_id": {"any_": [dep["id"]]}}})]
    assert len(first) == 1 and first[0]["state_type"] == "COMPLETED", "the form's run (test above) is missing"
    created = api(stack, f"/deployments/{dep['id']}/create_flow_run", {"parameters": first[0]["parameters"]})
    run = wait_for(
        lambda: (r := api(stack, f"/flow_runs/{created['id']}"))["state_type"] in FINAL and r, 600, "the rerun", 5
    )
    assert run["state_type"] == "COMPLETED", run["state"]
    tasks = api(stack, "/task_runs/filter", {"flow_runs": {"id": {"any_": [run["id"]]}}})
    states = {t["name"].rsplit("-", 1)[0]: t["state_name"] for t in tasks}
    stages = ("validate", "ingest", "features", "train", "evaluate")
    assert all(states.get(s) == "Cached" for s in stages), states
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            _open(page, f"{stack.url}/runs/flow-run/{run['id']}")
            page.get_by_text("Task Runs", exact=True).first.click()
            page.get_by_text("Cached").first.wait_for()  # the UI's own state badge
            page.screenshot(path=str(shots_dir(stack) / "5-rerun-cached.png"), full_page=True)
        finally:
            browser.close()
    from tasks.core.config import load_config
    from tasks.tracking import registered_name

    workload = load_config("local").workload  # the form's run: the profile's network, one model per network
    model = registered_name("faultline-fault", workload.topology)
    assert model == "faultline-fault-topozoo-geant2012"
    status, body = _get(f"{stack.mlflow_url}/api/2.0/mlflow/model-versions/search?filter=name%3D%27{model}%27")
    versions = json.loads(body).get("model_versions", [])
    assert status == 200 and len(versions) == 1, [(v["version"], v["run_id"]) for v in versions]


def test_checklist_deployment_runs_on_the_worker(stack):
    """The `presubmit` deployment from prefect.yaml, run on the worker over the store the UI run filled."""
    dep = api(stack, "/deployments/name/presubmit_checklist/presubmit")
    created = api(stack, f"/deployments/{dep['id']}/create_flow_run", {"parameters": {}})
    run = wait_for(
        lambda: (r := api(stack, f"/flow_runs/{created['id']}"))["state_type"] in FINAL and r,
        300,
        "the checklist run",
        every=3,
    )
    assert run["state_type"] == "COMPLETED", run["state"]
    # one report per checked pipeline run (the triggered checklists wrote theirs too); this run's is the newest
    reports = sorted(
        (Path(stack.store) / "store" / "checklists").glob("*/checklist.json"), key=lambda p: p.stat().st_mtime
    )
    assert reports, "no checklist report"
    report = json.loads(reports[-1].read_text())
    status = {c["id"]: c["status"] for c in report["checks"]}
    assert status["mlflow_complete"] == "pass" and status["spark_dynamic_allocation_off"] == "pass"
    assert status["gpu_utilization"] == "na" and report["verdict"] == "pass", report["checks"]
    keys = {a["key"] for a in api(stack, "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [run["id"]]}}})}
    assert {"presubmit-checklist", "presubmit-checklist-table"} <= keys


def test_a_run_killed_with_its_worker_is_marked_crashed_and_its_mlflow_run_killed(stack):
    """A running pipeline run and its worker SIGKILLed together, as a dying machine would leave them: nothing is
    left to report, so only the zombie-run automation can tell (deployments/automations.py): the run is set
    Crashed ~90 s after its last heartbeat event, and the `crashed` deployment's trigger marks its MLflow run
    KILLED and its heartbeat file crashed (on a worker started again). Last in the module: it kills the worker."""
    dep = api(stack, "/deployments/name/fault_prediction_pipeline/manual")
    created = api(stack, f"/deployments/{dep['id']}/create_flow_run", {"parameters": {"days": 1, "force": True}})
    rid = created["id"]
    hb = Path(stack.store) / "store" / "runs" / rid / "heartbeat.json"
    beat = wait_for(lambda: hb.is_file() and json.loads(hb.read_text()), 300, "the run's heartbeat file")
    query = {
        "filter": {"event": {"name": ["prefect.flow-run.heartbeat"]}, "resource": {"id": [f"prefect.flow-run.{rid}"]}},
        "limit": 5,
    }
    wait_for(lambda: api(stack, "/events/filter", query).get("events"), 180, "a Prefect heartbeat event of the run")
    assert api(stack, f"/flow_runs/{rid}")["state_type"] == "RUNNING"
    pid = int(beat["pid"])
    os.killpg(stack.worker.pid, signal.SIGKILL)
    os.killpg(os.getpgid(pid), signal.SIGKILL)
    run = wait_for(
        lambda: (r := api(stack, f"/flow_runs/{rid}"))["state_type"] == "CRASHED" and r, 300, "the automation", 5
    )
    assert "no heartbeat" in run["state"]["message"], run["state"]
    wait_for(lambda: not pid_alive(pid), 30, "the killed run's process to be gone")
    stack.start_worker()

    def mlflow_status():
        return json.loads(_get(f"{stack.mlflow_url}/api/2.0/mlflow/runs/get?run_id={beat['mlflow_run_id']}")[1])["run"][
            "info"
        ]["status"]

    wait_for(lambda: mlflow_status() == "KILLED", 300, "the `crashed` deployment to mark the MLflow run KILLED", 5)
    # the heartbeat file is written last (a mark cut short is retried by the next run over the store)
    wait_for(lambda: json.loads(hb.read_text())["status"] == "crashed", 30, "the heartbeat file marked crashed")
    _screenshot(stack, f"{stack.url}/runs/flow-run/{rid}", "6-killed-run-crashed.png", "Crashed")
