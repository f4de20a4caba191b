"""``faultline``: simulate, run the pipeline, check a run, doctor the machine, benchmark.

Every command goes through the same Prefect flows the UI's deployments run. Exit codes: 0 success, 2 input
data or a bad config / argument rejected (never retried), 1 anything else.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from flows.cli_parser import (
    EXIT_FAIL,
    EXIT_OK,
    EXIT_REJECTED,
    PROFILES,
    Parser,
    check_rejected,
    print_json,
    report_parser,
    run_args,
    version,
)

STAGES = ("validate", "ingest", "features", "train", "evaluate")


def _rejected(exc: Exception, args: argparse.Namespace, **extra: Any) -> int:
    print(f"error: {exc}", file=sys.stderr)
    if getattr(args, "json", False):
        print_json({"status": "rejected", "error": str(exc), **extra})
    return EXIT_REJECTED


def cmd_simulate(args: argparse.Namespace) -> int:
    from flows.simulate import simulate_workload
    from tasks.core.errors import ConfigError

    try:
        out = simulate_workload(
            topology=args.topology, days=args.days, seed=args.seed, dirt=args.dirt, start=args.start, out=args.out
        )
    except ConfigError as exc:
        return _rejected(exc, args)
    print_json(out) if args.json else print(json.dumps(out, indent=1, default=str))
    return EXIT_OK


def _human_summary(s: dict[str, Any], wall: float) -> str:
    lines = [
        f"Faultline run {s.get('run_id')} ({s.get('profile')}): {s['status']} in {wall:.0f} s",
        "",
        f"{'stage':<10} {'cached':<7} {'rows in':>10} {'rows out':>10} {'quarant.':>9} {'work':>10}  output",
    ]
    for name, st in s["stages"].items():
        lines.append(
            f"{name:<10} {str(st['cached']):<7} {st['rows_in'] or 0:>10} {st['rows_out'] or 0:>10} "
            f"{st['rows_quarantined'] or 0:>9} {st.get('work_rows') or 0:>10}  {st['output']}"
        )
    if s.get("processed"):
        warm = ", trained from the network's champion" if s.get("warm_start") == "champion" else ""
        lines.append(f"processed: {s['processed']}{warm} (work: rows computed; training: rows x epochs)")
    m = s.get("metrics") or {}
    if m:
        cols = [("model", ""), ("tree", "baseline_"), ("rule", "rule_")]
        extra = (("stack", "stack_"), ("oracle", "oracle_"), ("own-oracle", "oracle_own_"))
        cols += [(n, p) for n, p in extra if p + "pr_auc" in m]
        lines += ["", "held-out metrics      " + "".join(f"{n:>12}" for n, _ in cols)]
        keys = ("pr_auc", "roc_auc", "event_recall", "false_alerts_per_element_day", "median_lead_min")
        for k in (*keys, "calibration_error"):
            label = k.replace("false_alerts_per_element_day", "false_alerts/el-day")
            lines.append(f"  {label:<20}" + "".join(f"{m.get(p + k, float('nan')):>12.4f}" for _, p in cols))
    lines += ["", f"MLflow run: {s.get('mlflow_run_id')}  ({s.get('tracking_uri')})"]
    served = s.get("served") or {}
    if served:
        what = f"GBDT + GNN stack, tree weight {served['tree_weight']:g}" if served["kind"] == "stack" else "GNN"
        pr = served.get("metrics", {}).get("pr_auc", float("nan"))
        lines.append(
            f"served model: {what} (held-out PR-AUC {pr:.4f}), {s.get('registered_model') or 'not registered'}"
        )
    if s.get("data_docs"):
        lines.append(f"GX Data Docs: {s['data_docs']}")
    return "\n".join(lines)


def _before_start(args: argparse.Namespace, overrides: list[str]) -> None:
    """The flow's own first checks, run before its start-up so a bad request costs no engine: the config, the
    stage plan, a strict tracking server, and the raw directory's preflight (docs/DATA.md)."""
    from tasks.core.config import load_config, stage_plan
    from tasks.core.secrets import refuse_literal_secrets

    refuse_literal_secrets(args.set)  # before any of it reaches Prefect as a flow parameter
    cfg = load_config(args.profile, overrides)
    stage_plan(args.start_from, args.until, args.lake)
    if cfg.mlflow.strict and cfg.mlflow.tracking_uri:
        from tasks.core.secrets import resolve
        from tasks.core.spool import require_server

        require_server(resolve(cfg.mlflow.tracking_uri, "mlflow.tracking_uri"))
    if args.raw is not None:
        from tasks.core.stages.preflight import preflight

        preflight(args.raw)


