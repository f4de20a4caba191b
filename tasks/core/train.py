"""Training stage logic: dense snapshot tensors from the features, then a Horovod or DDP launch."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .config import TrainConfig
from .topology import Topology


class TrainingStalled(RuntimeError):
    pass


class TrainingFailed(RuntimeError):
    pass


def split_times(n_times: int, test_fraction: float) -> tuple[int, int]:
    """(val_start, test_start): train | validation (last 15 % of train) | held-out test window."""
    test_start = n_times - max(1, int(round(n_times * test_fraction)))
    return int(test_start * 0.85), test_start


def prepare_tensors(
    features_dir: Path, topo: Topology, names: list[str], window: int, test_fraction: float, out: Path
) -> dict[str, Any]:
    """features Parquet -> X [T, E, F] (standardised on the train window), y and mask [T, E]."""
    df = pd.read_parquet(features_dir, columns=["element_id", "timestamp", *names, "label", "in_fault"])
    times = np.sort(df["timestamp"].unique())
    t_idx = np.searchsorted(times, df["timestamp"].to_numpy())
    index = {e: i for i, e in enumerate(topo.element_ids)}
    e_idx = df["element_id"].map(index).to_numpy()
    n_t, n_e = len(times), topo.n
    val_start, test_start = split_times(n_t, test_fraction)
    values = df[names].to_numpy(np.float64)
    train_rows = t_idx < val_start
    mu = np.nanmean(values[train_rows], axis=0)
    sd = np.nanstd(values[train_rows], axis=0)
    sd[~np.isfinite(sd) | (sd < 1e-9)] = 1.0
    values = np.nan_to_num((values - mu) / sd, nan=0.0, posinf=0.0, neginf=0.0)
    x = np.zeros((n_t, n_e, len(names)), dtype=np.float32)
    x[t_idx, e_idx] = values.astype(np.float32)
    y = np.zeros((n_t, n_e), dtype=np.int8)
    mask = np.zeros((n_t, n_e), dtype=np.int8)
    y[t_idx, e_idx] = df["label"].to_numpy()
    mask[t_idx, e_idx] = 1 - df["in_fault"].to_numpy()
    indptr, indices = topo.csr()
    first = window - 1
    np.savez(
        out,
        X=x,
        y=y,
        mask=mask,
        indptr=indptr,
        indices=indices,
        train_t=np.arange(first, val_start),
        val_t=np.arange(max(first, val_start), test_start),
        test_t=np.arange(max(first, test_start), n_t),
        mean=mu,
        std=sd,
        times=pd.DatetimeIndex(times).as_unit("us").asi8,
    )
    return {
        "times": n_t,
        "elements": n_e,
        "features": len(names),
        "val_start": val_start,
        "test_start": test_start,
        "feature_names": names,
        "train_positive_rate": float(y[:val_start][mask[:val_start] > 0].mean()),
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_command(cfg: TrainConfig, spec_path: Path) -> list[str]:
    bin_dir = Path(sys.executable).parent
    if cfg.engine == "horovod":
        horovodrun = shutil.which("horovodrun", path=str(bin_dir)) or "horovodrun"
        return [
            horovodrun,
            "-np",
            str(cfg.num_proc),
            "-H",
            f"localhost:{cfg.num_proc}",
            "--gloo",
            "--network-interface",
            "lo",
            sys.executable,
            "-m",
            "tasks.core.train_worker",
            str(spec_path),
        ]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        str(cfg.num_proc),
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(_free_port()),
        "-m",
        "tasks.core.train_worker",
        str(spec_path),
    ]


def launch_training(
    spec: dict[str, Any],
    cfg: TrainConfig,
    work: Path,
    env: dict[str, str],
    progress: Callable[[dict], None] | None = None,
) -> dict[str, Any]:
    """Run the ranks; kill them all and raise if the heartbeat stops for ``stall_timeout_s``."""
    spec_path = work / "spec.json"
    spec_path.write_text(json.dumps(spec))
    cmd = launch_command(cfg, spec_path)
    log_path = work / "train.log"
    project = str(Path(__file__).resolve().parents[2])
    full_env = {
        **os.environ,
        **env,
        "PYTHONPATH": project + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "FAULTLINE_DEVICE": spec["device"],
        "OMP_NUM_THREADS": "1",
    }
    beat = work / "heartbeat.json"
    beat.unlink(missing_ok=True)
    started = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=full_env,
            text=True,
            start_new_session=True,
            cwd=project,
        )
        (work / "launcher.pid").write_text(str(proc.pid))
        reader = threading.Thread(target=_pump, args=(proc.stdout, log, progress), daemon=True)
        reader.start()
        last = started
        while proc.poll() is None:
            time.sleep(0.2)
            if beat.is_file():
                last = max(last, beat.stat().st_mtime)
            if time.time() - last > cfg.stall_timeout_s:
                _kill_group(proc)
                raise TrainingStalled(
                    f"training made no progress for {cfg.stall_timeout_s:.0f} s (a rank is stuck in a collective "
                    f"or lost); all ranks were killed. Log: {log_path}. Over InfiniBand with MPI, the guide's fix "
                    'is HOROVOD_MPI_ARGS="-mca btl ^openib".'
                )
        reader.join(timeout=10)
    if proc.returncode != 0:
        tail = log_path.read_text()[-3000:]
        raise TrainingFailed(f"training exited with code {proc.returncode}; log {log_path}:\n{tail}")
    return {"wall_s": time.time() - started, "command": cmd, "log": str(log_path)}


def _pump(stream, log, progress) -> None:
    for line in stream:
        log.write(line)
        log.flush()
        _maybe_progress(line, progress)


def _maybe_progress(line: str, progress) -> None:
    i = line.find('{"progress"')
    if progress and i >= 0:
        try:
            progress(json.loads(line[i:])["progress"])
        except (json.JSONDecodeError, KeyError):
            pass


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the launcher, its process group and every descendant (ranks may start their own groups)."""
    import psutil

    try:
        kids = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        kids = []
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for k in kids:
        try:
            k.kill()
        except psutil.NoSuchProcess:
            pass
    proc.wait(timeout=30)
