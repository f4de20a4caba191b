"""An increment's plan for a pipeline run (which earlier run it extends) and its warm start (the network's
champion): the flow's side of ``tasks.core.stages.increment``."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tasks.core.config import FaultlineConfig
from tasks.core.runtime import Runtime
from tasks.core.stages.increment import Increment, find_base
from tasks.core.stages.raw import discover
from tasks.core.store import stage_fingerprint
from tasks.runner import logger


def plan_increment(cfg: FaultlineConfig, rt: Runtime, root: Path, raw: str) -> Increment | None:
    """The earlier run over a prefix of ``raw``'s days that this run can extend (None: a full run; why is logged)."""

    def chain(raw_fp: str) -> tuple[str, str, str]:
        val = stage_fingerprint("validate", {"raw": raw_fp}, cfg.validate_)
        ingest = stage_fingerprint("ingest", {"raw": raw_fp, "validate": val}, cfg.ingest)
        return val, ingest, stage_fingerprint("features", {"ingest": ingest}, cfg.features, rt.backend)

    layout = discover(Path(raw))
    inc, why = find_base(root, Path(raw), layout.digests, chain, layout.stamps())
    if inc is None:
        logger().info("increment: none (%s): every day is processed", why)
    else:
        logger().info("increment: %d new files over the run whose validation is %s", len(inc.new_files),
                      inc.base_validate)  # fmt: skip
    return inc


@contextlib.contextmanager
def champion_weights(cfg: FaultlineConfig, network: str, root: Path) -> Iterator[Path | None]:
    """The graph model's weights (``gnn.pt``) of ``network``'s registered champion, downloaded under ``root`` for the
    block (removed after); None (and why, in the log) where there is none or MLflow does not answer: training
    then starts from scratch."""
    from tasks.core.spool import unreachable
    from tasks.core.trackers import tracker_for
    from tasks.tracking import registered_name

    name, uri = registered_name(cfg.evaluate.model_name, network), tracker_for(cfg).uri
    why, found = unreachable(uri), None
    with tempfile.TemporaryDirectory(prefix="champion-", dir=root) as dest:
        if why is None:
            try:
                import mlflow
                from mlflow import MlflowClient

                version = MlflowClient(uri).get_model_version_by_alias(name, "champion").version
                got = mlflow.artifacts.download_artifacts(f"models:/{name}/{version}", dst_path=dest, tracking_uri=uri)
                found = next(iter(sorted(Path(got).rglob("gnn.pt"))), None)
                why = None if found else f"{name} version {version} holds no gnn.pt"
                if found:
                    logger().info("train: warm start from %s version %s (the network's champion)", name, version)
            except Exception as exc:  # no champion yet, or the registry failed: a cold start, said
                why = f"{type(exc).__name__}: {exc}"[:300]
        if why:
            logger().info("train: no warm start (%s): training from scratch", why)
        yield found
