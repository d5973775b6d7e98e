#!/usr/bin/env bash
# Compile time of a one-file training loop (the W1 MLP with SGD) at -O2: reel's
# umbrella header against libtorch's <torch/torch.h>, alternating, 5 runs each.
# Usage: bench/compile_time.sh [--json PATH]   (needs no build: <reel/...> is this source tree)
set -euo pipefail
cd "$(dirname "$0")/.."
json=""
[ "${1:-}" = "--json" ] && json=$2
runs=5
# <reel/reel.h> resolves through include/reel -> the sources, as in a build tree
inc=$(mktemp -d)
trap 'rm -rf "$inc"' EXIT
ln -s "$PWD" "$inc/reel"
reel_cmd=(g++ -std=c++20 -O2 -I"$inc" -c bench/compile/w1_loop_reel.cpp -o /tmp/reel_loop.o)
torch_inc=/usr/include/torch/csrc/api/include
torch_cmd=(g++ -std=c++17 -O2 -I"$torch_inc" -c bench/compile/w1_loop_libtorch.cpp -o /tmp/torch_loop.o)
have_torch=0
[ -f "$torch_inc/torch/torch.h" ] && have_torch=1
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# a failed compile must stop the script, not be timed
time_of() {
  local t0 t1
  t0=$(date +%s.%N)
  "$@" >/dev/null || { echo "compile_time.sh: compile failed: $*" >&2; return 1; }
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc -l
}
reel_times=(); torch_times=()
for i in $(seq $runs); do
  t=$(time_of "${reel_cmd[@]}") || exit 1
  reel_times+=("$t")
  if [ $have_torch = 1 ]; then
    t=$(time_of "${torch_cmd[@]}") || exit 1
    torch_times+=("$t")
  fi
done
r=$(printf '%s\n' "${reel_times[@]}" | median)
printf 'compile  reel      %.2f s (median of %d)\n' "$r" $runs
[ -n "$json" ] && echo "{\"workload\": \"compile\", \"system\": \"reel\", \"device\": \"cpu\", \"threads\": 1, \"metric\": \"compile_s\", \"median\": $r, \"n\": $runs}" >> "$json"
if [ $have_torch = 1 ]; then
  t=$(printf '%s\n' "${torch_times[@]}" | median)
  printf 'compile  libtorch  %.2f s (median of %d)\nratio reel/libtorch %.3f\n' "$t" $runs "$(echo "$r / $t" | bc -l)"
  [ -n "$json" ] && echo "{\"workload\": \"compile\", \"system\": \"libtorch\", \"device\": \"cpu\", \"threads\": 1, \"metric\": \"compile_s\", \"median\": $t, \"n\": $runs}" >> "$json"
else
  echo "libtorch headers not found: install libtorch-dev to compare"
fi
