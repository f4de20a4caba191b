"""The scale curve's logic: which sizes run on the disk there is, how the cost's growth is judged, the peaks sampled,
the exports linked rather than copied, and the suite's loop over pipeline runs (the runs faked: the real ones are the
GPU host's, ``bench/device/session.sh`` step ``scale``)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tasks.core.benchmarks.scale import (
    EXPORTS,
    Peaks,
    dir_bytes,
    link_days,
    measure,
    next_factor,
    plot_scale,
    scale_report,
)


def test_a_size_runs_where_the_disk_holds_it_else_the_largest_that_fits():
    assert next_factor(8, None, 10, []) == (8, None)  # nothing measured yet: no estimate to refuse on
    assert next_factor(4, 100.0, 10_000, [1]) == (4, None)
    got, why = next_factor(8, 1_000.0, 5_000, [1, 4])  # 8 000 bytes needed, 4 250 may be planned
    assert got is None and "nothing larger than 4x fits" in why and "8x needs about" in why
    got, why = next_factor(8, 1_000.0, 7_100, [1, 4])  # 6 035 may be planned: 6x is the largest that fits
    assert got == 6 and "ran 6x, the largest that fits" in why


def _record(factor: int, rows: int, seconds: float, status: str = "completed") -> dict:
    return {"factor": factor, "kpi_rows": rows, "total_s": seconds, "status": status, "stages_s": {"train": seconds}}


@pytest.mark.parametrize(("last", "within"), [(210.0, True), (240.0, False)])
def test_the_growth_from_the_last_size_but_one_is_judged_against_linear(last, within):
    runs = [_record(1, 1_000_000, 30.0), _record(4, 4_000_000, 100.0), _record(8, 8_000_000, last)]
    rep = scale_report(runs, {"factors": [1, 4, 8]}, [])
    g = rep["growth"]
    assert (g["from"], g["to"], g["rows_ratio"]) == ("4x", "8x", 2.0)
    assert g["vs_linear"] == pytest.approx(last / 100.0 / 2.0) and g["within"] is within
    assert rep["runs"][0]["s_per_million_rows"] == 30.0 and rep["failed"] == [] and rep["repeats"] == 1


def test_a_failed_size_is_reported_and_not_judged():
    runs = [_record(1, 1_000_000, 30.0), {**_record(4, None, 0.0, "failed"), "error": "OutOfMemoryError: CUDA"}]
    rep = scale_report(runs, {"factors": [1, 4]}, ["4x failed"])
    assert "growth" not in rep and rep["failed"] == [{"factor": 4, "error": "OutOfMemoryError: CUDA"}]


def test_the_sizes_planned_are_those_whose_exports_and_store_fit():
    from tasks.core.benchmarks.scale import plan_sizes

    # 1 000 bytes a factor, 7 000 free: 5 950 may be planned, so 4x fits and 8x gives way to 5x
    assert plan_sizes([4, 8], 1_000, 7_000, [1]) == (
        [4, 5],
        ["8x needs about 0.0 GB of disk, 0.0 GB free (at most 85% of it planned): ran 5x, the largest that fits"],
    )
    assert plan_sizes([4, 8], 1_000, 100_000, [1]) == ([4, 8], [])
    none = "4x needs about 0.0 GB of disk, 0.0 GB free (at most 85% of it planned): nothing larger than 1x fits"
    assert plan_sizes([4, 8], 1_000, 2_000, [1]) == ([], [none])


def test_each_stage_s_peaks_are_those_sampled_while_it_ran():
    from tasks.core.benchmarks.scale import stage_peaks

    t0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
    series = [(t0 + i, 10 * i if i != 3 else None, 100 + i) for i in range(10)]  # one sample a second
    manifests = {
        "ingest": {"written_at": "2027-01-15T08:00:03Z", "seconds": 2.5},  # ran from 0.5 s to 3.x s
        "train": {"written_at": "2027-01-15T08:00:08Z", "seconds": 2.0},  # 6.x s to 8.x s
    }
    peaks = stage_peaks(series, manifests)
    assert peaks["ingest"] == {"peak_gpu_memory_bytes": 40, "peak_host_memory_bytes": 104, "samples": 4}  # 1-4 s
    assert peaks["train"] == {"peak_gpu_memory_bytes": 90, "peak_host_memory_bytes": 109, "samples": 4}


def test_peaks_keep_the_highest_sample_and_no_gpu_figure_without_a_gpu():
    gpu, host = iter([5, 9, 7, 7]), iter([100, 300, 200, 200])
    p = Peaks(gpu=lambda: next(gpu), host=lambda: next(host))
    for _ in range(3):
        p.sample()
    assert (p.gpu_bytes, p.host_bytes, p.samples) == (9, 300, 3)
    with Peaks(interval=0.01, gpu=lambda: None, host=lambda: 42) as q:
        pass
    assert q.result() == {"peak_gpu_memory_bytes": None, "peak_host_memory_bytes": 42, "samples": q.samples}
    assert q.samples >= 1


def _exports(root: Path, days: int) -> Path:
    for sub in ("kpi", "alarms"):
        (root / sub).mkdir(parents=True)
    (root / "topology.json").write_text("{}")
    for d in range(days):
        (root / "kpi" / f"kpi_2026-01-{5 + d:02d}.csv").write_text("x" * 100)
        (root / "alarms" / f"alarms_2026-01-{5 + d:02d}.jsonl").write_text("y" * 10)
    return root


def test_the_first_days_are_linked_and_a_linked_file_counts_once(tmp_path):
    src = _exports(tmp_path / "all", 4)
    dest = tmp_path / "2x" / EXPORTS
    link_days(src, dest, 2)
    assert sorted(p.name for p in (dest / "kpi").iterdir()) == ["kpi_2026-01-05.csv", "kpi_2026-01-06.csv"]
    assert (dest / "kpi" / "kpi_2026-01-05.csv").stat().st_ino == (src / "kpi" / "kpi_2026-01-05.csv").stat().st_ino
    (dest / "again.csv").hardlink_to(dest / "kpi" / "kpi_2026-01-05.csv")
    assert dir_bytes(dest) == 2 + 2 * 100 + 2 * 10


def test_a_size_is_measured_its_store_deleted_and_a_failure_recorded(tmp_path):
    def run(root: Path) -> dict:
        link_days(_exports(tmp_path / "src", 2), root / EXPORTS, 2)
        (root / "store" / "train" / "abc").mkdir(parents=True)
        (root / "store" / "lake.parquet").write_bytes(b"z" * 1000)
        manifest = {"seconds": 3.0, "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        (root / "store" / "train" / "abc" / "_manifest.json").write_text(json.dumps(manifest))
        (root / "store" / "spark-events" / "eventlog_v2_app").mkdir(parents=True)
        (root / "store" / "spark-events" / "eventlog_v2_app" / "events_1").write_bytes(b"e" * 10)
        stages = {"ingest": {"seconds": 2.0, "rows_in": 500}, "train": {"seconds": 3.0}}
        return {"status": "completed", "stages": stages}

    rec = measure(run, 2, 4, tmp_path / "work")
    assert (rec["factor"], rec["days"], rec["kpi_rows"], rec["total_s"], rec["status"]) == (2, 4, 500, 5.0, "completed")
    manifest_bytes = len((tmp_path / "work" / "2x-manifests" / "train.json").read_bytes())
    assert (rec["raw_bytes"], rec["store_bytes"]) == (2 + 200 + 20, 1000 + 10 + manifest_bytes)
    assert not (tmp_path / "work" / "2x").exists()
    assert json.loads((tmp_path / "work" / "2x-manifests" / "train.json").read_text())["seconds"] == 3.0
    assert (tmp_path / "work" / "2x-manifests" / "spark-events" / "eventlog_v2_app" / "events_1").is_file()
    assert set(rec["stage_peaks"]) == {"train"} and rec["stage_peaks"]["train"]["samples"] >= 1

    def oom(root: Path) -> dict:
        raise MemoryError("the host ran out")

    bad = measure(oom, 8, 16, tmp_path / "work")
    assert bad["status"] == "failed" and bad["error"] == "MemoryError: the host ran out" and bad["disk_bytes"] == 0
    assert (bad["failed_in"], bad["stages_s"]) == ("validate", {})  # no stage finished

    def late_oom(root: Path) -> dict:  # the stages before evaluate finished and wrote their manifests
        for stage, seconds in (("validate", 4.0), ("ingest", 2.0), ("features", 1.0), ("train", 3.0)):
            (root / "store" / stage / "fp").mkdir(parents=True)
            manifest = {"seconds": seconds, "rows_in": 500, "written_at": "2027-01-15T08:00:00Z"}
            (root / "store" / stage / "fp" / "_manifest.json").write_text(json.dumps(manifest))
        raise MemoryError("out of memory in evaluate")

    late = measure(late_oom, 4, 8, tmp_path / "work")
    assert (late["failed_in"], late["kpi_rows"], sum(late["stages_s"].values())) == ("evaluate", 500, 10.0)


def test_the_suite_runs_each_size_over_its_days_and_stops_where_the_disk_ends(tmp_path, monkeypatch):
    import flows.benchmark as fb
    from tasks.core.config import load_config

    exports = _exports(tmp_path / "sim", 8)
    runs: list[tuple[int, str]] = []

    def pipeline(profile, topology, raw, overrides):
        days = len(list((Path(raw) / "kpi").iterdir()))
        root = Path(next(o for o in overrides if o.startswith("paths.root=")).split("=", 1)[1])
        (root / "store").mkdir()
        (root / "store" / "out").write_bytes(b"z" * 1000 * days)  # 2 000 bytes a factor: 2 days a factor
        runs.append((days, topology))
        stages = {"ingest": {"seconds": 1.0 * days, "rows_in": 100 * days}, "train": {"seconds": 2.0}}
        return {"status": "completed", "stages": stages}

    monkeypatch.setattr(fb, "simulate_task", lambda workload, root: SimpleNamespace(path=str(exports)))
    monkeypatch.setattr(fb, "fault_prediction_pipeline", pipeline)
    monkeypatch.setattr(fb.shutil, "disk_usage", lambda p: SimpleNamespace(free=6_000))
    sets = ["bench.size=small", "bench.small.scale_factors=[1,2,4]", f"bench.work={tmp_path / 'work'}"]
    records, notes, spec = fb.scale_runs(load_config("local", sets), "local", [])
    assert spec == {"profile": "local", "topology": "topozoo/Abilene", "base_days": 2, "factors": [1, 2, 4]}
    assert runs == [(2, "topozoo/Abilene"), (4, "topozoo/Abilene")]  # 4x needs 8 000 bytes, 5 100 may be planned
    assert [r["factor"] for r in records] == [1, 2] and [r["store_bytes"] for r in records] == [2_000, 4_000]
    assert notes == ["4x needs about 0.0 GB of disk, 0.0 GB free (at most 85% of it planned): nothing larger than "
                     "2x fits"]  # fmt: skip
    rep = scale_report(records, spec, notes)
    assert rep["growth"]["rows_ratio"] == 2.0 and json.dumps(rep)
    png = plot_scale({**rep, "device": "test"}, tmp_path / "scale.png")
    assert png.stat().st_size > 0 and os.path.basename(png) == "scale.png"
