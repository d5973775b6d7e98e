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
# REEL_TRAIN_PRINT_CONFIGURE=1 prints the configure command it would run and stops (the
# ctest train_sh_cuda checks the choice).
set -euo pipefail
cd "$(dirname "$0")/.."
cuda=${REEL_CUDA:-}
if [ -z "$cuda" ]; then
  ldconfig=$(command -v ldconfig || echo /sbin/ldconfig)  # /sbin is not on every user's PATH
  if "$ldconfig" -p 2> /dev/null | grep -q 'libcuda\.so\.1 '; then cuda=ON; else cuda=OFF; fi
fi
configure=(cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREEL_BUILD_BENCH=OFF -DREEL_CUDA="$cuda")
if [ -n "${REEL_TRAIN_PRINT_CONFIGURE:-}" ]; then
  echo "${configure[*]}"
  exit 0
fi
scripts/install-deps.sh --data
echo "train.sh: CUDA backend $cuda ($([ -n "${REEL_CUDA:-}" ] && echo "REEL_CUDA=$REEL_CUDA" ||
  { [ "$cuda" = ON ] && echo "a GPU driver is installed" || echo "no GPU driver (libcuda.so.1); REEL_CUDA=ON builds it"; }))"
"${configure[@]}" > /dev/null
cmake --build build -j "$(nproc)" --target train_fashion_mnist evaluate_fashion_mnist
exec build/samples/train_fashion_mnist "$@"
