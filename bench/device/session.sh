#!/usr/bin/env bash
# Staging for an air-gapped GPU host reached through a command runner that carries a few tens of MB per call and
# keeps the machine only while calls follow each other (bench/README.md): after bench/device/receive.sh has
# unpacked the bundle in /tmp/fl/bundle,
#   start     everything below in the background (setsid: it outlives the call); returns at once
#   wait [S]  up to S seconds for it (default 540); prints the steps so far; copies the results into $OUT (every
#             20 s too, so a call cut at its limit still brings back what was there)
#   Make the calls back to back: an idle runner may hand the machine back, and /tmp/fl with it.
# The background chain (logs and results under /tmp/fl/out; the store under /tmp/fl/root): setup, then the steps
# named in STEPS (default below), in that order, so that a chain cut short loses the last ones:
#   setup     make setup BUNDLE=/tmp/fl/bundle (offline, timed); meanwhile, once the wheels are in, the gpu
#             profile's raw exports are simulated (backbone/world, DAYS days, default 14: 15.4 M KPI rows)
#   doctor    faultline doctor
#   lake      faultline run --profile gpu --until ingest: validate and ingest only (a lake for util and eval)
#   run       faultline run --profile gpu: the whole pipeline from those exports on the GPU path (RUN_SET: --set
#             overrides)
#   rapids    validate and ingest again on the same exports with CPU Spark, then with Spark's RAPIDS Accelerator (the
#             jar make setup installed; concurrentGpuTasks in RAPIDS_TASKS, default 2), each in its own store, then
#             bench/device/same_lake.py: lake, quarantine and GX results of the plugin's run vs the CPU's, stage times;
#             RAPIDS_SET adds --set overrides to the plugin's runs here and in ingest
#   ingest    faultline bench ingest --profile gpu with the plugin: CPU Spark on all cores, the concurrentGpuTasks
#             sweep (GPU_TASKS, default 1 2 4), Spark's own shuffle, pyarrow; the variants finished so far come back
#             as ingest_partial.json; last, CPU Spark on local[N] for each N in SPARK_CORES (default 2 8)
#   profile   bench/ingest_profile.py on the bench's exports, CPU Spark on local[N] for each N in PROFILE_CORES
#             (default 8 16): where each stage's task time goes as the cores grow
#   train     faultline bench train --profile gpu at the bench size (backbone/world, 4,032 snapshots, 6 epochs, one
#             GPU): Horovod and torch DDP, three runs of each, snapshots/s (median, min, max) and GPU utilization
#   trainab   bench/device/train_ab.py: the same bench size with Horovod, a base tree (a git archive carried as
#             .devparts/base.tgz, unpacked by start) vs this one, alternating, 3 runs each
#   cold      the run again from features (features, train, evaluate recomputed) with empty kernel caches: the
#             first run on a host that never ran `faultline warmup`
#   warm      the run again with features, train and evaluate recomputed: the same host with its kernel caches warm
#   hostab    the run again with the training tensors built on the host (train.tensors=host): train and evaluate
#             A/B against the run's on-GPU build, on the same host in one chain
#   e2e       faultline bench e2e --profile gpu: the GPU path, then the CPU path; E2E_SET adds --set overrides
#   start     bench/device/spark_start.py: a Spark application's start with the gpu profile's conf, in a fresh process
#             per variant (START_VARIANTS, default: the plugin with its libraries unpacked by setup, then the plugin
#             copying them out of the jar), START_RUNS rounds (default 3); the first variant's runs also read the
#             run's KPI exports twice, and the first round keeps the JVM's timestamped log of its start:
#             spark_start.json
#   pinned    bench/device/pinned_ab.py: validate and ingest from the run's exports with the plugin's pinned host
#             pool at each of PINNED_SIZES (default 8g 0), taking turns PINNED_ROUNDS times (default 2), each in a
#             fresh store: pinned_pool.json
#   scale     faultline bench scale --profile gpu: the GPU path at 1x, 4x and 8x the profile's days (bench.full.
#             scale_factors; SCALE_SET adds --set overrides), each from raw in a fresh store: e2e_scale.json;
#             SCALE_DAYS (e.g. 112) simulates the largest size's exports during setup, after the run's
#   scaling   faultline bench scaling --profile gpu --size SCALING_SIZE (default small; SCALING_SET: --set overrides):
#             this host's own strong and weak scaling, which the checklist judges the run against
#   check     faultline check on the newest GPU run (run's or e2e's), against this host's scaling report where the
#             scaling step made one
#   report    faultline report (HTML only) on the newest GPU run (run's or e2e's), after check where it ran
#   util      the train stage again, UTIL_N times (default 5; --refresh train), each followed by the GPU-utilization verdict
#   eval      the pipeline again from features on that lake (features and train cached): evaluation's time by part
#   features  faultline bench features --profile gpu at the same size (pandas, Dask on all cores, GPU, kernels)
#   tests     REQUIRE_GPU=1 pytest on TESTS (default tests/gpu_kernels: the CUDA kernels, GPU-vs-CPU features,
#             tensors and evaluation)
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PREFECT_HOME=/tmp/fl/prefect PREFECT_SERVER_ANALYTICS_ENABLED=false FAULTLINE_ROOT=/tmp/fl/root
OUT=${OUT:-/tmp/out}; R=/tmp/fl/out; mkdir -p "$OUT" $R
FL=".venv/bin/faultline"
step() { echo "== $(date +%T) $*" | tee -a $R/steps.log; }