def _data_rejected(exc: Exception, args: argparse.Namespace) -> int:
    print(f"error: input data rejected: {exc}", file=sys.stderr)
    if args.json:
        print_json({"status": "rejected", "error": str(exc), "file": exc.file, "column": exc.column})
    return EXIT_REJECTED


def cmd_run(args: argparse.Namespace) -> int:
    from tasks.core.config import run_overrides
    from tasks.core.errors import ConfigError, DataRejected

    overrides = run_overrides(args.topology, args.days, args.set)
    try:
        _before_start(args, overrides)
    except ConfigError as exc:
        return _rejected(exc, args)
    except DataRejected as exc:
        return _data_rejected(exc, args)
    from flows.pipeline import SPARK_APP, fault_prediction_pipeline, spark_ahead_of_run
    from tasks.core.sparkops import started_ahead

    plan = {"raw": args.raw, "start_from": args.start_from, "until": args.until, "lake": args.lake}
    refresh = list(args.refresh or []) or None
    try:  # the run's Spark application (its JVM, the plugin's set-up) starts now, beside Prefect's start-up
        ahead = spark_ahead_of_run(args.profile, overrides, force=args.force, refresh=refresh, **plan)
    except ConfigError as exc:
        return _rejected(exc, args)
    _announce_api()
    started = time.time()
    try:
        with started_ahead(ahead, SPARK_APP):
            summary = fault_prediction_pipeline(
                profile=args.profile, overrides=overrides, force=args.force, refresh=refresh,
                incremental=not args.full, **plan,
            )  # fmt: skip
    except DataRejected as exc:
        return _data_rejected(exc, args)
    except ConfigError as exc:
        return _rejected(exc, args)
    except Exception as exc:
        print(f"error: run failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        if args.json:
            print_json({"status": "failed", "error": f"{type(exc).__name__}: {exc}"})
        return EXIT_FAIL
    print(_human_summary(summary, time.time() - started), flush=True)
    if args.json:
        print_json(summary)
    return EXIT_OK if summary["status"] == "completed" else EXIT_FAIL


def _announce_api() -> None:
    url = os.environ.get("PREFECT_API_URL")
    where = (
        f"the Prefect server at {url}" if url else "a temporary Prefect API (set PREFECT_API_URL to use `make ui`'s)"
    )
    print(f"flow runs are recorded in {where}", file=sys.stderr)


def _print_checks(report: dict[str, Any], title: str) -> None:
    print(
        f"{title}: {report['verdict'].upper()}" + (f"  (MLflow run {report['run_id']})" if report.get("run_id") else "")
    )
    for r in report["checks"]:
        print(f"  {r['status'].upper():<5} {r['id']:<32} {str(r['evidence'])[:160]}")
        if r["remedy"]:
            print(f"        fix: {r['remedy']}")


def cmd_check(args: argparse.Namespace) -> int:
    from tasks.core.checklist.evidence import pipeline_run_id
    from tasks.core.config import load_config
    from tasks.core.errors import ConfigError

    try:  # the flow's first question, asked before its start-up: a bad profile, key or run id costs seconds
        from tasks.core.secrets import refuse_literal_secrets

        refuse_literal_secrets(args.set)
        run_id = pipeline_run_id(load_config(args.profile, args.set), args.run)
    except ConfigError as exc:
        return check_rejected(exc, args)
    from flows.checklist import presubmit_checklist
    from tasks.core.checklist.report import public

    try:
        report = presubmit_checklist(
            run_id=run_id, profile=args.profile, overrides=list(args.set or []), probe_nccl=not args.no_probe
        )
    except ConfigError as exc:
        return check_rejected(exc, args)
    _print_checks(report, "Pre-submission checklist")
    print(f"reports: {report['files']['markdown']}  {report['files']['json']}")
    if args.json:
        print_json(public(report))
    return EXIT_OK if report["verdict"] == "pass" else EXIT_FAIL


def cmd_tracking(args: argparse.Namespace) -> int:
    """Replay the tracking journals that runs wrote while the MLflow server was unreachable."""
    from tasks.core.config import load_config
    from tasks.core.errors import ConfigError
    from tasks.core.trackers import replay_journals

    try:
        out = replay_journals(load_config(args.profile, args.set))
    except ConfigError as exc:
        return _rejected(exc, args)
    if out["unreachable"] is not None:
        print(f"error: tracking server unreachable ({out['unreachable']}); {len(out['left'])} journal(s) wait in "
              f"{out['spool']}", file=sys.stderr)  # fmt: skip
        return EXIT_FAIL
    for r in out["replayed"]:
        print(f"replayed {r['journal']}: {r['calls']} calls, runs {r['runs'] or '(existing)'}")
    print(f"{len(out['replayed'])} journal(s) replayed, {len(out['left'])} left")
    if args.json:
        print_json({"replayed": out["replayed"], "left": out["left"]})
    return EXIT_OK if not out["left"] else EXIT_FAIL


def cmd_doctor(args: argparse.Namespace) -> int:
    from flows.checklist import environment_doctor
    from tasks.core.checklist.report import public

    report = environment_doctor()
    _print_checks(report, "Environment doctor")
    if args.json:
        print_json(public(report))
    return EXIT_OK if report["verdict"] == "pass" else EXIT_FAIL


def cmd_warmup(args: argparse.Namespace) -> int:
    from tasks.warmup import warm

    result = warm(args.profile, say=lambda m: print(m, file=sys.stderr))
    if args.json:
        print_json(result)
    return EXIT_OK


def _bench_overrides(args: argparse.Namespace) -> list[str]:
    """The benchmark flags are config keys (``bench.*``), set like any other override."""
    out = list(args.set or [])
    flags = {
        "bench.size": args.size,
        "bench.max_workers": args.max_workers,
        "bench.pandas_budget_s": args.pandas_budget,
        "bench.work": args.work,
        "paths.bench_results": args.results,
        f"bench.{args.size}.rows": args.rows,
        f"bench.{args.size}.times": args.times,
        f"bench.{args.size}.size_gb": args.size_gb,
        "workload.topology": args.topology,
    }
    return out + [f"{k}={v}" for k, v in flags.items() if v is not None]


def cmd_bench(args: argparse.Namespace) -> int:
    from flows.benchmark import benchmark
    from tasks.core.config import load_config
    from tasks.core.errors import ConfigError
    from tasks.core.secrets import refuse_literal_secrets

    overrides = _bench_overrides(args)
    try:
        refuse_literal_secrets(args.set)
        cfg = load_config(args.profile, overrides)
    except ConfigError as exc:
        return _rejected(exc, args)
    suites = ["baseline", "scaling"] if args.what == "all" else [args.what]
    parts = args.parts.split(",") if args.parts else None
    out = benchmark(suites=suites, profile=args.profile, overrides=overrides, parts=parts)
    for name, result in out.items():
        if not args.json:
            print(json.dumps({k: v for k, v in result.items() if k not in ("hardware", "runs")}, indent=1, default=str))
        print(f"wrote {result.get('json') or Path(cfg.paths.bench_results) / (name + '.json')}", file=sys.stderr)
    if args.json:
        print_json(out[suites[-1]] if len(suites) == 1 else out)
    return EXIT_OK


def _simulate_parser(sub) -> None:
    s = sub.add_parser("simulate", help="write simulated NMS exports over a real topology")
    s.add_argument("--topology", default="topozoo/Geant2012", help="topohub key, e.g. topozoo/Abilene")
    s.add_argument("--days", type=int, default=7)
    s.add_argument("--seed", type=int, default=7)
    s.add_argument("--dirt", type=float, default=0.0, help="fraction of rows made dirty (e.g. 0.01)")
    s.add_argument("--start", default="2026-01-05", help="first day, YYYY-MM-DD")
    s.add_argument("--out", required=True)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_simulate)


