"""One training process (a Horovod or DDP rank). Launched by ``tasks.core.training.launch.launch_training``.

horovodrun -np N -H localhost:N --gloo python -m tasks.core.training.worker SPEC.json
torchrun --nproc_per_node N -m tasks.core.training.worker SPEC.json

Every distributed line is marked ``[dist]``; the model (``model.py``) knows nothing of Horovod.
"""

from __future__ import annotations

import gc
import importlib
import json
import math
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from tasks.core.config import TrainConfig
from tasks.core.metrics import from_torch, pr_auc
from tasks.core.store import write_json_atomic
from tasks.core.training.checkpoint import load_latest, save_checkpoint
from tasks.core.training.comm import exit_now, make_comm
from tasks.core.training.frame_tensors import as_torch, build, write_meta
from tasks.core.training.model import FaultGNN, hazard_loss, normalised_adjacency, score_snapshots, windows_at
from tasks.core.training.procs import watch_owner
from tasks.core.training.profiling import StepProfiler, StepTimer
from tasks.core.training.recurrent import choose_kernel
from tasks.core.training.spec import TrainingSpec
from tasks.core.training.timeline import Timeline

IMPORTED = time.time()  # torch, CUDA's Python side and the project are imported


def pick_device(spec: TrainingSpec, local_rank: int) -> torch.device:
    if spec.device == "cuda":
        torch.cuda.set_device(local_rank)  # [dist] pin this process to its GPU by local rank
        # the guide's fix for allocator fragmentation OOMs: cap this process's share of the GPU
        torch.cuda.set_per_process_memory_fraction(spec.train.memory_fraction, local_rank)
        return torch.device("cuda", local_rank)
    torch.set_num_threads(max(1, int(spec.threads_per_rank)))
    return torch.device("cpu")


@dataclass
class Data:
    """The training tensors, moved to the device once; batches are gathered there (no per-step host copy)."""

    x: torch.Tensor
    y: torch.Tensor
    mask: torch.Tensor
    adj: Any
    train_t: np.ndarray
    val_t: np.ndarray
    pos_weight: torch.Tensor
    ttf: torch.Tensor | None = None  # steps to the next onset (-1: none), the hazard head's target
    label_steps: int = 12

    @classmethod
    def load(cls, path: str, device: torch.device, pos_weight: float | None = None) -> Data:
        """``pos_weight``: the fault class's weight in the loss; None: negatives per positive, capped at 50."""
        return cls.from_arrays(np.load(path), device, pos_weight)

    @classmethod
    def from_arrays(cls, d, device: torch.device, pos_weight: float | None = None) -> Data:
        """From NumPy arrays (``data.npz``) or arrays already on this rank's GPU (CuPy, shared through DLPack)."""
        x = as_torch(d["X"], device)
        y, mask = as_torch(d["y"], device).float(), as_torch(d["mask"], device).float()
        train_t = np.asarray(d["train_t"])
        tt = torch.as_tensor(train_t, device=device, dtype=torch.long)
        pos = float((y[tt] * mask[tt]).double().sum())
        neg = float(mask[tt].double().sum()) - pos
        return cls(
            x=x,
            y=y,
            mask=mask,
            adj=normalised_adjacency(np.asarray(d["indptr"]), np.asarray(d["indices"]), x.shape[1]).to(device),
            train_t=train_t,
            val_t=np.asarray(d["val_t"]),
            pos_weight=torch.tensor(pos_weight or min(50.0, neg / max(pos, 1.0)), device=device),
            ttf=as_torch(d["ttf"], device) if "ttf" in d else None,
            label_steps=int(d["label_steps"]) if "label_steps" in d else 12,
        )


def load_data(spec: TrainingSpec, device: torch.device, rank: int) -> Data:
    """The tensors from ``data.npz`` (built on the host by the stage), or built here from the recipe
    (``frame_tensors``: on this rank's GPU through cuDF); rank 0 then writes the small arrays for evaluation."""
    if Path(spec.data).suffix != ".json":
        return Data.load(str(spec.data), device, spec.train.pos_weight)
    arrays, info = build(spec.data, gpu=device.type == "cuda")
    if rank == 0:
        write_meta(spec.data, arrays, info)
    print(json.dumps({"tensors": {k: v for k, v in info.items() if k != "feature_names"}}), flush=True)
    return Data.from_arrays(arrays, device, spec.train.pos_weight)


