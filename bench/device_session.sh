#!/usr/bin/env bash
# Device-tool calls on the H200 after ../shared/device/fetch.sh staged RAPIDS, Dask, Horovod, Prefect and MLflow
# (see bench/README.md). Usage: bash bench/device_session.sh core|features|scaling  (writes into $OUT).
#   core:     install the staged packages; doctor; CUDA kernel + GPU-vs-CPU features stage tests; baseline
#             device probe; the pipeline on the gpu profile from features (synthetic lake); the checklist on it.
#   features: faultline bench features at 50 M KPI rows (GPU stage vs pandas vs Dask on 16 CPU cores, kernels).
#   features-gpu / features-cpu: the same bench split over two calls (GPU parts, then the CPU baselines on the
#             same lake, merged into one features.json), then the pipeline + checklist on the gpu profile.
#   scaling:  faultline bench scaling on the host's CPU cores (Dask workers, Horovod processes up to 8).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
bash /tmp/devstage/kit/install.sh > "$OUT/install.log" 2>&1; tail -2 "$OUT/install.log"
. /tmp/devstage/kit/env.sh
export PYTHONPATH=$PWD:$PYTHONPATH PREFECT_HOME=/tmp/prefect-home PREFECT_SERVER_ANALYTICS_ENABLED=false
FL="python3 -m flows.cli"
pipeline_and_check() {  # a synthetic 4-day lake -> the pipeline on the gpu profile from features -> the checklist
  python3 -c "from pathlib import Path; from tasks.core.bench_features import synthetic_lake as s; print(s(Path('/tmp/lake'), 'backbone/world', 3815*288*4))"
  $FL run --profile gpu --from features --lake /tmp/lake --set paths.root=/tmp/fl --set train.epochs=8 --json > "$OUT/pipeline.log" 2>&1
  echo "pipeline rc=$?"; tail -n 25 "$OUT/pipeline.log" | cut -c1-400
  $FL check --profile gpu --set paths.root=/tmp/fl --set paths.bench_results=$PWD/bench/results --json > "$OUT/checklist.txt" 2>&1
  echo "check rc=$?"; grep -E "^  (PASS|FAIL|WARN|NA)" "$OUT/checklist.txt" | cut -c1-220
  cp /tmp/fl/store/checklists/*/checklist.* "$OUT/" 2>/dev/null
  T=$(ls -d /tmp/fl/store/train/*/ | head -1); cp "$T/_manifest.json" "$OUT/train_manifest.json"; cp "$T/gpu_utilization.png" "$OUT/" 2>/dev/null
  F=$(ls -d /tmp/fl/store/features/*/ | head -1); cp "$F/_manifest.json" "$OUT/features_manifest.json"
}
case "$1" in
core)
  { nvidia-smi; nvidia-smi topo -m; } > "$OUT/device.txt" 2>&1
  $FL doctor --json > "$OUT/doctor.txt" 2>&1; echo "doctor rc=$?"; grep -E "PASS|FAIL|WARN|NA " "$OUT/doctor.txt" | cut -c1-150
  REQUIRE_GPU=1 python3 -m pytest -q -s -p no:cacheprovider tests/gpu_kernels > "$OUT/gpu_tests.txt" 2>&1
  echo "gpu tests rc=$?"; grep -E "worst|passed|failed|Error" "$OUT/gpu_tests.txt" | tail -8
  $FL bench baseline --profile gpu --set paths.root=/tmp/fl --work /tmp/bench --results "$OUT" --json > "$OUT/baseline.log" 2>&1
  echo "baseline rc=$?"; tail -c 600 "$OUT/baseline.log"; echo
  pipeline_and_check
  ;;
features)
  $FL bench features --profile gpu --set paths.root=/tmp/fl --work /tmp/bench --results "$OUT" --json > "$OUT/bench_features.log" 2>&1
  echo "bench features rc=$?"; grep -v "^{" "$OUT/bench_features.log" | grep -v WARN | tail -n 12 | cut -c1-300
  python3 -c "import json; r=json.load(open('$OUT/features.json')); print({k: r[k] for k in ('rows','gpu_vs_pandas','gpu_vs_dask_cpu')}, r['pandas'], r['dask_cpu'], r['gpu'], r['kernels'])"
  ;;
features-gpu)
  # call A: kernel + parity tests, then the GPU parts of the 50 M-row bench (1 and 2 threads on the worker)
  REQUIRE_GPU=1 python3 -m pytest -q -s -p no:cacheprovider tests/gpu_kernels > "$OUT/gpu_tests.txt" 2>&1
  echo "gpu tests rc=$?"; grep -E "worst|passed|failed|Error" "$OUT/gpu_tests.txt" | tail -8
  mkdir -p /tmp/benchres /tmp/benchres2
  $FL bench features --parts gpu,kernels --profile gpu --set paths.root=/tmp/fl --work /tmp/bench --results /tmp/benchres --json > "$OUT/bench_gpu.log" 2>&1
  echo "bench gpu rc=$?"; grep -v "^{" "$OUT/bench_gpu.log" | grep -v WARN | tail -n 6 | cut -c1-300
  cp /tmp/benchres/features.json "$OUT/features_gpu.json" 2>/dev/null
  python3 -c "import json; r=json.load(open('/tmp/benchres/features.json')); print(r['rows'], r['lake_seconds'], r['gpu'], r['kernels'])"
  [ "${SKIP_T2:-0}" = 1 ] && exit 0
  $FL bench features --parts gpu --profile gpu --set features.threads_per_worker=2 --set paths.root=/tmp/fl --work /tmp/bench --results /tmp/benchres2 --json > "$OUT/bench_gpu_t2.log" 2>&1
  echo "bench gpu t2 rc=$?"; python3 -c "import json; r=json.load(open('/tmp/benchres2/features.json')); print(r['gpu'])"
  cp /tmp/benchres2/features.json "$OUT/features_gpu_t2.json" 2>/dev/null
  ;;
features-cpu)
  # call B: the CPU baselines of the same bench on the same lake (merged with call A's GPU parts), then the
  # pipeline on the gpu profile from features and the checklist on it
  $FL bench features --parts pandas,dask ${PANDAS_BUDGET:+--pandas-budget $PANDAS_BUDGET} --profile gpu --set paths.root=/tmp/fl --work /tmp/bench --results /tmp/benchres --json > "$OUT/bench_cpu.log" 2>&1
  echo "bench cpu rc=$?"; grep -v "^{" "$OUT/bench_cpu.log" | grep -v WARN | tail -n 6 | cut -c1-300
  cp /tmp/benchres/features.json "$OUT/features.json" 2>/dev/null
  python3 -c "import json; r=json.load(open('$OUT/features.json')); print({k: r.get(k) for k in ('rows','gpu_vs_pandas','gpu_vs_dask_cpu','dask_cpu_vs_pandas','from_previous_run')}, r['pandas'], r['dask_cpu'])"
  rm -rf /tmp/bench/features/out-*
  [ "${RUN_PIPELINE:-0}" = 1 ] || exit 0
  pipeline_and_check
  ;;
scaling)
  FAULTLINE_FORCE_CPU=1 $FL bench scaling --profile local --max-workers ${MAXW:-8} --set paths.root=/tmp/fl \
    --set train.device=cpu --work /tmp/bench --results "$OUT" --json > "$OUT/bench_scaling.log" 2>&1
  echo "bench scaling rc=$?"; grep -E "^\| " "$OUT/bench_scaling.log" | head -40
  ;;
esac
