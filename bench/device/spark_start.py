"""Where a Spark application's start goes with the RAPIDS Accelerator: the gpu profile's Spark conf started in a
fresh process per variant (the JVM, the plugin's GPU and pinned-memory set-up, its native libraries), timed to a
session and to its first query; the variants take turns, RUNS rounds.
    usage: python bench/device/spark_start.py OUT.json [RUNS] [VARIANT ...]
With START_RAW set to raw exports, the first variant's runs then read, parse and count their KPI lines twice
(the pipeline's reader): what the first read pays once. ``plugin`` is the profile's conf as a run uses it (the
native libraries loaded from the folder make setup unpacked, where it did: tasks.core.nativelibs);
``plugin-copied`` the same without that folder, so that cuDF copies them out of the jar as it does by default.
With START_LOG set, the first round's runs keep the JVM's log of its start at INFO (Spark's context, the plugin,
cuDF's loader), timestamped, beside the Python side's ``session_started_at``."""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ONE = """
import json, sys, time
t0 = time.perf_counter()
from tasks.core.config import load_config
from tasks.core.runtime import resolve_runtime, spark_session
from pathlib import Path
cfg = load_config("gpu", json.loads(sys.argv[1]))
conf = resolve_runtime(cfg, Path("/tmp/fl/start")).spark_conf
conf.update(json.loads(sys.argv[2]))
if sys.argv[3] == "copied":  # cuDF's default: the libraries copied out of the jar to temporary files
    conf["spark.driver.extraJavaOptions"] = " ".join(
        o for o in conf["spark.driver.extraJavaOptions"].split() if not o.startswith("-Dai.rapids.cudf.lib-"))
native = "-Dai.rapids.cudf.lib-native-dir" in conf.get("spark.driver.extraJavaOptions", "")
if sys.argv[5]:  # the JVM's own account of its start, timestamped: Spark's context, the plugin, cuDF's loader
    conf["spark.driver.extraJavaOptions"] += f" -Dlog4j2.configurationFile=file:{sys.argv[5]}"
started_at = time.strftime("%H:%M:%S", time.localtime()) + f".{int(time.time() * 1000) % 1000:03d}"
t1 = time.perf_counter()
spark = spark_session({**conf, "spark.app.name": "faultline-start"})
t2 = time.perf_counter()
spark.range(1000).selectExpr("sum(id)").collect()
t3 = time.perf_counter()
got = {"imports_s": t1 - t0, "session_s": t2 - t1, "first_query_s": t3 - t2, "plugin": "spark.plugins" in conf,
       "native_dir": native, "session_started_at": started_at}
if sys.argv[4]:  # the pipeline's KPI read, parse and count, twice: what the first read pays once
    from tasks.core.stages.raw import discover
    from tasks.core.stages.readers import read_kpi
    layout = discover(Path(sys.argv[4]))
    for i in (1, 2):
        t = time.perf_counter()
        df = read_kpi(spark, layout).cache()
        got[f"kpi_rows_{i}"] = df.count()
        got[f"kpi_read_{i}_s"] = time.perf_counter() - t
        df.unpersist(True)
print(json.dumps(got))
"""

VARIANTS = {  # name: (config overrides, Spark conf overrides, native libraries)
    "cpu": (["ingest.rapids_jar=null"], {}, "as-set"),
    "plugin": ([], {}, "as-set"),
    "plugin-copied": ([], {}, "copied"),
    "plugin-pinned-0": ([], {"spark.rapids.memory.pinnedPool.size": "0"}, "as-set"),
}
RAW = os.environ.get("START_RAW", "")  # raw exports: the first variant's runs also read them (kpi_read_*)


LOG4J2 = """rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n
""" + "".join(
    f"logger.l{i}.name = {name}\nlogger.l{i}.level = info\n"
    for i, name in enumerate(("com.nvidia.spark.rapids", "ai.rapids.cudf", "org.apache.spark.SparkContext"))
)
TIMED = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} ")


def one(name: str, raw: str = "", log: str = "") -> dict:
    sets, conf, native = VARIANTS[name]
    p = subprocess.run(
        [sys.executable, "-c", ONE, json.dumps(sets), json.dumps(conf), native, raw, log],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if p.returncode != 0:
        return {"error": p.stderr[-800:]}
    row = json.loads(p.stdout.strip().splitlines()[-1])
    if log:  # the explain lines left out: where the start's seconds went, not the plans
        lines = [ln[:300] for ln in p.stderr.splitlines() if TIMED.match(ln) and "Exec <" not in ln]
        row["jvm_log"] = lines[:150]
    return row


def stats(xs: list[float]) -> dict:
    return {"median": round(statistics.median(xs), 3), "min": round(min(xs), 3), "max": round(max(xs), 3)} if xs else {}


def main(out: Path, runs: int, names: list[str]) -> None:
    rows: dict[str, list] = {n: [] for n in names}
    log = ""
    if os.environ.get("START_LOG"):  # the first round's runs keep the JVM's timestamped log of its start
        log = str(out.with_suffix(".log4j2.properties"))
        Path(log).write_text(LOG4J2)
    for r in range(runs):  # the variants take turns: a drift of the host falls on each alike
        for name in names:
            rows[name].append(one(name, RAW if name == names[0] else "", log if r == 0 else ""))
            print(r, name, {k: v for k, v in rows[name][-1].items() if k != "jvm_log"}, flush=True)
    from tasks.benchmark import provenance  # date, card, commit and command, as every bench writes them

    got = {}
    for name, rs in rows.items():
        ok = [x for x in rs if "error" not in x]
        keys = ("session_s", "first_query_s", "kpi_read_1_s", "kpi_read_2_s")
        got[name] = {"runs": rs, **{k: stats([x[k] for x in ok if k in x]) for k in keys}}
        print(name, got[name]["session_s"], got[name]["first_query_s"], flush=True)
    out.write_text(
        json.dumps(
            {
                "what": "Spark application start by variant",
                "provenance": provenance({}),
                "runs": runs,
                "raw": RAW or None,
                "variants": got,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 3, sys.argv[3:] or list(VARIANTS))
