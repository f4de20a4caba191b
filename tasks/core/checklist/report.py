"""The checklist's shapes and reports: a ``Check`` (evidence -> ``Outcome``), running a list of checks into a
verdict, and the report as markdown, a table, JSON and files. Shared by the checklist and the doctor."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PASS, WARN, FAIL, NA = "pass", "warn", "fail", "na"


@dataclass(frozen=True)
class Outcome:
    status: str
    evidence: str
    details: Any = None


@dataclass(frozen=True)
class Check:
    id: str
    title: str
    reads: str
    remedy: str
    fn: Callable[[dict[str, Any]], Outcome]
    scope: str = "run"  # "run": evaluates a recorded run; "env": the environment (also `faultline doctor`)


def manifest(ev: dict[str, Any], stage: str) -> dict[str, Any] | None:
    """The manifest of ``stage`` in the evidence, or None when the run did not have that stage."""
    return (ev.get("manifests") or {}).get(stage)


def requires_stage(stage: str, why: str | None = None):
    """A check that reads ``stage``'s manifest is not applicable to a run without that stage: the guard, once."""

    def wrap(fn: Callable[[dict[str, Any], dict[str, Any]], Outcome]) -> Callable[[dict[str, Any]], Outcome]:
        @functools.wraps(fn)
        def check(ev: dict[str, Any]) -> Outcome:
            m = manifest(ev, stage)
            if m is None:
                return Outcome(NA, why or f"the run has no {stage} stage")
            return fn(ev, m)

        return check

    return wrap


def evaluate(ev: dict[str, Any], checks: tuple[Check, ...]) -> dict[str, Any]:
    results = []
    for c in checks:
        try:
            o = c.fn(ev)
        except Exception as exc:  # a check that cannot read its evidence fails, naming why
            o = Outcome(FAIL, f"could not evaluate: {type(exc).__name__}: {exc}")
        results.append(
            {
                "id": c.id,
                "title": c.title,
                "status": o.status,
                "evidence": o.evidence,
                "reads": c.reads,
                "remedy": c.remedy if o.status in (FAIL, WARN) else "",
                "details": o.details,
            }
        )
    verdict = FAIL if any(r["status"] == FAIL for r in results) else PASS
    return {"verdict": verdict, "run_id": (ev.get("run") or {}).get("run_id"), "checks": results}


ICON = {PASS: "PASS", WARN: "WARN", FAIL: "FAIL", NA: "n/a"}


def to_markdown(report: dict[str, Any], title: str = "Pre-submission checklist") -> str:
    lines = [
        f"# {title}: **{report['verdict'].upper()}**",
        "",
        f"MLflow run `{report.get('run_id')}`",
        "",
        "| check | status | evidence | remedy |",
        "|---|---|---|---|",
    ]
    for r in report["checks"]:
        ev = str(r["evidence"]).replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {r['title']} (`{r['id']}`) | {ICON[r['status']]} | {ev} | {r['remedy'].replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def to_table(report: dict[str, Any]) -> list[dict[str, str]]:
    return [{"check": r["id"], "status": r["status"], "evidence": str(r["evidence"])[:300]} for r in report["checks"]]


def public(report: dict[str, Any]) -> dict[str, Any]:
    """The ``--json`` shape: verdict, run_id, and per check id/status/evidence/remedy."""
    return {
        "verdict": report["verdict"],
        "run_id": report.get("run_id"),
        "checks": [{k: r[k] for k in ("id", "status", "evidence", "remedy")} for r in report["checks"]],
    }


def write_reports(report: dict[str, Any], out_dir: Path, stem: str = "checklist") -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    j, m = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
    j.write_text(json.dumps(report, indent=1, default=str) + "\n")
    m.write_text(to_markdown(report, "Environment doctor" if stem == "doctor" else "Pre-submission checklist"))
    return j, m