def _run_parser(sub) -> None:
    r = sub.add_parser("run", help="run the pipeline flow")
    r.add_argument("--profile", default="local", choices=PROFILES)
    r.add_argument("--topology", help="topohub key of the simulated network (default: the profile's)")
    r.add_argument("--days", type=int, help="days of simulated telemetry (default: the profile's)")
    r.add_argument("--raw", help="raw exports directory (default: simulate the profile's workload)")
    r.add_argument("--from", dest="start_from", default="validate", choices=STAGES)
    r.add_argument("--lake", help="existing ingest output (with --from features)")
    r.add_argument("--until", default="evaluate", choices=STAGES)
    r.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    r.add_argument("--force", action="store_true", help="recompute every stage (training from scratch)")
    r.add_argument("--refresh", action="append", choices=STAGES, help="recompute this stage (repeatable)")
    r.add_argument(
        "--full", action="store_true", help="every day and training from scratch, where new days alone would do"
    )
    r.add_argument("--json", action="store_true", help="print the summary as one JSON object on the last line")
    r.set_defaults(func=cmd_run)


def _check_parser(sub) -> None:
    c = sub.add_parser("check", help="pre-submission checklist of a pipeline run (exit 1 when a check fails)")
    run_args(c)
    c.add_argument("--no-probe", action="store_true", help="skip the live NCCL pairwise probe")
    c.add_argument("--json", action="store_true", help="print the report as one JSON object on the last line")
    c.set_defaults(func=cmd_check)
    d = sub.add_parser("doctor", help="environment checks, runnable before any pipeline run")
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=cmd_doctor)
    w = sub.add_parser("warmup", help="compile the GPU path's kernels into CuPy's cache (make setup does it on a GPU)")
    w.add_argument("--profile", default="gpu", choices=PROFILES)
    w.add_argument("--json", action="store_true")
    w.set_defaults(func=cmd_warmup)
    t = sub.add_parser("tracking", help="replay tracking journaled while the MLflow server was unreachable")
    t.add_argument("action", choices=["replay"])
    t.add_argument("--profile", default="local", choices=PROFILES)
    t.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    t.add_argument("--json", action="store_true")
    t.set_defaults(func=cmd_tracking)