presimulate() {  # as soon as the venv can import the simulator: the same content-addressed raw stage as the run's
  # a warm machine's second chain finds the venv up to date (setup then prints neither of the first two)
  for _ in $(seq 300); do grep -q "Horovod (\|ready in\|is up to date" $R/install.log 2>/dev/null && break; sleep 2; done
  case " ${STEPS:-} " in *" ingest "*|*" profile "*)  # the ingest bench's exports, where a step reads them
  PYTHONPATH=$PWD .venv/bin/python -c "from pathlib import Path; from tasks.core.benchmarks.ingest import ensure_raw; print(ensure_raw(Path('/tmp/fl/bench/ingest'), 1.0))" > $R/simulate_bench.log 2>&1 & ;;
  esac
  PYTHONPATH=$PWD .venv/bin/python -c "from flows.simulate import simulate_workload as s; print('RAW', s(topology='backbone/world', days=${DAYS:-14}, profile='gpu')['out'])" > $R/simulate.log 2>&1
  echo "simulate rc=$?" >> $R/steps.log
  if [ -n "${SCALE_DAYS:-}" ]; then  # the scale step's largest exports too, while setup runs (the same store entry)
    s0=$(date +%s)
    PYTHONPATH=$PWD .venv/bin/python -c "from flows.simulate import simulate_workload as s; print(s(topology='backbone/world', days=$SCALE_DAYS, profile='gpu'))" > $R/simulate_scale.log 2>&1
    echo "simulate $SCALE_DAYS days rc=$? in $(( $(date +%s) - s0 )) s" >> $R/steps.log
  fi
  wait; echo "simulate bench rc=$?" >> $R/steps.log
}

# a value from a JSON file, or from the last line of a --json command's output
run_summary() { python3 -c "import json,sys; t=open(sys.argv[1]).read().strip(); d=json.loads(t if t.startswith('{') and t.endswith('}') and '\n{' not in t else t.splitlines()[-1]); print(d$2)" "$1" 2>/dev/null; }
util_verdict() { python3 -c "import json,sys; t=open(sys.argv[1]).read(); d=json.loads(t.strip().splitlines()[-1]); c=[c for c in d['checks'] if c['id']=='gpu_utilization'][0]; print(c['status'], '-', c['evidence'])" "$1" 2>&1 | tail -1 | cut -c1-260; }

manifests() {  # every stage manifest under $1 (and the ranks' logs) into manifests/$2: where each stage's time went
  local to=$R/manifests/${2:-.}; mkdir -p $to; for m in $(find $1 -name _manifest.json -path '*/store/*'); do
    d=$(dirname $m); s=$(basename $(dirname $d)); cp $m $to/$s-$(basename $d).json
    [ -f $d/train.log ] && cp $d/train.log $to/$s-$(basename $d).log; done; true
}

