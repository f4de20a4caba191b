"""NVIDIA's qualification tool (spark-rapids-user-tools) read offline on our own Spark event logs: a third party's
estimate of what the RAPIDS Accelerator would gain on a CPU run, per application and per job description, and
its AutoTuner's recommended GPU settings.

    python bench/qualify.py [EVENT_LOG_DIR ...]      (default: the newest application under
                                                      .faultline/store/spark-events, e.g. `faultline bench ingest`'s)
    -> bench/results/qualification.json

The tool pins its own stack (pandas 2.3, PySpark 3.5, xgboost 3.0, ...), which this project's cannot share, so it
gets a venv of its own, made once under ~/.cache/faultline/rapids-tools (network needed that once). It runs with
no network: the tools jar from its own wheel and a tools config that points the tool at its own PySpark 3.5's
jars (without one it tries to download a Spark distribution from archive.apache.org), on the project's Java
runtime."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOOLS = "spark-rapids-user-tools==26.8.4"
VENV = Path.home() / ".cache" / "faultline" / "rapids-tools"


def tools_venv() -> Path:
    py = VENV / "bin" / "python"
    if not (VENV / "bin" / "spark_rapids").is_file():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", TOOLS], check=True)
    return VENV


def _site(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def tools_config(venv: Path, path: Path) -> Path:
    jars = _site(venv) / "pyspark" / "jars"
    path.write_text(
        "api_version: '1.1'\nruntime:\n  dependencies:\n"
        f"    - name: Spark jars (the tools venv's PySpark)\n      uri: {jars}/*\n"
        "      dependency_type:\n        dep_type: classpath\n"
    )
    return path


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def run(event_logs: list[Path], out: Path) -> dict:
    from tasks.core.runtime import java_home

    venv = tools_venv()
    jar = next(_site(venv).glob("spark_rapids_pytools/resources/generated_files/core/jars/rapids-4-spark-tools_*.jar"))
    env = {**os.environ}
    if java_home():
        env["JAVA_HOME"] = java_home()
        env["PATH"] = f"{java_home()}/bin{os.pathsep}{env['PATH']}"
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            str(venv / "bin" / "spark_rapids"),
            "qualification",
            "--platform",
            "onprem",
            "--eventlogs",
            ",".join(str(p) for p in event_logs),
            "--tools_jar",
            str(jar),
            "--tools_config_file",
            str(tools_config(venv, Path(tmp) / "tools.yaml")),
            "-o",
            tmp,
        ]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
        runs = sorted(Path(tmp).glob("qual_*/qualification_summary.csv"))
        if p.returncode != 0 or not runs:
            raise SystemExit(
                f"spark_rapids qualification failed ({p.returncode}):\n{p.stdout[-3000:]}{p.stderr[-3000:]}"
            )
        base = runs[-1].parent
        apps = []
        for row in _rows(base / "qualification_summary.csv"):
            app = row["App ID"]
            tuning = base / "qual_core_output" / "tuning_apps" / app / "recommendations.log"
            per_sql = [r for r in _rows(base / "xgboost_predictions" / "per_sql.csv") if r["appId"] == app]
            text = tuning.read_text() if tuning.is_file() else ""
            apps.append(
                {
                    "app_name": row["App Name"],
                    "app_id": app,
                    "app_duration_ms": int(row["App Duration"]),
                    "estimated_gpu_speedup": float(row["Estimated GPU Speedup"]),
                    "speedup_category": row["Estimated GPU Speedup Category"],
                    "unsupported_operators_stage_duration_pct": float(
                        row["Unsupported Operators Stage Duration Percent"]
                    ),
                    "not_recommended_reason": row["Not Recommended Reason"],
                    "per_job": [
                        {
                            "description": r["description"],
                            "duration_ms": int(float(r["Duration"])),
                            "predicted_speedup": round(float(r["speedup_pred"]), 2),
                        }
                        for r in per_sql
                    ],
                    "recommended_conf": [ln.split(" ", 1)[1] for ln in text.splitlines() if ln.startswith("--conf ")],
                    "comments": [ln[2:] for ln in text.splitlines() if ln.startswith("- ")],
                }
            )
    result = {
        "benchmark": "qualification",
        "tool": TOOLS,
        "tools_jar": jar.name,
        "event_logs": [str(p) for p in event_logs],
        "note": "NVIDIA's estimate from a CPU run's event log (its XGBoost model), not a measurement on a GPU",
        "apps": apps,
    }
    out.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    logs = [Path(a) for a in sys.argv[1:]]
    if not logs:
        apps = sorted((REPO / ".faultline/store/spark-events").iterdir(), key=lambda p: p.stat().st_mtime)
        logs = apps[-1:]
    r = run(logs, REPO / "bench/results/qualification.json")
    for a in r["apps"]:
        print(f"{a['app_name']} {a['app_id']}: GPU speedup {a['estimated_gpu_speedup']}x ({a['speedup_category']})")
