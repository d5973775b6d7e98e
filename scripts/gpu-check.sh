#!/usr/bin/env bash
# The whole check of reel on a CUDA machine that has no apt (../shared/GPU.md):
#   scripts/gpu-check.sh PREFIX [CUDNN_ROOT]
# 1. unpacks the .deb files of .gpu-deps/ (scripts/fetch-gpu-deps.sh, run where apt is)
#    into PREFIX with dpkg -x (or a Python fallback where dpkg is missing), never into /;
# 2. finds cuDNN: the argument, else $CUDNN_ROOT, else the pip package nvidia.cudnn of
#    python3 (PyTorch's), else the CUDA toolkit;
# 3. configures (-DCMAKE_CUDA_ARCHITECTURES=90) and builds in $BUILD (default build-gpu);
# 4. runs ctest (reel_cuda_tests among them: here it must run, not skip) and
#    reel_cuda_tests again verbosely;
# 5. runs bench/compare.py --device cuda:0 (reel against PyTorch eager and torch.compile,
#    the GPU targets of issue #6) when python3 has torch with CUDA, else reel's programs alone.
# Logs, JUnit XML and benchmark JSON lines go to $OUT (default out/gpu-check).
# Environment: BUILD, OUT, JOBS, GPU_CHECK_STOP_AFTER=unpack|configure|build|test (stop
# early, for trying the script on a machine without a GPU), BENCH_ROUNDS and BENCH_REPS
# (default 2 and 2: rounds of compare.py, timed repetitions per run).
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 PREFIX [CUDNN_ROOT]" >&2
  exit 2
fi
prefix=$(realpath -m "$1")
cudnn_root=${2:-${CUDNN_ROOT:-}}
build=$(realpath -m "${BUILD:-$root/build-gpu}")
out=$(realpath -m "${OUT:-$root/out/gpu-check}")
jobs=${JOBS:-$(nproc)}
stop_after=${GPU_CHECK_STOP_AFTER:-}
mkdir -p "$prefix" "$out"
summary="$out/summary.txt"
: > "$summary"
status=0

log() { echo "[gpu-check] $*" | tee -a "$out/gpu-check.log"; }
note() { echo "$*" | tee -a "$summary"; }
# Runs a command with its output in $out/NAME.log; records PASS/FAIL/TIMEOUT in the summary.
step() {
  local name=$1 limit=$2
  shift 2
  log "$name: $*"
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  if [[ $rc -eq 0 ]]; then note "PASS    $name"
  elif [[ $rc -eq 124 ]]; then note "TIMEOUT $name (after ${limit}s, see $name.log)"
  else note "FAIL    $name (exit $rc, see $name.log)"
  fi
  return $rc
}
finish() {
  log "summary:"
  cat "$summary" | tee -a "$out/gpu-check.log"
  exit $status
}

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

# ---- 2. cuDNN
find_pip_cudnn() {
  local py
  for py in python3 /usr/bin/python3; do
    command -v "$py" > /dev/null || continue
    "$py" -c 'import nvidia.cudnn as m, os; print(list(m.__path__)[0])' 2> /dev/null && return 0
  done
  return 1
}
if [[ -z "$cudnn_root" ]]; then
  cudnn_root=$(find_pip_cudnn || true)
  [[ -z "$cudnn_root" && -e /usr/local/cuda/include/cudnn_version.h ]] && cudnn_root=/usr/local/cuda
fi
if [[ -z "$cudnn_root" || ! -e "$cudnn_root/include/cudnn_version.h" ]]; then
  log "cuDNN not found (looked at the argument, \$CUDNN_ROOT, python3's nvidia.cudnn, /usr/local/cuda)"
  note "FAIL    cudnn (not found)"
  status=1
  finish
fi
note "PASS    cudnn ($cudnn_root)"

# ---- 3. configure and build
export PATH="/usr/local/cuda/bin:$PATH"
export LD_LIBRARY_PATH="$libdir:$cudnn_root/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
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
{
  echo "date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2> /dev/null || echo "nvidia-smi: unavailable"
  nvcc --version | tail -2
  cmake --version | head -1
  c++ --version | head -1
  echo "cudnn: $cudnn_root"
} > "$out/machine.txt" 2>&1
step configure 900 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DREEL_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_PREFIX_PATH="$prefix/usr" -DCUDNN_ROOT="$cudnn_root" \
  -DZLIB_ROOT="$prefix/usr" -DREEL_BENCH_LIBTORCH=OFF || { status=1; finish; }
[[ "$stop_after" == configure ]] && finish
step build 3600 cmake --build "$build" -j "$jobs" || { status=1; finish; }
[[ "$stop_after" == build ]] && finish

# ---- 4. tests
step ctest 3600 ctest --test-dir "$build" -j "$jobs" --output-on-failure --output-junit "$out/ctest.xml" || status=1
# reel_cuda_tests exits 77 (skipped) without a usable GPU: on this machine that is a failure
step cuda_tests 1800 "$build/test/cuda/reel_cuda_tests" --durations yes -r junit -o "$out/cuda_tests.xml" || status=1
"$build/test/cuda/reel_cuda_tests" --list-tests > "$out/cuda_tests_list.txt" 2>&1
[[ "$stop_after" == test ]] && finish

# ---- 5. benchmarks: bench/compare.py --device cuda:0 runs reel, PyTorch eager and
# torch.compile side by side (rounds alternate) and prints issue #6's GPU targets (the
# table is at the end of bench_compare.log); without a CUDA PyTorch, reel's programs alone.
shopt -s nullglob
programs=("$build"/bench/bench_w*)
if [[ ${#programs[@]} -eq 0 ]]; then
  note "SKIP    benchmarks (none built in $build/bench)"
  finish
fi
torch_ok=$(/usr/bin/python3 -c 'import torch; print(int(torch.cuda.is_available()))' 2> /dev/null ||
           python3 -c 'import torch; print(int(torch.cuda.is_available()))' 2> /dev/null || echo 0)
py=$(/usr/bin/python3 -c 'import torch' 2> /dev/null && echo /usr/bin/python3 || echo python3)
if [[ "$torch_ok" == 1 ]]; then
  step bench_compare 5400 "$py" "$root/bench/compare.py" --device cuda:0 --build "$build" --python "$py" \
    --rounds "${BENCH_ROUNDS:-2}" --reps "${BENCH_REPS:-2}" --json "$out/bench.jsonl" || status=1
  sed -n '/^GPU: /,$p' "$out/bench_compare.log" > "$out/bench_table.txt"
else
  note "SKIP    pytorch benchmarks (no python3 with CUDA torch): reel's programs alone"
  declare -A bench_args=(
    [w1_mlp]="--epochs 2" [w2_conv_mlp]="--epochs 2" [w3_cnn]="--steps 200 --reps 3"
    [w4_vgg]="--steps 20 --reps 3" [w5_overhead]="--reps 3" [w6_optim]="--reps 3"
    [w7_bias_grad]="--reps 3" [w8_wide_fc]="--steps 10 --reps 3" [w0_peak]="--reps 3"
  )
  for prog in "${programs[@]}"; do
    name=${prog##*/bench_}
    # shellcheck disable=SC2086
    step "bench_$name" 900 "$prog" --device cuda:0 --json "$out/bench.jsonl" ${bench_args[$name]:-}
  done
fi
finish
