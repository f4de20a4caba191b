"""Launching the training ranks (Horovod or DDP) from the stage, watching them, and what their history says."""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tasks.core.config import TrainConfig
from tasks.core.ports import free_port
from tasks.core.training.prewarm import PROJECT, rank_env, take
from tasks.core.training.procs import kill_tree, pdeathsig
from tasks.core.training.spec import NodeMetrics, TrainingSpec
from tasks.core.training.timeline import rank_timeline


class TrainingStalled(RuntimeError):
    """No rank made progress for ``train.stall_timeout_s``: a rank stuck in a collective or lost. A retry
    resumes from the last epoch checkpoint, so it may succeed."""

    transient = True


class TrainingFailed(RuntimeError):
    pass


def training_spec(
    engine: str,
    device: str,
    cfg: TrainConfig,
    data: Path,
    checkpoints: Path,
    out: Path,
    fingerprint: str,
    threads_per_rank: int = 1,
    profile_steps: int = 5,
    node_metrics: dict[str, Any] | None = None,
) -> TrainingSpec:
    """What every rank reads from ``spec.json`` (:class:`TrainingSpec`); ``node_metrics`` (``run_id``,
    ``interval_s``, ``flow_host``): each other host's local rank 0 runs MLflow's SystemMetricsMonitor on that
    run under its host name."""
    return TrainingSpec(
        engine=engine,
        device=device,
        train=cfg.model_copy(update={"engine": engine}),
        data=Path(data),
        checkpoints=Path(checkpoints),
        out=Path(out),
        fingerprint=fingerprint,
        threads_per_rank=threads_per_rank,
        profile_steps=profile_steps,
        owner_pid=os.getpid(),  # the ranks end themselves when this process is gone (no orphans)
        node_metrics=NodeMetrics(**node_metrics) if node_metrics else None,
    )


def unlaunched(cfg: TrainConfig) -> bool:
    """One Horovod rank on this host: started without a launcher (and so it may be started ahead, ``prewarm``)."""
    return cfg.engine == "horovod" and cfg.num_proc == 1 and not cfg.hosts


def launch_command(cfg: TrainConfig, spec_path: Path, network_interface: str = "lo") -> list[str]:
    bin_dir = Path(sys.executable).parent
    worker = [sys.executable, "-m", "tasks.core.training.worker", str(spec_path)]
    if unlaunched(cfg):
        # one rank on this host: started directly, Horovod then runs as a world of one (hvd.init() with no launcher
        # environment); horovodrun's launch and rendezvous cost 2.4 s of a 37.6 s training stage on an H100 host
        return worker
    if cfg.engine == "horovod":
        horovodrun = shutil.which("horovodrun", path=str(bin_dir)) or "horovodrun"
        # --network-interface lo: the rendezvous and Gloo stay on loopback unless a multi-host run names one
        hosts = ",".join(cfg.hosts) if cfg.hosts else f"localhost:{cfg.num_proc}"
        return [
            horovodrun,
            "-np",
            str(cfg.num_proc),
            "-H",
            hosts,
            "--gloo",
            "--network-interface",
            network_interface,
        ] + worker
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        str(cfg.num_proc),
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        *worker[1:],
    ]


def launch_training(
    spec: TrainingSpec,
    cfg: TrainConfig,
    work: Path,
    env: dict[str, str],
    progress: Callable[[dict], None] | None = None,
) -> dict[str, Any]:
    """Run the ranks; kill them all and raise if the heartbeat stops for ``stall_timeout_s``."""
    spec_path = work / "spec.json"
    spec.write(spec_path)
    cmd = launch_command(cfg, spec_path, cfg.network_interface)
    log_path = work / "train.log"
    full_env = rank_env(spec.threads_per_rank, env)
    beat = work / "heartbeat.json"
    beat.unlink(missing_ok=True)
    (Path(spec.out) / "timeline.json").unlink(missing_ok=True)  # a failed launch's before it: not this one's
    started = time.time()
    rows: queue.Queue = queue.Queue()
    proc = None
    if unlaunched(cfg):  # one rank, no launcher: one may wait, started ahead with its imports done
        proc = take(spec.threads_per_rank, spec_path, full_env)
        cmd = proc.args if proc is not None else cmd
    with open(log_path, "w") as log:
        proc = proc or subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=full_env,
            text=True,
            preexec_fn=pdeathsig(),
            cwd=PROJECT,
        )
        (work / "launcher.pid").write_text(str(proc.pid))
        reader = threading.Thread(target=_pump, args=(proc.stdout, log, rows), daemon=True)
        reader.start()
        try:
            _watch(proc, beat, cfg.stall_timeout_s, started, log_path, rows, progress)
        except BaseException:
            kill_tree(proc)
            raise
        reader.join(timeout=10)
        _drain(rows, progress)
    if proc.returncode != 0:
        tail = log_path.read_text()[-3000:]
        raise TrainingFailed(f"training exited with code {proc.returncode}; log {log_path}:\n{tail}")
    ended = time.time()
    timeline = rank_timeline(Path(spec.out) / "timeline.json", started, ended)
    return {"wall_s": ended - started, "command": list(cmd), "log": str(log_path), "rank_timeline": timeline}


def _watch(proc, beat: Path, stall_s: float, started: float, log_path: Path, rows, progress) -> None:
    """Wait for the launcher; hand each epoch row to ``progress`` in this (the stage's) thread."""
    last = started
    while proc.poll() is None:
        time.sleep(0.2)
        _drain(rows, progress)
        if beat.is_file():
            last = max(last, beat.stat().st_mtime)
        if time.time() - last > stall_s:
            raise TrainingStalled(
                f"training made no progress for {stall_s:.0f} s (a rank is stuck in a collective "
                f"or lost); all ranks were killed. Log: {log_path}. Over InfiniBand with MPI, the guide's fix "
                'is HOROVOD_MPI_ARGS="-mca btl ^openib".'
            )


def _drain(rows: queue.Queue, progress) -> None:
    while True:
        try:
            row = rows.get_nowait()
        except queue.Empty:
            return
        if progress is not None:
            progress(row)


def _pump(stream, log, rows: queue.Queue) -> None:
    """The ranks' output into ``train.log``; epoch rows (``{"progress": ...}`` lines) into ``rows``."""
    for line in stream:
        log.write(line)
        log.flush()
        i = line.find('{"progress"')
        if i >= 0:
            try:
                rows.put(json.loads(line[i:])["progress"])
            except (json.JSONDecodeError, KeyError):
                pass


def steady_throughput(history: list[dict[str, Any]]) -> dict[str, float]:
    """Samples/s and the data-wait share over every epoch after the first (the first is warm-up)."""
    steady = history[1:] or history
    wait = sum(h["data_wait_s"] for h in steady)
    compute = sum(h["compute_s"] for h in steady)
    return {
        "samples_per_s": sum(h["samples"] for h in steady) / max(1e-9, wait + compute),
        "data_wait_fraction": wait / max(1e-9, wait + compute),
        "step_wait_s": wait,
        "step_compute_s": compute,
    }
