"""The report's two diagrams as inline SVG, drawn from what the run recorded: the DAG of its stages (engine, rows
in / out / quarantined, seconds, cached or not) and the architecture of its profile (engines, host, GPUs), with
``nvidia-smi topo -m`` as the host reported it."""

from __future__ import annotations

import html
import re
from typing import Any

STAGE_ORDER = ("validate", "ingest", "features", "train", "evaluate")


def _esc(v: Any) -> str:
    return html.escape(str(v))


def engines(config: dict[str, Any], manifests: dict[str, Any]) -> dict[str, str]:
    """Each stage's engine as the run's profile and manifests name it."""
    ing = config.get("ingest") or {}
    feats = config.get("features") or {}
    train = config.get("train") or {}
    ran = [(manifests.get(s) or {}).get("rapids") for s in ("validate", "ingest")]  # the plugin's report: it ran
    spark = "Spark + RAPIDS" if any(ran) else "Spark"
    backend = (manifests.get("features") or {}).get("backend") or feats.get("backend", "pandas")
    device = (manifests.get("train") or {}).get("device") or train.get("device", "cpu")
    return {
        "validate": f"Great Expectations on {spark}",
        "ingest": f"PySpark ({ing.get('master', 'local[*]')})",
        "features": f"Dask + {'cuDF' if backend == 'cudf' else 'pandas'} ({feats.get('cluster', 'local')})",
        "train": f"PyTorch + {train.get('engine', 'horovod')} x{train.get('num_proc', 1)} on {device}",
        "evaluate": "XGBoost + torch scoring",
    }


def _n(v: Any) -> str:
    return f"{v:,}" if isinstance(v, int) else "?"


def dag_svg(ev) -> str:
    stages = [s for s in STAGE_ORDER if s in ev.manifests]
    public = ((ev.summary or {}).get("stages")) or {}
    eng = engines(ev.config, ev.manifests)
    w, h, gap = 170, 118, 34
    width = len(stages) * (w + gap) + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {h + 20}" width="100%"'
           ' font-family="sans-serif" font-size="11" role="img" aria-label="pipeline DAG">']  # fmt: skip
    out.append('<defs><marker id="a" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto">'
               '<path d="M0,0 L8,4 L0,8 z" fill="#555"/></marker></defs>')  # fmt: skip
    for i, s in enumerate(stages):
        m, p = ev.manifests[s], public.get(s) or {}
        x = 5 + i * (w + gap)
        cached = p.get("cached")
        fill = "#eef6e0" if not cached else "#eeeeee"
        out.append(f'<rect x="{x}" y="5" width="{w}" height="{h}" rx="8" fill="{fill}" stroke="#76b900"/>')
        lines = [
            (f"<tspan font-weight='bold' font-size='13'>{_esc(s)}</tspan>"),
            _esc(eng[s]),
            f"in {_n(m.get('rows_in'))}",
            f"out {_n(m.get('rows_out'))}",
            f"quarantined {_n(m.get('rows_quarantined', 0))}",
            f"{m.get('seconds', 0):.1f} s" + (" (cached)" if cached else " (computed)" if cached is False else ""),
        ]
        for j, text in enumerate(lines):
            out.append(f'<text x="{x + 8}" y="{24 + j * 17}">{text}</text>')
        if i:
            out.append(f'<line x1="{x - gap}" y1="{5 + h / 2}" x2="{x - 2}" y2="{5 + h / 2}" stroke="#555"'
                       ' marker-end="url(#a)"/>')  # fmt: skip
    out.append("</svg>")
    return "".join(out)


def architecture_svg(ev) -> str:
    hw = ev.environment.get("hardware") or {}
    gpus = hw.get("gpus") or []
    cfg = ev.config
    eng = engines(cfg, ev.manifests)
    boxes = [
        ("Orchestration", ["Prefect 3 flow: 5 retryable tasks", "MLflow tracking + model registry"]),
        (
            "Host",
            [
                f"{hw.get('cpu_cores') or hw.get('cpu_count')} CPU cores, {hw.get('memory_gb')} GB",
                f"driver {hw.get('driver') or 'n/a'}",
            ],
        ),  # fmt: skip
        ("Engines", [eng["validate"], eng["ingest"], eng["features"], eng["train"]]),
        ("GPUs", [f"{g['index']}: {g['name']} ({g['memory_gb']} GB)" for g in gpus] or ["none (CPU only)"]),
    ]
    height = 40 + max(len(b[1]) for b in boxes) * 16 + 20
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {len(boxes) * 235} {height}" width="100%" '
           'font-family="sans-serif" font-size="11" role="img" aria-label="architecture">']  # fmt: skip
    for i, (title, lines) in enumerate(boxes):
        x = 5 + i * 235
        out.append(f'<rect x="{x}" y="5" width="220" height="{height - 10}" rx="8" fill="#f4f8ee" stroke="#76b900"/>')
        out.append(f'<text x="{x + 8}" y="24" font-weight="bold" font-size="13">{_esc(title)}</text>')
        for j, line in enumerate(lines):
            out.append(f'<text x="{x + 8}" y="{44 + j * 16}">{_esc(line[:38])}</text>')
    out.append("</svg>")
    topo = re.sub(r"\x1b\[[0-9;]*m", "", hw.get("nvlink_topology") or "")  # without the terminal's underlines
    text = f"<pre>{_esc(topo)}</pre>" if topo else "<p>nvidia-smi topo -m: n/a (no GPU on the run's host).</p>"
    return "".join(out) + "<h3>GPU interconnect (nvidia-smi topo -m)</h3>" + text