parts() {  # the newest train and evaluate manifests' parts, one line each, into the steps log
  for s in validate ingest features train evaluate; do m=$(ls -t $1/$s/*/_manifest.json 2>/dev/null | head -1); [ -n "$m" ] || continue
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); t=(d.get('launch') or {}).get('rank_timeline') or {}
print('  $s', round(d['seconds'], 1), 's:', d.get('timings_s') or '', t.get('parts_s', ''), t.get('loop_s', ''), (d.get('data') or {}).get('tensor_build_s', ''))" $m >> $R/steps.log 2>&1
  done
}

stage_line() {  # a --json run's stage times, one line, into the steps log
  python3 -c "import json,sys; d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print(' '.join(f'{k} {v[\"seconds\"]:.1f}s' for k, v in d['stages'].items()))" "$1" >> $R/steps.log
}

chain() {
  step "setup"; { nvidia-smi; nvidia-smi topo -m; lscpu; python3 -c 'import sys, torch; print(sys.version, torch.__version__)'; } > $R/device.txt 2>&1
  presimulate & SIM=$!
  t0=$(date +%s)
  if command -v make >/dev/null; then make setup BUNDLE=/tmp/fl/bundle PYTHON=python3 > $R/install.log 2>&1
  else python3 -m deployments.setup install --bundle /tmp/fl/bundle > $R/install.log 2>&1; fi
  echo "install rc=$? in $(( $(date +%s) - t0 )) s" | tee $R/install_time.txt >> $R/steps.log
  wait $SIM
  df -h /tmp | tail -1 | sed 's/^/  disk: /' >> $R/steps.log
  RUN=""
  for s in ${STEPS:-doctor run check util features tests e2e}; do
    step "$s"
    case $s in
    doctor) $FL doctor --json > $R/doctor.txt 2>&1; grep -E "^  (FAIL|WARN)" $R/doctor.txt >> $R/steps.log ;;
    tests) REQUIRE_GPU=1 .venv/bin/python -m pytest -q -p no:cacheprovider ${TESTS:-tests/gpu_kernels} > $R/gpu_tests.txt 2>&1
      tail -1 $R/gpu_tests.txt >> $R/steps.log ;;
    run) $FL run --profile gpu --topology backbone/world --days 14 $(for o in ${RUN_SET:-}; do echo --set $o; done) \
        --json > $R/run.json 2> $R/run.log
      echo "run rc=$?" >> $R/steps.log; RUN=$(run_summary $R/run.json "['mlflow_run_id']"); manifests /tmp/fl/root/store run
      parts /tmp/fl/root/store; echo "  spark jvm: $(run_summary $R/run.json ".get('spark_jvm')")" >> $R/steps.log
      stage_line $R/run.json ;;
    lake) $FL run --profile gpu --topology backbone/world --days ${DAYS:-14} --until ingest --json > $R/lake.json 2> $R/lake.log
      echo "lake rc=$?" >> $R/steps.log ;;
    rapids) # this chain's raw stage, the newest: an earlier chain's (another tree, another fingerprint) may linger on a
      # warm machine, and its URIs differ
      RAW=$(ls -td /tmp/fl/root/store/raw/*/ | head -1)
      # the CPU baseline: the same exports through CPU Spark and its CSV parser, in a store of its own
      FAULTLINE_ROOT=/tmp/fl/cpu $FL run --profile gpu --topology backbone/world --days ${DAYS:-14} --raw "$RAW" --until ingest \
        --set ingest.rapids_jar=null --set ingest.kpi_parse=csv --json > $R/cpu_spark.json 2> $R/cpu_spark.log
      echo "cpu spark rc=$?" >> $R/steps.log
      for g in ${RAPIDS_TASKS:-2}; do
        FAULTLINE_ROOT=/tmp/fl/rapids$g $FL run --profile gpu --topology backbone/world --days ${DAYS:-14} --raw "$RAW" --until ingest --set ingest.rapids_jar=installed \
          --set ingest.concurrent_gpu_tasks=$g $(for o in ${RAPIDS_SET:-}; do echo --set $o; done) --json > $R/rapids_$g.json 2> $R/rapids_$g.log
        echo "rapids tasks=$g rc=$?" >> $R/steps.log
        .venv/bin/python bench/device/same_lake.py /tmp/fl/cpu/store /tmp/fl/rapids$g/store $R/same_lake_$g.json >> $R/steps.log 2>&1
        cp /tmp/fl/rapids$g/store/ingest/*/rapids_explain.log $R/rapids_explain_ingest_$g.log 2>/dev/null
        echo "  pinned pool exceeded: $(grep -c 'maximum pool size exceeded' $R/rapids_$g.log) lines" >> $R/steps.log
      done ;;
    eval) LAKE=$(ls -d /tmp/fl/root/store/ingest/*/ | head -1)
      $FL run --profile gpu --topology backbone/world --days 14 --from features --lake "$LAKE" --json > $R/eval.json 2> $R/eval.log
      echo "eval rc=$?" >> $R/steps.log; RUN=$(run_summary $R/eval.json "['mlflow_run_id']")
      cp /tmp/fl/root/store/evaluate/*/_manifest.json $R/eval_manifest.json 2>/dev/null ;;
    ingest) tasks=$(echo ${GPU_TASKS:-1 2 4} | tr ' ' ,)
      cores=$(echo ${SPARK_CORES-2 8} | tr ' ' ,)
      $FL bench ingest --profile gpu --set ingest.rapids_jar=installed --set "bench.gpu_tasks=[$tasks]" \
        --set "bench.spark_cores=[$cores]" \
        $(for o in ${RAPIDS_SET:-}; do echo --set $o; done) \
        --set bench.repeat_under_s=${REPEAT_UNDER_S:-60} --results $R \
        --work /tmp/fl/bench --json > $R/ingest.log 2>&1
      echo "ingest rc=$?" >> $R/steps.log
      python3 - $R/ingest.json >> $R/steps.log 2>&1 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for k, v in d["spark_variants"].items():
    print(f"  {k}: {v['seconds']} s, {v['runs']} runs {v['min_max_s']}, GPU util {v['gpu_util_mean']}")
print("  pyarrow", d["pyarrow_seconds"], "s; rapids vs CPU Spark", d.get("rapids_vs_cpu_spark"), "same rows", d["same_rows_every_run"])
print("  CPU Spark by cores:", d.get("cpu_core_scaling"))
PY
      ;;
    profile) RAW=$(ls -d /tmp/fl/bench/ingest/raw-*/ | head -1)
      for n in ${PROFILE_CORES:-8 16}; do
        .venv/bin/python bench/ingest_profile.py "$RAW" --runs 2 --set "ingest.master=local[$n]" \
          --set ingest.shuffle_partitions=16 --set ingest.driver_memory_gb=24 --json $R/ingest_profile_$n.json \
          > $R/ingest_profile_$n.log 2>&1
        echo "profile local[$n] rc=$?" >> $R/steps.log; tail -n 4 $R/ingest_profile_$n.log | cut -c1-300 >> $R/steps.log
      done ;;
    train) $FL bench train --profile gpu --set train.num_proc=1 --set train.epochs=6 --topology backbone/world \
        --times 4032 --results $R --json > $R/train.log 2>&1
      echo "train rc=$?" >> $R/steps.log
      python3 -c "import json; d=json.load(open('$R/train.json')); print('  ', d['device'], {k: (v['samples_per_s'], v['gpu_utilization'].get('steady_mean')) for k, v in d['runs'].items()})" >> $R/steps.log 2>&1 ;;
    trainab) .venv/bin/python bench/device/train_ab.py /tmp/fl/base $PWD $R/train_ab.json --times 4032 \
        --set train.num_proc=1 --set train.epochs=6 --set paths.root=/tmp/fl/ab > $R/train_ab.log 2>&1
      echo "trainab rc=$?" >> $R/steps.log; tail -n 1 $R/train_ab.log | cut -c1-600 >> $R/steps.log ;;
    e2e) $FL bench e2e --profile gpu $(for o in ${E2E_SET:-}; do echo --set $o; done) --results $R --work /tmp/fl/bench \
        --json > $R/e2e.log 2>&1
      echo "e2e rc=$?" >> $R/steps.log; RUN=$(run_summary $R/e2e.json "['gpu_path']['mlflow_run_id']")
      python3 -c "import json; d=json.load(open('$R/e2e.json')); print('  e2e', d.get('e2e_ratio'), {p: {k: v.get('seconds') for k, v in d[p]['stages'].items()} for p in ('gpu_path', 'cpu_path')})" >> $R/steps.log 2>&1
      manifests /tmp/fl/root/store e2e ;;  # both paths' stage manifests, by fingerprint
    start) START_LOG=1 START_RAW=$(sed -n 's/^RAW //p' $R/simulate.log | tail -1) PYTHONPATH=$PWD .venv/bin/python bench/device/spark_start.py $R/spark_start.json ${START_RUNS:-3} \
        ${START_VARIANTS:-plugin plugin-copied} > $R/spark_start.log 2>&1
      echo "start rc=$?" >> $R/steps.log; tail -n 3 $R/spark_start.log | cut -c1-300 >> $R/steps.log ;;
    pinned) .venv/bin/python bench/device/pinned_ab.py "$(sed -n 's/^RAW //p' $R/simulate.log | tail -1)" $R/pinned_pool.json \
        ${PINNED_ROUNDS:-2} ${PINNED_SIZES:-8g 0} > $R/pinned_ab.log 2>&1
      echo "pinned rc=$?" >> $R/steps.log; tail -n 4 $R/pinned_ab.log | cut -c1-400 >> $R/steps.log ;;
    scale) $FL bench scale --profile gpu $(for o in ${SCALE_SET:-}; do echo --set $o; done) --results $R \
        --work /tmp/fl/bench --json > $R/scale.log 2>&1
      echo "scale rc=$?" >> $R/steps.log; mkdir -p $R/manifests; cp -r /tmp/fl/bench/scale/*-manifests $R/manifests/ 2>/dev/null
      python3 - $R/e2e_scale.json >> $R/steps.log 2>&1 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["runs"]:
    print(f"  {r['factor']}x {r.get('kpi_rows')} rows {r['total_s']} s {r['status']} GPU {r.get('peak_gpu_memory_bytes')} "
          f"host {r.get('peak_host_memory_bytes')} disk {r.get('disk_bytes')} {r.get('stages_s')}")
print("  growth", d.get("growth"), d.get("notes"))
PY
      ;;
    hostab) # the GPU path again from its cached features, the training tensors built on the host (the stage,
      # data.npz) instead of on each rank's GPU: train and evaluate A/B on the same host in one chain
      $FL run --profile gpu --topology backbone/world --days ${DAYS:-14} --set train.tensors=host --json \
        > $R/run_host.json 2> $R/run_host.log
      echo "hostab rc=$?" >> $R/steps.log; manifests /tmp/fl/root/store hostab; parts /tmp/fl/root/store
      stage_line $R/run_host.json ;;
    cold) # the GPU path again from features with empty kernel caches (CuPy's, CUDA's): a host that never ran the
      # warm-up (make setup's `faultline warmup`); with the warm step after it, an A/B of the warm-up on one host
      rm -rf /tmp/fl/cold && mkdir -p /tmp/fl/cold
      CUPY_CACHE_DIR=/tmp/fl/cold/cupy CUDA_CACHE_PATH=/tmp/fl/cold/nv $FL run --profile gpu --topology backbone/world \
        --days ${DAYS:-14} --refresh features --refresh train --refresh evaluate --json > $R/run_cold.json 2> $R/run_cold.log
      echo "cold rc=$? ($(ls /tmp/fl/cold/cupy 2>/dev/null | wc -l) kernels compiled)" >> $R/steps.log
      manifests /tmp/fl/root/store cold; parts /tmp/fl/root/store
      stage_line $R/run_cold.json ;;
    warm) # the GPU path again on the same host, features and train recomputed: the CUDA kernels (ours, CuPy's)
      # now compiled and cached on disk, the OS page cache warm; cold start = the run's figures minus these
      $FL run --profile gpu --topology backbone/world --days ${DAYS:-14} --refresh features --refresh train \
        --refresh evaluate --json > $R/run_warm.json 2> $R/run_warm.log
      echo "warm rc=$?" >> $R/steps.log; manifests /tmp/fl/root/store warm; parts /tmp/fl/root/store
      stage_line $R/run_warm.json ;;
    scaling) $FL bench scaling --profile gpu --size ${SCALING_SIZE:-small} $(for o in ${SCALING_SET:-}; do echo --set $o; done) \
        --results $R --work /tmp/fl/bench \
        --json > $R/scaling.log 2>&1
      echo "scaling rc=$?" >> $R/steps.log ;;
    check) BR=$PWD/bench/results; [ -f $R/scaling.json ] && BR=$R
      $FL check --profile gpu --set paths.bench_results=$BR --run "$RUN" --json > $R/check.txt 2>&1
      echo "check $RUN rc=$?" >> $R/steps.log; cp /tmp/fl/root/store/checklists/$RUN/checklist.* $R/ 2>/dev/null ;;
    report) # the submission report of the newest GPU run (the HTML: the host has no Chromium to print the PDF)
      $FL report --profile gpu --run "$RUN" --no-pdf --out $R/report --json > $R/report.log 2>&1
      echo "report $RUN rc=$?" >> $R/steps.log ;;
    util) LAKE=$(ls -d /tmp/fl/root/store/ingest/*/ | head -1)
      for i in $(seq ${UTIL_N:-5}); do
        $FL run --profile gpu --topology backbone/world --days 14 --from features --lake "$LAKE" --until train \
          --refresh train --json > $R/util_$i.json 2> $R/util_$i.log
        $FL check --profile gpu --no-probe --json > $R/util_check_$i.txt 2>&1
        echo "repeat $i: $(util_verdict $R/util_check_$i.txt)" >> $R/steps.log
        cp $R/util_check_$i.txt $R/util_check_$i.json
      done
      .venv/bin/python bench/device/util_summary.py $R >> $R/steps.log 2>&1 ;;
    features) $FL bench features --profile gpu --rows ${ROWS:-15379200} --pandas-budget 60 --results $R \
        --work /tmp/fl/bench --json > $R/features.log 2>&1
      echo "features rc=$?" >> $R/steps.log ;;
    esac
  done
  step "done"; touch /tmp/fl/done
}

