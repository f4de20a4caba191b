"""New days processed as they arrive, on the real engines: an 8th day after 7 processed (with the simulator's late
samples of day 7 in day 8's export), against a full run over the 8 days, through `faultline bench increment`."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tests.helpers import faultline

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.horovod]


def _rows(path: Path) -> list[tuple]:
    t = ds.dataset(path, format="parquet", partitioning="hive").to_table()
    return sorted(tuple(str(v) for v in r.values()) for r in t.to_pylist())


def test_an_eighth_day_costs_under_a_third_of_a_full_run_and_equals_it(tmp_path):
    results, work = tmp_path / "results", tmp_path / "work"
    quick = ["--set", "train.hidden=8", "--set", "ingest.master=local[2]", "--set", f"paths.root={tmp_path}"]
    proc = faultline(
        "bench", "increment", "--size", "small", *quick, "--results", str(results), "--work", str(work), "--json",
        root=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    rep = json.loads((results / "increment.json").read_text())
    assert rep["spec"]["days"] == 8 and rep["repeats"] == 1 and rep["provenance"]["command"].startswith("faultline")
    assert all(rep["identical"].values()) and rep["same_fingerprints"] and rep["warm_started"], rep
    assert rep["work_ratio"] <= 0.3, rep["increment_work_rows"]
    assert rep["increment_work_rows"]["train"] * 4 == rep["full_work_rows"]["train"]  # 2 epochs warm, 8 cold
    assert (results / "increment.png").stat().st_size > 5_000
    # read back apart from the bench's own comparison: the increment's outputs are the full run's, row for row
    a, b = work / "increment" / "0" / "a" / "store", work / "increment" / "0" / "b" / "store"
    for stage, parts in (("ingest", ("kpi", "alarms", "quarantine/kpi")), ("features", ("features",))):
        (full,) = list((b / stage).iterdir())
        inc = a / stage / full.name  # published under the fingerprint a full run gives
        m = json.loads((inc / "_manifest.json").read_text())
        assert m["increment"]["new_files"] == ["alarms/alarms_2026-01-12.jsonl", "kpi/kpi_2026-01-12.csv"]
        for part in parts:
            assert _rows(inc / part) == _rows(full / part), (stage, part)
    ingest = json.loads((a / "ingest" / _fp(b, "ingest") / "_manifest.json").read_text())
    assert ingest["increment"]["late_days"] == ["2026-01-11"]  # day 7's late samples arrived with day 8
    features = json.loads((a / "features" / _fp(b, "features") / "_manifest.json").read_text())
    assert features["days_recomputed"] == 2 and features["days"] == 8  # day 7 (late rows) and day 8
    # MLflow says which run processed every day and which the new day alone, from the champion
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{a.parent / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()], order_by=["start_time ASC"])
    tags = [(r.data.tags.get("processed"), r.data.tags.get("warm_start")) for r in runs]
    assert tags == [("every day", "none"), ("new days", "champion")], tags
    assert runs[1].data.tags["increment_new_files"] == "alarms/alarms_2026-01-12.jsonl, kpi/kpi_2026-01-12.csv"
    assert runs[1].data.metrics["validate.work_rows"] < runs[1].data.metrics["validate.rows_in"]


def _fp(store: Path, stage: str) -> str:
    (out,) = list((store / stage).iterdir())
    return out.name
