"""On the GPU host: does the ingest's file-number guard (ingest.number_files) run under the RAPIDS Accelerator?

Session 30's H200 lease failed every plugin ingest on that guard, then written as ``coalesce(lookup,
raise_error(...))``, with an error naming a file that *was* listed. The plugin's GpuCoalesce evaluates every argument
on the whole batch; its GpuIf/GpuCaseWhen evaluate a side-effecting branch only on the rows that take it. This probe
runs, on the same KPI exports with the plugin on (the pipeline's own Spark settings, gpu profile) and then off:
  - the guard as written now (``when``), counting rows by file number;
  - the session 30 guard (``coalesce``);
  - the ``when`` guard on rows whose file is not listed: it must fail, naming that file, on the GPU too.

    .venv/bin/python bench/device/guard_probe.py RAW_DIR OUT_JSON [MODE [JAR]]

MODE and JAR default to executeOnGPU and the jar make setup installed; ``explainOnly JAR`` checks the probe itself on
a host without a GPU (every query then runs on the CPU, so its verdict there says nothing about the GPU).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

STRAY = "file:///elsewhere/kpi_2026-01-09.csv"


def coalesce_guard(df):
    """Session 30's guard (the file number or raise_error, as a coalesce)."""
    from pyspark.sql import functions as F

    from tasks.core.stages.ingest import FILE_NO

    files = sorted(df.inputFiles())
    uri = F.col("_source_file")
    by_hash = F.create_map(*[x for n, u in enumerate(files, 1) for x in (F.xxhash64(F.lit(u)), F.lit(n))])
    unlisted = F.raise_error(F.concat(F.lit("ingest: a row from a file not in the input's listing: "), uri))
    return df.withColumn(FILE_NO, F.coalesce(by_hash[F.xxhash64(uri)].cast("int"), unlisted.cast("int")))


def attempt(numbered) -> dict:
    """Rows per file number, or the error; and whether the plan that ran had GPU operators."""
    from tasks.core.stages.ingest import FILE_NO

    q = numbered.groupBy(FILE_NO).count().orderBy(FILE_NO)
    t0 = time.perf_counter()
    try:
        rows = q.collect()
        got = {"ok": True, "rows_by_file": [[r[FILE_NO], r["count"]] for r in rows]}
    except Exception as e:  # noqa: BLE001 - the probe records what failed
        msg = str(e)
        got = {"ok": False, "error": next((ln for ln in msg.splitlines() if "listing" in ln), msg[:300])[:400]}
    got["seconds"] = round(time.perf_counter() - t0, 2)
    plan = q._jdf.queryExecution().executedPlan().toString()
    got["gpu_operators"] = sorted({w for w in plan.replace("(", " ").split() if w.startswith("Gpu")})
    return got


def main(raw: Path, out: Path, mode: str = "executeOnGPU", jar: str = "installed") -> dict:
    from pyspark.sql import functions as F

    from tasks.core.config import load_config
    from tasks.core.runtime import detect_hardware, spark_conf, spark_session
    from tasks.core.stages.ingest import number_files
    from tasks.core.stages.raw import discover, read_kpi

    cfg = load_config("gpu", {"ingest": {"rapids_jar": jar, "rapids_mode": mode}}).ingest
    spark = spark_session(spark_conf(cfg, detect_hardware(), None))
    df = read_kpi(spark, discover(raw))
    variants = {
        "when": number_files(df)[0],
        "coalesce": coalesce_guard(df),
        "when_unlisted_file": number_files(df.withColumn("_source_file", F.lit(STRAY)))[0],
    }
    result: dict = {"raw": str(raw), "mode": mode, "files": len(df.inputFiles()), "repeats": 1, "extrapolated": False}
    result["runs"] = {}  # each query once: its seconds orient, no ratio is drawn from them
    for gpu in ("true", "false"):
        spark.conf.set("spark.rapids.sql.enabled", gpu)
        for name, numbered in variants.items():
            result["runs"][f"{name} gpu={gpu}"] = attempt(numbered)
    runs = result["runs"]
    when_gpu, when_cpu = runs["when gpu=true"], runs["when gpu=false"]
    result["verdict"] = {
        "when_runs_on_gpu": when_gpu["ok"],
        "when_same_rows_as_cpu": when_gpu["ok"] and when_gpu["rows_by_file"] == when_cpu.get("rows_by_file"),
        "coalesce_fails_on_gpu_only": not runs["coalesce gpu=true"]["ok"] and runs["coalesce gpu=false"]["ok"],
        "unlisted_fails_naming_it_on_gpu": STRAY in runs["when_unlisted_file gpu=true"].get("error", ""),
    }
    out.write_text(json.dumps(result, indent=1) + "\n")
    spark.stop()
    return result


if __name__ == "__main__":
    r = main(Path(sys.argv[1]), Path(sys.argv[2]), *sys.argv[3:5])
    print(json.dumps(r["verdict"]), {k: (v["ok"], v["seconds"]) for k, v in r["runs"].items()})
