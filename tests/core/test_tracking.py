"""The model registry the MLflow way (issue 16 item 5): one version per distinct weights, and the ``champion``
alias moved only by a better held-out PR-AUC."""

from __future__ import annotations

import torch

from tasks.core.tracking import Tracker


def test_one_version_per_weights_and_the_champion_moves_only_when_beaten(tmp_path):
    tr = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "registry-test", tmp_path / "art")
    model, example = torch.nn.Linear(3, 1), torch.zeros(2, 3)

    def log(weights: str, pr_auc: float) -> str:
        run = tr.start_run(weights, {})
        return tr.log_torch_model(run, model, example, "m", weights, {"pr_auc": pr_auc, "baseline_pr_auc": 0.5})

    assert log("w1", 0.60) == "1"
    assert log("w1", 0.60) == "1"  # a rerun over the same trained weights registers nothing new
    assert log("w2", 0.55) == "2"
    assert str(tr.client.get_model_version_by_alias("m", "champion").version) == "1"  # 0.55 does not beat 0.60
    assert log("w3", 0.70) == "3"
    assert str(tr.client.get_model_version_by_alias("m", "champion").version) == "3"
    versions = tr.client.search_model_versions("name = 'm'")
    assert sorted(str(v.version) for v in versions) == ["1", "2", "3"]
    v3 = tr.client.get_model_version("m", "3")
    assert "PR-AUC 0.7000 (tree baseline 0.5000)" in v3.description
    logged = [{m.key: m.value for m in lm.metrics} for lm in tr.client.search_logged_models([tr.experiment_id])]
    assert sorted(m["pr_auc"] for m in logged) == [0.55, 0.6, 0.6, 0.7]  # evaluation
