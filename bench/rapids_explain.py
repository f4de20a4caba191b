"""What the RAPIDS Accelerator would place on the GPU in validate and ingest, on any host: the pipeline's own
validate and ingest with the plugin in ``explainOnly`` mode (the queries run on the CPU), and each stage's
``rapids`` manifest entry collected into one JSON.

    python bench/rapids_explain.py [OUT_JSON]      (default bench/results/rapids_explain_cpu.json)

The jar comes from make setup's cache (Maven Central, SHA-1 checked, once). Counts are operator mentions in the
plugin's explain lines (AQE re-plans stage by stage, so an operator can be named more than once)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from deployments.setup.wheelhouse import CACHE, rapids_jar

REPO = Path(__file__).resolve().parents[1]
ARGS = ["--topology", "topozoo/Abilene", "--days", "3", "--until", "ingest"]


def main(out: Path) -> dict:
    jar = rapids_jar(CACHE / "jars")
    with tempfile.TemporaryDirectory() as root:
        cmd = [sys.executable, "-m", "flows.cli", "run", *ARGS, "--json"]
        cmd += ["--set", f"ingest.rapids_jar={jar}", "--set", "ingest.rapids_mode=explainOnly"]
        p = subprocess.run(cmd, cwd=REPO, env={**os.environ, "FAULTLINE_ROOT": root}, capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(p.stderr[-3000:])
        summary = json.loads(p.stdout.strip().splitlines()[-1])
        stages = {
            name: json.loads(Path(st["output"], "_manifest.json").read_text())["rapids"]
            for name, st in summary["stages"].items()
        }
    result = {
        "benchmark": "rapids_explain",
        "command": f"faultline run {' '.join(ARGS)} --set ingest.rapids_jar=<jar> --set ingest.rapids_mode=explainOnly",
        "jar": jar.name,
        "note": "explainOnly: every query ran on the CPU; the plugin reported where each operator would run",
        "stages": stages,
    }
    out.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    r = main(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "bench/results/rapids_explain_cpu.json")
    for name, st in r["stages"].items():
        print(
            name, f"{st['gpu_share']:.1%} of operator mentions on the GPU;", len(st["fallbacks"]), "kinds of fallback"
        )