# at most 8 files come back: the headline files, and everything else in one tarball (written aside, then moved)
collect() {
  cp /tmp/fl/bench/ingest/partial.json $R/ingest_partial.json 2>/dev/null  # the ingest variants finished so far
  for f in steps.log ingest.json checklist.md e2e.json e2e_scale.json spark_start.json pinned_pool.json; do [ -f $R/$f ] && cp $R/$f "$OUT/"; done
  tar czf $OUT/.out.tgz.part --exclude='*.tgz' -C $R . 2>/dev/null && mv $OUT/.out.tgz.part $OUT/out.tgz
}

case "${1:-}" in
start)
  if [ -f .devparts/base.tgz ]; then rm -rf /tmp/fl/base && mkdir -p /tmp/fl/base && tar xzf .devparts/base.tgz -C /tmp/fl/base; fi
  rm -f /tmp/fl/done; setsid nohup bash "$0" chain > $R/chain.log 2>&1 < /dev/null &
  sleep 3; cat $R/steps.log
  ;;
chain) chain ;;
wait)
  # the results are copied into $OUT every 20 s, not only at the end: a call cut at its limit still brings back
  # what was there
  end=$(( $(date +%s) + ${2:-540} )); n=0
  while [ ! -f /tmp/fl/done ] && [ "$(date +%s)" -lt "$end" ]; do
    sleep 5; n=$((n + 1)); [ $((n % 4)) = 0 ] && collect
  done
  cat $R/steps.log; tail -n 3 $R/install.log $R/e2e.log 2>/dev/null | cut -c1-300
  ;;
esac
collect; true
