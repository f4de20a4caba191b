"""What a submission report is built from, and nothing else: the pipeline run's MLflow record (metrics, tags,
manifests, environment, plots, checklist), the benchmark results beside the project (``paths.bench_results``)
and the CUDA kernels' source."""

from __future__ import annotations

import base64
import csv
import io
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tasks.core.checklist.evidence import run_evidence

PLOTS = ("pr_curve", "lead_time_hist", "confusion_matrix", "gpu_energy")
KERNELS = Path(__file__).resolve().parents[3] / "gpu_kernels"


@dataclass
class Evidence:
    """One run's record and the host-matched benchmark results the report shows."""

    run: dict[str, Any]
    manifests: dict[str, Any]
    config: dict[str, Any]
    environment: dict[str, Any]
    summary: dict[str, Any] | None
    checklist: dict[str, Any] | None
    images: dict[str, str] = field(default_factory=dict)  # name -> data: URI (PNG, inline)
    utilization: list[tuple[float, float]] = field(default_factory=list)  # (seconds, %) of GPU 0 in training
    bench: dict[str, Any] = field(default_factory=dict)  # suite -> result JSON, as committed
    bench_images: dict[str, str] = field(default_factory=dict)
    tracking_uri: str = ""
    experiment_id: str = ""
    name: str = ""  # the MLflow run's name: "<network> <first day>..<last day> (<profile>)"

    @property
    def card(self) -> str:
        """The run's card ("NVIDIA H100 80GB HBM3"), or "" on a host without a GPU."""
        gpus = (self.environment.get("hardware") or {}).get("gpus") or []
        return gpus[0]["name"] if gpus else ""

    @property
    def host(self) -> str:
        hw = self.environment.get("hardware") or {}
        gpus = hw.get("gpus") or []
        cores = hw.get("cpu_cores") or hw.get("cpu_count")
        return f"{len(gpus)}x {self.card}, {cores} cores" if gpus else f"{cores}-core CPU (no GPU)"


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode()


def same_host(result: dict[str, Any] | None, card: str) -> bool:
    """Whether a benchmark result was measured on the run's kind of host (its card; no card: a CPU host)."""
    if not result:
        return False
    device = str(result.get("device") or "")
    if not card:
        return "cpu" in device.lower() or device == ""
    return device == card or device in card or card in device


def _bench(results_dir: Path) -> tuple[dict[str, Any], dict[str, str]]:
    out, images = {}, {}
    for suite in ("e2e", "scaling", "features"):
        path = results_dir / f"{suite}.json"
        if path.is_file():
            out[suite] = json.loads(path.read_text())
        if (results_dir / f"{suite}.png").is_file():
            images[suite] = data_uri((results_dir / f"{suite}.png").read_bytes())
    return out, images


def _utilization(path: Path) -> list[tuple[float, float]]:
    if not path.is_file():
        return []
    with open(path) as f:
        return [(float(r["t_s"]), float(r["utilization_pct"])) for r in csv.DictReader(f) if r.get("gpu") in ("0", 0)]


def gather(tracker, run_id: str | None, results_dir: Path) -> Evidence:
    """The pipeline run ``run_id`` (either id; None: the latest) as the report reads it."""
    ev = run_evidence(tracker, run_id)
    run, client = ev["run"], tracker.client
    rid = run["run_id"]
    got = Evidence(run, ev["manifests"], ev["config"], ev["environment"], None, None)
    got.tracking_uri, got.experiment_id = tracker.uri, tracker.experiment_id
    got.name = client.get_run(rid).info.run_name or rid
    with tempfile.TemporaryDirectory() as tmp:

        def fetch(path: str) -> Path | None:
            return Path(client.download_artifacts(rid, path, tmp)) if path in run["artifacts"] else None

        for name in PLOTS:
            if p := fetch(f"plots/{name}.png"):
                got.images[name] = data_uri(p.read_bytes())
        if p := fetch("summary.json"):
            got.summary = json.loads(p.read_text())
        if p := fetch("checklist/checklist.json"):
            got.checklist = json.loads(p.read_text())
        if p := fetch("training/gpu_utilization.csv"):
            got.utilization = _utilization(p)
    got.bench, got.bench_images = _bench(Path(results_dir))
    return got


def kernel_sources() -> dict[str, str]:
    """Each CUDA kernel's source as the module holds it (the string handed to CuPy's RawKernel)."""
    import ast

    out = {}
    for path in sorted(KERNELS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "__global__" in node.value:
                out[path.name] = node.value.strip()
    return out


def png(fig) -> str:
    """A matplotlib figure as an inline PNG (closed after)."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return data_uri(buf.getvalue())