@dataclass
class RunState:
    """One rank's training: the train section, the communicator, the tensors, the model (and its wrapped form),
    the optimizer and schedule, this rank's share of the snapshots and steps, and the heartbeat."""

    cfg: TrainConfig
    comm: Any
    data: Data
    model: FaultGNN
    net: Any
    optimizer: Any
    scheduler: Any
    per_rank: int
    steps: int
    bf16: bool
    hazard: bool
    beat: Callable[[int, int, int], None]


@dataclass
class State:
    """What a checkpoint restores: the epoch to start at, the history so far and the best epoch (rank 0)."""

    start_epoch: int = 0
    history: list[dict] = field(default_factory=list)
    best: dict | None = None


def resume(comm, spec: TrainingSpec, model, optimizer, scheduler) -> State:
    state = State()
    if comm.rank == 0:  # [dist] only rank 0 reads checkpoints; the state reaches others by broadcast
        found = load_latest(Path(spec.checkpoints), spec.fingerprint, lambda m: print(m, flush=True))
        if found is not None:
            ck = found[1]
            model.load_state_dict(ck["model"])
            optimizer.load_state_dict(ck["optimizer"])
            scheduler.load_state_dict(ck["scheduler"])
            torch.set_rng_state(ck["torch_rng"])
            np.random.set_state(ck["numpy_rng"])
            state = State(ck["epoch"] + 1, ck["history"], ck.get("best"))
    comm.sync(model, optimizer)  # [dist] rank 0's parameters and optimizer state on every rank
    state.start_epoch = comm.broadcast_object(state.start_epoch)  # [dist] every rank resumes at the same epoch
    state.history = comm.broadcast_object(state.history)
    # [dist] the LR schedule's position too, or ranks would step with different learning rates
    scheduler.load_state_dict(comm.broadcast_object(scheduler.state_dict()))
    return state


