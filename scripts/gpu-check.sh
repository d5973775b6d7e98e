#!/usr/bin/env bash
# The whole check of reel on a CUDA machine that has no apt (../shared/GPU.md), one command:
#   scripts/gpu-check.sh PREFIX [CUDNN_ROOT]
#  0. versions first: GPU name, driver and the CUDA it supports, the toolkit (nvcc), every
#     cuDNN found (its version and the CUDA it was built for, asked of the library itself)
#     and cuBLAS: versions.txt, and the summary's head;
#  1. unpacks the .deb files of .gpu-deps/ (scripts/fetch-gpu-deps.sh, run where apt is)
#     into PREFIX with dpkg -x (or a Python fallback where dpkg is missing), never into /;
#  2. picks cuDNN: among the argument, $CUDNN_ROOT, python3's pip packages (nvidia.cudnn and
#     any other nvidia/*/ folder holding cudnn_version.h) and the toolkit, the first one built
#     for the toolkit's CUDA major (a cuDNN for CUDA 12 under a CUDA 13 build fails at first
#     use; reel then says so, cuda/internal/decide.h); with none, the first found, as a FAIL;
#  3. configures (Release, -DCMAKE_CUDA_ARCHITECTURES=90, benchmarks on, samples off) and builds;
#  4. runs ctest without the GPU program and, at the same time, reel_cuda_tests (REEL_CUDA_REQUIRED=1:
#     here a skip is a failure), then the order-dependent memory test alone;
#  5. compute-sanitizer: memcheck over every CUDA test but the one-epoch training run, racecheck
#     and synccheck over the reduction, softmax, norm and bias-gradient tests;
#  6. bench/compare.py --device cuda:0: reel against PyTorch eager (torch.compile with
#     BENCH_TORCH_COMPILE=1), issue #6's GPU targets in bench_table.txt;
#  7. summary.txt: one line per step (PASS / FAIL / TIMEOUT / SKIP), the versions, the failing
#     test names, the benchmark table.
# Everything lands in $OUT (default out/gpu-check). Environment: BUILD, OUT, JOBS,
# GPU_CHECK_BUDGET (seconds, default 600), GPU_CHECK_STOP_AFTER=versions|unpack|configure|build|test
# (stop early: a dry run on a machine without a GPU), BENCH_ROUNDS, BENCH_REPS (default 2, 1).
#
# Time: the whole script fits in 10 minutes on an H100 with 16 cores. Every step runs under a
# limit that is also cut to what is left of GPU_CHECK_BUDGET, so the script ends in time
# whatever happens; a step cut short says TIMEOUT. The plan, counted:
#   - build, ~180 s: 15 CUDA sources (reduce.cu, binary.cu, copy.cu, norm.cu, softmax.cu...:
#     each instantiates its kernels for 7-9 dtypes), ~60 library .cpp, ~35 test files, 10
#     benchmarks: ~105 compile jobs. The development machine's .ninja_log (2 cores shared by
#     8 builds, so ~5-10x inflated) sums 40 min, the longest jobs cpu/elementwise.cpp and
#     binary.cu; on 16 unshared cores that is ~4-8 min of CPU, ~30 s of wall time, plus the
#     longest single job on the critical path (~60-90 s): limit 240 s.
#   - tests, ~60 s wall: the CPU suite (199 ctest cases; their times sum to 570 s on the
#     loaded 2-core machine, longest 36 s: ~30 s on 12 cores) beside reel_cuda_tests, whose
#     time is W1's one epoch on the CPU (~6 s at 4 threads) and on the GPU (~2 s), the
#     2^31-element tests (~20 GiB of traffic: < 0.1 s of HBM) and ~500 small ops compared
#     against the CPU (< 10 s); limit 150 s.
#   - compute-sanitizer, ~120 s: memcheck slows each kernel 10-100x; the CUDA tests without
#     the training run launch ~3,000 kernels of under 1 ms, plus the large test's ~12 passes
#     over 2 GiB (~2 s each instrumented): ~60 s; racecheck and synccheck over ~60 launches of
#     reduce/softmax/norm/bias kernels on tensors of at most 3 x 2^18 elements: ~20 s each.
#     Limits 150 + 60 + 45 s.
#   - benchmarks, ~150 s: 8 workloads x 2 rounds x (reel + PyTorch eager) = 32 processes;
#     PyTorch's start (import, CUDA context) ~4 s, reel's ~1 s, each workload's work 1-5 s.
#     Limit: whatever is left.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 PREFIX [CUDNN_ROOT]" >&2
  exit 2
