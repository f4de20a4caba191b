#!/usr/bin/env bash
# Build Horovod 0.28.1 (Gloo + PyTorch, no MPI) once per machine and cache the wheel outside the checkout.
# PyPI's sdist sets C++14, which PyTorch >= 2.1 headers reject; we patch both CMakeLists to C++17.
# Usage: build_horovod.sh PYTHON   (prints the path of the cached wheel)
set -euo pipefail
PY=$(command -v "${1:-python}"); PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")
HVD_VERSION=0.28.1
TORCH_VERSION=$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')
CACHE=${FAULTLINE_CACHE:-$HOME/.cache/faultline}
WHEELS="$CACHE/wheels/horovod-$HVD_VERSION-torch-$TORCH_VERSION"
mkdir -p "$WHEELS"
existing=$(ls "$WHEELS"/horovod-*.whl 2>/dev/null | head -n1 || true)
if [ -n "$existing" ]; then echo "$existing"; exit 0; fi

work=$(mktemp -d "$CACHE/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "[faultline] building Horovod $HVD_VERSION against torch $TORCH_VERSION (once; ~8 min on 2 cores)" >&2
"$PY" -m pip download --quiet --no-deps --no-binary :all: "horovod==$HVD_VERSION" -d "$work" >&2
tar -xzf "$work/horovod-$HVD_VERSION.tar.gz" -C "$work"
src="$work/horovod-$HVD_VERSION"
sed -i 's/CMAKE_CXX_STANDARD 14/CMAKE_CXX_STANDARD 17/; s/std=c++14/std=c++17/g' \
    "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"
grep -q 'include <string>' "$src/horovod/common/group_table.h" || \
    sed -i '0,/#include/s//#include <string>\n#include/' "$src/horovod/common/group_table.h"
export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
       HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_GPU_OPERATIONS= \
       CMAKE_POLICY_VERSION_MINIMUM=3.5 MAKEFLAGS="-j$(nproc)"
(cd "$src" && "$PY" -m pip wheel --no-build-isolation --no-deps -w "$work/out" . >&2)
whl=$(ls "$work"/out/horovod-*.whl)
cp "$whl" "$WHEELS/.$(basename "$whl").partial" && mv "$WHEELS/.$(basename "$whl").partial" "$WHEELS/$(basename "$whl")"
echo "$WHEELS/$(basename "$whl")"
