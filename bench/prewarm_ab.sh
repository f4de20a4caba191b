#!/usr/bin/env bash
# The train stage with its one rank started ahead (train.prewarm=true: while the features are computed) and
# without, alternated, REPEATS times each, on a small workload (the features recomputed each time, so that the rank
# has something to overlap): each run's stage seconds, its rank timeline and what the rank did before its launch.
#   usage: bash bench/prewarm_ab.sh [REPEATS] [PROFILE] [TOPOLOGY] [DAYS]     (FAULTLINE_ROOT: the store, default
#   /tmp/prewarm-ab)
set -u
cd "$(dirname "$0")/.."
export FAULTLINE_ROOT=${FAULTLINE_ROOT:-/tmp/prewarm-ab}
for i in $(seq "${1:-3}"); do for pw in false true; do
  .venv/bin/faultline run --profile "${2:-local}" --topology "${3:-topozoo/Abilene}" --days "${4:-3}" \
    --set train.num_proc=1 --set train.prewarm=$pw --refresh features --refresh train --until train --json \
    > /dev/null 2>&1 || { echo "run failed (prewarm=$pw)"; exit 1; }
  m=$(ls -td "$FAULTLINE_ROOT"/store/train/*/ | head -1)
  python3 -c "import json; d=json.load(open('$m/_manifest.json')); t=d['launch']['rank_timeline']; print(json.dumps({'prewarm': '$pw', 'repeat': $i, 'train_s': round(d['seconds'], 2), 'parts_s': t['parts_s'], 'before_launch': t.get('prewarm')}))"
done; done
