#!/usr/bin/env bash
# ctest gbench_adapter: installs the build into a scratch prefix, builds bm_mlp.cpp (a Google
# Benchmark program using <reel/measure/gbench.h>) against it and Debian's libbenchmark-dev
# with find_package, runs it, and checks that the work counters came out.
# Usage: run.sh BUILD_DIR WORK_DIR GENERATOR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(realpath "$1") work=$2 generator=$3
rm -rf "$work"
mkdir -p "$work/src"
cmake --install "$build" --prefix "$work/prefix" > /dev/null
cp "$here/bm_mlp.cpp" "$work/src/"
cat > "$work/src/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.22)
project(bm_mlp LANGUAGES CXX)
find_package(reel REQUIRED)
find_package(benchmark REQUIRED)
add_executable(bm_mlp bm_mlp.cpp)
target_link_libraries(bm_mlp PRIVATE reel::reel benchmark::benchmark)
CMAKE
cmake -S "$work/src" -B "$work/build" -G "$generator" -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build" > "$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
XDG_CACHE_HOME="$work/cache" OMP_NUM_THREADS=2 "$work/build/bm_mlp" --benchmark_min_time=0.05 \
  --benchmark_format=json > "$work/out.json"
for counter in '"FLOP/s"' '"bytes/s"' '"%peak"' '"%bandwidth"' '"BM_mlp_step/64/manual_time"'; do
  grep -q "$counter" "$work/out.json" || { echo "no $counter in the benchmark's output:"; cat "$work/out.json"; exit 1; }
done
# the FLOP rate is positive: 2 x 64 x (784 x 128 + 128 x 10) products forward alone
grep -E '"FLOP/s": [1-9]' "$work/out.json" > /dev/null || { echo "FLOP/s is not positive:"; cat "$work/out.json"; exit 1; }
echo "a Google Benchmark program built against the installed reel and libbenchmark-dev ran with reel's counters"
