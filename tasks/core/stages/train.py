"""The train stage, beside the other five (simulate, validate, ingest, features, evaluate): the features' snapshot
tensors, then Horovod or DDP ranks. Its parts live in ``tasks.core.training`` (model, tensors, launcher, rank,
checkpoints, typed spec, GPU utilization); this is the stage's entry."""

from __future__ import annotations

from tasks.core.training.stage import train_stage

__all__ = ["train_stage"]
