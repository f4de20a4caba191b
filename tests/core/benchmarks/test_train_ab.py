"""bench/device/train_ab.py: two source trees' training throughput, alternating, in one invocation. The summary on
given numbers; the whole A/B for real on the CPU at a tiny size, with the base tree a copy elsewhere (each child
must import the tree it is given, not the installed project)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("train_ab", ROOT / "bench/device/train_ab.py")
ab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ab)


def _runs(rates):
    return [{"samples_per_s": r} for r in rates]


def test_summary_medians_ranges_pairs_and_the_verdict():
    s = ab.summarise({"base": _runs([100.0, 120.0, 110.0]), "head": _runs([112.0, 108.0, 115.0])})
    assert s["base"] == {"samples_per_s_median": 110.0, "samples_per_s_min_max": [100.0, 120.0], "repeats": 3}
    assert s["head"]["samples_per_s_median"] == 112.0
    assert s["head_vs_base"] == pytest.approx(112 / 110, abs=1e-3)
    assert s["paired_differences"] == [12.0, -12.0, 5.0]
    assert s["head_not_slower"] is True


def test_a_head_below_every_base_run_is_slower():
    s = ab.summarise({"base": _runs([100.0, 101.0, 102.0]), "head": _runs([95.0, 99.0, 97.0])})
    assert s["head_not_slower"] is False and s["head_vs_base"] < 1


@pytest.mark.engine  # two source trees, each training in its own processes
def test_a_real_ab_on_the_cpu_runs_each_tree_from_its_own_source(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "xf", "-", "-C", str(base)], input=archive, check=True)
    shutil.copy(ROOT / "bench/device/train_ab.py", base / "bench/device/train_ab.py")  # uncommitted edits too
    out = tmp_path / "out" / "train_ab.json"
    out.parent.mkdir()
    sets = ["train.epochs=1", "train.num_proc=1", "train.hidden=8", f"paths.root={tmp_path / 'root'}"]
    res = ab.main(
        [str(base), str(ROOT), str(out), "--repeats", "1", "--profile", "local", "--times", "48",
         "--topology", "topozoo/Abilene", *(x for s in sets for x in ("--set", s))]
    )  # fmt: skip
    assert json.loads(out.read_text())["head_vs_base"] == res["head_vs_base"] > 0
    assert res["device"] == "cpu" and res["base"]["repeats"] == res["head"]["repeats"] == 1
    assert all(r["samples_per_s"] > 0 for side in ("base", "head") for r in res["runs"][side])
