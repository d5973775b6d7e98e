#!/usr/bin/env bash
# The test command: installs missing build dependencies, builds reel and its tests
# (with the CUDA backend when nvcc is found; GPU tests skip without a GPU) and runs
# the whole suite through ctest. Usage: scripts/test.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
# --data: the tests that train on real data (the multi-host test of dist/, the samples' checks)
# skip without Fashion-MNIST, and a fresh machine has none: installing it here is what makes
# CI run them (31 MB; a machine that once ran scripts/train.sh had hidden this).
scripts/install-deps.sh --data
jobs=$(nproc)
# A full disk shows up as a dozen unrelated failures (pip, safetensors' writes, mpirun's session
# folder), so say it first: a fresh build and run of the suite took 3.7 GiB at its peak
# (2026-11-29), the build folder 3.1 of it, the temporary folder and the venvs the rest.
for dir in "$(dirname "$(realpath -m "$build")")" "${TMPDIR:-/tmp}"; do
  free_gib=$(df -Pk "$dir" | awk 'NR == 2 { print int($4 / 1048576) }')
  if [ "$free_gib" -lt 5 ]; then
    echo "scripts/test.sh: warning: $free_gib GiB free under $dir; building and running the suite takes about 4 GiB" >&2
  fi
done
# CUDA wherever nvcc is (also when scripts/train.sh configured this folder without it)
cuda=OFF
if command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then cuda=ON; fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREEL_BUILD_BENCH=OFF -DREEL_CUDA=$cuda -DREEL_WERROR=ON
cmake --build "$build" -j "$jobs"
ctest --test-dir "$build" -j "$jobs" --output-on-failure
