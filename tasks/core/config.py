"""One typed, frozen config for a whole run: profile YAML + ``section.key=value`` overrides (the sections
themselves: ``tasks.core.sections``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from .errors import ConfigError
from .sections import (
    PROFILES,
    STAGES,
    BenchConfig,
    BenchSize,
    EvaluateConfig,
    FaultlineConfig,
    FeaturesConfig,
    IngestConfig,
    MlflowConfig,
    PathsConfig,
    RunsConfig,
    TrainConfig,
    ValidateConfig,
    WorkloadConfig,
    flatten,
)

PROFILE_DIR = Path(__file__).resolve().parents[2] / "deployments" / "profiles"

__all__ = [
    "PROFILES",
    "STAGES",
    "BenchConfig",
    "BenchSize",
    "ConfigError",
    "EvaluateConfig",
    "FaultlineConfig",
    "FeaturesConfig",
    "IngestConfig",
    "MlflowConfig",
    "PathsConfig",
    "RunsConfig",
    "TrainConfig",
    "ValidateConfig",
    "WorkloadConfig",
    "flatten",
    "load_config",
    "parse_overrides",
    "run_overrides",
    "stage_plan",
]


def parse_overrides(items: list[str] | tuple[str, ...] | None) -> dict[str, Any]:
    """``["train.epochs=3", "bench.full.rows=1e6"]`` -> nested dict (values parsed as YAML)."""
    nested: dict[str, Any] = {}
    for item in items or ():
        if "=" not in item:
            raise ConfigError(f"override {item!r}: expected section.key=value")
        key, raw = item.split("=", 1)
        parts = key.strip().split(".")
        if len(parts) < 2 or not all(parts):
            raise ConfigError(f"override {item!r}: key must be section.key (e.g. train.epochs=3)")
        value = yaml.safe_load(raw) if raw.strip() else ""
        node = nested
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r}: {part} is set both as a value and as a section")
        node[parts[-1]] = value
    return nested


def run_overrides(topology: str | None = None, days: int | None = None, extra: list[str] | None = None) -> list[str]:
    """The flow's and CLI's shortcuts (``topology``, ``days``) as the overrides they stand for."""
    out = list(extra or [])
    if topology:
        out.append(f"workload.topology={topology}")
    if days:
        out.append(f"workload.days={days}")
    return out


def _known_keys(model: type[BaseModel], extra: dict[str, Any], prefix: str = "") -> None:
    """Every override key names a field, in full: ``--set a.b.c=1`` is refused as ``a.b.c`` (no section ``a``), not
    as pydantic's ``a``. A field that is a mapping (``ingest.extra_conf``) takes any key below it."""
    by_name = {(f.alias or n): f for n, f in model.model_fields.items()}
    for key, value in extra.items():
        path = f"{prefix}{key}"
        field = by_name.get(key)
        if field is None:
            import difflib

            where = f"section {prefix[:-1]!r}" if prefix else "the config"
            full = path + _leaf_suffix(value)
            close = difflib.get_close_matches(key, list(by_name), n=1)
            hint = f"did you mean '{prefix}{close[0]}'? " if close else ""
            raise ConfigError(
                f"unknown key {full!r}: {where} has no {key!r} ({hint}known: {', '.join(sorted(by_name))})"
            )
        kind = field.annotation
        if isinstance(value, dict) and isinstance(kind, type) and issubclass(kind, BaseModel):
            _known_keys(kind, value, f"{path}.")


def _leaf_suffix(value: Any) -> str:
    """The rest of an override's key below a dict of overrides (``{"b": {"c": 1}}`` -> ``.b.c``)."""
    out = ""
    while isinstance(value, dict) and len(value) == 1:
        ((key, value),) = value.items()
        out += f".{key}"
    return out


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _format_errors(err: ValidationError, source: str) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]).replace("validate_", "validate")
        if e["type"] == "extra_forbidden":
            lines.append(f"  unknown key '{loc}'")
        else:
            lines.append(f"  {loc}: {e['msg']} (got {e.get('input')!r})")
    return f"invalid config ({source}):\n" + "\n".join(lines)


def load_config(
    profile: str = "local",
    overrides: list[str] | tuple[str, ...] | dict[str, Any] | None = None,
) -> FaultlineConfig:
    """Load ``deployments/profiles/<profile>.yaml`` (or a path) and apply overrides."""
    path = Path(profile)
    if not path.suffix:
        path = PROFILE_DIR / f"{profile}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))
        raise ConfigError(f"profile {profile!r} not found at {path}; known profiles: {known}")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of sections")
    data.setdefault("profile", path.stem)
    if os.environ.get("FAULTLINE_ROOT"):  # where a worker's flow runs keep their store (before overrides)
        data.setdefault("paths", {})["root"] = os.environ["FAULTLINE_ROOT"]
    if os.environ.get("FAULTLINE_MLFLOW_URI"):  # `make ui`'s tracking server, unless the profile names one
        mlflow = data.setdefault("mlflow", {})
        mlflow["tracking_uri"] = mlflow.get("tracking_uri") or os.environ["FAULTLINE_MLFLOW_URI"]
    extra = overrides if isinstance(overrides, dict) else parse_overrides(overrides)
    _known_keys(FaultlineConfig, extra)
    defaults = FaultlineConfig().model_dump(mode="json", by_alias=True)  # so a nested override keeps its siblings
    merged = _merge(_merge(defaults, data), extra)
    try:
        return FaultlineConfig.model_validate(merged)
    except ValidationError as err:
        raise ConfigError(_format_errors(err, f"{path.name} + overrides")) from None


def stage_plan(start_from: str, until: str, lake: str | None = None) -> tuple[str, ...]:
    """The stages a run executes, in order; rejects an impossible request before anything starts."""
    if start_from not in STAGES or until not in STAGES:
        raise ConfigError(f"stages are {', '.join(STAGES)}; got start_from={start_from!r}, until={until!r}")
    first, last = STAGES.index(start_from), STAGES.index(until)
    if first > last:
        raise ConfigError(f"start_from={start_from} comes after until={until}")
    if first >= STAGES.index("features") and not lake:
        raise ConfigError(f"start_from={start_from} needs lake=<an ingest output directory> (--lake)")
    if lake and not (Path(lake) / "kpi").is_dir():
        raise ConfigError(f"lake={lake!r} is not an ingest output: expected a directory with kpi/ and alarms/")
    return STAGES[first : last + 1]
