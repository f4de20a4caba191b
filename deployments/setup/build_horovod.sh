#!/usr/bin/env bash
# Build Horovod 0.28.1 once per machine and cache the wheel outside the checkout; prints the wheel's path.
#   usage: build_horovod.sh PYTHON SDIST MODE      MODE: cpu (Gloo) | nccl (Gloo + NCCL for GPU tensors)
# The sdist is the patched one (C++17 for PyTorch >= 2.1, <string> for GCC 13; deployments/setup/wheelhouse.py).
# NCCL comes from the nvidia-nccl wheel that a CUDA torch installs; nvcc from CUDA_HOME (default /usr/local/cuda).
set -euo pipefail
PY=$(cd "$(dirname "$1")" && pwd)/$(basename "$1"); SDIST=$(cd "$(dirname "$2")" && pwd)/$(basename "$2"); MODE=${3:-cpu}
HVD_VERSION=0.28.1
read -r TORCH_VERSION PYV < <("$PY" -c 'import sys, torch; print(torch.__version__.split("+")[0], "%d%d" % sys.version_info[:2])')
CACHE=${FAULTLINE_CACHE:-$HOME/.cache/faultline}
SRC=$(sha256sum "$SDIST" | cut -c1-12)  # the patched sources are part of the key
WHEELS="$CACHE/wheels/horovod-$HVD_VERSION-$SRC-$MODE-py$PYV-torch-$TORCH_VERSION"
mkdir -p "$WHEELS"
existing=$(ls "$WHEELS"/horovod-*.whl 2>/dev/null | head -n1 || true)
if [ -n "$existing" ]; then echo "$existing"; exit 0; fi

work=$(mktemp -d "$CACHE/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "[faultline setup] building Horovod $HVD_VERSION ($MODE) against torch $TORCH_VERSION (once; 2-8 min)" >&2
tar -xzf "$SDIST" -C "$work"
export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
       HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_GPU_OPERATIONS= \
       CMAKE_POLICY_VERSION_MINIMUM=3.5 MAKEFLAGS="-j$(nproc)"
# GCC 13 needs these headers where Horovod's sources assume them (harmless on older compilers)
export CXXFLAGS="${CXXFLAGS:--include string -include cstdint -include stdexcept -include limits -include memory}"
if [ "$MODE" = nccl ]; then
  NCCL_DIR=$("$PY" -c 'import nvidia.nccl as m; print(list(m.__path__)[0])')
  mkdir -p "$work/nccl_lib" && ln -sf "$NCCL_DIR/lib/libnccl.so.2" "$work/nccl_lib/libnccl.so"
  export HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_NCCL_INCLUDE="$NCCL_DIR/include" HOROVOD_NCCL_LIB="$work/nccl_lib" \
         HOROVOD_NCCL_LINK=SHARED HOROVOD_BUILD_CUDA_CC_LIST=${HOROVOD_BUILD_CUDA_CC_LIST:-90} \
         CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} HOROVOD_CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} \
         NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH="$NCCL_DIR/lib:${LD_LIBRARY_PATH:-}"
fi
(cd "$work/horovod-$HVD_VERSION" && "$PY" -m pip wheel --no-index --no-build-isolation --no-deps -w "$work/out" . >"$work/build.log" 2>&1) || {
  { grep -n -E ' error: |Error [0-9]|CMake Error|FAILED' "$work/build.log" | cut -c1-300 | head -30 >&2; } || true
  echo "[faultline setup] Horovod build failed; full log: $work/build.log (kept)" >&2; trap - EXIT; exit 1; }
whl=$(ls "$work"/out/horovod-*.whl)
cp "$whl" "$WHEELS/.$(basename "$whl").partial" && mv "$WHEELS/.$(basename "$whl").partial" "$WHEELS/$(basename "$whl")"
echo "$WHEELS/$(basename "$whl")"
