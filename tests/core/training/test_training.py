"""Horovod and DDP on 2 CPU processes: same results, resume after SIGKILL, a stalled rank times out, no orphans."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from tasks.core.config import load_config
from tasks.core.stages.features import feature_names
from tasks.core.topology import Topology
from tasks.core.training import prewarm
from tasks.core.training.frame_tensors import write_recipe
from tasks.core.training.launch import TrainingStalled, launch_command, launch_training, training_spec
from tasks.core.training.prewarm import prewarmed
from tasks.core.training.tensors import prepare_tensors
from tests.helpers import REPO

pytestmark = [pytest.mark.horovod, pytest.mark.spark]
SETTINGS = ["train.epochs=4", "train.batch_size=8", "train.hidden=8", "train.window=4", "train.num_proc=2"]


@pytest.fixture(scope="module")
def data(tiny_features, tmp_path_factory):
    cfg = load_config("local", SETTINGS)
    out = tmp_path_factory.mktemp("tensors") / "data.npz"
    topo = Topology.read(tiny_features / "topology.json")
    prepare_tensors(tiny_features / "features", topo, feature_names(cfg.features), cfg.train.window, 0.25, out)
    return out


def _spec(cfg, data, work, engine):
    return training_spec(engine, "cpu", cfg.train, data, work / "ckpt", work, "test-fp")


def _train(data, work, engine="horovod", extra=()):
    work.mkdir(parents=True, exist_ok=True)
    cfg = load_config("local", [*SETTINGS, f"train.engine={engine}", *extra])
    launch_training(_spec(cfg, data, work, engine), cfg.train, work, {})
    return json.loads((work / "history.json").read_text())


def test_horovod_and_ddp_agree(data, tiny_features, tmp_path):
    """Horovod on the stage's data.npz; DDP on ranks that build their own tensors from the Parquet (the GPU path's
    way, here on the CPU): the same losses and scores, and rank 0 leaves the small arrays for evaluation."""
    hvd = _train(data, tmp_path / "hvd", "horovod")
    (tmp_path / "ddp").mkdir()
    cfg = load_config("local", SETTINGS)
    names = feature_names(cfg.features)
    recipe = write_recipe(tmp_path / "ddp", tiny_features / "features", names, cfg.train.window, 0.25, "real", 0, 60)
    ddp = _train(recipe, tmp_path / "ddp", "ddp")
    meta, host = np.load(tmp_path / "ddp" / "data.npz"), np.load(data)
    assert "X" not in meta.files and {"mean", "std", "times", "test_t", "indptr"} <= set(meta.files)
    np.testing.assert_array_equal(meta["mean"], host["mean"])
    info = json.loads((tmp_path / "ddp" / "data_info.json").read_text())
    assert info["rows"] > 0 and info["tensor_device"] == "cpu" and info["tensor_build_s"] >= 0
    parts = ["step_index", "fill_cells", "train_stats", "standardise", "the_rest"]  # where the build's time goes
    assert (
        list(info["tensor_parts_s"]) == parts and sum(info["tensor_parts_s"].values()) <= info["tensor_build_s"] + 0.01
    )
    assert [h["epoch"] for h in hvd] == [0, 1, 2, 3]
    np.testing.assert_allclose([h["train_loss"] for h in hvd], [h["train_loss"] for h in ddp], rtol=1e-6)
    np.testing.assert_allclose([h["val_pr_auc"] for h in hvd], [h["val_pr_auc"] for h in ddp], rtol=1e-6)
    assert hvd[-1]["train_loss"] < hvd[0]["train_loss"]  # it learns
    for work in (tmp_path / "hvd", tmp_path / "ddp"):  # rank 0's timeline: every part, none negative
        t = json.loads((work / "timeline.json").read_text())
        assert set(t["parts_s"]) == set(TIMELINE_PARTS) and min(t["parts_s"].values()) >= 0, t
        assert set(t["loop_s"]) == {"epochs", "validate", "checkpoint"} and t["loop_s"]["epochs"] > 0
        assert t["loop_s"]["epochs"] + t["loop_s"]["validate"] <= t["parts_s"]["loop"] + 0.01
        assert t["notes"]["recurrent"] == {"requested": "auto", "timed_s": {}}  # nothing timed off a GPU


def test_one_rank_trains_with_horovod_started_directly(data, tmp_path):
    """One rank on this host starts without horovodrun: Horovod is a world of one, and the rank trains, checkpoints
    and leaves its timeline as under the launcher."""
    work = tmp_path / "one"
    work.mkdir()
    cfg = load_config("local", [*SETTINGS, "train.num_proc=1"])
    launched = launch_training(_spec(cfg, data, work, "horovod"), cfg.train, work, {})
    assert launched["command"][1:3] == ["-m", "tasks.core.training.worker"]  # no launcher in front
    one = json.loads((work / "history.json").read_text())
    assert [h["epoch"] for h in one] == [0, 1, 2, 3] and one[-1]["train_loss"] < one[0]["train_loss"]
    assert set(launched["rank_timeline"]["parts_s"]) == {"launcher", *TIMELINE_PARTS, "shutdown"}
    assert launched["rank_timeline"]["notes"]["recurrent"]["requested"] == "auto"  # the GRU's kernel, as chosen
    assert (work / "ckpt" / "epoch_0003.done").exists()

    # the same rank started ahead (while the features would be computed): it trains the same, its imports done
    ahead = tmp_path / "ahead"
    ahead.mkdir()
    with prewarmed(1, True):
        started = prewarm._WAITING[1]
        _until_idle(started.pid)  # its imports done before the launch: it waits on its stdin, using no CPU
        got = launch_training(_spec(cfg, data, ahead, "horovod"), cfg.train, ahead, {})
    assert got["command"][1:] == ["-m", "tasks.core.training.prewarm"] and started.poll() == 0
    again = json.loads((ahead / "history.json").read_text())
    np.testing.assert_allclose([h["train_loss"] for h in again], [h["train_loss"] for h in one], rtol=1e-6)
    timeline = got["rank_timeline"]
    assert timeline["prewarm"]["imports_s"] > 0 and timeline["prewarm"]["waited_s"] >= 0
    # nothing left to import at the launch: it reached the rank sooner than a fresh process got through its imports
    # (a comparison, not a clock limit: a host busy with other tests slows both)
    cold = launched["rank_timeline"]["parts_s"]
    assert timeline["parts_s"]["imports"] == 0
    assert 0 <= timeline["parts_s"]["launcher"] < cold["launcher"] + cold["imports"]


def test_a_rank_started_ahead_and_not_taken_is_ended():
    with prewarmed(1, True):
        waiting = prewarm._WAITING[1]
        assert waiting.poll() is None
    assert waiting.poll() is not None and not prewarm._WAITING
    with prewarmed(1, False):
        assert not prewarm._WAITING


def _until_idle(pid: int, timeout_s: float = 120.0) -> None:
    """Until the process has used no CPU for a second (blocked, here on its stdin), or ``timeout_s``. A fixed sleep
    was too short on a host busy with other tests: the imports were still under way at the launch."""
    proc, end = psutil.Process(pid), time.monotonic() + timeout_s
    last = sum(proc.cpu_times()[:2])
    while time.monotonic() < end:
        time.sleep(1.0)
        now = sum(proc.cpu_times()[:2])
        if now == last:
            return
        last = now


TIMELINE_PARTS = ("imports", "comm_init", "device_context", "tensors", "model", "optimizer",
                  "resume_and_first_collective", "loop", "save")  # fmt: skip


def test_resume_after_sigkill_matches_uninterrupted(data, tmp_path):
    reference = _train(data, tmp_path / "ref")
    work = tmp_path / "killed"
    work.mkdir()
    cfg = load_config("local", SETTINGS)
    _spec(cfg, data, work, "horovod").write(work / "spec.json")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        launch_command(cfg.train, work / "spec.json"),
        start_new_session=True,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    while not (work / "ckpt" / "epoch_0000.done").exists():
        assert time.time() < deadline and proc.poll() is None, "training never reached its first checkpoint"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # mid-epoch 1: every rank and the launcher die at once
    proc.wait()
    assert not (work / "history.json").exists()
    resumed = _train(data, work)
    assert resumed[0]["epoch"] == 0 and len(resumed) == 4
    np.testing.assert_allclose([h["train_loss"] for h in resumed], [h["train_loss"] for h in reference], rtol=1e-6)
    np.testing.assert_allclose(resumed[-1]["val_pr_auc"], reference[-1]["val_pr_auc"], rtol=1e-6)


def _procs(work, ranks_only: bool = False) -> list[psutil.Process]:
    """Every live process whose command line names this training's spec (ranks, shells, launcher)."""
    spec = str(work / "spec.json")
    out = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            line = " ".join(p.info["cmdline"] or [])
            if spec in line and p.info["status"] != psutil.STATUS_ZOMBIE:
                if not ranks_only or p.info["cmdline"][1:3] == ["-m", "tasks.core.training.worker"]:
                    out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return out


