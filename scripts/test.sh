#!/usr/bin/env bash
# The test command: installs missing build dependencies, builds reel and its tests
# (with the CUDA backend when nvcc is found; GPU tests skip without a GPU) and runs
# the whole suite through ctest. Usage: scripts/test.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
scripts/install-deps.sh
jobs=$(nproc)
# CUDA wherever nvcc is (also when scripts/train.sh configured this folder without it)
cuda=OFF
if command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then cuda=ON; fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREEL_BUILD_BENCH=OFF -DREEL_CUDA=$cuda -DREEL_WERROR=ON
cmake --build "$build" -j "$jobs"
ctest --test-dir "$build" -j "$jobs" --output-on-failure