def train_epoch(epoch: int, run: RunState, timer: StepTimer, profiler: StepProfiler | None) -> tuple[float, float]:
    """One epoch of this rank's shard; returns (sum of losses, wall-clock start)."""
    cfg, comm, data, net, optimizer = run.cfg, run.comm, run.data, run.net, run.optimizer
    order = np.random.default_rng(cfg.seed * 1009 + epoch).permutation(data.train_t)
    per_rank, batch, steps = run.per_rank, cfg.batch_size, run.steps
    # [dist] each rank trains on its own shard; the indices go to the device once per epoch
    shard = torch.as_tensor(order[comm.rank * per_rank : (comm.rank + 1) * per_rank], device=data.x.device)
    loss_sum = torch.zeros((), device=data.x.device)
    started = time.time()
    for step in range(steps):
        timer.mark(0)
        tb = shard[step * batch : (step + 1) * batch]
        xb, yb, mb = windows_at(data.x, tb, cfg.window), data.y[tb], data.mask[tb]  # gathered on the device
        timer.mark(1)
        with torch.autocast(data.x.device.type, dtype=torch.bfloat16, enabled=run.bf16):
            logits = net(xb, data.adj, hazard=run.hazard)
        loss = (cell_loss(logits, tb, yb, data, run.hazard) * mb).sum() / mb.sum().clamp_min(1.0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        loss_sum += loss.detach()  # stays on the device: no sync per step
        timer.mark(2)
        if profiler is not None:
            profiler.step()
        run.beat(epoch, step, steps)
    return float(loss_sum), started


def cell_loss(logits: torch.Tensor, tb: torch.Tensor, yb: torch.Tensor, data: Data, hazard: bool) -> torch.Tensor:
    """[b, e] loss per cell: the label's BCE, or with the hazard head the survival loss over its K steps."""
    if not hazard:
        return F.binary_cross_entropy_with_logits(logits.float(), yb, pos_weight=data.pos_weight, reduction="none")
    remaining = (data.x.shape[0] - 1 - tb)[:, None]  # steps of data after each snapshot: censoring
    return hazard_loss(logits, data.ttf[tb], remaining)


def validate(run: RunState, row: dict) -> None:
    data, model = run.data, run.model
    s = score_snapshots(model, data.x, data.adj, data.val_t, run.cfg.window, run.cfg.batch_size, run.bf16)
    vt = torch.as_tensor(data.val_t, device=data.x.device)
    m = data.mask[vt].bool()
    row["val_pr_auc"] = pr_auc(from_torch(data.y[vt][m]), from_torch(s[m]))  # sorted on the GPU


def keep_best(state: State, row: dict, model) -> None:
    score = -1.0 if math.isnan(row["val_pr_auc"]) else row["val_pr_auc"]
    if state.best is None or score > state.best["score"]:  # keep the epoch that validates best
        state.best = {
            "score": score,
            "epoch": row["epoch"],
            "model": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
        }


def checkpoint(spec: TrainingSpec, epoch: int, run: RunState, state: State) -> None:
    cfg = run.cfg
    if (epoch + 1) % cfg.checkpoint_every == 0 or epoch == cfg.epochs - 1:
        save_checkpoint(
            Path(spec.checkpoints),
            epoch,
            {
                "model": run.model.state_dict(),
                "optimizer": run.optimizer.state_dict(),
                "scheduler": run.scheduler.state_dict(),
                "torch_rng": torch.get_rng_state(),
                "numpy_rng": np.random.get_state(),
                "history": state.history,
                "best": state.best,
            },
            spec.fingerprint,
        )


def heartbeat(path: Path, epochs: int, rank: int):
    last = [0.0]

    def beat(epoch: int, step: int, steps: int) -> None:
        if rank == 0 and (time.time() - last[0] > 1.0 or step == steps - 1):
            now = last[0] = time.time()
            write_json_atomic(path, {"epoch": epoch, "step": step + 1, "steps": steps, "epochs": epochs, "time": now})

    return beat


def setup(spec: TrainingSpec, timeline: Timeline) -> RunState:
    cfg = spec.train
    comm = make_comm(spec.engine, spec.device)
    timeline.mark("comm_init")
    device = pick_device(spec, comm.local_rank)
    if device.type == "cuda":
        torch.zeros(1, device=device)  # the CUDA context is made here, measured apart from the tensors' build
    timeline.mark("device_context")
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    data = load_data(spec, device, comm.rank)
    timeline.mark("tensors")
    hazard = int(cfg.hazard_steps)
    if hazard and data.ttf is None:
        raise ValueError(f"{spec.data}: train.hazard_steps={hazard} needs the steps to onset (ttf), not in it")
    args = (cfg.hidden, cfg.layers, cfg.dropout, cfg.temporal_graph, hazard, data.label_steps)
    model = FaultGNN(data.x.shape[2], *args).to(device)
    bf16, rows = bool(cfg.bf16 and device.type == "cuda"), cfg.batch_size * data.x.shape[1]  # a step's sequences
    choice = choose_kernel(model.temporal, rows, cfg.window, device, bf16, cfg.recurrent)  # the GRU's kernel
    model.recurrent, timeline.notes["recurrent"] = choice
    timeline.mark("model")
    if cfg.init_weights and comm.rank == 0:  # a warm start; [dist] rank 0's weights reach the others in resume()
        from tasks.core.training.model import warm_start

        warm_start(model, cfg.init_weights, cfg.window)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr * comm.size)  # [dist] LR scaled by world size
    net, optimizer = comm.wrap(model, optimizer)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=cfg.epochs)
    per_rank = len(data.train_t) // comm.size
    return RunState(
        cfg=cfg,
        comm=comm,
        data=data,
        model=model,
        net=net,
        optimizer=optimizer,
        scheduler=scheduler,
        per_rank=per_rank,
        steps=max(1, math.ceil(per_rank / cfg.batch_size)),
        bf16=bf16,
        hazard=hazard > 0,
        beat=heartbeat(Path(spec.out) / "heartbeat.json", cfg.epochs, comm.rank),
    )


