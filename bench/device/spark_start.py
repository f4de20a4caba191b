"""Where a Spark application's start goes with the RAPIDS Accelerator: the gpu profile's Spark conf started in a
fresh process per variant (the JVM, the plugin's GPU and pinned-memory set-up), timed to a session and to its first
query, each variant RUNS times.   usage: python bench/device/spark_start.py OUT.json [RUNS]"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
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
t1 = time.perf_counter()
spark = spark_session({**conf, "spark.app.name": "faultline-start"})
t2 = time.perf_counter()
spark.range(1000).selectExpr("sum(id)").collect()
t3 = time.perf_counter()
print(json.dumps({"imports_s": t1 - t0, "session_s": t2 - t1, "first_query_s": t3 - t2,
                  "plugin": "spark.plugins" in conf}))
"""

VARIANTS = {
    "cpu": (["ingest.rapids_jar=null"], {}),
    "plugin": ([], {}),
    "plugin-pinned-0": ([], {"spark.rapids.memory.pinnedPool.size": "0"}),
    "plugin-pool-none": ([], {"spark.rapids.memory.gpu.pool": "NONE"}),
}


def main(out: Path, runs: int = 2) -> None:
    got = {}
    for name, (sets, conf) in VARIANTS.items():
        rows = []
        for _ in range(runs):
            p = subprocess.run([sys.executable, "-c", ONE, json.dumps(sets), json.dumps(conf)], capture_output=True,
                               text=True, timeout=300)
            if p.returncode != 0:
                rows.append({"error": p.stderr[-500:]})
                break
            rows.append(json.loads(p.stdout.strip().splitlines()[-1]))
        ok = [r for r in rows if "error" not in r]
        got[name] = {"runs": rows, "session_s_median": statistics.median(r["session_s"] for r in ok) if ok else None}
        print(name, got[name]["session_s_median"], flush=True)
    out.write_text(json.dumps({"what": "Spark application start by variant", "time": time.time(), "variants": got},
                              indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 2)
