"""Ingest benchmark: Spark ingest throughput beside pyarrow's CSV -> Parquet on the same files, same invocation.

With the RAPIDS Accelerator configured (``ingest.rapids_jar``), the same files go through CPU Spark and through the
plugin with each ``concurrentGpuTasks`` of ``bench.gpu_tasks`` and with Spark's own shuffle instead of the RAPIDS
shuffle manager. Each Spark run is its own process (a JVM's classpath, and so the plugin, is fixed when it starts)
and its own application; GPU utilization is sampled inside it over the ingest only. A run shorter than
``bench.repeat_under_s`` is repeated to the median of three, with min and max."""

from __future__ import annotations

import logging
import math
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tasks.core.benchmarks.measure import ratio, spread
from tasks.core.config import BenchConfig, IngestConfig
from tasks.core.runtime import Hardware, Runtime, master_cores, rapids_jar, spark_conf, spark_session
from tasks.core.schema import STEPS_PER_DAY
from tasks.core.stages.ingest import run_ingest
from tasks.core.stages.raw import discover
from tasks.core.stages.simulate import simulate
from tasks.core.store import json_safe, write_json_atomic
from tasks.core.topology import load_topology

MB = 1024 * 1024
logger = logging.getLogger("faultline.bench.ingest")
ARROW_REPEATS = 3
PARTIAL = "partial.json"  # under the bench's work directory: the variants finished so far (write_partial)


KPI_CSV_BYTES_PER_ROW = 70  # the simulator's KPI lines: 77 MB a day for backbone/world's 3,815 elements


def ensure_raw(work: Path, size_gb: float, topology: str = "backbone/world", seed: int = 7) -> Path:
    """Simulated exports of at least ``size_gb`` of KPI CSV (whole days: 14 for 1 GB of backbone/world)."""
    per_day = load_topology(topology).n * STEPS_PER_DAY * KPI_CSV_BYTES_PER_ROW
    days = max(1, math.ceil(size_gb * 1024**3 / per_day))
    raw = work / f"raw-{topology.replace('/', '_')}-{days}d"
    if not (raw / "ground_truth.json").is_file():
        shutil.rmtree(raw, ignore_errors=True)
        simulate(topology, days, seed, raw, dirt=0.0)  # clean, so the pyarrow baseline parses every row
    return raw


