"""One training process (a Horovod or DDP rank). Launched by ``tasks.core.train.launch_training``.

horovodrun -np N -H localhost:N --gloo python -m tasks.core.train_worker SPEC.json
torchrun --nproc_per_node N -m tasks.core.train_worker SPEC.json
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from .comm import make_comm
from .metrics import pr_auc
from .model import FaultGNN, normalised_adjacency, windows_at


def _write_json(path: Path, data) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _device(spec: dict, local_rank: int) -> torch.device:
    if spec["device"] == "cuda":
        torch.cuda.set_device(local_rank)  # [dist] pin this process to its GPU by local rank
        # the guide's fix for allocator fragmentation OOMs: cap this process's share of the GPU
        torch.cuda.set_per_process_memory_fraction(spec["train"]["memory_fraction"], local_rank)
        return torch.device("cuda", local_rank)
    torch.set_num_threads(max(1, int(os.environ.get("FAULTLINE_THREADS_PER_RANK", "1"))))
    return torch.device("cpu")


def _scores(model, x, adj, ts: np.ndarray, window: int, batch: int, device, bf16: bool) -> torch.Tensor:
    model.eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(ts), batch):
            t = torch.as_tensor(ts[i : i + batch], device=device)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                out.append(torch.sigmoid(model(windows_at(x, t, window), adj).float()))
    model.train()
    return torch.cat(out) if out else torch.zeros((0, x.shape[1]))


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    cfg = spec["train"]
    comm = make_comm(spec["engine"])
    rank, size = comm.rank, comm.size
    device = _device(spec, comm.local_rank)
    torch.manual_seed(cfg["seed"])
    np.random.seed(cfg["seed"])
    data = np.load(spec["data"])
    # the whole training set goes to the device once; batches are gathered there (no per-step host copy)
    x = torch.from_numpy(data["X"]).to(device)
    y = torch.from_numpy(data["y"].astype(np.float32)).to(device)
    mask = torch.from_numpy(data["mask"].astype(np.float32)).to(device)
    adj = normalised_adjacency(data["indptr"], data["indices"], x.shape[1]).to(device)
    train_t, val_t = data["train_t"], data["val_t"]
    window, batch, bf16 = cfg["window"], cfg["batch_size"], bool(cfg["bf16"] and device.type == "cuda")
    pos = float((data["y"][train_t] * data["mask"][train_t]).sum())
    neg = float(data["mask"][train_t].sum()) - pos
    pos_weight = torch.tensor(min(50.0, neg / max(pos, 1.0)), device=device)

    model = FaultGNN(x.shape[2], cfg["hidden"], cfg["layers"]).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg["lr"] * size)  # [dist] LR scaled by world size
    net, optimizer = comm.wrap(model, optimizer)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=cfg["epochs"])
    ckpt_dir, out_dir = Path(spec["checkpoints"]), Path(spec["out"])
    history: list[dict] = []
    start_epoch = 0
    best: dict | None = None  # rank 0: the best-validating epoch so far (restored on resume)
    if rank == 0:  # [dist] only rank 0 reads checkpoints; the state reaches others by broadcast
        path = latest_checkpoint(ckpt_dir, spec["fingerprint"])
        if path is not None:
            state = load_checkpoint(path)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
            torch.set_rng_state(state["torch_rng"])
            np.random.set_state(state["numpy_rng"])
            history, start_epoch = state["history"], state["epoch"] + 1
            best = state.get("best")
    comm.sync(model, optimizer)  # [dist] rank 0's parameters and optimizer state on every rank
    start_epoch = comm.broadcast_object(start_epoch)  # [dist] every rank resumes at the same epoch
    history = comm.broadcast_object(history)
    # [dist] the LR schedule's position too, or ranks would step with different learning rates
    scheduler.load_state_dict(comm.broadcast_object(scheduler.state_dict()))

    per_rank = len(train_t) // size
    steps = max(1, math.ceil(per_rank / batch))
    beat = out_dir / "heartbeat.json"
    last_beat = 0.0
    stall_rank = int(os.environ.get("FAULTLINE_TEST_STALL_RANK", "-1"))
    timer = _StepTimer(device)
    profiler = _Profiler(device, out_dir, steps, int(spec.get("profile_steps", 5))) if rank == 0 else None
    for epoch in range(start_epoch, cfg["epochs"]):
        order = np.random.default_rng(cfg["seed"] * 1009 + epoch).permutation(train_t)
        # [dist] each rank trains on its own shard; the indices go to the device once per epoch
        shard = torch.as_tensor(order[rank * per_rank : (rank + 1) * per_rank], device=device)
        loss_sum = torch.zeros((), device=device)
        epoch_start = time.time()
        for step in range(steps):
            if rank == stall_rank and epoch == start_epoch and step == 1:
                time.sleep(10**6)  # test hook: a rank that never joins the next collective
            if profiler and epoch == start_epoch:
                profiler.at(step)
            timer.mark(0)
            tb = shard[step * batch : (step + 1) * batch]
            xb, yb, mb = windows_at(x, tb, window), y[tb], mask[tb]  # gathered on the device
            timer.mark(1)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                logits = net(xb, adj)
            per_element = F.binary_cross_entropy_with_logits(
                logits.float(), yb, pos_weight=pos_weight, reduction="none"
            )
            loss = (per_element * mb).sum() / mb.sum().clamp_min(1.0)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach()  # stays on the device: no sync per step
            timer.mark(2)
            if rank == 0 and (time.time() - last_beat > 1.0 or step == steps - 1):
                _write_json(
                    beat,
                    {"epoch": epoch, "step": step + 1, "steps": steps, "epochs": cfg["epochs"], "time": time.time()},
                )
                last_beat = time.time()
        if profiler and epoch == start_epoch:
            profiler.finish()
        wait_s, compute_s = timer.totals()  # synchronises: the epoch's steps are done on the device
        epoch_end = time.time()
        scheduler.step()
        row = {
            "epoch": epoch,
            "train_loss": comm.mean(float(loss_sum) / steps),  # [dist] averaged over ranks
            "lr": scheduler.get_last_lr()[0],
            "data_wait_s": comm.mean(wait_s),
            "compute_s": comm.mean(compute_s),
            "samples": per_rank * size,
            "t_start": epoch_start,  # wall clock of the epoch's training steps (for GPU utilization windows)
            "t_end": epoch_end,
        }
        if rank == 0:  # [dist] only rank 0 evaluates, logs and checkpoints
            s = _scores(model, x, adj, val_t, window, batch, device, bf16)
            vt = torch.as_tensor(val_t, device=device)
            m = mask[vt].bool()
            row["val_pr_auc"] = pr_auc(y[vt][m].cpu().numpy(), s[m].cpu().numpy())
            history.append(row)
            score = -1.0 if math.isnan(row["val_pr_auc"]) else row["val_pr_auc"]
            if best is None or score > best["score"]:  # keep the epoch that validates best
                best = {
                    "score": score,
                    "epoch": epoch,
                    "model": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
                }
            if (epoch + 1) % cfg["checkpoint_every"] == 0 or epoch == cfg["epochs"] - 1:
                save_checkpoint(
                    ckpt_dir,
                    epoch,
                    {
                        "model": model.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "scheduler": scheduler.state_dict(),
                        "torch_rng": torch.get_rng_state(),
                        "numpy_rng": np.random.get_state(),
                        "history": history,
                        "best": best,
                    },
                    spec["fingerprint"],
                )
            print(json.dumps({"progress": row}), flush=True)
    if rank == 0:
        state = best["model"] if best and best.get("model") else model.state_dict()
        torch.save(
            {"model": state, "config": model.config, "window": window, "best_epoch": best["epoch"] if best else None},
            out_dir / "model.pt",
        )
        _write_json(out_dir / "history.json", history)
    comm.shutdown()
    return 0


class _StepTimer:
    """Data-wait vs compute split per step; CUDA events on the GPU so timing adds no synchronisation."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.events: list[list] = []
        self.wait = self.compute = 0.0
        self._cur: list = []

    def mark(self, i: int) -> None:
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
        else:
            e = time.perf_counter()
        self._cur = [e] if i == 0 else [*self._cur, e]
        if i == 2:
            self.events.append(self._cur)

    def totals(self) -> tuple[float, float]:
        if self.cuda:
            torch.cuda.synchronize()
            wait = sum(a.elapsed_time(b) for a, b, _ in self.events) / 1000
            comp = sum(b.elapsed_time(c) for _, b, c in self.events) / 1000
        else:
            wait = sum(b - a for a, b, _ in self.events)
            comp = sum(c - b for _, b, c in self.events)
        self.events = []
        return wait, comp


class _Profiler:
    """A PyTorch profiler trace of a few training steps on rank 0 (CUDA kernels on the GPU)."""

    def __init__(self, device: torch.device, out_dir: Path, steps: int, n: int) -> None:
        self.first = 3 if steps > 3 + n else 0
        self.last = min(steps, self.first + n)
        self.out_dir, self.prof, self.device = out_dir, None, device

    def at(self, step: int) -> None:
        from torch.profiler import ProfilerActivity, profile

        if step == self.first and self.prof is None and self.last > self.first:
            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
            self.prof = profile(activities=acts, record_shapes=False)
            self.prof.start()
        elif step == self.last and self.prof is not None:
            self.finish()

    def finish(self) -> None:
        if self.prof is None:
            return
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        self.prof.stop()
        self.prof.export_chrome_trace(str(self.out_dir / "trace.json"))
        self.prof = None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
