"""The checklist's Spark and data checks: validation, executor memory, direct memory, dynamic allocation,
Parquet row groups."""

from __future__ import annotations

from typing import Any

from tasks.core.checklist.gpu_checks import _run_gpus
from tasks.core.checklist.report import FAIL, NA, PASS, WARN, Outcome, manifest, requires_stage

ROW_GROUP_TARGET_MB = 256


def _spark_conf(ingest: dict[str, Any]) -> dict[str, str]:
    return ingest.get("spark_conf") or {}


@requires_stage("ingest", "the run has no ingest stage (started from an existing lake)")
def check_dynamic_allocation(ev: dict[str, Any], ingest: dict[str, Any]) -> Outcome:
    conf = _spark_conf(ingest)
    value = conf.get("spark.dynamicAllocation.enabled")
    if value is None:
        return Outcome(
            FAIL, "the ingest manifest holds no effective Spark conf (spark.dynamicAllocation.enabled unset)"
        )
    if str(value).lower() == "false":
        return Outcome(PASS, f"spark.dynamicAllocation.enabled={value} (master {conf.get('spark.master')})")
    return Outcome(FAIL, f"spark.dynamicAllocation.enabled={value}")


def _gx_results(v: dict[str, Any]) -> str:
    suites = v.get("gx_success") or {}
    if not suites:
        return "no GX suite results recorded"
    failed = [name for name, ok in suites.items() if not ok]
    text = f"GX: {len(suites) - len(failed)} of {len(suites)} suites passed"
    if v.get("gx_mostly") is not None and v["gx_mostly"] < 1.0:
        text += f" (each row rule needs {v['gx_mostly']:.0%} of rows)"
    return text + (f" (not: {', '.join(sorted(failed))})" if failed else "")


@requires_stage("validate", "the run has no validation stage (started from an existing lake)")
def check_validation(ev: dict[str, Any], v: dict[str, Any]) -> Outcome:
    limit = (v.get("config") or {}).get("max_quarantine_rate", 0.2)
    rate = float(v.get("quarantine_rate", 0.0))
    ingest = manifest(ev, "ingest") or {}
    lost = ingest.get("rows_in", 0) - ingest.get("rows_out", 0) - ingest.get("rows_quarantined", 0) if ingest else 0
    text = f"{_gx_results(v)}; quarantine rate {rate:.3%} (limit {limit:.1%})"
    if lost:
        return Outcome(FAIL, f"{text}; ingest lost {lost} rows (in != out + quarantined)")
    gx_failed = v.get("gx_mostly") is not None and not all((v.get("gx_success") or {}).values())
    return Outcome(PASS if rate <= limit and not gx_failed else FAIL, text)


@requires_stage("ingest")
def check_executor_memory(ev: dict[str, Any], ingest: dict[str, Any]) -> Outcome:
    gpus = _run_gpus(ev)
    if not gpus:
        return Outcome(NA, "no GPU on the ingest host: the rule (GPU memory x 1.2 + 2 GB) does not apply")
    conf = _spark_conf(ingest)
    got = _to_gb(conf.get("spark.executor.memory", "0m"))
    want = gpus[0]["memory_gb"] * 1.2 + 2
    text = f"spark.executor.memory={conf.get('spark.executor.memory')} ({got:.1f} GB); rule {want:.1f} GB"
    return Outcome(PASS if got >= want * 0.98 else FAIL, text)


def _to_gb(v: str) -> float:
    v = str(v).strip().lower()
    units = {"k": 1 / 2**20, "m": 1 / 1024, "g": 1.0, "t": 1024.0}
    if v and v[-1] in units:
        return float(v[:-1]) * units[v[-1]]
    if v.endswith("b") and v[-2:-1] in units:
        return float(v[:-2]) * units[v[-2]]
    return float(v) / 2**30


@requires_stage("ingest")
def check_max_direct_memory(ev: dict[str, Any], ingest: dict[str, Any]) -> Outcome:
    import re

    conf = _spark_conf(ingest)
    keys = ("spark.executor.extraJavaOptions", "spark.driver.extraJavaOptions")
    bad = [k for k in keys if "-XX:MaxDirectMemorySize=" not in conf.get(k, "")]
    if bad:
        return Outcome(FAIL, f"-XX:MaxDirectMemorySize is not set in {', '.join(bad)}")
    flag = re.search(r"-XX:MaxDirectMemorySize=\S+", conf["spark.executor.extraJavaOptions"])
    return Outcome(PASS, f"{flag.group(0)} for driver and executors")


@requires_stage("ingest")
def check_row_groups(ev: dict[str, Any], ingest: dict[str, Any]) -> Outcome:
    """The configured block size, then what was written: full row groups near the target, or, where every file
    is one row group, no more files than the data needs (one per date directory, or one per target's worth)."""
    target = ROW_GROUP_TARGET_MB * 2**20
    configured = int(ingest.get("parquet_block_size_bytes") or 0)
    facts = ((ingest.get("sources") or {}).get("kpi") or {}).get("parquet") or {}
    full = facts.get("full_row_group_bytes") or []  # every row group but each file's last
    text = f"parquet.block.size={configured / 2**20:.0f} MB (target {ROW_GROUP_TARGET_MB} MB)"
    if not 0.5 * target <= configured <= 2 * target:
        return Outcome(FAIL, text)
    if full:
        median = sorted(full)[len(full) // 2]
        text += f"; {len(full)} full row groups, median {median / 2**20:.0f} MB"
        return Outcome(PASS if 0.5 * target <= median <= 1.5 * target else WARN, text)
    files, parts, written = facts.get("files") or 0, facts.get("partitions") or 0, facts.get("bytes") or 0
    if not files or not parts:
        return Outcome(WARN, f"{text}; the ingest manifest does not say how its files were laid out")
    need = max(parts, -(-written // target))
    median = (facts.get("median_file_bytes") or 0) / 2**20
    text += (
        f"; written: {files} files in {parts} date directories, {written / 2**20:.1f} MB, median file "
        f"{median:.1f} MB (one row group each)"
    )
    if files > need:
        return Outcome(WARN, f"{text}: {need} files would hold it, each as large as its day allows")
    return Outcome(PASS, f"{text}: no file could be larger (each holds a whole day, under the target)")