def pyarrow_csv_to_parquet(files: list[Path], out: Path, compression: str) -> int:
    """The baseline: pyarrow reads each day's CSV with the same types and writes Parquet (no validation)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    types = {"timestamp": pa.timestamp("us", tz="UTC"), "element_id": pa.string(), "if_errors": pa.int64()}
    opts = pcsv.ConvertOptions(column_types=types, timestamp_parsers=[pcsv.ISO8601])
    parse = pcsv.ParseOptions(invalid_row_handler=lambda row: "skip")
    out.mkdir(parents=True, exist_ok=True)
    rows = 0
    for f in files:
        table = pcsv.read_csv(f, convert_options=opts, parse_options=parse)
        rows += table.num_rows
        pq.write_table(table, out / f"{f.stem}.parquet", compression=compression, row_group_size=1 << 22)
    return rows


Variant = tuple[str, dict[str, Any]]  # (name, IngestConfig updates)
Progress = Callable[[int, int, str, dict[str, Any]], None] | None  # (variants done, of, the last one's name, its run)


def variants(
    cfg: IngestConfig, gpu_tasks: list[int], spark_cores: list[int] = (), hw: Hardware | None = None
) -> list[Variant]:
    """CPU Spark always; with the plugin configured (``auto``: where ``hw`` has a GPU and the jar is installed), the
    concurrentGpuTasks sweep and Spark's own shuffle; then CPU Spark on ``local[N]`` for each of ``spark_cores``
    (last: a run cut short loses these first)."""
    cpu = {"rapids_jar": None, "kpi_parse": "csv"}  # CPU Spark with its own parser, the faster there
    out: list[Variant] = [("cpu-spark", cpu)]
    if rapids_jar(cfg, hw or Hardware(cpu_count=1, memory_gb=1.0)):
        out += [(f"rapids-tasks{n}", {"concurrent_gpu_tasks": n}) for n in gpu_tasks]
        out.append((f"rapids-tasks{cfg.concurrent_gpu_tasks}-spark-shuffle", {"rapids_shuffle_mode": "SPARK"}))
    out += [(f"cpu-spark-cores{n}", {**cpu, "master": f"local[{n}]"}) for n in spark_cores]
    return out


def core_scaling(spark_runs: dict[str, dict[str, Any]], master: str, cpu_count: int) -> list[dict[str, Any]] | None:
    """CPU Spark's medians by core count (the master's run and each ``cpu-spark-cores{N}``), each with its speedup
    over the fewest cores' run and that speedup per added core factor (efficiency: 1.0 is linear). All from this
    invocation; None when fewer than two core counts ran."""
    by_cores: dict[int, float] = {}
    base = master_cores(master, cpu_count)
    if base is not None and "cpu-spark" in spark_runs:
        by_cores[base] = spark_runs["cpu-spark"]["seconds"]
    for name, r in spark_runs.items():
        if name.startswith("cpu-spark-cores"):
            by_cores.setdefault(int(name.removeprefix("cpu-spark-cores")), r["seconds"])
    if len(by_cores) < 2:
        return None
    n0 = min(by_cores)
    rows = []
    for n in sorted(by_cores):
        speedup = ratio(by_cores[n0], by_cores[n], 3)
        rows.append({"cores": n, "seconds": by_cores[n], "speedup": speedup, "efficiency": round(speedup * n0 / n, 3)})
    return rows


def _spark_once(raw: Path, out: Path, cfg: IngestConfig, conf: dict[str, str]) -> dict[str, Any]:
    """One ingest in a fresh process (its own JVM and application); its summary, seconds and GPU samples."""
    import json
    import os
    import subprocess
    import sys

    import tasks
    from tasks.core.training.procs import pdeathsig

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    spec = out.parent / f"{out.name}.spec.json"
    spec.write_text(json.dumps({"raw": str(raw), "out": str(out), "ingest": cfg.model_dump(mode="json"), "conf": conf}))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(tasks.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]),
    }
    p = subprocess.run(  # killed with the benchmark, as training's ranks are
        [sys.executable, "-m", "tasks.core.benchmarks.ingest", str(spec)],
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=pdeathsig(),
    )
    if p.returncode != 0:
        raise RuntimeError(f"ingest benchmark run {out.name} failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def _child(spec_path: Path) -> dict[str, Any]:
    """In the benchmark's child process: start Spark, ingest once under a GPU sampler, stop Spark."""
    import json

    from tasks.core.training.gpu_monitor import UtilizationSampler

    spec = json.loads(spec_path.read_text())
    raw, out, cfg = Path(spec["raw"]), Path(spec["out"]), IngestConfig.model_validate(spec["ingest"])
    t0 = time.perf_counter()
    spark = spark_session(spec["conf"])
    start_s = time.perf_counter() - t0
    with UtilizationSampler(out.parent / f"{out.name}.gpu.csv", interval=0.1) as gpu:
        w0, t0 = time.time(), time.perf_counter()
        summary = run_ingest(spark, discover(raw), out, cfg)
        seconds, w1 = time.perf_counter() - t0, time.time()
    spark.stop()
    util = gpu.summary(windows=[(w0, w1)])
    keys = ("rows_in", "rows_out", "rows_quarantined")
    return {
        "seconds": seconds,
        "spark_start_s": start_s,
        **{k: summary[k] for k in keys},
        "gpu_util_mean": util.get("steady_mean"),
        "gpu_samples": util.get("steady_samples", 0),
        "gpu_max_memory_gb": util.get("max_memory_gb"),
    }


def _median_of(run, repeat_under_s: float) -> dict[str, Any]:
    """``run()`` once; again twice if it took less than ``repeat_under_s``: the median run, with min and max."""
    runs = [run()]
    if runs[0]["seconds"] < repeat_under_s:
        runs += [run(), run()]
    s = spread([r["seconds"] for r in runs])
    pick = min(runs, key=lambda r: abs(r["seconds"] - s["median"]))
    return {
        **pick,
        "seconds": round(s["median"], 2),
        "runs": len(runs),
        "min_max_s": [round(s["min"], 2), round(s["max"], 2)],
        "spark_start_s": round(pick["spark_start_s"], 2),
    }


def write_partial(path: Path, spark_runs: dict[str, dict[str, Any]], remaining: list[str], raw_mb: float) -> None:
    """The variants done so far, rewritten whole after each one (atomically): a run cut short (a GPU host taken back)
    still leaves every finished variant's median, and the plugin's ratio to CPU Spark once both have run. Not the
    report: ``bench_ingest`` returns that at the end, with pyarrow's baseline."""
    part: dict[str, Any] = {"benchmark": "ingest", "partial": True, "remaining": remaining, "raw_mb": round(raw_mb, 1)}
    part["spark_variants"] = spark_runs
    cpu = spark_runs.get("cpu-spark")
    if cpu:
        part["vs_cpu_spark"] = {
            k: ratio(cpu["seconds"], v["seconds"], 3) for k, v in spark_runs.items() if k != "cpu-spark"
        }
    part["extrapolated"] = False
    write_json_atomic(path, json_safe(part))