def epoch_row(epoch: int, run: RunState, loss_sum: float, started: float, timer: StepTimer) -> dict:
    comm = run.comm
    wait_s, compute_s = timer.totals()  # synchronises: the epoch's steps are done on the device
    ended = time.time()
    run.scheduler.step()
    return {
        "epoch": epoch,
        "train_loss": comm.mean(loss_sum / run.steps),  # [dist] averaged over ranks
        "lr": run.scheduler.get_last_lr()[0],
        "data_wait_s": comm.mean(wait_s),
        "compute_s": comm.mean(compute_s),
        "samples": run.per_rank * comm.size,
        "t_start": started,  # wall clock of the epoch's training steps (for GPU utilization windows)
        "t_end": ended,
    }


def node_monitor(spec: TrainingSpec, local_rank: int, host: str | None = None):
    """MLflow's SystemMetricsMonitor for this node, on the pipeline's run, its metrics under
    ``system/<host>/``: started by local rank 0 on every host but the flow's own (whose monitor already covers it).
    Returns the running monitor, or None."""
    nm = spec.node_metrics
    host = host or socket.gethostname()
    if not nm or local_rank != 0 or host == nm.flow_host:
        return None
    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

    monitor = SystemMetricsMonitor(
        nm.run_id,
        sampling_interval=nm.interval_s,
        node_id=host,
        tracking_uri=os.environ.get("MLFLOW_TRACKING_URI"),
    )
    monitor.start()
    return monitor


def main(spec_path: str, timeline: Timeline | None = None) -> int:
    timeline = timeline or Timeline(IMPORTED)
    spec = TrainingSpec.read(spec_path)
    watch_owner(spec.owner_pid)
    preload = threading.Thread(target=importlib.import_module, args=("torch._dynamo",), daemon=True)
    preload.start()  # what torch.optim's first optimizer imports (~900 modules), beside the tensors' build
    run = setup(spec, timeline)
    timeline.mark("optimizer")
    comm, out_dir = run.comm, Path(spec.out)
    monitor = node_monitor(spec, comm.local_rank)
    try:
        return _train(spec, run, comm, out_dir, timeline)
    finally:
        if monitor is not None:
            monitor.finish()


def _train(spec: TrainingSpec, run: RunState, comm, out_dir: Path, timeline: Timeline) -> int:
    state = resume(comm, spec, run.model, run.optimizer, run.scheduler)
    timeline.mark("resume_and_first_collective")  # NCCL's communicators are set up by the first broadcast
    timer = StepTimer(run.data.x.device)
    profiler = None
    if comm.rank == 0:
        profiler = StepProfiler(run.data.x.device, out_dir / "trace.json", run.steps, spec.profile_steps)
    for epoch in range(state.start_epoch, run.cfg.epochs):
        t = time.time()
        loss_sum, started = train_epoch(epoch, run, timer, profiler if epoch == state.start_epoch else None)
        if profiler is not None and epoch == state.start_epoch:
            profiler.finish()
        row = epoch_row(epoch, run, loss_sum, started, timer)
        timeline.add("epochs", t)
        if comm.rank == 0:  # [dist] only rank 0 evaluates, logs and checkpoints
            t = time.time()
            validate(run, row)
            timeline.add("validate", t)
            state.history.append(row)
            keep_best(state, row, run.model)
            t = time.time()
            checkpoint(spec, epoch, run, state)
            timeline.add("checkpoint", t)
            print(json.dumps({"progress": row}), flush=True)
    timeline.mark("loop")
    if comm.rank == 0:
        best = state.best
        weights = best["model"] if best and best.get("model") else run.model.state_dict()
        torch.save(
            {
                "model": weights,
                "config": run.model.config,
                "window": run.cfg.window,
                "best_epoch": best["epoch"] if best else None,
            },
            out_dir / "model.pt",
        )
        write_json_atomic(out_dir / "history.json", state.history, indent=None)
        timeline.mark("save")
        write_json_atomic(out_dir / "timeline.json", timeline.parts(), indent=None)
    run.net = run.optimizer = None  # DDP's reducer holds work on the process group: released while the group lives
    gc.collect()
    comm.shutdown()
    return 0


if __name__ == "__main__":
    exit_now(main(sys.argv[1]))
