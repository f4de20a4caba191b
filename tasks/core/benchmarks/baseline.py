"""Day-one performance baseline: HiBench-style Spark micro-workloads and a compute/memory probe.

Spark sort, aggregation and join run over generated data beside pandas doing the same on the same
number of rows in this process; the probe measures memory copy bandwidth and matmul rate on the CPU
(NumPy) and, where a GPU exists, device-to-device copy, host-to-device copy and bf16 matmul (torch).
The result carries the hardware, and a later baseline on the same hardware is compared with it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from tasks.core.config import IngestConfig
from tasks.core.runtime import Runtime


def _best(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def spark_micro(spark, rows: int, keys: int = 1000) -> dict[str, float]:
    """Seconds for sort, aggregation and join of ``rows`` generated rows (data cached first)."""
    from pyspark.sql import functions as F

    df = spark.range(rows).select("id", F.rand(1).alias("v"), (F.rand(2) * keys).cast("int").alias("k")).cache()
    df.count()
    dim = spark.range(keys).select(F.col("id").cast("int").alias("k"), (F.col("id") * 2).alias("w")).cache()
    dim.count()
    noop = lambda d: d.write.format("noop").mode("overwrite").save()
    out = {
        "sort": _best(lambda: noop(df.orderBy("v"))),
        "aggregation": _best(lambda: df.groupBy("k").agg(F.sum("v"), F.avg("v"), F.count("id")).collect()),
        "join": _best(lambda: noop(df.join(dim, "k"))),
    }
    df.unpersist()
    dim.unpersist()
    return out


def pandas_micro(rows: int, keys: int = 1000) -> dict[str, float]:
    import pandas as pd

    rng = np.random.default_rng(1)
    df = pd.DataFrame({"id": np.arange(rows), "v": rng.random(rows), "k": (rng.random(rows) * keys).astype("int32")})
    dim = pd.DataFrame({"k": np.arange(keys, dtype="int32"), "w": np.arange(keys) * 2})
    return {
        "sort": _best(lambda: df.sort_values("v")),
        "aggregation": _best(lambda: df.groupby("k").agg(s=("v", "sum"), m=("v", "mean"), n=("id", "count"))),
        "join": _best(lambda: df.merge(dim, on="k")),
    }


def cpu_probe(mb: int = 256, n: int = 1024) -> dict[str, float]:
    a = np.ones(mb * 2**20 // 8)
    b = np.empty_like(a)
    copy_s = _best(lambda: np.copyto(b, a))
    m = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    mm_s = _best(lambda: m @ m)
    return {"copy_gb_s": round(2 * a.nbytes / copy_s / 1e9, 2), "matmul_fp32_gflops": round(2 * n**3 / mm_s / 1e9, 1)}


def gpu_probe(mb: int = 1024, n: int = 8192) -> dict[str, float] | None:
    import torch

    if not torch.cuda.is_available():
        return None
    dev = torch.device("cuda")
    x = torch.empty(mb * 2**20, dtype=torch.uint8, device=dev)
    y = torch.empty_like(x)
    host = torch.empty(mb * 2**20, dtype=torch.uint8, pin_memory=True)

    def timed(fn, repeat=5) -> float:
        fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeat):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1000 / repeat

    d2d = timed(lambda: y.copy_(x))
    h2d = timed(lambda: x.copy_(host, non_blocking=True))
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    mm = timed(lambda: a @ a, repeat=10)
    return {
        "device": torch.cuda.get_device_name(0),
        "d2d_copy_gb_s": round(2 * x.numel() / d2d / 1e9, 1),
        "h2d_copy_gb_s": round(x.numel() / h2d / 1e9, 1),
        "matmul_bf16_tflops": round(2 * n**3 / mm / 1e12, 1),
    }


def hardware_key(hw: dict[str, Any]) -> str:
    gpus = ",".join(g["name"] for g in hw.get("gpus") or []) or "no-gpu"
    return f"{hw.get('cpu_count')}cpu-{round(hw.get('memory_gb', 0))}GB-{gpus}"


def bench_baseline(cfg: IngestConfig, rt: Runtime, rows: int, previous: Path | None = None) -> dict[str, Any]:
    from tasks.core.sparkops import stage_spark

    hw = rt.hardware.as_dict()
    result: dict[str, Any] = {
        "benchmark": "baseline",
        "hardware": hw,
        "hardware_key": hardware_key(hw),
        "rows": rows,
        "spark_master": cfg.master,
    }
    from tasks.core.probes import java_version

    sp: dict[str, float] = {}
    if java_version().get("found"):
        with stage_spark(rt.spark_conf, "bench-baseline") as spark:  # stopped before the GPU probe
            sp = spark_micro(spark, rows)
        pd_ = pandas_micro(rows)
        result["spark_seconds"] = {k: round(v, 4) for k, v in sp.items()}
        result["pandas_seconds"] = {k: round(v, 4) for k, v in pd_.items()}
        result["spark_rows_per_s"] = {k: round(rows / v, 1) for k, v in sp.items()}
        result["spark_vs_pandas"] = {k: round(pd_[k] / sp[k], 3) for k in sp}  # > 1: Spark faster
    else:
        result["spark_skipped"] = "no Java on this machine: Spark micro-workloads not run"
    result["cpu"] = cpu_probe()
    gpu = gpu_probe()
    result["gpu"] = gpu
    if gpu:
        result["gpu_vs_cpu"] = {
            "copy": round(gpu["d2d_copy_gb_s"] / result["cpu"]["copy_gb_s"], 1),
            "matmul": round(gpu["matmul_bf16_tflops"] * 1000 / result["cpu"]["matmul_fp32_gflops"], 1),
        }
    if previous is not None and previous.is_file():
        prev = json.loads(previous.read_text())
        if prev.get("hardware_key") == result["hardware_key"]:
            result["vs_previous"] = {
                f"spark_{k}": round(prev["spark_seconds"][k] / sp[k], 3)
                for k in sp
                if k in prev.get("spark_seconds", {})
            }
            result["previous_recorded"] = prev.get("recorded_at")
    result["recorded_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return result


def summary_rows(res: dict[str, Any]) -> list[dict[str, Any]]:
    """The baseline as table rows: each Spark workload beside pandas, then the compute/memory probe."""
    rows = [
        {
            "workload": k,
            "spark_s": res["spark_seconds"][k],
            "pandas_s": res["pandas_seconds"][k],
            "spark_vs_pandas": res["spark_vs_pandas"][k],
        }
        for k in res.get("spark_seconds", {})
    ]
    probe = {"cpu copy GB/s": res["cpu"]["copy_gb_s"], "cpu fp32 GFLOP/s": res["cpu"]["matmul_fp32_gflops"]}
    if res.get("gpu"):
        probe.update(
            {"gpu d2d GB/s": res["gpu"]["d2d_copy_gb_s"], "gpu bf16 TFLOP/s": res["gpu"]["matmul_bf16_tflops"]}
        )
    return [*rows, {"workload": "probe", **probe}]
