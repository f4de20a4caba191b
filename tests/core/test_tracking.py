"""The model registry the MLflow way: one version per distinct weights, and the ``champion``
alias moved only by a better held-out PR-AUC. The served model is a ``pyfunc`` over a directory."""

from __future__ import annotations

import mlflow.pyfunc
import numpy as np

from tasks.core.tracking import Tracker


class Constant(mlflow.pyfunc.PythonModel):
    """A stand-in served model: P = the number in the artifact's file ``k``, for every element."""

    def load_context(self, context) -> None:
        with open(f"{context.artifacts['served']}/k") as f:
            self.k = float(f.read())

    def predict(self, context, model_input, params=None):
        return np.full(np.asarray(model_input).shape[:2], self.k)


def test_one_version_per_weights_and_the_champion_moves_only_when_beaten(tmp_path):
    tr = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "registry-test", tmp_path / "art")
    example = np.zeros((1, 3), np.float32)

    def log(weights: str, pr_auc: float) -> str:
        served = tmp_path / weights
        served.mkdir(exist_ok=True)
        (served / "k").write_text(str(pr_auc))
        run = tr.start_run(weights, {})
        metrics = {"pr_auc": pr_auc, "baseline_pr_auc": 0.5}
        return tr.log_served_model(run, served, Constant(), example, "m", weights, metrics, "stack, tree weight 0.5")

    assert log("w1", 0.60) == "1"
    assert log("w1", 0.60) == "1"  # a rerun over the same trained weights registers nothing new
    assert log("w2", 0.55) == "2"
    assert str(tr.client.get_model_version_by_alias("m", "champion").version) == "1"  # 0.55 does not beat 0.60
    assert log("w3", 0.70) == "3"
    assert str(tr.client.get_model_version_by_alias("m", "champion").version) == "3"
    versions = tr.client.search_model_versions("name = 'm'")
    assert sorted(str(v.version) for v in versions) == ["1", "2", "3"]
    v3 = tr.client.get_model_version("m", "3")
    assert "(stack, tree weight 0.5)" in v3.description and "PR-AUC 0.7000 (tree baseline 0.5000)" in v3.description
    assert v3.tags["serves"] == "stack, tree weight 0.5"
    logged = [{m.key: m.value for m in lm.metrics} for lm in tr.client.search_logged_models([tr.experiment_id])]
    assert sorted(m["pr_auc"] for m in logged) == [0.55, 0.6, 0.6, 0.7]  # evaluation on each logged model
    mlflow.set_tracking_uri(tr.uri)
    champion = mlflow.pyfunc.load_model("models:/m@champion")  # what a NOC loads: the artifact travels with it
    assert champion.predict(np.zeros((2, 3), np.float32)).tolist() == [[0.7, 0.7, 0.7], [0.7, 0.7, 0.7]]


def test_a_served_model_logged_during_an_outage_is_journaled_and_registered_on_replay(tmp_path):
    from tasks.core.ports import free_port
    from tasks.core.spool import ResilientTracker, pending, replay

    down = f"http://127.0.0.1:{free_port()}"  # nothing listens: the run's tracking is journaled
    tr = ResilientTracker(lambda: Tracker(down, "outage", None), down, "outage", tmp_path / "spool")
    served = tmp_path / "served"
    served.mkdir()
    (served / "k").write_text("0.25")
    run = tr.start_run("offline", {})
    assert tr.offline and run.startswith("spooled-")
    tr.log_served_model(run, served, Constant(), np.zeros((1, 3), np.float32), "m", "w", {"pr_auc": 0.25}, "stack")
    (served / "k").write_text("0.99")  # the run rewrites its file: the journal kept the logged copy
    (journal,) = pending(tmp_path / "spool")
    store = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "outage", tmp_path / "art")
    real = replay(journal, lambda _: store)["runs"][run]
    (version,) = store.client.search_model_versions("name = 'm'")
    assert version.run_id == real and version.tags["serves"] == "stack"
    assert store.client.get_run(real).data.tags["registered_model"] == "m/1"  # as the live run would be tagged
    mlflow.set_tracking_uri(store.uri)
    loaded = mlflow.pyfunc.load_model("models:/m/1")
    assert loaded.predict(np.zeros((1, 3), np.float32)).tolist() == [[0.25, 0.25, 0.25]]


def test_the_scheduled_replay_with_nothing_waiting_loads_neither_mlflow_nor_torch(tmp_path):
    """The ``tracking-replay`` deployment runs every 10 minutes on the stack's worker, one process per run: with no
    journal waiting it answers without importing MLflow or the pipeline's stages (about 2 s, not 6 s and 1 GB)."""
    import json
    import subprocess
    import sys

    script = (
        "import json, sys\n"
        "import flows.tracking\n"
        "from tasks.core.config import load_config\n"
        "from tasks.core.trackers import replay_journals\n"
        f"out = replay_journals(load_config('local', ['paths.root={tmp_path}']))\n"
        "print(json.dumps({**out, 'loaded': sorted(m for m in ('mlflow', 'torch', 'pyspark') if m in sys.modules)}))\n"
    )
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["replayed"] == [] and got["left"] == [] and got["unreachable"] is None
    assert got["loaded"] == [], got["loaded"]
