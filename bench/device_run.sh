#!/usr/bin/env bash
# One call on the H200 (device tool): stage the few packages the image lacks (.devmini/, see bench/README.md),
# build Horovod 0.28.1 with NCCL there (in the background), run the CUDA kernel tests, then the training benchmark.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
S=/tmp/site; mkdir -p $S
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $S .devmini/whl/*.whl || exit 1
(PYTHONPATH=$S bash .devmini/hvd_build.sh "$PWD/.devmini/horovod-0.28.1-patched.tar.gz" /tmp/site_hvd 16 \
   > "$OUT/hvd_build.log" 2>&1) &
HVD=$!
export PYTHONPATH=$S:$PWD
{ nvidia-smi; nvidia-smi topo -m; python3 -c 'import torch; print(torch.__version__, torch.cuda.get_device_name())'; } \
  > "$OUT/device.txt" 2>&1
REQUIRE_GPU=1 python3 -m pytest -q -p no:cacheprovider tests/gpu_kernels > "$OUT/kernel_tests.txt" 2>&1
tail -3 "$OUT/kernel_tests.txt"
wait $HVD; tail -2 "$OUT/hvd_build.log"
NCCL_DIR=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])')
export PYTHONPATH=/tmp/site_hvd:$PYTHONPATH PATH=/tmp/site_hvd/bin:$PATH LD_LIBRARY_PATH=$NCCL_DIR/lib:${LD_LIBRARY_PATH:-}
horovodrun --check-build > "$OUT/hvd_check_build.txt" 2>&1; cat "$OUT/hvd_check_build.txt"
python3 -m flows.cli bench train --profile gpu --set train.num_proc=1 --set train.epochs=6 \
  --topology backbone/world --times 4032 --work /tmp/bench --results "$OUT" --json > "$OUT/bench_train.log" 2>&1
echo "bench rc=$?"; tail -c 1500 "$OUT/bench_train.log"
cp /tmp/bench/train/horovod/gpu_utilization.png "$OUT/train_gpu_utilization.png" 2>/dev/null
cp /tmp/bench/train/horovod/train.log "$OUT/train_horovod.log" 2>/dev/null
gzip -c /tmp/bench/train/horovod/trace.json > "$OUT/train_trace.json.gz" 2>/dev/null
