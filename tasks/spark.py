"""The Spark session the stages share (built once per process from the profile)."""

from __future__ import annotations

from pathlib import Path

from tasks.core.config import IngestConfig
from tasks.core.runtime import detect_hardware, spark_conf, spark_session


def get_spark(cfg: IngestConfig, root: Path):
    return spark_session(spark_conf(cfg, detect_hardware(), Path(root) / "spark-events"))
