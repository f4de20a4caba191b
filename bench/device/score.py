"""Where evaluation could go next: the graph model's held-out scoring (``score_snapshots``, what the evaluate
stage runs on the CPU today) on the host's CPU cores vs the GPU, at the gpu profile's shape: T=4,032 snapshots
x E=3,815 elements x F=84 features (random values; the time per snapshot does not depend on them), the last 25 %
scored, hidden 64, window 6, a random graph of mean degree 4. Needs only torch and numpy (runs on the H200's own
torch before any bundle is staged):
    PYTHONPATH=. python3 bench/device/score.py [OUT_JSON] [CPU_BUDGET_S]
GPU: median of 3 (min, max), data already on the device, plus the one-off host-to-device copy.
CPU: the median of 3 (min, max), or
(when one run would exceed CPU_BUDGET_S, default 90) the snapshots scored within the budget, extrapolated linearly to
all and labelled so in the JSON."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import numpy as np
import torch

from tasks.core.training.model import FaultGNN, normalised_adjacency, score_snapshots

T, E, F, HIDDEN, WINDOW, DEGREE = 4032, 3815, 84, 64, 6, 4


def graph(rng: np.random.Generator):
    deg = rng.poisson(DEGREE, E).clip(1)
    indptr = np.concatenate([[0], np.cumsum(deg)])
    return normalised_adjacency(indptr, rng.integers(0, E, indptr[-1]), E)


def main(out: str, cpu_budget_s: float) -> dict:
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.standard_normal((T, E, F), dtype=np.float32))
    adj, model = graph(rng), FaultGNN(F, HIDDEN, 2)
    ts = np.arange(T - T // 4, T)
    res: dict = {"shape": {"T": T, "E": E, "F": F, "scored": len(ts)}, "hidden": HIDDEN, "window": WINDOW}
    res["cpu_threads"] = torch.get_num_threads()
    cpu_runs, done = [], 0
    for _ in range(3):  # the median of 3 when one run fits the budget; else one run, cut and extrapolated
        t0, done = time.perf_counter(), 0
        for i in range(0, len(ts), 64):  # score_snapshots' own batches, timed so the budget can stop it
            score_snapshots(model, x, adj, ts[i : i + 64], WINDOW)
            done = min(len(ts), i + 64)
            if time.perf_counter() - t0 > cpu_budget_s:
                break
        cpu_runs.append((time.perf_counter() - t0) * len(ts) / done)
        if done < len(ts):
            break
    res["cpu"] = {
        "seconds": round(statistics.median(cpu_runs), 2),
        "min_s": round(min(cpu_runs), 2),
        "max_s": round(max(cpu_runs), 2),
        "repeats": len(cpu_runs),
        "extrapolated": done < len(ts),
    }
    if torch.cuda.is_available():
        t0 = time.perf_counter()
        xg, ag, mg = x.cuda(), adj.to("cuda"), model.cuda()
        torch.cuda.synchronize()
        copy_s = time.perf_counter() - t0
        runs = {}
        for bf16 in (False, True):
            times = []
            for _ in range(4):  # the first is warm-up (cuDNN plans), then three timed
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                score_snapshots(mg, xg, ag, ts, WINDOW, bf16=bf16).cpu()
                times.append(time.perf_counter() - t0)
            runs["bf16" if bf16 else "fp32"] = {
                "median_s": round(statistics.median(times[1:]), 3),
                "min_s": round(min(times[1:]), 3),
                "max_s": round(max(times[1:]), 3),
                "warmup_s": round(times[0], 3),
            }
        res["gpu"] = {"device": torch.cuda.get_device_name(0), "h2d_copy_s": round(copy_s, 2), **runs}
        res["cpu_vs_gpu_fp32"] = round(res["cpu"]["seconds"] / runs["fp32"]["median_s"], 1)
    res["extrapolated"] = ["cpu.seconds"] if res["cpu"]["extrapolated"] else []
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res))
    return res


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "score.json", float(sys.argv[2]) if len(sys.argv) > 2 else 90.0)
