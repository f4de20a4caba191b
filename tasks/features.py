"""Features stage: Dask (pandas or cuDF backend) over the ingest output."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from tqdm import tqdm

from gpu_kernels import neighbors, rolling
from tasks.common import TASK_OPTIONS, Timer, manifest_header, publish_stage_artifact, stage_result
from tasks.core.config import FeaturesConfig
from tasks.core.features import build_features, day_groups, feature_names
from tasks.core.runtime import dask_client, dataframe_backend
from tasks.core.store import (
    MANIFEST,
    code_version,
    completed,
    fingerprint,
    fingerprint_tree,
    publish_manifest,
    published,
    staging,
)
from tasks.core.topology import Topology


def lake_fingerprint(lake: Path) -> str:
    """The ingest stage's fingerprint when the lake has a manifest, else a hash of its files."""
    import json

    if (lake / MANIFEST).is_file():
        return json.loads((lake / MANIFEST).read_text()).get("fingerprint") or fingerprint_tree(lake)
    return fingerprint_tree(lake)


@task(name="features", **TASK_OPTIONS)
def features_task(lake: str, lake_fp: str, cfg: FeaturesConfig, root: Path, force: bool = False) -> dict[str, Any]:
    backend = dataframe_backend(cfg)
    fp = fingerprint("features", lake_fp, cfg.model_dump(mode="json"), backend, code_version())
    out = None if force else completed(root, "features", fp)
    if out is None:
        topo = Topology.read(Path(lake) / "topology.json")
        with staging(root, "features", fp) as tmp, Timer() as timer:
            client = dask_client(cfg, backend)
            try:
                dashboard = client.dashboard_link
                with tqdm(total=len(day_groups(Path(lake) / "kpi")), desc=f"features ({backend})", unit="day") as bar:
                    summary = build_features(
                        client, Path(lake), topo, cfg, backend, tmp, progress=lambda done, n: bar.update(1)
                    )
            finally:
                client.close()
                if getattr(client, "cluster", None) is not None and not cfg.scheduler_address:
                    client.cluster.close()
            (tmp / "topology.json").write_bytes((Path(lake) / "topology.json").read_bytes())
            publish_manifest(
                tmp,
                {
                    **manifest_header("features", {"ingest": lake_fp}, cfg, timer.seconds),
                    "lake": str(lake),
                    "backend": backend,
                    "dask_dashboard": dashboard,
                    "features": {
                        "names": feature_names(cfg),
                        "windows": list(cfg.windows),
                        "kpis": list(cfg.kpis),
                        "horizon_minutes": cfg.horizon_minutes,
                        "kernels": {"rolling": rolling.KERNEL_VERSION, "neighbors": neighbors.KERNEL_VERSION},
                        "kernel_path": "cuda" if backend == "cudf" else "numpy-reference",
                    },
                    **summary,
                },
            )
        out = published(root, "features", fp)
    m = out.manifest
    result = stage_result(
        "features",
        out,
        {
            "backend": m["backend"],
            "lake_fingerprint": lake_fp,
            "feature_names": m["features"]["names"],
            "positives": m["positives"],
            "dask_dashboard": m["dask_dashboard"],
        },
    )
    publish_stage_artifact(
        result,
        {
            "backend": m["backend"],
            "features": len(m["features"]["names"]),
            "positive labels": m["positives"],
            "Dask dashboard": m["dask_dashboard"],
        },
    )
    return result