def _ranks(work) -> list[psutil.Process]:
    return _procs(work, ranks_only=True)


def test_stalled_rank_ends_with_clear_error(data, tmp_path):
    """A rank that stops (SIGSTOP: a hung NIC, a swapped-out process) blocks the collective; the stage notices
    the silent heartbeat, kills every rank and says so."""
    import threading

    work = tmp_path / "stall"

    def stop_rank_1() -> None:
        deadline = time.time() + 120
        while time.time() < deadline:
            for p in _ranks(work):
                if p.environ().get("HOROVOD_RANK") == "1" and (work / "heartbeat.json").exists():
                    p.send_signal(signal.SIGSTOP)
                    return
            time.sleep(0.1)

    threading.Thread(target=stop_rank_1, daemon=True).start()
    started = time.time()
    with pytest.raises(TrainingStalled, match="no progress for 12 s"):
        _train(data, work, extra=["train.stall_timeout_s=12", "train.epochs=200"])
    assert time.time() - started < 90
    time.sleep(1)
    assert _procs(work) == [], "a stalled run left processes behind"


def test_a_killed_driver_leaves_no_rank_behind(data, tmp_path):
    """SIGKILL of the process that launched training (not its group): the launcher and every rank die too. And
    while it runs, horovodrun's rendezvous and the ranks listen on loopback only."""
    work = tmp_path / "orphans"
    work.mkdir()
    driver = textwrap.dedent(
        f"""
        from pathlib import Path
        from tasks.core.config import load_config
        from tasks.core.training.launch import launch_training, training_spec
        cfg = load_config("local", {[*SETTINGS, "train.epochs=200"]!r})
        work = Path({str(work)!r})
        spec = training_spec("horovod", "cpu", cfg.train, Path({str(data)!r}), work / "ckpt", work, "orphan-fp")
        launch_training(spec, cfg.train, work, {{}})
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", driver], cwd=REPO, stdout=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (work / "ckpt" / "epoch_0000.done").exists():
        assert time.time() < deadline and proc.poll() is None, "training never reached its first checkpoint"
        time.sleep(0.05)
    assert len(_ranks(work)) == 2
    launcher = psutil.Process(int((work / "launcher.pid").read_text()))
    listening = [
        c.laddr
        for p in [launcher, *launcher.children(recursive=True)]
        for c in p.net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    ]
    assert listening and all(a.ip in ("127.0.0.1", "::1") for a in listening), listening
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 5
    while _procs(work) and time.time() < deadline:
        time.sleep(0.1)
    assert _procs(work) == [], f"orphans left: {[(p.pid, p.cmdline()[:4]) for p in _procs(work)]}"


def test_one_horovod_rank_on_this_host_starts_without_the_launcher():
    one = launch_command(load_config("local", ["train.num_proc=1"]).train, REPO / "spec.json")
    assert one[1:] == ["-m", "tasks.core.training.worker", str(REPO / "spec.json")]
    two = launch_command(load_config("local", ["train.num_proc=2"]).train, REPO / "spec.json")
    assert Path(two[0]).name == "horovodrun" and two[two.index("-np") + 1] == "2"
    there = launch_command(load_config("local", ["train.num_proc=1", "train.hosts=[dgx-01:1]"]).train, REPO / "s")
    assert Path(there[0]).name == "horovodrun"  # another host: the launcher reaches it


def test_multi_host_launch_names_every_host():
    cfg = load_config("local", ["train.num_proc=16", "train.hosts=[dgx-01:8, dgx-02:8]", "train.network_interface=ib0"])
    cmd = launch_command(cfg.train, REPO / "spec.json", cfg.train.network_interface)
    assert cmd[cmd.index("-np") + 1] == "16" and cmd[cmd.index("-H") + 1] == "dgx-01:8,dgx-02:8"
    assert cmd[cmd.index("--network-interface") + 1] == "ib0"


@pytest.mark.parametrize("other_host", [True, False])
def test_each_other_hosts_rank_0_logs_its_system_metrics_under_its_node_id(data, tmp_path, other_host):
    """Two Horovod ranks on CPU stand in for a host other than the flow's (``flow_host`` names another machine):
    local rank 0 runs MLflow's SystemMetricsMonitor into the pipeline's run under ``system/<host>/``; on the
    flow's own host nothing is added (the flow's monitor covers it)."""
    import socket

    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    run_id = client.create_run(client.create_experiment("nodes")).info.run_id
    host = socket.gethostname()
    cfg = load_config("local", [*SETTINGS, "train.epochs=6"])
    work = tmp_path / "work"
    work.mkdir()
    nodes = {"run_id": run_id, "interval_s": 0.5, "flow_host": "the-flow-host" if other_host else host}
    spec = training_spec("horovod", "cpu", cfg.train, data, work / "ckpt", work, "test-fp", node_metrics=nodes)
    launch_training(spec, cfg.train, work, {"MLFLOW_TRACKING_URI": uri})
    assert "tracking" not in json.dumps(spec.as_json()) and uri not in (work / "spec.json").read_text()  # env only
    keys = set(client.get_run(run_id).data.metrics)
    node_keys = {k for k in keys if k.startswith(f"system/{host}/")}
    if other_host:
        assert f"system/{host}/cpu_utilization_percentage" in node_keys, keys
        assert f"system/{host}/system_memory_usage_megabytes" in node_keys
        assert not any(k.count("/") > 2 for k in keys)  # one node id, not one per rank
    else:
        assert not node_keys


def test_the_hazard_head_trains_on_two_ranks_and_scores_the_label(data, tmp_path):
    import torch

    from tasks.core.training.model import load_model, normalised_adjacency, score_snapshots

    hist = _train(data, tmp_path / "hazard", extra=["train.hazard_steps=24"])
    assert hist[-1]["train_loss"] < hist[0]["train_loss"]  # the survival loss falls
    model, ck = load_model(tmp_path / "hazard" / "model.pt")
    assert (model.hazard_steps, model.label_steps) == (24, 12)
    d = np.load(data)
    adj = normalised_adjacency(d["indptr"], d["indices"], d["X"].shape[1])
    p = score_snapshots(model, torch.from_numpy(d["X"]), adj, d["test_t"], ck["window"]).numpy()
    assert np.isfinite(p).all() and ((p > 0) & (p < 1)).all()  # the label's P, from the hazard's first hour
    y, m = d["y"][d["test_t"]], d["mask"][d["test_t"]] > 0
    assert p[m & (y == 1)].mean() > p[m & (y == 0)].mean()  # it ranks the faults ahead
