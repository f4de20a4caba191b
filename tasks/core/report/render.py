"""The submission report as one self-contained HTML page: every image inline, no script, no network needed.

Sections (each an ``<section id=...>``): summary, comparison, dag, architecture, complexity, kernels,
performance, energy, checklist, environment. A figure the run did not record says what is missing and which
command produces it; a benchmark from another kind of host is never shown as this host's."""

from __future__ import annotations

import html
from typing import Any

from tasks.core.report.diagrams import architecture_svg, dag_svg
from tasks.core.report.gather import Evidence, kernel_sources, png, same_host

STAGES = ("validate", "ingest", "features", "train", "evaluate")
MODELS = (  # name in the report, metric prefix in the MLflow run
    ("graph model (GNN)", ""),
    ("GBDT + GNN stack", "stack_"),
    ("tuned tree (XGBoost)", "baseline_"),
    ("threshold rule", "rule_"),
    ("oracle (hidden state, neighbours)", "oracle_"),
    ("oracle (own hidden state)", "oracle_own_"),
)
COLUMNS = (
    ("PR-AUC", "pr_auc", "{:.3f}"),
    ("ROC-AUC", "roc_auc", "{:.3f}"),
    ("event recall", "event_recall", "{:.3f}"),
    ("false alerts / element-day", "false_alerts_per_element_day", "{:.2f}"),
    ("median lead (min)", "median_lead_min", "{:.0f}"),
    ("calibration error", "calibration_error", "{:.4f}"),
)
CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:60em;color:#1a1a1a}
h1{font-size:1.6em}h2{border-bottom:2px solid #76b900;padding-bottom:.2em;margin-top:1.6em;break-after:avoid}
table{border-collapse:collapse;margin:.6em 0;font-size:.92em}
td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}img{max-width:100%}
pre{background:#f6f6f6;padding:.6em;overflow-x:auto;font-size:.8em;white-space:pre-wrap}
.missing{background:#fff4e5;border-left:4px solid #f0a020;padding:.4em .8em}.pass{color:#2a7d2a}.fail{color:#b00020}
section{break-inside:auto}figure{break-inside:avoid;margin:.8em 0}
"""


def esc(v: Any) -> str:
    return html.escape(str(v))


def table(head: list[str], rows: list[list[Any]]) -> str:
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def missing(what: str, command: str) -> str:
    return f'<p class="missing">{esc(what)} Produce it with <code>{esc(command)}</code>.</p>'


def img(uri: str, caption: str) -> str:
    return f'<figure><img src="{uri}" alt="{esc(caption)}"><figcaption>{esc(caption)}</figcaption></figure>'


def section(sid: str, title: str, body: str) -> str:
    return f'<section id="{sid}"><h2>{esc(title)}</h2>{body}</section>'


def _fmt(v: Any, spec: str) -> str:
    return spec.format(v) if isinstance(v, (int, float)) else "n/a"


def comparison(ev: Evidence) -> str:
    m = ev.run["metrics"]
    rows = [
        [esc(name), *(_fmt(m.get(prefix + key), spec) for _, key, spec in COLUMNS)]
        for name, prefix in MODELS
        if prefix + "pr_auc" in m
    ]
    out = "<p>Held-out window " + esc(ev.run["tags"].get("data_window", "?")) + ", test rows only.</p>"
    out += table(["model", *(c[0] for c in COLUMNS)], rows)
    e2e = ev.bench.get("e2e")
    profile = ev.run["tags"].get("profile", "local")
    if same_host(e2e, ev.card):
        rows = [
            [s, _fmt(e2e["gpu_path"]["stages"][s]["seconds"], "{:.1f}"),
             _fmt(e2e["cpu_path"]["stages"][s]["seconds"], "{:.1f}"), _fmt(e2e["stage_ratio"].get(s), "{:.1f}x")]
            for s in STAGES if s in e2e["gpu_path"]["stages"]
        ]  # fmt: skip
        rows.append(["<b>total</b>", _fmt(e2e["gpu_path"]["total_s"], "{:.1f}"),
                     _fmt(e2e["cpu_path"]["total_s"], "{:.1f}"), _fmt(e2e["e2e_ratio"], "<b>{:.1f}x</b>")])  # fmt: skip
        prov = e2e.get("provenance", {})
        out += f"<h3>GPU path against the CPU path ({esc(prov.get('card', e2e.get('device')))})</h3>"
        out += table(["stage", "GPU path (s)", "CPU path (s)", "ratio"], rows)
        extrapolated = ", ".join(e2e.get("extrapolated") or []) or "nothing"
        out += f"<p>Extrapolated: {esc(extrapolated)}. Measured {esc(prov.get('date'))} at {esc(prov.get('commit'))}"
        out += f" by <code>{esc(prov.get('command'))}</code>.</p>"
    else:
        where = f" (the one here is from {e2e.get('device')})" if e2e else ""
        out += missing(f"No GPU-vs-CPU result from this run's kind of host, {ev.host}{where}.",
                       f"faultline bench e2e --profile {profile}")  # fmt: skip
    return section("comparison", "Comparison with existing approaches", out)


def complexity(ev: Evidence) -> str:
    man = ev.manifests
    data = (man.get("train") or {}).get("data") or {}
    n = (man.get("validate") or {}).get("rows_in")
    t, e, f = data.get("times"), data.get("elements"), data.get("features")
    cfg = (man.get("train") or {}).get("config") or {}
    ep, h, w = cfg.get("epochs"), cfg.get("hidden"), cfg.get("window")
    test = (man.get("evaluate") or {}).get("rows_in")
    rows = [
        ("validate", "O(N·C)", f"N={n} raw rows, C expectations per row"),
        ("ingest", "O(N log N)", f"N={n}: parse, deduplicate and sort by element and time (Spark shuffle)"),
        ("features", "O(N·K + T·L·F)", f"N={n} rows, K rolling windows, T={t} snapshots, L links, F={f} features"),
        ("train", "O(epochs·T·W·(E·F·H + L·H))",
         f"epochs={ep}, T={t}, W={w} window, E={e} elements, F={f}, H={h} hidden, L links"),
        ("evaluate", "O(R·F·rounds + R log R)", f"R={test} test rows: tree scoring and the sorted PR/ROC curves"),
    ]  # fmt: skip
    body = [[s, f"<code>{esc(o)}</code>", esc(p), _fmt((man.get(s) or {}).get("seconds"), "{:.1f}")]
            for s, o, p in rows if s in man]  # fmt: skip
    return section("complexity", "Time complexity of each stage",
                   table(["stage", "time complexity", "parameters of this run", "measured (s)"], body))  # fmt: skip


def kernels(ev: Evidence) -> str:
    feats = ev.bench.get("features") or {}
    k = feats.get("kernels") or {}
    out = ""
    if k:
        card = (feats.get("provenance") or {}).get("card") or feats.get("device")
        note = "" if same_host(feats, ev.card) else " (not this run's kind of host)"
        rows = [
            [name, _fmt(v.get("gb_s"), "{:.0f}"), _fmt(k.get("copy_gb_s"), "{:.0f}"),
             _fmt(v.get("bandwidth_fraction"), "{:.0%}")]
            for name, v in k.items() if isinstance(v, dict)
        ]  # fmt: skip
        out += f"<p>Measured on {esc(card)}{esc(note)} with {esc(k.get('timer', ''))}.</p>"
        out += table(["kernel", "GB/s", "device copy GB/s", "of copy bandwidth"], rows)
    else:
        out += missing("No kernel bandwidth measured here.", "faultline bench features --profile gpu")
    for name, src in kernel_sources().items():
        out += f"<h3>gpu_kernels/{esc(name)}</h3><pre>{esc(src)}</pre>"
    return section("kernels", "CUDA kernels", out)


def performance(ev: Evidence) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    man = ev.manifests
    secs = [(s, (man.get(s) or {}).get("seconds") or 0.0) for s in STAGES if s in man]
    fig, ax = plt.subplots(figsize=(7, 2.8))
    ax.barh([s for s, _ in secs][::-1], [v for _, v in secs][::-1], color="#76b900")
    ax.set(xlabel="seconds", title=f"Stage times, {ev.host}")
    out = img(png(fig), "seconds per stage of this run")
    profile = ev.run["tags"].get("profile", "local")
    if same_host(ev.bench.get("e2e"), ev.card) and "e2e" in ev.bench_images:
        out += img(ev.bench_images["e2e"], "end to end, GPU path against CPU path, stage by stage")
    scaling = ev.bench.get("scaling")
    if same_host(scaling, ev.card) and "scaling" in ev.bench_images:
        prov = scaling.get("provenance", {})
        out += img(ev.bench_images["scaling"], f"strong and weak scaling on {prov.get('card', scaling.get('device'))}")
    else:
        where = f"; the one here is from {scaling.get('device')}" if scaling else ""
        out += missing(f"No scaling report from this run's kind of host ({ev.host}{where}).",
                       f"faultline bench scaling --profile {profile}")  # fmt: skip
    if ev.utilization:
        fig, ax = plt.subplots(figsize=(7, 2.6))
        ax.plot([t for t, _ in ev.utilization], [u for _, u in ev.utilization], lw=0.8, color="#76b900")
        ax.set(xlabel="seconds of training", ylabel="GPU busy (%)", ylim=(0, 105), title="GPU utilization")
        out += img(png(fig), "GPU utilization over the train stage (NVML samples)")
    else:
        out += missing("No GPU utilization timeline: this run trained on the CPU.", "faultline run --profile gpu")
    top = ((man.get("train") or {}).get("kernel_timeline") or {}).get("top_kernels") or []
    if top:
        out += "<h3>Top kernels of the profiled steps</h3>" + top_kernels(top)
    return section("performance", "Performance", out)


def top_kernels(top: list[dict[str, Any]]) -> str:
    """The profiler's CUDA kernels by GPU time (``kernel_timeline.top_kernels``: kernel, calls, total_us)."""
    rows = [
        [f"<code>{esc(str(r.get('kernel'))[:90])}</code>", esc(r.get("calls")),
         _fmt((r.get("total_us") or 0) / 1000, "{:.1f}")]
        for r in top[:10]
    ]  # fmt: skip
    return table(["kernel", "calls", "GPU time (ms)"], rows)


def energy(ev: Evidence) -> str:
    total = (ev.summary or {}).get("gpu_energy") or {}
    man = ev.manifests
    rows = []
    for s in STAGES:
        e = (man.get(s) or {}).get("gpu_energy") or {}
        if e.get("available"):
            rows.append(
                [
                    s,
                    _fmt(e["joules"], "{:,.0f}"),
                    _fmt(e["mean_power_w"], "{:.0f}"),
                    _fmt(e.get("peak_power_w"), "{:.0f}"),
                ]
            )
    if not rows:
        reasons = {((man.get(s) or {}).get("gpu_energy") or {}).get("reason") for s in STAGES} - {None}
        why = "; ".join(sorted(reasons)) or "the run recorded no energy"
        return section("energy", "Power and energy", f"<p>n/a on this host: {esc(why)}.</p>")
    out = table(["stage", "GPU energy (J)", "mean power (W)", "peak power (W)"], rows)
    m = ev.run["metrics"]
    joules = m.get("gpu_energy_j", total.get("total_j"))
    per_mrow = m.get("gpu_joules_per_million_rows", total.get("joules_per_million_rows"))
    out += f"<p>Total {_fmt(joules, '{:,.0f}')} J; <b>{_fmt(per_mrow, '{:,.0f}')} J per million KPI rows</b>.</p>"
    if "gpu_energy" in ev.images:
        out += img(ev.images["gpu_energy"], "GPU energy per stage and the power curve")
    return section("energy", "Power and energy", out)


def checklist(ev: Evidence) -> str:
    c = ev.checklist
    if not c:
        todo = missing("No checklist for this run yet.", f"faultline check --run {ev.run['run_id']}")
        return section("checklist", "Pre-submission checklist", todo)
    rows = [
        [esc(r["id"]), f'<span class="{esc(r["status"])}">{esc(r["status"].upper())}</span>',
         esc(str(r.get("evidence"))[:200]), esc(r.get("remedy") or "")]
        for r in c.get("checks", [])
    ]  # fmt: skip
    verdict = esc(str(c.get("verdict", "?")).upper())
    body = f"<p>Verdict: <b>{verdict}</b></p>" + table(["check", "status", "evidence", "remedy"], rows)
    return section("checklist", "Pre-submission checklist", body)


def environment(ev: Evidence) -> str:
    env = ev.environment
    rows = [["python", esc(env.get("python"))], ["platform", esc(env.get("platform"))]]
    rows += [[esc(k), esc(v)] for k, v in (env.get("packages") or {}).items()]
    return section("environment", "Environment and versions", table(["component", "version"], rows))


def header(ev: Evidence) -> str:
    tags, run = ev.run["tags"], ev.run
    uri = ev.tracking_uri
    mlflow = (
        f"{uri.rstrip('/')}/#/experiments/{ev.experiment_id}/runs/{run['run_id']}" if uri.startswith("http") else ""
    )
    link = (
        f'<a href="{esc(mlflow)}">{esc(run["run_id"])}</a>'
        if mlflow
        else f"<code>{esc(run['run_id'])}</code> in <code>{esc(uri)}</code>"
    )
    rows = [
        ["network", esc(tags.get("network", "?"))],
        ["data window", esc(tags.get("data_window", "?"))],
        ["profile", esc(tags.get("profile", "?"))],
        ["host", esc(ev.host)],
        ["code version", esc(tags.get("code_version", "?"))],
        ["MLflow run", link],
        ["Prefect flow run", f"<code>{esc(tags.get('prefect_flow_run_id', 'n/a'))}</code>"],
        ["registered model", esc(tags.get("registered_model", "none"))],
    ]
    body = "".join(f"<tr><th>{k}</th><td style='text-align:left'>{v}</td></tr>" for k, v in rows)
    return section("summary", "Run", f"<table>{body}</table>")


def render(ev: Evidence, title: str) -> str:
    parts = [
        header(ev),
        comparison(ev),
        section("dag", "Data flow: the pipeline's stages", dag_svg(ev)),
        section("architecture", "Architecture: engines, hosts and GPUs", architecture_svg(ev)),
        complexity(ev),
        kernels(ev),
        performance(ev),
        energy(ev),
        checklist(ev),
        environment(ev),
    ]
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
        f"<style>{CSS}</style></head><body><h1>{esc(title)}</h1>{''.join(parts)}</body></html>"
    )
