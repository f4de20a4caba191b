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

import pandas as pd
import pyarrow.parquet as pq

DATASETS = ("kpi", "alarms", "quarantine/kpi", "quarantine/alarms")


def newest(store: Path, stage: str) -> Path:
    dirs = [d for d in (store / stage).iterdir() if (d / "_manifest.json").is_file()]
    return max(dirs, key=lambda d: (d / "_manifest.json").stat().st_mtime)


def digest(path: Path) -> dict:
    if not path.is_dir():
        return {"rows": 0, "digest": None}
    df = pq.read_table(path).to_pandas()
    df = df[sorted(df.columns)]
    for c in df.columns:  # partition columns come back as categories; compare their values
        if isinstance(df[c].dtype, pd.CategoricalDtype):
            df[c] = df[c].astype(str)
    h = pd.util.hash_pandas_object(df, index=False).to_numpy().copy()  # one hash a row
    h.sort()  # the rows as a multiset: order-free, without sorting the frame by every column
    return {"rows": len(df), "digest": hashlib.sha256(h.tobytes()).hexdigest()[:16]}


def main(cpu_store: Path, gpu_store: Path, out: Path) -> dict:
    result: dict = {"cpu_store": str(cpu_store), "gpu_store": str(gpu_store), "datasets": {}}
    lakes = {side: newest(store, "ingest") for side, store in (("cpu", cpu_store), ("gpu", gpu_store))}
    for name in DATASETS:
        a, b = digest(lakes["cpu"] / name), digest(lakes["gpu"] / name)
        result["datasets"][name] = {"cpu": a, "gpu": b, "same": a == b}
    manifests = {
        side: {
            stage: json.loads((newest(store, stage) / "_manifest.json").read_text()) for stage in ("validate", "ingest")
        }
        for side, store in (("cpu", cpu_store), ("gpu", gpu_store))
    }
    for key in ("expectations", "violations", "gx_success", "rows"):  # a key missing on both sides is not "same"
        a, b = manifests["cpu"]["validate"].get(key), manifests["gpu"]["validate"].get(key)
        result.setdefault("validate", {})[f"same_{key}"] = a is not None and a == b
    result["seconds"] = {
        side: {stage: m[stage].get("seconds") for stage in ("validate", "ingest")} for side, m in manifests.items()
    }
    result["rapids"] = {stage: manifests["gpu"][stage].get("rapids") for stage in ("validate", "ingest")}
    result["identical"] = all(d["same"] for d in result["datasets"].values()) and all(result["validate"].values())
    out.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    r = main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
    print("identical:", r["identical"], {k: v["same"] for k, v in r["datasets"].items()}, r["validate"], r["seconds"])
