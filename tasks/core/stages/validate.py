"""Validation of the raw exports with Great Expectations 1.x on their Spark DataFrames."""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from tasks.core.background import in_thread
from tasks.core.config import ValidateConfig
from tasks.core.datadocs import vendor_site
from tasks.core.errors import DataRejected, InvariantBroken
from tasks.core.laps import Laps
from tasks.core.schema import ALARM_COLUMNS, KPI_COLUMNS
from tasks.core.sparkops import job_group, share_frames, unpersist
from tasks.core.stages.raw import CORRUPT, RawLayout, check_files
from tasks.core.stages.readers import read_alarms, read_kpi
from tasks.core.stages.rules import KEYS, Rule, alarm_rules, kpi_rules, with_derived

SPARK_TYPE = {"string": "StringType", "timestamp": "TimestampType", "double": "DoubleType", "long": "LongType"}

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")


def rule_counts(df, rules: list[Rule]) -> dict[str, int]:
    """Violations per rule over parsed rows, in one Spark pass."""
    from pyspark.sql import functions as F

    parsed = df.filter(F.col(CORRUPT).isNull())
    row = parsed.select(*[F.sum(r.violation().cast("long")).alias(r.reason) for r in rules]).first()
    return {r.reason: int(row[r.reason] or 0) for r in rules}


def _suite(context, name: str, expectations: list) -> Any:
    import great_expectations as gx

    suite = context.suites.add(gx.ExpectationSuite(name=name))
    for e in expectations:
        suite.add_expectation(e)
    return suite


ROW_SAMPLES = 0  # a row suite's bad rows are in the quarantine with their reasons: GX counts them, lists none
FILE_SAMPLES = 20  # a file suite lists up to this many malformed lines' text (GX's partial_unexpected_list)


def _run_suite(context, source, name: str, expectations: list, df, samples: int = FILE_SAMPLES) -> dict[str, Any]:
    """One suite over ``df`` through a checkpoint. ``samples``: the bad values GX lists per expectation. Each list
    is a Spark job of its own that scans the rows until it has found them (every row, where a rule finds none); with
    0, Spark plans it away (a zero limit), and the suite's counts come from one aggregation."""
    import great_expectations as gx

    batch = source.add_dataframe_asset(name=name).add_batch_definition_whole_dataframe("all")
    suite = _suite(context, name, expectations)
    vd = context.validation_definitions.add(gx.ValidationDefinition(name=name, data=batch, suite=suite))
    cp = context.checkpoints.add(
        gx.Checkpoint(
            name=f"{name}_checkpoint",
            validation_definitions=[vd],
            actions=[],  # each suite's run stores its result; the Data Docs are built once, after the last
            result_format={"result_format": "SUMMARY" if samples else "BASIC", "partial_unexpected_count": samples},
        )
    )
    spark = getattr(df, "sparkSession", None)  # None: a pandas frame (the topology's), which starts no Spark job
    described = f"GX suite {name}: {len(expectations)} expectations"
    with job_group(spark, f"validate:{name}", described) if spark is not None else nullcontext():
        result = cp.run(batch_parameters={"dataframe": df})
    (run_result,) = result.run_results.values()
    return run_result.to_json_dict() | {"_success": bool(result.success)}


