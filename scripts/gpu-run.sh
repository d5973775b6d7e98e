#!/usr/bin/env bash
# The GPU check, step 2 of 2, on the GPU machine: runs what scripts/gpu-pack.sh packed,
# in at most GPU_RUN_BUDGET seconds (default 300), every step under `timeout`. Copied into
# the pack as run.sh; run it from the repository root (bench/compare.py is read there):
#   bash gpu-pack/run.sh
# With the device tool: carry ["gpu-pack"], command "bash gpu-pack/run.sh", timeout_s 420.
#
# Steps (one line each in summary.txt: PASS / FAIL / TIMEOUT / SKIP, with its seconds):
#   unpack      the .debs into a prefix (dpkg -x, never into /), the programs into a build tree
#   libraries   cuDNN and cuBLAS/cudart where the machine has them (PyTorch's pip folders
#               nvidia/cudnn/lib and nvidia/cu13/lib first: newer than the system's), every
#               program's libraries resolved (ldd)
#   versions    GPU, driver, reel's view of CUDA/cuBLAS/cuDNN, PyTorch's
#   gpu         is there one? Without, the check stops here and says so (a dry run)
#   cuda_tests  reel_cuda_tests, all of it (REEL_CUDA_REQUIRED=1: a skip fails)
#   memcheck_*  compute-sanitizer memcheck, each test file in its own process (a crash in
#               one hides nothing of the others; the graph captures and replays included),
#               all but the one-epoch accuracy case ([data]: W1's kernels, 469 times over)
#               and the whole-stack RNN cases (in memcheck_stack)
#   memcheck_graph_probe  the hidden [.probe] case: whether memcheck itself flags a graph's
#               reuse of one address for two allocations (explains or not the graph reports)
#   racecheck, synccheck, initcheck   over the tests of the kernels with shared memory or
#               warp shuffles (reduce, softmax, norm, bias sums, attention, sort and scans)
#   sample_cnn_gpu, sample_cnn_cpu   train_fashion_mnist --model cnn, one epoch on each
#               device from the same seed; accuracy_gap: their test accuracies within 0.5 points
#   sample_bench_mlp_vs_conv1x1  the user bench sample, --quick, CPU and GPU
#   sample_gpt  train_gpt --small on the GPU, 200 steps
#   cuda_tests_rows, memcheck_rows, racecheck_rows, synccheck_rows, initcheck_rows
#               the attention tests with the switch REEL_CUDA_ATTENTION=rows (not the default)
#   cuda_tests_rows64, memcheck_rows64, racecheck_rows64   the tiles at 64 rows a block
#   cuda_tests_vector*, memcheck_vector*, racecheck_vector*   REEL_CUDA_ATTENTION=vector, 32
#               and 64 rows a block
#   cuda_tests_mma, cuda_tests_mma64, memcheck_mma, racecheck_mma   REEL_CUDA_ATTENTION=mma (the
#               tensor cores in 3xTF32, not yet measured), 32 and 64 rows a block
#   cuda_tests_stack, memcheck_stack   the recurrent tests with REEL_CUDNN_RNN=stack (the
#               whole-stack cuDNN RNN, not the default); memcheck_stack also holds the
#               [rnn_stack] cases (they set the path themselves; both paths, 40 stacks), which
#               memcheck_rnn leaves out to stay in its minute
#   cuda_tests_bn_fused, memcheck_bn_fused, racecheck_bn_fused   the norm tests (the
#               [bn_relu] cases set both paths themselves) with REEL_CUDA_BN_RELU=fused (batch
#               norm + relu fused, not the default)
#   cuda_tests_half, memcheck_half   the attention tests with REEL_CUDA_HALF_ATTENTION=cudnn
#               (cuDNN's fused f16/bf16 attention, not the default; the [half] cases set both
#               paths themselves and ran in cuda_tests too)
#   w12_half_attention  W12's step and SDPA rows under --amp bf16 with REEL_CUDA_HALF_ATTENTION
#               staged, then cudnn, then PyTorch eager under the same autocast
#   cuda_tests_channel_sums, memcheck_channel_sums, synccheck_channel_sums   the reduction
#               and bias tests with REEL_CUDA_CHANNEL_SUMS=warps (per-channel sums a warp a run,
#               not the default)
#   cuda_tests_onepass, memcheck_onepass, racecheck_onepass, synccheck_onepass   the same
#               tests (and the graph tests) with REEL_CUDA_CHANNEL_SUMS=onepass (one launch, the
#               last block of each channel adding its partials; not the default)
#   cuda_tests_small_h, memcheck_small_h   the recurrent tests with REEL_CUDA_RNN_ALGO=small_h
#               (cuDNN's small-hidden persistent kernel on the per-layer path; not the default)
#   w7_channel_sums  W7 (the bias gradient) with REEL_CUDA_CHANNEL_SUMS=cub, warps, then onepass
#   cuda_tests_channels_last, memcheck_on_channels_last   the autocast, convolution, pooling,
#               norm and layout tests with REEL_CUDA_CHANNELS_LAST=on (f16/bf16 activations
#               NHWC, not the default; the [channels_last] cases set both sides themselves)
#   cuda_tests_half_elementwise, memcheck_on_half_elementwise   the [half_elementwise], autocast
#               and channels-last tests with REEL_CUDA_HALF_ELEMENTWISE=native (f16/bf16 unary and
#               binary ops in one pass, not the default; the [half_elementwise] cases set both
#               paths themselves and ran in cuda_tests too)
#   cuda_tests_half_norm, memcheck_on_half_norm   the norm, autocast and channels-last tests
#               with REEL_CUDA_CHANNELS_LAST=on and REEL_CUDA_HALF_NORM=cudnn (cuDNN's batch norm
#               of NHWC halves, not the default; the [half_norm] cases set both paths themselves)
#   cuda_tests_half_norm_nchw, memcheck_half_norm_nchw   the norm and autocast tests with
#               REEL_CUDA_HALF_NORM=cudnn alone (NCHW halves' batch norms mixed, through cuDNN)
#   w4_w10_w11_channels_last  W4, W10 and W11 under --amp bf16: NCHW (the default), the
#               half elementwise kernels alone, NCHW with cuDNN's mixed batch norm (alone and with
#               them), NHWC, NHWC with cuDNN's batch norm and the half elementwise kernels; then
#               PyTorch eager under the same autocast
#   rnn_probe   W9's GRU layer alone: cuDNN called directly in each layout, algorithm, math type
#               and padded-IO flag, reel's path (bench/gpu_rnn_probe.cpp), then PyTorch's and its
#               top kernels (bench/reference/gru_probe_pytorch.py): is cuDNN slow for reel's
#               descriptors, or reel's wrapper around it?
#   compare_rows  bench/compare.py --only W12 with REEL_CUDA_ATTENTION=rows
#   profiles    one W9, one W12 and one W4 step (bf16 autocast, then f32) op by op
#               (bench --profile 1, REEL_CUDA_SYNC=1)
#   w9_cudnn_rnn  W9 (the GRU) with REEL_CUDNN_RNN=layers, stack, then layers with
#               REEL_CUDA_RNN_ALGO=small_h: step times, packings
#   w10_w11_bn_relu  W10 (ResNet-50 forward) and W11 (DenseNet-121 training) with
#               REEL_CUDA_BN_RELU=separate, then fused (W4 has no batch norm)
#   sdpa_rows_per_block  W12's SDPA, tiles, vector tiles and mma tiles, 32 and 64 rows a block
#               (REEL_CUDA_ATTENTION, REEL_CUDA_ATTENTION_ROWS)
#   compare     bench/compare.py --device cuda: reel against PyTorch eager, in the time left
# Output: $OUT (the device tool's) or gpu-pack/out: summary.txt and logs.tar.gz (every log,
# the benchmark JSON lines). Exit 0 when every step passed; 3 when there is no GPU.
# Environment: GPU_RUN_BENCH_ONLY (set: skip the tests, sanitizers and samples), GPU_RUN_SANITIZERS=0
# and GPU_RUN_SAMPLES=0 (skip those alone: a short lease's first run), GPU_RUN_SANITIZERS=memcheck
# (memcheck over each test file, no other tool), GPU_RUN_MEMCHECK_FILES (those files' tags alone,
# "[#test_cuda_x] [#test_cuda_y]"), GPU_RUN_TESTS
# (a Catch filter: those tests, the sanitizers over them, no samples), GPU_RUN_JOBS (the switches'
# tests and the sanitizers run this many at a time, default a third of the cores), GPU_RUN_BUDGET, GPU_RUN_WORK (default /tmp/reel-gpu-run), BENCH_ONLY (default
# W12,W1,W3,W4,W6,W7,W8), OUT.
set -uo pipefail
pack=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=${REEL_ROOT:-$(dirname "$pack")}
work=${GPU_RUN_WORK:-/tmp/reel-gpu-run}
out=${OUT:-$pack/out}
budget=${GPU_RUN_BUDGET:-300}
logs=$work/logs
export pack work logs root  # read by the functions that step runs in a child shell
rm -rf "$work"
mkdir -p "$work/prefix" "$work/build" "$work/data" "$logs" "$out"
summary=$out/summary.txt
: > "$summary"
status=0
t0=$SECONDS

