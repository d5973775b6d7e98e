#!/usr/bin/env bash
# Trains the Fashion-MNIST sample: installs what is missing (build dependencies and
# Debian's dataset-fashion-mnist), builds, and runs samples/train_fashion_mnist.
# Usage: scripts/train.sh [sample options, e.g. --model cnn --epochs 10]
#
# It builds the CUDA backend only where it can run: when a GPU driver is installed
# (libcuda.so.1 known to the loader), or when asked with REEL_CUDA=ON in the environment
# (REEL_CUDA=OFF never builds it). An installed nvcc alone is not a reason: without a driver
# nothing could run what its objects take minutes to compile (README, "Build time").
# CI (scripts/test.sh) builds the CUDA code wherever nvcc is found.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --data
cuda=${REEL_CUDA:-}
if [ -z "$cuda" ]; then
  if /sbin/ldconfig -p 2> /dev/null | grep -q 'libcuda\.so\.1 '; then cuda=ON; else cuda=OFF; fi
fi
echo "train.sh: CUDA backend $cuda ($([ -n "${REEL_CUDA:-}" ] && echo "REEL_CUDA=$REEL_CUDA" ||
  { [ "$cuda" = ON ] && echo "a GPU driver is installed" || echo "no GPU driver (libcuda.so.1); REEL_CUDA=ON builds it"; }))"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREEL_BUILD_BENCH=OFF -DREEL_CUDA="$cuda" > /dev/null
cmake --build build -j "$(nproc)" --target train_fashion_mnist evaluate_fashion_mnist
exec build/samples/train_fashion_mnist "$@"
