"""``faultline``: simulate, run the pipeline, and (later subcommands) check, doctor, bench.

Exit codes: 0 success, 2 input data rejected (or a bad config), 1 anything else.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_FAIL, EXIT_REJECTED = 0, 1, 2
STAGE_CHOICES = ("validate", "ingest", "features", "train", "evaluate")


def _print_json(obj: dict[str, Any]) -> None:
    print(json.dumps(obj, default=str), flush=True)


def cmd_simulate(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from tasks.core.simulate import simulate
    from tasks.core.topology import TopologyError

    try:
        with tqdm(total=args.days, desc=f"simulate {args.topology}", unit="day") as bar:
            s = simulate(
                args.topology,
                args.days,
                args.seed,
                Path(args.out),
                args.dirt,
                args.start,
                progress=lambda d, n: bar.update(1),
            )
    except TopologyError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_REJECTED
    out = {
        "out": str(s.out),
        "topology": s.topology,
        "elements": s.elements,
        "days": s.days,
        "kpi_rows": s.kpi_rows,
        "alarm_rows": s.alarm_rows,
        "faults": s.faults,
        "dirt": s.dirt,
    }
    _print_json(out) if args.json else print(json.dumps(out, indent=1))
    return EXIT_OK


def _human_summary(s: dict[str, Any], wall: float) -> str:
    lines = [
        f"Faultline run {s.get('run_id')} ({s.get('profile')}): {s['status']} in {wall:.0f} s",
        "",
        f"{'stage':<10} {'cached':<7} {'rows in':>10} {'rows out':>10} {'quarant.':>9}  output",
    ]
    for name, st in s["stages"].items():
        lines.append(
            f"{name:<10} {str(st['cached']):<7} {st['rows_in'] or 0:>10} {st['rows_out'] or 0:>10} "
            f"{st['rows_quarantined'] or 0:>9}  {st['output']}"
        )
    m = s.get("metrics") or {}
    if m:
        lines += ["", "held-out metrics        model    tree-baseline   threshold-rule"]
        for k in ("pr_auc", "roc_auc", "f1", "recall_at_p90", "mean_lead_time_min"):
            lines.append(
                f"  {k:<20} {m.get(k, float('nan')):>8.4f}   {m.get('baseline_' + k, float('nan')):>8.4f}"
                f"        {m.get('rule_' + k, float('nan')):>8.4f}"
            )
    lines += ["", f"MLflow run: {s.get('mlflow_run_id')}  ({s.get('tracking_uri')})"]
    if s.get("registered_model"):
        lines.append(f"registered model: {s['registered_model']}")
    if s.get("data_docs"):
        lines.append(f"GX Data Docs: {s['data_docs']}")
    return "\n".join(lines)


def cmd_run(args: argparse.Namespace) -> int:
    from flows.pipeline import fault_prediction_pipeline
    from tasks.core.config import ConfigError, load_config
    from tasks.core.errors import DataRejected

    try:
        load_config(args.profile, args.set)  # fail fast, before any engine starts
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        if args.json:
            _print_json({"status": "rejected", "error": str(exc)})
        return EXIT_REJECTED
    started = time.time()
    try:
        summary = fault_prediction_pipeline(
            profile=args.profile,
            overrides=list(args.set or []),
            raw=args.raw,
            lake=args.lake,
            start_from=args.start_from,
            until=args.until,
            force=args.force,
            refresh=list(args.refresh or []) or None,
        )
    except DataRejected as exc:
        print(f"error: input data rejected: {exc}", file=sys.stderr)
        if args.json:
            _print_json({"status": "rejected", "error": str(exc), "file": exc.file, "column": exc.column})
        return EXIT_REJECTED
    except Exception as exc:
        print(f"error: run failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        if args.json:
            _print_json({"status": "failed", "error": f"{type(exc).__name__}: {exc}"})
        return EXIT_FAIL
    print(_human_summary(summary, time.time() - started), flush=True)
    if args.json:
        _print_json(summary)
    return EXIT_OK if summary["status"] == "completed" else EXIT_FAIL


def _print_checks(report: dict[str, Any], title: str) -> None:
    print(
        f"{title}: {report['verdict'].upper()}" + (f"  (MLflow run {report['run_id']})" if report.get("run_id") else "")
    )
    for r in report["checks"]:
        print(f"  {r['status'].upper():<5} {r['id']:<32} {str(r['evidence'])[:160]}")
        if r["remedy"]:
            print(f"        fix: {r['remedy']}")


def cmd_check(args: argparse.Namespace) -> int:
    from flows.checklist import presubmit_checklist
    from tasks.core.checklist import public
    from tasks.core.config import ConfigError
    from tasks.core.evidence import RunNotFound

    try:
        report = presubmit_checklist(
            run_id=args.run, profile=args.profile, overrides=list(args.set or []), probe_nccl=not args.no_probe
        )
    except (RunNotFound, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        if args.json:
            _print_json({"verdict": "fail", "run_id": args.run, "error": str(exc), "checks": []})
        return EXIT_FAIL
    _print_checks(report, "Pre-submission checklist")
    print(f"reports: {report['files']['markdown']}  {report['files']['json']}")
    if args.json:
        _print_json(public(report))
    return EXIT_OK if report["verdict"] == "pass" else EXIT_FAIL


def cmd_doctor(args: argparse.Namespace) -> int:
    from tasks.core.checklist import evaluate, public
    from tasks.core.doctor import DOCTOR_CHECKS, gather

    report = evaluate(gather(), DOCTOR_CHECKS)
    _print_checks(report, "Environment doctor")
    if args.json:
        _print_json(public(report))
    return EXIT_OK if report["verdict"] == "pass" else EXIT_FAIL


def cmd_bench(args: argparse.Namespace) -> int:
    from flows.benchmark import benchmark

    overrides = list(args.set or [])
    if args.results:
        overrides.append(f"paths.bench_results={args.results}")
    opts = {
        "size_gb": args.size_gb,
        "times": args.times,
        "topology": args.topology,
        "rows": args.rows,
        "lake": args.lake,
        "parts": args.parts,
        "pandas_budget_s": args.pandas_budget,
    }
    suites = ["baseline", "scaling"] if args.what == "all" else [args.what]
    out = benchmark(
        suites=suites,
        profile=args.profile,
        overrides=overrides,
        size=args.size,
        max_workers=args.max_workers,
        work=args.work,
        options=opts,
    )
    for name, result in out.items():
        if not args.json:
            print(json.dumps({k: v for k, v in result.items() if k not in ("hardware", "runs")}, indent=1, default=str))
        print(f"wrote {Path(args.results or 'bench/results') / (name + '.json')}", file=sys.stderr)
    if args.json:
        _print_json(out[suites[-1]] if len(suites) == 1 else out)
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="faultline", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("simulate", help="write simulated NMS exports over a real topology")
    s.add_argument("--topology", default="topozoo/Geant2012", help="topohub key, e.g. topozoo/Abilene")
    s.add_argument("--days", type=int, default=7)
    s.add_argument("--seed", type=int, default=7)
    s.add_argument("--dirt", type=float, default=0.0, help="fraction of rows made dirty (e.g. 0.01)")
    s.add_argument("--start", default="2026-01-05", help="first day, YYYY-MM-DD")
    s.add_argument("--out", required=True)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_simulate)
    r = sub.add_parser("run", help="run the pipeline flow")
    r.add_argument("--profile", default="local")
    r.add_argument("--raw", help="raw exports directory (default: simulate the profile's workload)")
    r.add_argument(
        "--from", dest="start_from", default="validate", choices=["validate", "ingest", "features", "train", "evaluate"]
    )
    r.add_argument("--lake", help="existing ingest output (with --from features)")
    r.add_argument("--until", default="evaluate", choices=["validate", "ingest", "features", "train", "evaluate"])
    r.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    r.add_argument("--force", action="store_true", help="recompute every stage")
    r.add_argument("--refresh", action="append", choices=list(STAGE_CHOICES), help="recompute this stage (repeatable)")
    r.add_argument("--json", action="store_true", help="print the summary as one JSON object on the last line")
    r.set_defaults(func=cmd_run)
    c = sub.add_parser("check", help="pre-submission checklist of a pipeline run (exit 1 when a check fails)")
    c.add_argument("--run", help="MLflow run id (default: the latest pipeline run)")
    c.add_argument("--profile", default="local")
    c.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    c.add_argument("--no-probe", action="store_true", help="skip the live NCCL pairwise probe")
    c.add_argument("--json", action="store_true", help="print the report as one JSON object on the last line")
    c.set_defaults(func=cmd_check)
    d = sub.add_parser("doctor", help="environment checks, runnable before any pipeline run")
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=cmd_doctor)
    b = sub.add_parser("bench", help="benchmarks: ratios against a baseline measured in the same run")
    b.add_argument("what", choices=["all", "baseline", "scaling", "ingest", "train", "features"])
    b.add_argument("--size", choices=["small", "full"], default="full", help="small: a quick test of the flow")
    b.add_argument("--max-workers", type=int, help="scaling: up to N workers (default: the profile's)")
    b.add_argument("--topology", help="topohub key (train): default the profile's workload topology")
    b.add_argument("--times", type=int, default=None, help="snapshots of synthetic data (train; default 2016)")
    b.add_argument("--rows", type=int, default=None, help="KPI rows (features)")
    b.add_argument("--lake", help="an existing ingest output to grow the features input from (features)")
    b.add_argument("--parts", help="features: a subset of pandas,dask,gpu,kernels (the rest from the last report)")
    b.add_argument("--pandas-budget", type=float, help="features: seconds of pandas, the rest extrapolated")
    b.add_argument("--profile", default="local")
    b.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    b.add_argument("--size-gb", type=float, default=None, help="raw input size (ingest; default 1.0)")
    b.add_argument("--work", default=".faultline/bench", help="scratch directory (inputs are reused)")
    b.add_argument("--results", default=None, help="where the JSON goes (default: paths.bench_results)")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench)
    return p


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