note() { echo "$*" | tee -a "$summary"; }
left() { echo $((budget - (SECONDS - t0))); }
# cut_limit NAME: the caller's `limit` cut to the time left; with under 5 s, NAME is noted
# skipped and it fails
cut_limit() {
  local rem
  rem=$(left)
  ((rem < limit)) && limit=$rem
  if ((limit < 5)); then
    note "SKIP    $1 (the ${budget}s budget is spent)"
    status=1
    return 1
  fi
}
# step NAME LIMIT CMD...: CMD under min(LIMIT, time left), output in logs/NAME.log
step() {
  local name=$1 limit=$2
  shift 2
  cut_limit "$name" || return 1
  echo "[gpu-run $((SECONDS - t0))s] $name (limit ${limit}s): $*"
  local s=$SECONDS
  if declare -F "$1" > /dev/null; then  # a function of this script: timeout runs programs only
    timeout -k 5 "$limit" bash -c "$(declare -f "$1"); $1" > "$logs/$name.log" 2>&1
  else
    timeout -k 5 "$limit" "$@" > "$logs/$name.log" 2>&1
  fi
  local rc=$?
  local took=$((SECONDS - s))
  if [[ $rc -eq 0 ]]; then note "PASS    $name (${took}s)"
  elif [[ $rc -eq 124 || $rc -eq 137 ]]; then note "TIMEOUT $name (after ${took}s)"; status=1
  else note "FAIL    $name (exit $rc after ${took}s)"; status=1
  fi
  return $rc
}
finish() {
  wait_steps  # any check still running side by side
  {
    echo "---- failures, first lines of each failing log"
    for f in "$logs"/*.log; do
      grep -qE "FAILED|ERROR SUMMARY: [1-9]|^========= (Invalid|Race|Barrier|Error|Uninitialized|Program hit)|=> not found" \
        "$f" || continue
      echo "-- $(basename "$f")"
      grep -E "FAILED|with expansion|^  \"|ERROR SUMMARY|^========= (Invalid|Race|Barrier|Error|Uninitialized|Program hit)|at .* in [a-z_]*\.cu|=> not found" \
        "$f" | head -12
    done
    echo "---- versions"
    cat "$logs/versions.log" 2> /dev/null
    [[ -s "$logs/bench_table_rows.txt" ]] && { echo "---- benchmarks, REEL_CUDA_ATTENTION=rows"; cat "$logs/bench_table_rows.txt"; }
    [[ -s "$logs/bench_table.txt" ]] && { echo "---- benchmarks"; cat "$logs/bench_table.txt"; }
    [[ -s "$logs/w9_cudnn_rnn.log" ]] && { echo "---- W9, REEL_CUDNN_RNN=layers, stack, then REEL_CUDA_RNN_ALGO=small_h";
      grep -E "^REEL_CUDNN_RNN|^W9 |packings" "$logs/w9_cudnn_rnn.log"; }
    [[ -s "$logs/rnn_probe.log" ]] && { echo "---- W9's GRU layer: cuDNN variants, reel, PyTorch";
      grep -E "^rnn_probe" "$logs/rnn_probe.log"; }
    [[ -s "$logs/w10_w11_bn_relu.log" ]] && { echo "---- W10, W11, REEL_CUDA_BN_RELU=separate then fused";
      grep -E "^REEL_CUDA_BN_RELU|^W1[01] " "$logs/w10_w11_bn_relu.log"; }
    [[ -s "$logs/w12_half_attention.log" ]] && {
      echo "---- W12 --amp bf16, REEL_CUDA_HALF_ATTENTION=staged then cudnn, then PyTorch eager";
      grep -E "^REEL_CUDA_HALF_ATTENTION|^PyTorch|^W12 |refused" "$logs/w12_half_attention.log"; }
    [[ -s "$logs/w7_channel_sums.log" ]] && { echo "---- W7, REEL_CUDA_CHANNEL_SUMS=cub, warps, then onepass";
      grep -E "^REEL_CUDA_CHANNEL_SUMS|^W7 " "$logs/w7_channel_sums.log"; }
    [[ -s "$logs/w4_w10_w11_channels_last.log" ]] && {
      echo "---- W4, W10, W11 under --amp bf16: NCHW, half elementwise, NHWC, NHWC + cuDNN norm + half elementwise; PyTorch eager"
      grep -E "^REEL_CUDA_CHANNELS_LAST|^PyTorch|^W4 |^W10 |^W11 " "$logs/w4_w10_w11_channels_last.log"; }
    # the sections above as one decision per switch (each path against the default and PyTorch
    # eager, issue 46's targets); it only reads the logs, so it must not change the run's status
    echo "---- GPU paths: which wins"
    python3 "$root/bench/gpu_paths.py" "$logs" 2>&1 || true
    echo "---- total $((SECONDS - t0))s of a ${budget}s budget; exit $status"
  } >> "$summary"
  cp "$summary" "$logs/"
  tar -C "$logs" -czf "$out/logs.tar.gz" .
  echo "---- summary ($summary)"
  cat "$summary"
  exit "$status"
}

# Checks that time nothing (the switches' tests, the sanitizers) run side by side,
# GPU_RUN_JOBS at a time (default a third of the cores): compute-sanitizer's processes are
# bound by the host far more than by the GPU, so a lease's minutes cover more of them. Each
# writes its log as step does; wait_steps waits for all and notes their results. The whole
# CUDA test run (its timer tests among them) and every benchmark still run alone.
jobs_max=${GPU_RUN_JOBS:-$(($(nproc) >= 6 ? $(nproc) / 3 : 2))}
mkdir -p "$work/results"
step_par() {
  local name=$1 limit=$2
  shift 2
  while (($(jobs -rp | wc -l) >= jobs_max)); do wait -n 2> /dev/null || true; done
  cut_limit "$name" || return 1
  echo "[gpu-run $((SECONDS - t0))s] $name (side by side, limit ${limit}s): $*"
  (
    started=$SECONDS
    timeout -k 5 "$limit" "$@" > "$logs/$name.log" 2>&1
    echo "$? $((SECONDS - started))" > "$work/results/$name"
  ) &
}
wait_steps() {
  wait
  local f name rc took
  for f in "$work"/results/*; do
    [[ -e "$f" ]] || continue
    name=$(basename "$f")
    read -r rc took < "$f"
    if [[ $rc -eq 0 ]]; then note "PASS    $name (${took}s, side by side)"
    elif [[ $rc -eq 124 || $rc -eq 137 ]]; then note "TIMEOUT $name (after ${took}s, side by side)"; status=1
    else note "FAIL    $name (exit $rc after ${took}s, side by side)"; status=1
    fi
    rm -f "$f"
  done
}

# ---- unpack
unpack() {
  local deb
  for deb in "$pack"/debs/*.deb; do dpkg -x "$deb" "$work/prefix" || return 1; done
  tar -C "$work/build" -xJf "$pack/bin.tar.xz" || return 1
  mkdir -p "$work/data/fashion-mnist"
  cp "$pack"/data/fashion-mnist/*.gz "$work/data/fashion-mnist/" && tar -C "$work/data" -xJf "$pack/data/fortunes.tar.xz"
}
step unpack 60 unpack || finish
prefix_lib=$work/prefix/usr/lib/x86_64-linux-gnu
export REEL_FASHION_MNIST=$work/data/fashion-mnist
# the benchmark programs and their PyTorch peers read Debian's path
if [[ ! -e /usr/share/datasets/fashion-mnist ]] && mkdir -p /usr/share/datasets 2> /dev/null; then
  ln -s "$REEL_FASHION_MNIST" /usr/share/datasets/fashion-mnist
fi

# ---- libraries: the first folder holding each library, PyTorch's pip folders first
find_libs() {  # find_libs LIB...: "LIB DIR" a line, DIR the first folder holding LIB or NOT-FOUND
  local py dirs=()
  for py in python3 /usr/bin/python3; do
    command -v "$py" > /dev/null || continue
    mapfile -t -O "${#dirs[@]}" dirs < <("$py" -c '
import glob, os, site
roots = []
try:
    import nvidia
    roots += list(nvidia.__path__)
except Exception:
    pass
roots += [os.path.join(p, "nvidia") for p in site.getsitepackages()]
for r in dict.fromkeys(os.path.realpath(r) for r in roots if os.path.isdir(r)):
    for sub in ("cudnn/lib", "cu13/lib", "cublas/lib", "cuda_runtime/lib", "cuda_nvrtc/lib"):
        if os.path.isdir(os.path.join(r, sub)):
            print(os.path.join(r, sub))' 2> /dev/null)
  done
  dirs+=(/usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu)
  local lib d found
  for lib in "$@"; do
    found=""
    for d in "${dirs[@]}"; do
      if [[ -e "$d/$lib" ]]; then found=$d; break; fi
    done
    echo "$lib ${found:-NOT-FOUND}"
  done
}
find_libs libcudnn.so.9 libcublasLt.so.13 libcublas.so.13 libcudart.so.13 > "$work/found_libs.txt" 2>&1
# NVRTC: cuDNN compiles some fused attention engines at run time (REEL_CUDA_HALF_ATTENTION=cudnn);
# without it cuDNN refuses those graphs and reel runs them staged, so it is looked for, not required
find_libs libnvrtc.so.13 > "$work/optional_libs.txt" 2>&1
lib_path="$prefix_lib:$work/build/lib"
while read -r lib dir; do
  [[ "$dir" == NOT-FOUND ]] && continue
  [[ ":$lib_path:" == *":$dir:"* ]] || lib_path="$lib_path:$dir"
done < <(cat "$work/found_libs.txt" "$work/optional_libs.txt")
export LD_LIBRARY_PATH="$lib_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
check_libraries() {
  cat "$work/found_libs.txt" "$work/optional_libs.txt"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  local p missing=0
  for p in "$work"/build/test/cuda/reel_cuda_tests "$work"/build/samples/* "$work"/build/bench/* "$work"/build/lib/*; do
    if ldd "$p" | grep "not found"; then
      echo "$p: a library is missing"
      missing=1
    fi
  done
  ! grep -q NOT-FOUND "$work/found_libs.txt" && ((missing == 0))
}
step libraries 30 check_libraries

# ---- versions, and is there a GPU at all
cuda_tests=$work/build/test/cuda/reel_cuda_tests
versions() {
  echo "date: $(date -u +%FT%TZ), host $(hostname), $(nproc) cores, $(. /etc/os-release 2> /dev/null && echo "$PRETTY_NAME")"
  head -3 "$pack/MANIFEST" 2> /dev/null
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,clocks.max.sm --format=csv,noheader 2>&1 |
      sed 's/^/gpu: /'
  else
    echo "gpu: nvidia-smi not found"
  fi
  echo "nvcc: $(nvcc --version 2> /dev/null | grep -o 'release [0-9.]*, V[0-9.]*' || echo 'not on PATH')"
  echo "compute-sanitizer: $(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2> /dev/null || echo 'not found')"
  python3 -c 'import torch; print("pytorch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version())' \
    2>&1 | tail -1
  # reel's own view (cudart, cuBLAS, cuDNN as loaded); exits 77 without a GPU
  "$cuda_tests" --list-tags 2>&1 | grep -E "^(versions|SKIPPED|FAILED)" || true
}
versions > "$logs/versions.log" 2>&1
cat "$logs/versions.log"
note "PASS    versions"
if ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L 2> /dev/null | grep -q "^GPU "; then
  seen=$(command -v nvidia-smi > /dev/null && nvidia-smi -L 2>&1 | head -1 || echo "no nvidia-smi")
  note "SKIP    gpu: no GPU on this machine ($seen); the check stops before its first GPU call"
  status=3
  finish
fi
note "PASS    gpu ($(nvidia-smi -L | head -1))"

# the other side of each switch (docs/cuda.md, "switches"): the row kernels of attention
rows=(env REEL_CUDA_ATTENTION=rows)
rows64=(env REEL_CUDA_ATTENTION_ROWS=64)  # the tiles with 64 rows a block whatever the shape
vector=(env REEL_CUDA_ATTENTION=vector)   # the tiles with 16-byte shared reads (not yet measured)
mma=(env REEL_CUDA_ATTENTION=mma)         # the tensor cores in 3xTF32 (not yet measured)
# the other side of each switch: the path that is not the default (the H200 made fused the
# default on 2026-11-29: bnrelu names the replaced separate path, kept and tested)
stack=(env REEL_CUDNN_RNN=stack)          # the whole-stack cuDNN RNN (layers is the default)
bnrelu=(env REEL_CUDA_BN_RELU=separate)   # batch norm, then a relu pass (fused is the default)
half=(env REEL_CUDA_HALF_ATTENTION=cudnn)  # cuDNN's fused f16/bf16 attention (staged is the default)
chsums=(env REEL_CUDA_CHANNEL_SUMS=warps)   # per-channel sums a warp a run (cub is the default)
onepass=(env REEL_CUDA_CHANNEL_SUMS=onepass)  # per-channel sums in one launch (not yet measured)
smallh=(env REEL_CUDA_RNN_ALGO=small_h)    # cuDNN's small-hidden persistent RNN kernel (not yet measured)
nhwc=(env REEL_CUDA_CHANNELS_LAST=on)        # f16/bf16 activations NHWC (not yet measured)
halfnorm=(env REEL_CUDA_CHANNELS_LAST=on REEL_CUDA_HALF_NORM=cudnn)  # their batch norms through cuDNN (likewise)
halfnorm_nchw=(env REEL_CUDA_HALF_NORM=cudnn)  # NCHW halves' batch norms mixed, through cuDNN (not yet measured)
nhwc_tests="[autocast],[channels_last],[conv],[pool],[norm],[bias]"
halfew=(env REEL_CUDA_HALF_ELEMENTWISE=native)  # f16/bf16 elementwise ops in one pass (staged is the default)
halfew_tests="[half_elementwise],[autocast],[channels_last]"

# ---- the CUDA tests, whole
export REEL_CUDA_REQUIRED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
if [[ -n "${GPU_RUN_BENCH_ONLY:-}" ]]; then  # a run for the benchmarks alone: no tests, sanitizers or samples
  note "SKIP    tests, sanitizers and samples (GPU_RUN_BENCH_ONLY)"
else
filter=${GPU_RUN_TESTS:-}  # a Catch filter: these tests alone, their sanitizers, no samples
step cuda_tests 100 "$cuda_tests" --durations yes ${filter:+"$filter"}

# ---- REEL_CUDA_ATTENTION=rows over the attention tests (the tiles, the default, ran them above)
step_par cuda_tests_rows 60 "${rows[@]}" "$cuda_tests" --durations yes "[attention]"
step_par cuda_tests_rows64 60 "${rows64[@]}" "$cuda_tests" --durations yes "[attention]"
step_par cuda_tests_vector 60 "${vector[@]}" "$cuda_tests" --durations yes "[attention]"
step_par cuda_tests_vector64 60 "${vector[@]}" REEL_CUDA_ATTENTION_ROWS=64 "$cuda_tests" --durations yes "[attention]"
step_par cuda_tests_mma 60 "${mma[@]}" "$cuda_tests" --durations yes "[attention]"
step_par cuda_tests_mma64 60 "${mma[@]}" REEL_CUDA_ATTENTION_ROWS=64 "$cuda_tests" --durations yes "[attention]"
# ---- REEL_CUDNN_RNN=stack over the recurrent tests (modules and rnn() through the stack)
step_par cuda_tests_stack 60 "${stack[@]}" "$cuda_tests" --durations yes "[rnn]"
# ---- REEL_CUDA_BN_RELU=fused over the norm tests (every batch_norm_relu through the fused kernels)
step_par cuda_tests_bn_fused 60 "${bnrelu[@]}" "$cuda_tests" --durations yes "[norm]"
# ---- REEL_CUDA_HALF_ATTENTION=cudnn over the attention tests (autocast's attention in bf16)
step_par cuda_tests_half 60 "${half[@]}" "$cuda_tests" --durations yes "[attention]"
# ---- REEL_CUDA_CHANNEL_SUMS=warps over the reductions (conv bias gradients among them)
step_par cuda_tests_channel_sums 60 "${chsums[@]}" "$cuda_tests" --durations yes "[reduce],[bias]"
# ---- REEL_CUDA_CHANNEL_SUMS=onepass: the same, and the graph tests (its counters persist across replays)
step_par cuda_tests_onepass 60 "${onepass[@]}" "$cuda_tests" --durations yes "[reduce],[bias],[graph]"
# ---- REEL_CUDA_RNN_ALGO=small_h over the recurrent tests (per-layer path: every float32 layer of small H)
step_par cuda_tests_small_h 60 "${smallh[@]}" "$cuda_tests" --durations yes "[rnn]"
# ---- REEL_CUDA_CHANNELS_LAST=on over every test that makes half activations
step_par cuda_tests_channels_last 60 "${nhwc[@]}" "$cuda_tests" --durations yes "$nhwc_tests"
step_par cuda_tests_half_norm 60 "${halfnorm[@]}" "$cuda_tests" --durations yes "[norm],[autocast],[channels_last]"
# ---- REEL_CUDA_HALF_NORM=cudnn with NCHW activations (the default layout): mixed batch norms in cuDNN
step_par cuda_tests_half_norm_nchw 60 "${halfnorm_nchw[@]}" "$cuda_tests" --durations yes "[norm],[autocast]"
# ---- REEL_CUDA_HALF_ELEMENTWISE=native over the tests that run half elementwise ops
step_par cuda_tests_half_elementwise 60 "${halfew[@]}" "$cuda_tests" --durations yes "$halfew_tests"

# ---- compute-sanitizer
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2> /dev/null)
if [[ "${GPU_RUN_SANITIZERS:-1}" == 0 ]]; then  # a short lease: tests and benchmarks first
  note "SKIP    sanitizers (GPU_RUN_SANITIZERS=0)"
elif [[ -z "$sanitizer" ]]; then
  note "FAIL    sanitizers (compute-sanitizer not found)"
  status=1
else
  # every test file in its own process ([#file] tags: Catch's -#)
  mapfile -t files < <("$cuda_tests" -# --list-tags 2> /dev/null | grep -o '\[#test_[a-z_]*\]' | sort -u)
  [[ ${#files[@]} -gt 0 ]] || note "FAIL    memcheck (no test files listed)"
  [[ -n "$filter" ]] && files=()
  # a short lease: memcheck over these test files alone ("[#test_cuda_x] [#test_cuda_y]")
  [[ -n "${GPU_RUN_MEMCHECK_FILES:-}" ]] && read -ra files <<< "$GPU_RUN_MEMCHECK_FILES"
  [[ -n "$filter" ]] && step memcheck 60 "$sanitizer" --tool memcheck --error-exitcode 1 --print-limit 30 \
    "$cuda_tests" "$filter"
  for f in "${files[@]}"; do
    name=${f#"[#test_"}
    name=${name#cuda_}
    step_par "memcheck_${name%"]"}" 60 "$sanitizer" --tool memcheck --error-exitcode 1 --print-limit 30 \
      "$cuda_tests" -# "$f~[data]~[rnn_stack]"
  done
  kernels=${filter:-"[reduce],[softmax],[norm],[bias],[attention],[everyday]"}
  if [[ "${GPU_RUN_SANITIZERS:-1}" == memcheck ]]; then
    note "SKIP    racecheck, synccheck, initcheck and the switches' sanitizer steps (GPU_RUN_SANITIZERS=memcheck)"
  else
  for tool in racecheck synccheck initcheck; do
    step_par "$tool" 60 "$sanitizer" --tool "$tool" --error-exitcode 1 --print-limit 30 "$cuda_tests" "$kernels"
  done
  # the hidden probe (test_cuda_graph.cpp): does memcheck flag a graph's address reuse itself?
  step_par memcheck_graph_probe 30 "$sanitizer" --tool memcheck --error-exitcode 1 --print-limit 5 "$cuda_tests" "[.probe]"
  for tool in memcheck racecheck synccheck initcheck; do
    step_par "${tool}_rows" 60 "${rows[@]}" "$sanitizer" --tool "$tool" --error-exitcode 1 --print-limit 30 \
      "$cuda_tests" "[attention]"
  done
  # the whole stack under memcheck: every recurrent test, the [rnn_stack] cases included
  step_par memcheck_stack 90 "${stack[@]}" "$sanitizer" --tool memcheck --error-exitcode 1 --print-limit 30 \
    "$cuda_tests" "[rnn]"
  # batch norm + relu fused under memcheck and racecheck (its sums share memory and shuffles)
  for tool in memcheck racecheck; do
    step_par "${tool}_bn_fused" 60 "${bnrelu[@]}" "$sanitizer" --tool "$tool" --error-exitcode 1 --print-limit 30 \
      "$cuda_tests" "[norm]"
  done
  # cuDNN's fused attention under memcheck (its kernels are cuDNN's: racecheck is theirs to keep)
  step_par memcheck_half 60 "${half[@]}" "$sanitizer" --tool memcheck --error-exitcode 1 --print-limit 30 \
    "$cuda_tests" "[half]"
  # the per-channel sums a warp a run: loads and shuffles (no shared memory for racecheck)
  for tool in memcheck synccheck; do
    step_par "${tool}_channel_sums" 60 "${chsums[@]}" "$sanitizer" --tool "$tool" --error-exitcode 1 --print-limit 30 \
      "$cuda_tests" "[reduce],[bias]"
  done
  # the one-pass sums: shared memory, shuffles, a counter a channel and the last block's reads
  for tool in memcheck racecheck synccheck; do
    step_par "${tool}_onepass" 60 "${onepass[@]}" "$sanitizer" --tool "$tool" --error-exitcode 1 --print-limit 30 \
      "$cuda_tests" "[reduce],[bias]"
  done
  step_par memcheck_small_h 60 "${smallh[@]}" "$sanitizer" --tool memcheck --error-exitcode 1 --print-limit 30 \
    "$cuda_tests" "[rnn]~[rnn_stack]"
  # NHWC activations: cuDNN's NHWC descriptors, the strided pooling and elementwise kernels
  step_par memcheck_on_channels_last 60 "${nhwc[@]}" "$sanitizer" --tool memcheck --error-exitcode 1 --print-limit 30 \
    "$cuda_tests" "$nhwc_tests"
  step_par memcheck_on_half_norm 60 "${halfnorm[@]}" "$sanitizer" --tool memcheck --error-exitcode 1 --print-limit 30 \
    "$cuda_tests" "[norm],[channels_last]"
  step_par memcheck_half_norm_nchw 60 "${halfnorm_nchw[@]}" "$sanitizer" --tool memcheck --error-exitcode 1 \
    --print-limit 30 "$cuda_tests" "[norm],[autocast]"
  # f16/bf16 elementwise ops in one pass: the launcher's 16-byte half loads, strided and broadcast offsets
  step_par memcheck_on_half_elementwise 60 "${halfew[@]}" "$sanitizer" --tool memcheck --error-exitcode 1 --print-limit 30 \
    "$cuda_tests" "$halfew_tests"
  # the tiles with 64 rows a block (the tests' shapes take 32), and the vector tiles at both
  for tool in memcheck racecheck; do
    step_par "${tool}_rows64" 60 "${rows64[@]}" "$sanitizer" --tool "$tool" --error-exitcode 1 --print-limit 30 \
      "$cuda_tests" "[attention]"
    step_par "${tool}_vector" 60 "${vector[@]}" "$sanitizer" --tool "$tool" --error-exitcode 1 --print-limit 30 \
      "$cuda_tests" "[attention]"
    step_par "${tool}_vector64" 60 "${vector[@]}" REEL_CUDA_ATTENTION_ROWS=64 "$sanitizer" --tool "$tool" \
      --error-exitcode 1 --print-limit 30 "$cuda_tests" "[attention]"
    step_par "${tool}_mma" 60 "${mma[@]}" "$sanitizer" --tool "$tool" --error-exitcode 1 --print-limit 30 \
      "$cuda_tests" "[attention]"
  done
  fi
fi

# every check started side by side has ended before anything is timed
wait_steps

# ---- the samples, one epoch on each device, and the GPT on the GPU
samples=$work/build/samples
if [[ "${GPU_RUN_SAMPLES:-1}" == 0 ]]; then
  note "SKIP    samples (GPU_RUN_SAMPLES=0)"
elif [[ -z "$filter" ]]; then
step sample_cnn_gpu 60 "$samples/train_fashion_mnist" --device cuda --model cnn --epochs 1 \
  --data "$REEL_FASHION_MNIST" --out "$work/cnn_gpu" --logdir "$work/tb_gpu"
step sample_cnn_cpu 60 "$samples/train_fashion_mnist" --device cpu --model cnn --epochs 1 \
  --data "$REEL_FASHION_MNIST" --out "$work/cnn_cpu" --logdir "$work/tb_cpu"
acc() { sed -n 's/^test accuracy \([0-9.]*\)%.*/\1/p' "$logs/$1.log" | tail -1; }
gpu_acc=$(acc sample_cnn_gpu) cpu_acc=$(acc sample_cnn_cpu)
if [[ -n "$gpu_acc" && -n "$cpu_acc" ]]; then
  if awk -v g="$gpu_acc" -v c="$cpu_acc" 'BEGIN { d = g - c; exit !(d <= 0.5 && d >= -0.5) }'; then
    note "PASS    accuracy_gap (cnn, one epoch: gpu $gpu_acc%, cpu $cpu_acc%)"
  else
    note "FAIL    accuracy_gap (cnn, one epoch: gpu $gpu_acc%, cpu $cpu_acc%: more than 0.5 points apart)"
    status=1
  fi
else
  note "FAIL    accuracy_gap (no test accuracy in the sample logs)"
  status=1
fi
# issue 43's user bench program on both devices (quick sizes): the dense MLP against its 1x1
# convolutions, FLOPs equal, times in alternation, % of peak
step sample_bench_mlp_vs_conv1x1 60 "$samples/bench_mlp_vs_conv1x1" --quick --out "$work/bench_mlp_vs_conv1x1"
step sample_gpt 45 "$samples/train_gpt" --small --device cuda --steps 200 --eval-interval 100 \
  --data "$work/data/fortunes" --out "$work/gpt" --logdir none
fi
fi

# W9's GRU layer alone, first (seconds, and it answers W9's gap): cuDNN's variants called
# directly and reel's path, then PyTorch's. The probe has its own limit so that PyTorch's
# rows come whatever it takes (cudnnBuildRNNDynamic compiles at run time); not pass/fail
# beyond running
rnn_probe() {
  local rc=0
  timeout -k 5 25 "$work/build/bench/bench_gpu_rnn_probe" || rc=1
  python3 "$root/bench/reference/gru_probe_pytorch.py" || rc=1
  return $rc
}
step rnn_probe 45 rnn_probe
# ---- reel against PyTorch eager on this GPU: W12 and SDPA with the row kernels first,
# then the default paths (W12 with the tiles first) in the time left
compare_args=(--device cuda --build "$work/build" --python python3 --rounds 1 --reps 1 --no-compile --no-torch-compile)
step compare_rows 120 "${rows[@]}" python3 "$root/bench/compare.py" "${compare_args[@]}" --only W12 \
  --json "$logs/bench_rows.jsonl"
sed -n '/^GPU: /,$p' "$logs/compare_rows.log" > "$logs/bench_table_rows.txt"
# where a W9 and a W12 step go, op by op (REEL_CUDA_SYNC=1: each op's own time), for the
# next round's work; not pass/fail beyond running
profile() {
  REEL_CUDA_SYNC=1 "$work/build/bench/bench_w9_gru_imdb" --device cuda --steps 2 --reps 1 --profile 1 &&
    REEL_CUDA_SYNC=1 "$work/build/bench/bench_w12_gpt" --device cuda --steps 1 --reps 1 \
      --profile 1 &&
    # W4 under bf16 autocast, then in f32: where bf16's step (1.3-1.9 of f32's on 11-29) goes
    REEL_CUDA_SYNC=1 "$work/build/bench/bench_w4_vgg" --device cuda --amp bf16 --steps 1 --reps 1 --profile 1 &&
    REEL_CUDA_SYNC=1 "$work/build/bench/bench_w4_vgg" --device cuda --steps 1 --reps 1 --profile 1
}
step profiles 50 profile
# W12 under bf16 autocast: attention staged in f32 (the default), then in cuDNN's fused bf16
# kernels, then PyTorch eager (whose autocast runs attention in bf16), same steps
w12_half_attention() {
  local p
  for p in staged cudnn; do
    echo "REEL_CUDA_HALF_ATTENTION=$p"
    REEL_CUDA_HALF_ATTENTION=$p "$work/build/bench/bench_w12_gpt" --device cuda --amp bf16 --steps 10 --reps 2 ||
      return 1
  done
  echo "PyTorch eager"
  python3 "$root/bench/reference/workloads_pytorch.py" w12 --device cuda --amp bf16 --steps 10 --reps 2
}
step w12_half_attention 60 w12_half_attention
# W7 with the per-channel sums through CUB (the default), then a warp a run, then one launch
w7_channel_sums() {
  local p
  for p in cub warps onepass; do
    echo "REEL_CUDA_CHANNEL_SUMS=$p"
    REEL_CUDA_CHANNEL_SUMS=$p "$work/build/bench/bench_w7_bias_grad" --device cuda --reps 5 || return 1
  done
}
step w7_channel_sums 40 w7_channel_sums
# W4, W10 and W11 under bf16 autocast: activations NCHW (the default), the half elementwise
# kernels alone, NCHW with cuDNN's mixed batch norm (alone, then with the half elementwise
# kernels), NHWC, NHWC with cuDNN's batch norm and the half elementwise kernels; then
# PyTorch eager under the same autocast (NCHW, its default memory format). Each section's
# header holds its settings, read by bench/gpu_paths.py
w4_w10_w11_channels_last() {
  local settings
  for settings in "REEL_CUDA_CHANNELS_LAST=off" \
    "REEL_CUDA_CHANNELS_LAST=off REEL_CUDA_HALF_ELEMENTWISE=native" \
    "REEL_CUDA_CHANNELS_LAST=off REEL_CUDA_HALF_NORM=cudnn" \
    "REEL_CUDA_CHANNELS_LAST=off REEL_CUDA_HALF_NORM=cudnn REEL_CUDA_HALF_ELEMENTWISE=native" \
    "REEL_CUDA_CHANNELS_LAST=on" \
    "REEL_CUDA_CHANNELS_LAST=on REEL_CUDA_HALF_NORM=cudnn REEL_CUDA_HALF_ELEMENTWISE=native"; do
    echo "$settings"
    # shellcheck disable=SC2086 # the settings are words on purpose
    env $settings "$work/build/bench/bench_w4_vgg" --device cuda --amp bf16 --steps 10 --reps 2 &&
      env $settings "$work/build/bench/bench_w10_resnet50" --device cuda --amp bf16 --steps 10 --reps 2 &&
      env $settings "$work/build/bench/bench_w11_densenet" --device cuda --amp bf16 --steps 5 --reps 2 ||
      return 1
  done
  echo "PyTorch eager"
  local w
  for w in w4 w10 w11; do
    python3 "$root/bench/reference/workloads_pytorch.py" "$w" --device cuda --amp bf16 --steps 5 --reps 2 || return 1
  done
}
step w4_w10_w11_channels_last 170 w4_w10_w11_channels_last
# W9's GRU per layer (the default), as the whole stack, and per layer through cuDNN's
# small-hidden persistent kernel, same steps, one after the other
w9_cudnn_rnn() {
  local p
  for p in layers stack; do
    echo "REEL_CUDNN_RNN=$p"
    REEL_CUDNN_RNN=$p "$work/build/bench/bench_w9_gru_imdb" --device cuda --steps 20 --reps 2 || return 1
  done
  echo "REEL_CUDNN_RNN=layers REEL_CUDA_RNN_ALGO=small_h"
  REEL_CUDNN_RNN=layers REEL_CUDA_RNN_ALGO=small_h "$work/build/bench/bench_w9_gru_imdb" --device cuda --steps 20 \
    --reps 2
}
step w9_cudnn_rnn 50 w9_cudnn_rnn
# W10 and W11 (their norms are batch_norm_relu) with batch norm and relu separate, then
# fused (the default since 2026-11-29), same steps, one after the other
w10_w11_bn_relu() {
  local p
  for p in separate fused; do
    echo "REEL_CUDA_BN_RELU=$p"
    REEL_CUDA_BN_RELU=$p "$work/build/bench/bench_w10_resnet50" --device cuda --steps 10 --reps 2 || return 1
    REEL_CUDA_BN_RELU=$p "$work/build/bench/bench_w11_densenet" --device cuda --steps 5 --reps 2 || return 1
  done
}
step w10_w11_bn_relu 50 w10_w11_bn_relu
# SDPA alone with 32 and with 64 rows a block (REEL_CUDA_ATTENTION_ROWS), against the
# geometry's own choice in the compare below
sdpa_rows() {
  local r k
  for k in tiles vector mma; do
    for r in 32 64; do
      echo "REEL_CUDA_ATTENTION=$k REEL_CUDA_ATTENTION_ROWS=$r"
      REEL_CUDA_ATTENTION=$k REEL_CUDA_ATTENTION_ROWS=$r "$work/build/bench/bench_w12_gpt" --device cuda \
        --sdpa-only 1 --reps 3 || return 1
    done
  done
}
step sdpa_rows_per_block 60 sdpa_rows
rem=$(left)
if ((rem > 30)); then
  step compare $((rem - 10)) python3 "$root/bench/compare.py" "${compare_args[@]}" --only "${BENCH_ONLY:-W12,W1,W3,W4,W6,W7,W8}" \
    --json "$logs/bench.jsonl"
  sed -n '/^GPU: /,$p' "$logs/compare.log" > "$logs/bench_table.txt"
  [[ -s "$logs/bench_table.txt" ]] || tail -30 "$logs/compare.log" > "$logs/bench_table.txt"
else
  note "SKIP    compare (${rem}s left)"
fi
finish