def _bench_parser(sub) -> None:
    b = sub.add_parser("bench", help="benchmarks: ratios against a baseline measured in the same run")
    suites = ["all", "baseline", "scaling", "ingest", "train", "features", "e2e", "quality", "increment", "scale"]
    b.add_argument("what", choices=suites)
    b.add_argument("--size", choices=["small", "full"], default="full", help="small: a quick test of the flow")
    b.add_argument("--max-workers", type=int, help="scaling: up to N workers (default: the profile's)")
    b.add_argument("--topology", help="topohub key (train): default the profile's workload topology")
    b.add_argument("--times", type=int, help="snapshots of synthetic data (train)")
    b.add_argument("--rows", type=int, help="KPI rows (features)")
    b.add_argument("--parts", help="features: a subset of pandas,dask,gpu,kernels")
    b.add_argument("--pandas-budget", type=float, help="features: seconds of pandas, the rest extrapolated")
    b.add_argument("--profile", default="local", choices=PROFILES)
    b.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    b.add_argument("--size-gb", type=float, help="raw input size (ingest)")
    b.add_argument("--work", help="scratch directory (inputs are reused)")
    b.add_argument("--results", help="where the JSON goes (default: paths.bench_results)")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="faultline", description=__doc__.splitlines()[0])
    p.add_argument("--version", action="version", version=version())
    p.add_argument("-v", "--verbose", action="count", default=0, help="more output (-v: Prefect, -vv: engines too)")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    for add in (_simulate_parser, _run_parser, _check_parser, report_parser, _bench_parser):
        add(sub)
    return p


def _quiet(verbose: int) -> None:
    """The CLI shows its own progress and summary; engine chatter (Dask, Spark, Prefect INFO) only with -v. The
    flow run's INFO lines still reach Prefect's API (its Logs tab): only the console's handler is quieter. A run
    sent to a Prefect server (PREFECT_API_URL: `make ui`'s stack) beats as the stack's worker's runs do, so the
    zombie-run automation never takes a live CLI run for a dead one."""
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "INFO")
    os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "INFO" if verbose else "WARNING")
    if os.environ.get("PREFECT_API_URL"):
        from tasks.core.runs import FLOW_HEARTBEAT_S

        os.environ.setdefault("PREFECT_FLOWS_HEARTBEAT_FREQUENCY", str(FLOW_HEARTBEAT_S))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # Prefect's 20-s wait for its ephemeral API (migrations on a fresh PREFECT_HOME) runs out on a busy 2-core host
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    if verbose < 2:
        for name in ("distributed", "dask", "py4j", "great_expectations", "mlflow", "alembic"):
            logging.getLogger(name).setLevel(logging.WARNING)
        os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _quiet(args.verbose)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