fi
prefix=$(realpath -m "$1")
cudnn_arg=${2:-${CUDNN_ROOT:-}}
build=$(realpath -m "${BUILD:-$root/build-gpu}")
out=$(realpath -m "${OUT:-$root/out/gpu-check}")
jobs=${JOBS:-$(nproc)}
stop_after=${GPU_CHECK_STOP_AFTER:-}
budget=${GPU_CHECK_BUDGET:-600}
mkdir -p "$prefix" "$out"
summary="$out/summary.txt"
: > "$summary"
: > "$out/gpu-check.log"
status=0
t0=$SECONDS

log() { echo "[gpu-check $((SECONDS - t0))s] $*" | tee -a "$out/gpu-check.log"; }
note() { echo "$*" | tee -a "$summary"; }
left() { echo $((budget - (SECONDS - t0))); }
# step NAME LIMIT CMD...: runs CMD with its output in $out/NAME.log under min(LIMIT, time
# left); records PASS / FAIL / TIMEOUT with its duration in the summary.
step() {
  local name=$1 limit=$2
  shift 2
  local rem
  rem=$(left)
  ((rem < limit)) && limit=$rem
  if ((limit < 5)); then
    note "SKIP    $name (out of time: the budget of ${budget}s is spent)"
    return 1
  fi
  log "$name (limit ${limit}s): $*"
  local s=$SECONDS
  timeout -k 10 "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  local took=$((SECONDS - s))
  if [[ $rc -eq 0 ]]; then note "PASS    $name (${took}s)"
  elif [[ $rc -eq 124 || $rc -eq 137 ]]; then note "TIMEOUT $name (after ${took}s, see $name.log)"
  else note "FAIL    $name (exit $rc after ${took}s, see $name.log)"
  fi
  return $rc
}
finish() {
  {
    echo
    echo "---- versions"
    cat "$out/versions.txt" 2> /dev/null
    for f in ctest cuda_tests cuda_memory memcheck racecheck synccheck; do
      [[ -f "$out/$f.log" ]] || continue
      failed=$(grep -E "FAILED|\(Failed\)|\(Timeout\)|\(SEGFAULT\)|Exception|test cases:.*failed|ERROR SUMMARY: [1-9]|^========= (Invalid|Race|Barrier|Error|Program hit)" \
        "$out/$f.log" | head -20)
      [[ -n "$failed" ]] && { echo "---- $f: failures (first 20 lines, see $f.log)"; echo "$failed"; }
    done
    if [[ -f "$out/bench_table.txt" ]]; then
      echo "---- benchmarks (bench_table.txt)"
      cat "$out/bench_table.txt"
    fi
    echo "---- total $((SECONDS - t0))s of a ${budget}s budget; exit $status"
  } >> "$summary"
  log "summary ($summary):"
  cat "$summary" | tee -a "$out/gpu-check.log"
  exit $status
}

export PATH="/usr/local/cuda/bin:$PATH"

