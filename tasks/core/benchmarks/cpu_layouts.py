"""The CPU path's training layout in the end-to-end benchmark: the fastest of at least three rank x thread layouts
on the host, so that the CPU path is not slowed by a layout chosen for the GPU.

Each layout trains Horovod ranks on the CPU for two epochs over synthetic tensors of the workload's shape (its
topology's elements, the features' count, enough snapshots for two steps a rank per epoch); the second epoch's
samples/s judges it (the first is warm-up). Values do not change a step's cost, the shape does.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

EPOCHS = 2
MAX_RANKS = 8


def layouts(cores: int, max_ranks: int = MAX_RANKS) -> list[tuple[int, int]]:
    """(ranks, threads per rank) pairs that fill the host's cores: ranks 1, 2, 4, ... up to the cores (and
    ``max_ranks``); where that gives fewer than three, more ranks than cores (one thread each) make the third."""
    ranks = [r for r in (1, 2, 4, 8, 16, 32, 64) if r <= min(cores, max_ranks)]
    while len(ranks) < 3:
        ranks.append(ranks[-1] * 2)
    return [(r, max(1, cores // r)) for r in ranks]


def sweep_times(batch_size: int, ranks: int, train_share: float = 0.9) -> int:
    """Snapshots for two full steps a rank per epoch at ``ranks`` ranks: the synthetic tensors train on snapshots
    16 (the first windows' history) up to ``train_share`` of them."""
    return math.ceil((16 + 2 * batch_size * ranks) / train_share) + 1


def pick(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest layout by its steady samples/s (the epochs after the first)."""
    return max(results, key=lambda r: r["samples_per_s"])


def sweep(work: Path, cfg, rt_for, topology: str, features: int) -> dict[str, Any]:
    """Every layout's steady samples/s and the fastest. ``rt_for(ranks)``: the CPU runtime (threads per rank
    derived) and train section of that many ranks."""
    from tasks.core.benchmarks.train import _run, synthetic_tensors

    cores = rt_for(1)[0].hardware.cpu_count
    pairs = layouts(cores)
    Path(work).mkdir(parents=True, exist_ok=True)
    data = Path(work) / "layouts.npz"
    shape = synthetic_tensors(data, topology, sweep_times(cfg.batch_size, pairs[-1][0]), features)
    results = []
    for ranks, _threads in pairs:
        rt, train = rt_for(ranks)
        run = _run("horovod", train.model_copy(update={"epochs": EPOCHS}), data, Path(work) / f"ranks-{ranks}", rt)
        results.append(
            {
                "ranks": ranks,
                "threads_per_rank": rt.threads_per_rank,
                "samples_per_s": round(run["samples_per_s"], 2),
                "wall_s": run["wall_s"],
            }
        )
    best = pick(results)
    return {"cores": cores, "data": shape, "epochs": EPOCHS, "layouts": results, "fastest": best}
