#!/usr/bin/env bash
# Builds the CPU tests with AddressSanitizer + UndefinedBehaviorSanitizer and runs them.
# Usage: scripts/sanitize.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-asan}
scripts/install-deps.sh
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DREEL_SANITIZE=ON -DREEL_CUDA=OFF -DREEL_WERROR=ON \
  -DREEL_BUILD_BENCH=OFF -DREEL_BUILD_SAMPLES=OFF
cmake --build "$build" -j "$(nproc)" --target reel_tests
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export OMP_NUM_THREADS=2
"$build"/test/reel_tests