# ---- 0. versions, before anything else
toolkit_cudart=$(sed -n 's/^#define CUDART_VERSION *\([0-9]*\).*/\1/p' /usr/local/cuda/include/cuda_runtime_api.h 2> /dev/null)
toolkit_major=$((${toolkit_cudart:-0} / 1000))
# cuDNN candidates: folders holding include/cudnn_version.h and a libcudnn.so.{9,8}
cudnn_candidates() {
  [[ -n "$cudnn_arg" ]] && echo "$cudnn_arg"
  local py
  for py in python3 /usr/bin/python3; do
    command -v "$py" > /dev/null || continue
    "$py" - << 'PY' 2> /dev/null
import glob, os, site, sys
roots = []
try:
    import nvidia.cudnn as m
    roots += list(m.__path__)
except Exception:
    pass
for sp in site.getsitepackages() + [site.getusersitepackages()]:
    roots += [os.path.dirname(os.path.dirname(h)) for h in glob.glob(os.path.join(sp, "nvidia", "**", "include", "cudnn_version.h"), recursive=True)]
for r in dict.fromkeys(os.path.realpath(r) for r in roots):
    print(r)
PY
  done
  echo /usr/local/cuda
  echo /usr
}
cudnn_libdir() {  # the folder of ROOT's libcudnn.so.9 (or .8)
  local d
  for d in "$1/lib" "$1/lib64" "$1/lib/x86_64-linux-gnu"; do
    if [[ -e "$d/libcudnn.so.9" || -e "$d/libcudnn.so.8" ]]; then echo "$d"; return 0; fi
  done
  return 1
}
# Asks the library itself: "VERSION CUDART" (cudnnGetVersion, cudnnGetCudartVersion).
probe_cudnn() {
  local lib=$1 exe="$out/probe_cudnn"
  if [[ ! -x "$exe" ]]; then
    printf '%s\n' '#include <stdio.h>' '#include <stddef.h>' 'size_t cudnnGetVersion(void);' \
      'size_t cudnnGetCudartVersion(void);' \
      'int main(void) { printf("%zu %zu\n", cudnnGetVersion(), cudnnGetCudartVersion()); return 0; }' \
      > "$out/probe_cudnn.c"
  fi
  local so=libcudnn.so.9
  [[ -e "$lib/$so" ]] || so=libcudnn.so.8
  cc -o "$exe.$$" "$out/probe_cudnn.c" "$lib/$so" 2> /dev/null &&
    LD_LIBRARY_PATH="$lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout 20 "$exe.$$"
  local rc=$?
  rm -f "$exe.$$"
  return $rc
}
cudnn_root="" cudnn_lib="" cudnn_fallback="" cudnn_fallback_lib=""
{
  echo "date: $(date -u +%FT%TZ), host $(hostname), $(nproc) cores"
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
    nvidia-smi 2> /dev/null | grep -o "CUDA Version: [0-9.]*" | sed 's/^/driver supports /'
  else
    echo "gpu: nvidia-smi not found"
  fi
  echo "toolkit: $(nvcc --version 2> /dev/null | grep -o 'release [0-9.]*, V[0-9.]*' || echo 'nvcc not found'), CUDART_VERSION ${toolkit_cudart:-?}"
  cublas_h=/usr/local/cuda/include/cublas_api.h
  if [[ -e $cublas_h ]]; then
    echo "cublas: headers $(sed -n 's/^#define CUBLAS_VER_\(MAJOR\|MINOR\|PATCH\) *\([0-9]*\).*/\2/p' $cublas_h | paste -sd.)," \
      "library $(ls /usr/local/cuda/lib64/libcublasLt.so.* 2> /dev/null | sed 's|.*/||' | sort -V | tail -1)"
  fi
  echo "compute-sanitizer: $(command -v compute-sanitizer || ls /usr/local/cuda/compute-sanitizer/compute-sanitizer 2> /dev/null || echo 'not found')"
  while read -r cand; do
    [[ -e "$cand/include/cudnn_version.h" ]] || continue
    lib=$(cudnn_libdir "$cand") || continue
    v=$(probe_cudnn "$lib")
    if [[ -z "$v" ]]; then
      echo "cudnn candidate: $cand (library in $lib does not load)"
      continue
    fi
    read -r ver cudart <<< "$v"
    echo "cudnn candidate: $cand: cuDNN $((ver / 10000)).$((ver % 10000 / 100)).$((ver % 100)) for CUDA $((cudart / 1000)).$((cudart % 1000 / 10))"
    if [[ -z "$cudnn_root" && $((cudart / 1000)) -eq $toolkit_major ]]; then
      cudnn_root=$cand cudnn_lib=$lib
    fi
    [[ -z "$cudnn_fallback" ]] && cudnn_fallback=$cand cudnn_fallback_lib=$lib
  done < <(cudnn_candidates | awk '!seen[$0]++')
  echo "cudnn chosen: ${cudnn_root:-none built for CUDA $toolkit_major}"
} > "$out/versions.txt" 2>&1
cat "$out/versions.txt" | tee -a "$out/gpu-check.log"
if [[ -n "$cudnn_root" ]]; then
  note "PASS    versions (cuDNN for CUDA $toolkit_major: $cudnn_root)"
elif [[ -n "$cudnn_fallback" ]]; then
  cudnn_root=$cudnn_fallback cudnn_lib=$cudnn_fallback_lib
  note "FAIL    versions (no cuDNN built for CUDA $toolkit_major; using $cudnn_root: convolutions will fail with" \
    "reel's version error; install nvidia-cudnn-cu$toolkit_major)"
  status=1