def _spark_variants(
    work: Path, raw: Path, raw_mb: float, cfg: IngestConfig, rt: Runtime, bench: BenchConfig, progress: Progress
) -> dict[str, dict[str, Any]]:
    """Each Spark variant over the same files, the median of its runs; the finished ones on disk after each, and
    ``progress(done, total, name, run)`` told."""
    (work / PARTIAL).unlink(missing_ok=True)  # an earlier invocation's: never read as this one's
    spark_runs: dict[str, dict[str, Any]] = {}
    todo = variants(cfg, bench.gpu_tasks, bench.spark_cores, rt.hardware)
    for i, (name, updates) in enumerate(todo):
        vcfg = cfg.model_copy(update=updates)
        conf = {**spark_conf(vcfg, rt.hardware, work / "spark-events"), "spark.app.name": f"faultline-bench-{name}"}
        spark_runs[name] = r = _median_of(
            lambda vcfg=vcfg, conf=conf: _spark_once(raw, work / "spark-out", vcfg, conf), bench.repeat_under_s
        )
        r["mb_per_s"] = round(raw_mb / r["seconds"], 2)
        write_partial(work / PARTIAL, spark_runs, [n for n, _ in todo[i + 1 :]], raw_mb)
        if progress is not None:
            progress(i + 1, len(todo), name, r)
        else:
            logger.info(
                "ingest bench %s: %.1f s (median of %d), %.1f MB/s", name, r["seconds"], r["runs"], r["mb_per_s"]
            )
    return spark_runs


def bench_ingest(
    work: Path, size_gb: float, cfg: IngestConfig, rt: Runtime, bench: BenchConfig, progress: Progress = None
) -> dict[str, Any]:
    raw = Path(bench.raw) if bench.raw else ensure_raw(work, size_gb, bench.sized.ingest_topology)
    layout = discover(raw)
    raw_mb = sum(p.stat().st_size for p in layout.kpi_files + layout.alarm_files) / MB
    kpi_mb = sum(p.stat().st_size for p in layout.kpi_files) / MB
    spark_runs = _spark_variants(work, raw, raw_mb, cfg, rt, bench, progress)
    arrow_runs = []
    for _ in range(ARROW_REPEATS):  # a few seconds each: the median of three
        shutil.rmtree(work / "arrow-out", ignore_errors=True)
        t0 = time.perf_counter()
        arrow_rows = pyarrow_csv_to_parquet(list(layout.kpi_files), work / "arrow-out", cfg.compression)
        arrow_runs.append(time.perf_counter() - t0)
    arrow = spread(arrow_runs)
    arrow_s = arrow["median"]
    cpu = spark_runs["cpu-spark"]
    spark_mb_s, arrow_mb_s = raw_mb / cpu["seconds"], kpi_mb / arrow_s
    rows = {(r["rows_in"], r["rows_out"], r["rows_quarantined"]) for r in spark_runs.values()}
    result = {
        "benchmark": "ingest",
        "hardware": rt.hardware.as_dict(),
        "device": rt.hardware.gpus[0].name if rt.hardware.gpus else f"{rt.hardware.cpu_count}-core CPU",
        "spark_master": cfg.master,
        "extra_conf": dict(cfg.extra_conf),  # ingest.extra_conf, as given (every variant ran with it)
        "raw": str(raw),
        "raw_mb": round(raw_mb, 1),
        "kpi_csv_mb": round(kpi_mb, 1),
        "rows_in": cpu["rows_in"],
        "rows_out": cpu["rows_out"],
        "rows_quarantined": cpu["rows_quarantined"],
        "same_rows_every_run": len(rows) == 1,
        "spark_seconds": cpu["seconds"],
        "spark_mb_per_s": round(spark_mb_s, 2),
        "spark_runs": cpu["runs"],
        "spark_min_max_s": cpu["min_max_s"],
        "spark_variants": spark_runs,
        "pyarrow_seconds": round(arrow_s, 2),
        "pyarrow_runs": ARROW_REPEATS,
        "pyarrow_min_max_s": [round(arrow["min"], 2), round(arrow["max"], 2)],
        "pyarrow_rows": arrow_rows,
        "pyarrow_mb_per_s": round(arrow_mb_s, 2),
        "spark_vs_pyarrow": round(spark_mb_s / arrow_mb_s, 3),
        "extrapolated": False,
        "note": "Spark does schema enforcement, 20 rule checks, quarantine, dedup (window) and date "
        "partitioning; pyarrow only parses and writes the KPI CSV. Every figure is from this invocation: each "
        "Spark variant in its own process (Spark start-up not counted: spark_start_s; the JVM's warm-up is in "
        "every run, as in a pipeline's ingest), the median of three where "
        f"a run took under {bench.repeat_under_s:g} s, else one run; pyarrow the median of three.",
    }
    result["cpu_core_scaling"] = core_scaling(spark_runs, cfg.master, rt.hardware.cpu_count)
    gpu = {k: v for k, v in spark_runs.items() if k.startswith("rapids-")}
    if gpu:
        best = min(gpu, key=lambda k: gpu[k]["seconds"])
        result["rapids_mode"] = cfg.rapids_mode
        result["rapids_best"] = best
        result["rapids_vs_cpu_spark"] = round(cpu["seconds"] / gpu[best]["seconds"], 3)
    return result


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(_child(Path(sys.argv[1]))))
