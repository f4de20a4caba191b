"""Two or more ingest settings, A/B in one invocation: bench/ingest_profile.py --runs 2 for each, alternating
(A B A B ...), so that a machine's drift falls on every variant alike; each run's cold-JVM and warm-JVM seconds, the
median of the repeats with min and max, and each variant's medians against the first's.

    .venv/bin/python bench/ingest_ab.py [RAW] --variant NAME=SET[;SET...] --variant ... [--repeats 3] [--json OUT]

e.g. --variant G1=ingest.jvm_gc=G1 --variant Parallel=ingest.jvm_gc=Parallel (a variant with no SET: the profile).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tasks.core.benchmarks.measure import spread  # noqa: E402
from tasks.core.runtime import detect_hardware  # noqa: E402


def parse_variant(text: str) -> tuple[str, list[str]]:
    name, _, sets = text.partition("=")
    if not name:
        raise SystemExit(f"--variant {text!r}: expected NAME=SET[;SET...]")
    return name, [s for s in sets.split(";") if s]


def figures(xs: list[float]) -> dict:
    return {**{k: round(v, 2) for k, v in spread(xs).items()}, "runs": xs}


def one_run(raw: Path | None, sets: list[str], out: Path) -> dict[str, float]:
    cmd = [sys.executable, str(HERE / "ingest_profile.py"), *([str(raw)] if raw else []), "--runs", "2"]
    cmd += [x for s in sets for x in ("--set", s)] + ["--json", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    runs = json.loads(out.read_text())["runs"]
    return {"cold": runs[0]["seconds"], "warm": runs[1]["seconds"], "rows_in": runs[0]["rows_in"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("raw", nargs="?", type=Path)
    ap.add_argument("--variant", action="append", required=True, type=parse_variant)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if len(args.variant) < 2:
        raise SystemExit("give two --variant at least")
    got: dict[str, list[dict]] = {name: [] for name, _ in args.variant}
    with tempfile.TemporaryDirectory(prefix="ingest-ab-") as tmp:
        for i in range(args.repeats):
            for name, sets in args.variant:
                got[name].append(r := one_run(args.raw, sets, Path(tmp) / f"{name}-{i}.json"))
                print(f"repeat {i + 1}/{args.repeats} {name}: cold {r['cold']} s, warm {r['warm']} s", flush=True)
    summary = {n: {k: figures([r[k] for r in rs]) for k in ("cold", "warm")} for n, rs in got.items()}
    first = args.variant[0][0]
    result = {
        "benchmark": "ingest-ab",
        "hardware": detect_hardware().as_dict(),
        "raw": str(args.raw or "the bench's exports"),
        "variants": {n: {"sets": s, **summary[n]} for n, s in args.variant},
        "same_rows_every_run": len({r["rows_in"] for rs in got.values() for r in rs}) == 1,
        f"vs_{first}": {
            n: {k: round(summary[first][k]["median"] / summary[n][k]["median"], 3) for k in ("cold", "warm")}
            for n in got
            if n != first
        },
        "repeats": args.repeats,
        "extrapolated": False,
        "note": "One invocation: the variants alternate (A B A B ...), each run a fresh process running the ingest "
        "twice in one Spark application (cold JVM, then warm); medians of the repeats with min and max; a ratio "
        f"above 1 means faster than {first}.",
    }
    print(json.dumps(result[f"vs_{first}"]))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