else
  note "FAIL    versions (no loadable cuDNN found: pass its folder as the second argument)"
  status=1
  finish
fi
[[ "$stop_after" == versions ]] && finish

# ---- 1. dependencies from .gpu-deps/
unpack() {  # dpkg -x, or the same by hand: a .deb is an ar archive holding data.tar.*
  if command -v dpkg > /dev/null; then
    dpkg -x "$1" "$prefix"
  else
    python3 - "$1" "$prefix" << 'PY'
import io, sys, tarfile
deb, dest = sys.argv[1], sys.argv[2]
data = open(deb, "rb").read()
assert data[:8] == b"!<arch>\n", f"{deb}: not an ar archive"
pos = 8
while pos < len(data):
    name, size = data[pos:pos + 16].decode().strip().rstrip("/"), int(data[pos + 48:pos + 58].decode())
    body = data[pos + 60:pos + 60 + size]
    if name.startswith("data.tar"):
        if name.endswith(".zst"):
            import zstandard  # only for zstd-compressed packages
            body = zstandard.ZstdDecompressor().decompress(body, max_output_size=1 << 31)
        tarfile.open(fileobj=io.BytesIO(body)).extractall(dest)
    pos += 60 + size + (size & 1)
PY
  fi
}
debs=("$root"/.gpu-deps/*.deb)
if [[ ! -e "${debs[0]}" ]]; then
  log "no .deb files in $root/.gpu-deps: run scripts/fetch-gpu-deps.sh where apt works (oneDNN, fmt, Catch2, zlib)"
  note "FAIL    unpack (no .gpu-deps/*.deb)"
  status=1
  finish
fi
for deb in "${debs[@]}"; do
  stamp="$prefix/.unpacked-$(basename "$deb")"
  [[ -e "$stamp" ]] && continue
  log "unpack $(basename "$deb")"
  if unpack "$deb"; then touch "$stamp"; else note "FAIL    unpack $(basename "$deb")"; status=1; fi
done
libdir="$prefix/usr/lib/x86_64-linux-gnu"
# Some development links are absolute (libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13):
# point them into the prefix, where the runtime package put the file.
for link in "$libdir"/*.so; do
  [[ -L "$link" ]] || continue
  target=$(readlink "$link")
  if [[ "$target" == /* && -e "$prefix$target" ]]; then
    ln -sfn "$prefix$target" "$link" && log "relinked $link -> $prefix$target"
  elif [[ ! -e "$link" ]]; then
    log "warning: dangling $link -> $target"
  fi
done
note "PASS    unpack ($(ls "${debs[@]}" | wc -l) packages into $prefix)"
[[ "$stop_after" == unpack ]] && finish

# ---- 3. configure and build
export LD_LIBRARY_PATH="$libdir:$cudnn_lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fashion="$prefix/usr/share/datasets/fashion-mnist"
if [[ -d "$fashion" ]]; then
  export REEL_FASHION_MNIST="$fashion"
  # the benchmark programs read Debian's path; link it when this user may
  if [[ ! -e /usr/share/datasets/fashion-mnist ]] && mkdir -p /usr/share/datasets 2> /dev/null; then
    ln -s "$fashion" /usr/share/datasets/fashion-mnist && log "linked /usr/share/datasets/fashion-mnist -> $fashion"
  fi
else
  log "no Fashion-MNIST in $fashion: the W1 training test fails and W1-W3 benchmarks skip (fetch-gpu-deps.sh --data)"
fi
step configure 120 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DREEL_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_PREFIX_PATH="$prefix/usr" -DCUDNN_ROOT="$cudnn_root" \
  -DZLIB_ROOT="$prefix/usr" -DREEL_BENCH_LIBTORCH=OFF -DREEL_BUILD_BENCH=ON -DREEL_BUILD_SAMPLES=OFF ||
  { status=1; finish; }
grep -E "reel CUDA backend" "$out/configure.log" | tee -a "$out/versions.txt"
[[ "$stop_after" == configure ]] && finish
step build 240 cmake --build "$build" -j "$jobs" || { status=1; finish; }
[[ "$stop_after" == build ]] && finish

# ---- 4. tests: the CPU suite and the GPU program side by side (the GPU tests use few cores)
export REEL_CUDA_REQUIRED=1  # reel_cuda_tests must run here: a skip (exit 77) fails
cuda_tests="$build/test/cuda/reel_cuda_tests"
"$cuda_tests" --list-tests > "$out/cuda_tests_list.txt" 2>&1
(OMP_NUM_THREADS=4 step cuda_tests 150 "$cuda_tests" --durations yes -r junit -o "$out/cuda_tests.xml" \
  > /dev/null; echo $? > "$out/.cuda_tests.rc") &
cuda_pid=$!
step ctest 150 ctest --test-dir "$build" -j "$((jobs > 4 ? jobs - 4 : 1))" --output-on-failure \
  --output-junit "$out/ctest.xml" -E '^reel_cuda_tests$' || status=1
wait "$cuda_pid"
[[ "$(cat "$out/.cuda_tests.rc" 2> /dev/null)" == 0 ]] || status=1
grep -h "^\(PASS\|FAIL\|TIMEOUT\|SKIP\) *cuda_tests" "$summary" > /dev/null || note "FAIL    cuda_tests (no result)"
# the memory-pool test alone, in a fresh process: its statistics must not depend on test order
step cuda_memory 30 "$cuda_tests" "[memory]" || status=1
[[ "$stop_after" == test ]] && finish

# ---- 5. compute-sanitizer
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/compute-sanitizer/compute-sanitizer 2> /dev/null)
if [[ -z "$sanitizer" ]]; then
  note "FAIL    sanitizers (compute-sanitizer not found in the toolkit)"
  status=1
else
  # memcheck: every CUDA test but W1's epoch (its kernels are the op tests' kernels, 469 times over)
  step memcheck 150 "$sanitizer" --tool memcheck --error-exitcode 1 --print-limit 50 "$cuda_tests" "~[train]" ||
    status=1
  # shared-memory races and barrier misuse in the kernels that use shared memory and warp shuffles
  kernels="[reduce],[softmax],[norm],[bias]"
  step racecheck 60 "$sanitizer" --tool racecheck --error-exitcode 1 --print-limit 50 "$cuda_tests" "$kernels" ||
    status=1
  step synccheck 45 "$sanitizer" --tool synccheck --error-exitcode 1 --print-limit 50 "$cuda_tests" "$kernels" ||
    status=1
fi

# ---- 6. benchmarks: reel against PyTorch eager on this GPU (bench/compare.py, issue #6's targets)
shopt -s nullglob
programs=("$build"/bench/bench_w*)
if [[ ${#programs[@]} -eq 0 ]]; then
  note "SKIP    benchmarks (none built in $build/bench)"
  finish
fi
py=""
for cand in python3 /usr/bin/python3; do
  if "$cand" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2> /dev/null; then
    py=$cand
    break
  fi
done
if [[ -n "$py" ]]; then
  "$py" -c 'import torch; print("pytorch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version())' \
    >> "$out/versions.txt" 2>&1
  compile_flag=(--no-torch-compile)
  [[ "${BENCH_TORCH_COMPILE:-0}" == 1 ]] && compile_flag=()
  step bench_compare 900 "$py" "$root/bench/compare.py" --device cuda:0 --build "$build" --python "$py" \
    --rounds "${BENCH_ROUNDS:-2}" --reps "${BENCH_REPS:-1}" --json "$out/bench.jsonl" ${compile_flag[@]+"${compile_flag[@]}"} || status=1
  sed -n '/^GPU: /,$p' "$out/bench_compare.log" > "$out/bench_table.txt"
  [[ -s "$out/bench_table.txt" ]] || tail -40 "$out/bench_compare.log" > "$out/bench_table.txt"
else
  note "SKIP    pytorch benchmarks (no python3 with CUDA torch): reel's programs alone"
  declare -A bench_args=(
    [w1_mlp]="--epochs 1" [w2_conv_mlp]="--epochs 1" [w3_cnn]="--steps 200 --reps 2"
    [w4_vgg]="--steps 20 --reps 2" [w5_overhead]="--reps 2" [w6_optim]="--reps 2"
    [w7_bias_grad]="--reps 2" [w8_wide_fc]="--steps 10 --reps 2" [w0_peak]="--reps 2"
  )
  for prog in "${programs[@]}"; do
    name=${prog##*/bench_}
    # shellcheck disable=SC2086
    step "bench_$name" 120 "$prog" --device cuda:0 --json "$out/bench.jsonl" ${bench_args[$name]:-} || status=1
  done
fi
finish
