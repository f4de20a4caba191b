"""Training throughput of two source trees on the same card, in one invocation: A/B, alternating, N runs each.

Whether a change to the model or the loop leaves training no slower: a figure from another card, or another day,
says nothing about that; the code from before the change, run on the same card in the same call, does. Each run
is `bench train`'s own `_run` (Horovod, one GPU, a fresh directory, the same synthetic snapshots for both trees),
imported from the tree under test (PYTHONPATH=tree, checked), in its own process; the trees alternate (A B A B
...) so that drift hits both.

  usage: python bench/device/train_ab.py BASE_TREE HEAD_TREE OUT.json [--repeats 3] [--profile gpu]
             [--times 4032] [--topology backbone/world] [--set section.key=value ...]
  e.g.   git archive 51afc47 | gzip > .devparts/base.tgz   (here), then on the device:
         mkdir -p /tmp/fl/base && tar xzf .devparts/base.tgz -C /tmp/fl/base &&
         .venv/bin/python bench/device/train_ab.py /tmp/fl/base $PWD /tmp/fl/out/train_ab.json \
             --set train.num_proc=1 --set train.epochs=6
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tasks.core.benchmarks.measure import ratio, spread  # the installed project's (HEAD_TREE's on the device)
from tasks.core.benchmarks.train import synthetic_tensors  # one data file for both trees

CHILD = """
import json, sys
from pathlib import Path
import tasks
tree, data, work, profile, *overrides = sys.argv[1:]
assert Path(tasks.__file__).resolve().is_relative_to(Path(tree).resolve()), (tasks.__file__, tree)
from tasks.core.config import load_config
from tasks.core.runtime import resolve_runtime
from tasks.runner import store_root
from tasks.core.benchmarks.train import _run
cfg = load_config(profile, overrides)
rt = resolve_runtime(cfg, store_root(cfg.paths.root))
r = _run("horovod", cfg.train, Path(data), Path(work), rt)
gpu = rt.hardware.gpus[0].name if rt.hardware.gpus else "cpu"
top = (r.get("top_kernels") or [{}])[0]
print(json.dumps({"samples_per_s": r["samples_per_s"], "wall_s": r["wall_s"], "device": gpu,
                  "gpu_util_steady": r["gpu_utilization"].get("steady_mean"), "top_kernel": top}, default=str))
"""


def summarise(runs: dict[str, list[dict]]) -> dict:
    """Median, min and max of each side's snapshots/s; head/base as a ratio of medians; the paired differences."""
    out: dict = {}
    for side, rs in runs.items():
        s = spread([r["samples_per_s"] for r in rs])
        out[side] = {
            "samples_per_s_median": round(s["median"], 1),
            "samples_per_s_min_max": [round(s["min"], 1), round(s["max"], 1)],
            "repeats": len(rs),
        }
    base, head = (out[s]["samples_per_s_median"] for s in ("base", "head"))
    pairs = [h["samples_per_s"] - b["samples_per_s"] for b, h in zip(runs["base"], runs["head"], strict=False)]
    out["head_vs_base"] = ratio(head, base, 3)
    out["paired_differences"] = [round(d, 1) for d in pairs]
    # not slower: the head's median at or above the slowest base run (inside the base's own run-to-run range)
    out["head_not_slower"] = head >= out["base"]["samples_per_s_min_max"][0]
    return out


def one(tree: Path, data: Path, work: Path, profile: str, overrides: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-c", CHILD, str(tree), str(data), str(work), profile, *overrides]
    p = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{tree}: training run failed (rc {p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", type=Path)
    ap.add_argument("head", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--profile", default="gpu")
    ap.add_argument("--times", type=int, default=4032)
    ap.add_argument("--topology", default="backbone/world")
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    a = ap.parse_args(argv)
    work = a.out.parent / "train_ab"
    work.mkdir(parents=True, exist_ok=True)
    shape = synthetic_tensors(work / "synthetic.npz", a.topology, a.times, 84)
    runs: dict[str, list[dict]] = {"base": [], "head": []}
    for i in range(a.repeats):
        for side, tree in (("base", a.base), ("head", a.head)):
            t0 = time.time()
            r = one(tree.resolve(), work / "synthetic.npz", work / f"{side}-{i}", a.profile, a.overrides)
            runs[side].append(r)
            print(f"{side} {i + 1}/{a.repeats}: {r['samples_per_s']:.1f} snapshots/s ({time.time() - t0:.0f} s)")
    res = {
        "benchmark": "train_ab",
        "device": runs["head"][0]["device"],
        "data": shape,
        "overrides": a.overrides,
        "extrapolated": False,
        **summarise(runs),
        "runs": runs,
    }
    a.out.write_text(json.dumps(res, indent=2, default=str))
    print(json.dumps({k: v for k, v in res.items() if k != "runs"}))
    return res


if __name__ == "__main__":
    main()
