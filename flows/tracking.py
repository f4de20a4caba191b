"""Tracking journals delivered without waiting for the next run: the ``tracking-replay`` deployment runs this
flow on a schedule (``faultline tracking replay`` does the same once, from the command line)."""

from __future__ import annotations

from typing import Any, Literal

from prefect import flow, get_run_logger


@flow(name="tracking_replay", log_prints=True)
def tracking_replay(profile: Literal["local", "gpu", "dgx"] = "local", overrides: list[str] | None = None) -> dict:
    """Replay the tracking journals runs wrote while the MLflow server was unreachable, if it answers now: each
    journaled run gets its params, metrics, artifacts, model and final status in MLflow. With the server still
    down the journals stay for the next try (the flow run completes and says so).

    Args:
        profile: the profile whose MLflow store and journal folder to use.
        overrides: config overrides, each section.key=value (for example mlflow.tracking_uri=...).
    """
    from tasks.core.config import load_config
    from tasks.core.secrets import refuse_literal_secrets
    from tasks.core.trackers import replay_journals

    refuse_literal_secrets(overrides, "overrides")  # a secret in a parameter would be stored by Prefect
    out: dict[str, Any] = replay_journals(load_config(profile, overrides or []))
    log = get_run_logger()
    if out["unreachable"] is not None:
        log.warning("tracking server unreachable (%s): %d journal(s) wait in %s", out["unreachable"],
                    len(out["left"]), out["spool"])  # fmt: skip
    for r in out["replayed"]:
        log.info("replayed %s: %s calls, runs %s", r["journal"], r["calls"], r["runs"] or "(existing)")
    log.info("%d journal(s) replayed, %d left", len(out["replayed"]), len(out["left"]))
    return out
