"""Horovod and DDP on 2 CPU processes: same results, resume after SIGKILL, a stalled rank times out."""

import json
import os
import signal
import subprocess
import time

import numpy as np
import pytest

from tasks.core.config import load_config
from tasks.core.features import feature_names
from tasks.core.topology import Topology
from tasks.core.train import TrainingStalled, launch_command, launch_training, prepare_tensors

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
    return {
        "engine": engine,
        "device": "cpu",
        "train": cfg.train.model_dump(mode="json"),
        "data": str(data),
        "checkpoints": str(work / "ckpt"),
        "out": str(work),
        "fingerprint": "test-fp",
    }


def _train(data, work, engine="horovod", extra=()):
    work.mkdir(parents=True, exist_ok=True)
    cfg = load_config("local", [*SETTINGS, f"train.engine={engine}", *extra])
    launch_training(_spec(cfg, data, work, engine), cfg.train, work, {})
    return json.loads((work / "history.json").read_text())


def test_horovod_and_ddp_agree(data, tmp_path):
    hvd = _train(data, tmp_path / "hvd", "horovod")
    ddp = _train(data, tmp_path / "ddp", "ddp")
    assert [h["epoch"] for h in hvd] == [0, 1, 2, 3]
    np.testing.assert_allclose([h["train_loss"] for h in hvd], [h["train_loss"] for h in ddp], rtol=1e-6)
    np.testing.assert_allclose([h["val_pr_auc"] for h in hvd], [h["val_pr_auc"] for h in ddp], rtol=1e-6)
    assert hvd[-1]["train_loss"] < hvd[0]["train_loss"]  # it learns


def test_resume_after_sigkill_matches_uninterrupted(data, tmp_path):
    reference = _train(data, tmp_path / "ref")
    work = tmp_path / "killed"
    work.mkdir()
    cfg = load_config("local", SETTINGS)
    spec = _spec(cfg, data, work, "horovod")
    (work / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, "FAULTLINE_DEVICE": "cpu", "OMP_NUM_THREADS": "1"}
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


def test_stalled_rank_ends_with_clear_error(data, tmp_path, monkeypatch):
    monkeypatch.setenv("FAULTLINE_TEST_STALL_RANK", "1")
    started = time.time()
    with pytest.raises(TrainingStalled, match="no progress for 12 s"):
        _train(data, tmp_path / "stall", extra=["train.stall_timeout_s=12"])
    assert time.time() - started < 60
