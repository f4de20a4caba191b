"""Validate and ingest on Spark with the RAPIDS Accelerator vs on the CPU, over the same raw exports: is the lake
the same, row for row, and the quarantine, and GX's results; and how long each stage took, with how much of the
plan the plugin placed on the GPU (from the ingest manifest's ``rapids`` report).

    python bench/device/same_lake.py CPU_STORE GPU_STORE OUT_JSON

Each store is a ``<root>/store`` holding one ``validate/<fp>`` and one ``ingest/<fp>`` (the newest is taken).
Rows are compared as multisets: each row hashed (NaN-safe, columns in name order), the hashes sorted; the counts and
a digest of the sorted hashes must match. Single runs (a run is a whole stage over 15 M rows)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

DATASETS = ("kpi", "alarms", "quarantine/kpi", "quarantine/alarms")


def newest(store: Path, stage: str) -> Path:
    dirs = [d for d in (store / stage).iterdir() if (d / "_manifest.json").is_file()]
    return max(dirs, key=lambda d: (d / "_manifest.json").stat().st_mtime)


def frame(path: Path) -> pd.DataFrame | None:
    if not path.is_dir():
        return None
    df = pq.read_table(path).to_pandas()
    df = df[sorted(df.columns)]
    for c in df.columns:  # partition columns come back as categories; compare their values
        if isinstance(df[c].dtype, pd.CategoricalDtype):
            df[c] = df[c].astype(str)
    return df


def _sorted_hashes(df: pd.DataFrame) -> np.ndarray:
    h = pd.util.hash_pandas_object(df, index=False).to_numpy().copy()  # one hash a row
    h.sort()  # the rows as a multiset: order-free, without sorting the frame by every column
    return h


def digest(df: pd.DataFrame | None) -> dict:
    if df is None:
        return {"rows": 0, "digest": None}
    return {"rows": len(df), "digest": hashlib.sha256(_sorted_hashes(df).tobytes()).hexdigest()[:16]}


def _shown(row: pd.Series) -> dict:
    """A row as JSON, each float with its bits too (-0.0 and NaN payloads are otherwise invisible)."""
    out = {}
    for k, v in row.items():
        out[k] = f"{v!r} ({np.float64(v).view(np.uint64):#018x})" if isinstance(v, float) else repr(v)
    return out


def differences(a: pd.DataFrame, b: pd.DataFrame, out_dir: Path, name: str, show: int = 10) -> dict:
    """Where two frames differ: the columns whose multisets of values differ, and the rows found on one side only
    (all of them written to Parquet beside the report, the first few shown)."""
    cols = [
        c for c in a.columns if c not in b.columns or not np.array_equal(_sorted_hashes(a[[c]]), _sorted_hashes(b[[c]]))
    ]
    ha, hb = (pd.util.hash_pandas_object(df, index=False) for df in (a, b))
    ca, cb = ha.value_counts(), hb.value_counts()
    only = {}
    for side, df, h, mine, theirs in (("cpu", a, ha, ca, cb), ("gpu", b, hb, cb, ca)):
        extra = mine.sub(theirs, fill_value=0)
        rows = df[h.isin(extra[extra > 0].index).to_numpy()]
        rows.to_parquet(out_dir / f"only_{side}_{name.replace('/', '_')}.parquet")
        only[side] = {"rows": len(rows), "first": [_shown(r) for _, r in rows.head(show).iterrows()]}
    return {"columns_that_differ": cols, "only": only}


def tree_diff(a, b, path: str = "", out: list | None = None, limit: int = 40) -> list:
    """The paths at which two JSON values differ, with both values (the first ``limit``)."""
    out = [] if out is None else out
    if len(out) >= limit:
        return out
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            tree_diff(a.get(k), b.get(k), f"{path}/{k}", out, limit)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            tree_diff(x, y, f"{path}[{i}]", out, limit)
    elif a != b:
        out.append({"path": path, "cpu": repr(a)[:300], "gpu": repr(b)[:300]})
    return out


def main(cpu_store: Path, gpu_store: Path, out: Path) -> dict:
    result: dict = {"cpu_store": str(cpu_store), "gpu_store": str(gpu_store), "datasets": {}}
    lakes = {side: newest(store, "ingest") for side, store in (("cpu", cpu_store), ("gpu", gpu_store))}
    for name in DATASETS:
        fa, fb = frame(lakes["cpu"] / name), frame(lakes["gpu"] / name)
        a, b = digest(fa), digest(fb)
        result["datasets"][name] = {"cpu": a, "gpu": b, "same": a == b}
        if a != b and fa is not None and fb is not None:
            result["datasets"][name]["differences"] = differences(fa, fb, out.parent, name)
    manifests = {
        side: {
            stage: json.loads((newest(store, stage) / "_manifest.json").read_text()) for stage in ("validate", "ingest")
        }
        for side, store in (("cpu", cpu_store), ("gpu", gpu_store))
    }
    for key in ("expectations", "violations", "gx_success", "rows"):  # a key missing on both sides is not "same"
        a, b = manifests["cpu"]["validate"].get(key), manifests["gpu"]["validate"].get(key)
        result.setdefault("validate", {})[f"same_{key}"] = a is not None and a == b
        if a != b:
            result.setdefault("validate_differences", {})[key] = tree_diff(a, b)
    result["seconds"] = {
        side: {stage: m[stage].get("seconds") for stage in ("validate", "ingest")} for side, m in manifests.items()
    }
    # the stage times: one run a side, both on one host in one chain (each a whole stage over the exports)
    result |= {"repeats": 1, "extrapolated": False}
    result["rapids"] = {stage: manifests["gpu"][stage].get("rapids") for stage in ("validate", "ingest")}
    result["identical"] = all(d["same"] for d in result["datasets"].values()) and all(result["validate"].values())
    out.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    r = main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
    print("identical:", r["identical"], {k: v["same"] for k, v in r["datasets"].items()}, r["validate"], r["seconds"])
