"""What the stage hands every training rank (``spec.json``), typed: written by the launcher, read by each rank."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tasks.core.config import TrainConfig


@dataclass(frozen=True)
class NodeMetrics:
    """Each other host's local rank 0 runs MLflow's SystemMetricsMonitor on this run under its host name (the
    tracking URI travels in the environment, never in ``spec.json``)."""

    run_id: str
    interval_s: float
    flow_host: str


@dataclass(frozen=True)
class TrainingSpec:
    """The engine and device, the train section, where the tensors, checkpoints and outputs live, the data
    fingerprint checkpoints must match, and the process that owns the ranks (they end when it is gone)."""

    engine: str
    device: str
    train: TrainConfig
    data: Path
    checkpoints: Path
    out: Path
    fingerprint: str
    threads_per_rank: int = 1
    profile_steps: int = 5
    owner_pid: int | None = field(default_factory=os.getpid)
    node_metrics: NodeMetrics | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "device": self.device,
            "train": self.train.model_dump(mode="json"),
            "data": str(self.data),
            "checkpoints": str(self.checkpoints),
            "out": str(self.out),
            "fingerprint": self.fingerprint,
            "threads_per_rank": self.threads_per_rank,
            "profile_steps": self.profile_steps,
            "owner_pid": self.owner_pid,
            "node_metrics": vars(self.node_metrics) if self.node_metrics else None,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TrainingSpec:
        nm = d.get("node_metrics")
        return cls(
            engine=d["engine"],
            device=d["device"],
            train=TrainConfig.model_validate(d["train"]),
            data=Path(d["data"]),
            checkpoints=Path(d["checkpoints"]),
            out=Path(d["out"]),
            fingerprint=d["fingerprint"],
            threads_per_rank=int(d.get("threads_per_rank", 1)),
            profile_steps=int(d.get("profile_steps", 5)),
            owner_pid=d.get("owner_pid"),
            node_metrics=NodeMetrics(**nm) if nm else None,
        )

    def write(self, path: Path) -> None:
        Path(path).write_text(json.dumps(self.as_json()))

    @classmethod
    def read(cls, path: str | Path) -> TrainingSpec:
        return cls.from_json(json.loads(Path(path).read_text()))