def _summarise(result: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for r in result["results"]:
        cfg = r["expectation_config"]
        out.append(
            {
                "expectation": cfg["type"],
                "column": cfg["kwargs"].get("column") or cfg["kwargs"].get("column_list"),
                "reason": (cfg.get("meta") or {}).get("reason"),
                "success": r["success"],
                "unexpected_count": (r.get("result") or {}).get("unexpected_count"),
                "observed_value": (r.get("result") or {}).get("observed_value"),
            }
        )
    return out


def _file_expectations(columns, mostly: float) -> list:
    import great_expectations as gx

    E = gx.expectations
    return [
        E.ExpectTableRowCountToBeBetween(min_value=1),
        E.ExpectTableColumnsToMatchOrderedList(
            column_list=[c.name for c in columns] + [CORRUPT, "_source_file", "_seq"]
        ),
        *[E.ExpectColumnValuesToBeOfType(column=c.name, type_=SPARK_TYPE[c.kind]) for c in columns],
        E.ExpectColumnValuesToBeNull(column=CORRUPT, meta={"reason": "malformed"}, mostly=mostly),
    ]


def _row_expectations(rules: list[Rule], key: tuple[str, ...], mostly: float) -> list:
    import great_expectations as gx

    E = gx.expectations
    unique = (
        E.ExpectCompoundColumnsToBeUnique(column_list=list(key), mostly=mostly)
        if len(key) > 1
        else E.ExpectColumnValuesToBeUnique(column=key[0], mostly=mostly)
    )
    return [*[r.expectation(mostly) for r in rules], unique]


def _topology_suite(topo) -> tuple[list, Any]:
    """The topology's expectations and its element ids as a pandas frame: a few thousand ids are checked in
    milliseconds where a Spark job costs seconds."""
    import great_expectations as gx
    import pandas as pd

    E = gx.expectations
    frame = pd.DataFrame({"element_id": pd.Series(list(topo.element_ids), dtype="string")})
    exps = [
        E.ExpectTableRowCountToBeBetween(min_value=1),
        E.ExpectColumnValuesToNotBeNull(column="element_id"),
        E.ExpectColumnValuesToBeUnique(column="element_id"),
    ]
    return exps, frame


def _read_sources(spark, layout: RawLayout) -> tuple[dict[str, Any], dict[str, int]]:
    """Both sources as cached DataFrames with their row counts; an empty source is rejected."""
    frames = {"kpi": read_kpi(spark, layout).cache(), "alarms": read_alarms(spark, layout)}
    counts = {}
    for source, df in frames.items():
        with job_group(spark, f"validate:{source}", f"validate {source}: read the raw exports and count rows"):
            counts[source] = df.count() if df is not None else 0
    for source, rows in counts.items():
        if rows == 0:
            where = layout.root / source
            raise DataRejected(f"{where}: the {source} source is empty (expected at least one row)", file=str(where))
    frames["alarms"] = frames["alarms"].cache()
    return frames, counts


def _gx_context(out_dir: Path):
    """GX's file context in ``out_dir`` and its Spark and pandas sources."""
    import great_expectations as gx

    context = gx.get_context(mode="file", project_root_dir=str(out_dir))
    context.variables.progress_bars = {"globally": False, "metric_calculations": False}
    context.variables.save()
    sources = {
        "spark": context.data_sources.add_spark(name="raw_exports"),
        "pandas": context.data_sources.add_pandas(name="topology_export"),
    }
    return context, sources


def files_checked(layout: RawLayout) -> Future:
    """:func:`check_files` started in a thread now, so that it reads the exports' bytes while Spark's JVM starts.
    The future gives its figures and the seconds it ran, or raises its ``DataRejected``."""

    def timed() -> tuple[dict[str, int], float]:
        started = time.perf_counter()
        return check_files(layout), round(time.perf_counter() - started, 3)

    return in_thread("check-files", timed)


def run_validation(
    spark, layout: RawLayout, out_dir: Path, build_docs: bool = True, mostly: float = 1.0, probe=None,
    checked: Future | None = None,
) -> dict[str, Any]:  # fmt: skip
    """File-level checks (``checked``: started before the session), then one GX suite per source; returns the
    validation summary. ``mostly``: the share of rows each row rule (and the malformed-line and uniqueness checks)
    needs for GX to pass it; the pipeline passes ``1 - validate.max_quarantine_rate``, the dirt it tolerates.
    ``probe(frames)``: more figures from the cached sources (``increment.late_rows_probe``)."""
    from pyspark.sql import functions as F

    lap, (files, ran_s) = Laps(), (checked or files_checked(layout)).result()  # Laps: where validation's time goes
    lap("check_files")  # with ``checked``: what the checks had left once the session was up
    topo = layout.topology()
    # GX's import and file context (seconds of Python) are made while the JVM parses and counts the exports
    with ThreadPoolExecutor(1, thread_name_prefix="gx-context") as pool:
        made = pool.submit(_gx_context, out_dir)
        frames, row_counts = _read_sources(spark, layout)
        lap("read_and_count")
        context, sources = made.result()
    rules = {
        "kpi": kpi_rules(list(topo.element_ids), layout.start, layout.end),
        "alarms": alarm_rules(list(topo.element_ids), layout.start, layout.end),
    }
    lap("gx_context")  # what the read left of the context's making
    src = sources["spark"]
    results, counts = {}, {}
    for source, df in frames.items():
        columns = KPI_COLUMNS if source == "kpi" else ALARM_COLUMNS
        results[f"{source}_file"] = _run_suite(context, src, f"{source}_file", _file_expectations(columns, mostly), df)
        lap(f"gx_{source}_file")
        parsed = with_derived(df.filter(F.col(CORRUPT).isNull()).drop(CORRUPT), rules[source])
        row_exps = _row_expectations(rules[source], KEYS[source], mostly)
        results[f"{source}_rows"] = _run_suite(context, src, f"{source}_rows", row_exps, parsed, ROW_SAMPLES)
        lap(f"gx_{source}_rows")
        counts[source] = gx_counts(results, source, rules[source]) or _spark_counts(df, source, rules[source], results)
    results["topology"] = _run_suite(context, sources["pandas"], "topology", *_topology_suite(topo))
    lap("gx_topology")
    if build_docs:  # once (an UpdateDataDocsAction per checkpoint rebuilt the whole site five times)
        context.build_data_docs()
        lap("data_docs")
    probed = {"probe": probe(frames)} if probe is not None else {}
    if not share_frames(layout.read_key(), frames):  # ingest, in the same application, takes them
        unpersist(frames)
    (result_path := out_dir / "validation_result.json").write_text(json.dumps(results, indent=1, default=str))
    docs = context.get_docs_sites_urls()
    lap("results")
    return {
        "timings_s": {**lap.seconds, "check_files_ran": ran_s},
        "files": files,
        "window": {"start": layout.start.isoformat(), "end": layout.end.isoformat()},
        "rows": row_counts,
        "violations": counts,
        "expectations": {name: _summarise(r) for name, r in results.items()},
        "gx_success": {name: r["_success"] for name, r in results.items()},
        "gx_mostly": mostly,
        "topology_ok": results["topology"]["_success"],
        "result_json": str(result_path),
        "data_docs": docs[0]["site_url"] if docs else None,
        **probed,
    }


def _spark_counts(df, source: str, rules: list[Rule], results: dict[str, Any] | None = None) -> dict[str, int]:
    """Where GX left a count out (an expectation raised): each rule's and the malformed lines' count in Spark,
    checked against the counts GX did give (``results``)."""
    from pyspark.sql import functions as F

    with job_group(df.sparkSession, f"validate:{source}", f"validate {source}: rule counts in Spark"):
        counts = {**rule_counts(df, rules), "malformed": df.filter(F.col(CORRUPT).isNotNull()).count()}
    for reason, n in (_gx_found(results, source) if results else {}).items():
        if n is not None and reason in counts and int(n) != counts[reason]:
            raise InvariantBroken(f"validation disagrees on {source}.{reason}: GX {n}, Spark {counts[reason]}")
    return counts


def _gx_found(results: dict[str, Any], source: str) -> dict[str, int | None]:
    """Each rule's count and the malformed lines' as ``source``'s suites give them (None: left out)."""
    got = {e["reason"]: e["unexpected_count"] for e in _summarise(results[f"{source}_rows"]) if e["reason"]}
    file = [e["unexpected_count"] for e in _summarise(results[f"{source}_file"]) if e["reason"] == "malformed"]
    got["malformed"] = file[0] if file else None
    return got


def gx_counts(results: dict[str, Any], source: str, rules: list[Rule]) -> dict[str, int] | None:
    """Rows breaking each rule, and the malformed lines, as GX counted them in ``source``'s suites (one
    aggregation); None where GX left one out. Ingest quarantines by the same rules as Spark predicates and fails
    unless its counts equal these, reason for reason (``ingest.check_against_validation``)."""
    got = _gx_found(results, source)
    wanted = [*(r.reason for r in rules), "malformed"]
    if any(got.get(k) is None for k in wanted):
        return None
    return {k: int(got[k]) for k in wanted}


def quarantine_rate(validation: dict[str, Any]) -> float:
    total = sum(validation["rows"].values())
    bad = sum(sum(v.values()) for v in validation["violations"].values())
    return bad / total if total else 0.0


DATA_DOCS = "gx/uncommitted/data_docs/local_site/index.html"
EXPECTATIONS_MD = "expectations.md"


def expectation_rows(expectations: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Every expectation that found bad rows or failed, with GX's count: what a reader of the run looks for."""
    return [
        {
            "suite": suite,
            "expectation": e["expectation"],
            "column": ", ".join(e["column"]) if isinstance(e["column"], list) else e["column"],
            "reason": e["reason"],
            "unexpected": e["unexpected_count"],
            "passed": e["success"],
        }
        for suite, exps in expectations.items()
        for e in exps
        if not e["success"] or e["unexpected_count"]
    ]


def expectations_markdown(summary: dict[str, Any]) -> str:
    """The suites' verdicts and the expectations that counted bad rows, as markdown (logged to MLflow)."""
    mostly = summary.get("gx_mostly", 1.0)
    lines = [
        "# Validation (Great Expectations)",
        "",
        f"Each row rule passes when at least {mostly:.0%} of rows meet it; the rest are quarantined by ingest.",
        "",
        "| suite | passed |",
        "|---|---|",
        *[f"| {name} | {'yes' if ok else '**no**'} |" for name, ok in summary["gx_success"].items()],
        "",
    ]
    rows = expectation_rows(summary["expectations"])
    if not rows:
        return "\n".join([*lines, "No expectation found a bad row.", ""])
    lines += ["| suite | expectation | column | reason | unexpected rows | passed |", "|---|---|---|---|---|---|"]
    lines += [
        f"| {r['suite']} | {r['expectation']} | {r['column']} | {r['reason'] or ''} | {r['unexpected']} | "
        f"{'yes' if r['passed'] else '**no**'} |"
        for r in rows
    ]
    return "\n".join([*lines, ""])


def validate_stage(
    spark, layout: RawLayout, out_dir: Path, cfg: ValidateConfig, probe=None, checked: Future | None = None
) -> dict[str, Any]:
    """The validate stage's output in ``out_dir`` and its manifest body; rejects the run (exit 2) when more
    rows break the rules than ``validate.max_quarantine_rate`` allows (for an increment: in the new files)."""
    mostly = 1.0 - cfg.max_quarantine_rate
    summary = run_validation(spark, layout, out_dir, cfg.build_data_docs, mostly, probe, checked)
    rate = quarantine_rate(summary)
    if rate > cfg.max_quarantine_rate:
        raise DataRejected(
            f"{layout.root}: {rate:.1%} of rows break validation rules, above "
            f"validate.max_quarantine_rate={cfg.max_quarantine_rate:.1%}; violations: {summary['violations']}",
            file=str(layout.root),
        )
    rows = sum(summary["rows"].values())
    (out_dir / EXPECTATIONS_MD).write_text(expectations_markdown(summary))
    started = time.perf_counter()
    docs = vendor_site((out_dir / DATA_DOCS).parent) if cfg.build_data_docs else None
    summary["timings_s"]["data_docs_vendor"] = round(time.perf_counter() - started, 3)
    return {
        "raw": str(layout.root),
        "rows_in": rows,
        "rows_out": rows,
        "rows_quarantined": 0,
        "quarantine_rate": rate,
        "data_docs_rel": DATA_DOCS if cfg.build_data_docs else None,
        "data_docs_offline": docs and {k: docs[k] for k in ("offline", "pages", "external")},
        "expectations_md": EXPECTATIONS_MD,
        **{k: v for k, v in summary.items() if k not in ("result_json", "data_docs")},
    }
