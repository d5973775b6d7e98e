#!/usr/bin/env bash
# The plain CMake way, as a user who does not read scripts/ builds reel: the default
# generator (Unix Makefiles on CMake 3.25), with and without nvcc. CI runs it after
# scripts/test.sh (whose Ninja build compiles and tests everything):
#  - as the machine is (the CUDA backend on when nvcc is found): configure, then build
#    libreel, the target where the generators differ (its CUDA objects, architectures
#    and dialect flags); about as long as the library part of the Ninja build;
#  - without nvcc (not on PATH, /usr/local/cuda not searched): configure and generate
#    only; a CUDA-less build compiles a subset of what the Ninja build compiled.
# Usage: scripts/check-makefiles.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-make}
opts=(-DREEL_BUILD_BENCH=OFF -DREEL_BUILD_SAMPLES=OFF -DREEL_WERROR=ON)
cmake -S . -B "$build" -G "Unix Makefiles" "${opts[@]}"
cmake --build "$build" -j "$(nproc)" --target reel
if grep -q '^REEL_CUDA:BOOL=ON' "$build/CMakeCache.txt"; then
  # REEL_NVCC set to not-found skips the search, as a machine without the toolkit finds nothing
  nocuda_path=$(printf '%s' "$PATH" | tr ':' '\n' | grep -v cuda | paste -sd: -)
  rm -rf "$build-nocuda"  # a cached REEL_CUDA=ON from an earlier configure would survive
  PATH="$nocuda_path" cmake -S . -B "$build-nocuda" -G "Unix Makefiles" "${opts[@]}" -DREEL_NVCC=REEL_NVCC-NOTFOUND
  grep -q '^REEL_CUDA:BOOL=OFF' "$build-nocuda/CMakeCache.txt"
fi
echo "Unix Makefiles: configured and built with the machine's toolchain, and configured without nvcc"
