#!/usr/bin/env bash
# The GPU check, step 1 of 2, on a development machine (no GPU needed): builds reel in
# Release for the GPU machines' architectures and puts into one folder everything step 2
# (scripts/gpu-run.sh, copied in as run.sh) needs on a bare GPU machine (Ubuntu 24.04,
# CUDA 13 driver, PyTorch's pip CUDA libraries, no apt, no network):
#   PACK/run.sh               step 2: `bash PACK/run.sh` there (in the repository root)
#   PACK/bin.tar.xz           libreel, reel_cuda_tests, the bench_w* programs and bench_gpu_* probes, the samples
#                             train_fashion_mnist, train_gpt and bench_mlp_vs_conv1x1, stripped (build-tree layout:
#                             bench/compare.py --build reads it as it is)
#   PACK/debs/                the runtime packages that machine lacks: libdnnl2, libfmt9,
#                             ocl-icd-libopencl1 (apt-get download, never installed)
#   PACK/data/fashion-mnist/  Debian's Fashion-MNIST (both splits, 31 MB, gzipped as shipped):
#                             the W1 test, the samples and W1-W3 read it
#   PACK/data/fortunes.tar.xz the fortunes text train_gpt reads
#   PACK/MANIFEST             the commit, the build's options and every file's size
# The folder is ignored by git: hand it to the device tool as one carried path
# (carry: ["gpu-pack"], command: "bash gpu-pack/run.sh"). The tool carries at most
# 64 MiB with the working tree (7.5 MB tracked): the pack must stay under
# PACK_LIMIT_MB (default 56) and this script fails when it does not.
#
#   scripts/gpu-pack.sh [PACK]     (default gpu-pack)
# Environment: BUILD (default build-pack), ARCHS (CUDA architectures, default "90;80": the
# H100 and H200, and the A100; the programs are ~7 MB of the pack with sm_90 alone), JOBS,
# PACK_LIMIT_MB.
set -euo pipefail
cd "$(dirname "$0")/.."
pack=$(realpath -m "${1:-gpu-pack}")
build=$(realpath -m "${BUILD:-build-pack}")
archs=${ARCHS:-90;80}
jobs=${JOBS:-$(nproc)}
limit_mb=${PACK_LIMIT_MB:-56}
fashion=/usr/share/datasets/fashion-mnist
fortunes=/usr/share/games/fortunes

for need in "$fashion/train-images-idx3-ubyte.gz" "$fortunes/fortunes" /usr/local/cuda/bin/nvcc; do
  [[ -e "$need" ]] || { echo "gpu-pack: $need is missing (scripts/install-deps.sh --data; apt-get install fortunes)" >&2; exit 1; }
done

# cuDNN's fused attention (REEL_CUDA_HALF_ATTENTION=cudnn) is compiled from the cuDNN
# frontend's headers (PyPI; the GPU machine needs nothing of it: headers only)
scripts/fetch-cudnn-frontend.sh
# MPI and NCCL stay out (REEL_DIST=OFF): the GPU machine has neither, and the samples then
# link neither. ONNX and libtorch references are not part of the check.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DREEL_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$archs" \
  -DREEL_WERROR=ON -DREEL_DIST=OFF -DREEL_ONNX=OFF -DREEL_BUILD_TESTS=ON -DREEL_BUILD_BENCH=ON \
  -DREEL_BUILD_SAMPLES=ON -DREEL_BENCH_LIBTORCH=OFF
# the workloads (bench_w*) and the GPU probes (bench_gpu_*: bench/gpu_rnn_probe.cpp)
mapfile -t benches < <(ninja -C "$build" -t targets all | sed -n 's/^\(bench_\(w\|gpu_\)[0-9a-z_]*\): phony$/\1/p' |
  sort -u)
targets=(reel reel_cuda_tests train_fashion_mnist train_gpt bench_mlp_vs_conv1x1 "${benches[@]}")
cmake --build "$build" -j "$jobs" --target "${targets[@]}"

rm -rf "$pack"
mkdir -p "$pack/debs" "$pack/data/fashion-mnist"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# the programs in the build tree's layout, libraries resolved to files, debug info stripped
mkdir -p "$stage/lib" "$stage/test/cuda" "$stage/bench" "$stage/samples"
for so in "$build"/libreel.so.0 "$build"/libreel_omp_env.so.0; do
  [[ -e "$so" ]] && cp -L "$so" "$stage/lib/$(basename "$so")"
done
cp "$build/test/cuda/reel_cuda_tests" "$stage/test/cuda/"
for b in "${benches[@]}"; do cp "$build/bench/$b" "$stage/bench/"; done
cp "$build/samples/train_fashion_mnist" "$build/samples/train_gpt" "$build/samples/bench_mlp_vs_conv1x1" "$stage/samples/"
find "$stage" -type f -exec strip --strip-debug {} +
tar -C "$stage" -cJf "$pack/bin.tar.xz" .
# the runtime libraries Ubuntu 24.04 with PyTorch's CUDA wheels lacks (its libstdc++, libgomp and zlib do)
(cd "$pack/debs" && apt-get download libdnnl2 libfmt9 ocl-icd-libopencl1 > /dev/null)
cp "$fashion"/*-ubyte.gz "$pack/data/fashion-mnist/"
tar -C "$(dirname "$fortunes")" -cJf "$pack/data/fortunes.tar.xz" --exclude='*.dat' --exclude='*.u8' --exclude='off' \
  "$(basename "$fortunes")"
cp scripts/gpu-run.sh "$pack/run.sh"
{
  echo "reel GPU pack: commit $(git rev-parse HEAD)$(git diff --quiet HEAD -- . ':!gpu-pack' || echo ' (with uncommitted changes)'), $(date -u +%FT%TZ)"
  echo "build: Release, CUDA architectures $archs, $(/usr/local/cuda/bin/nvcc --version | grep -o 'release [0-9.]*'), REEL_DIST=OFF"
  grep -E "^(CUDNN_VERSION|CMAKE_CXX_COMPILER):" "$build/CMakeCache.txt" || true
  echo "cuDNN frontend headers: $(cat .deps/cudnn-frontend/VERSION)"
  grep -q "attention_cudnn.cpp" "$build/build.ninja" || { echo "gpu-pack: attention_cudnn.cpp not in the build" >&2; exit 1; }
  echo "programs: $(tar -tJf "$pack/bin.tar.xz" | grep -v '/$' | tr '\n' ' ')"
  echo "files:"
  (cd "$pack" && find . -type f ! -name MANIFEST -printf '%10s  %p\n' | sort -k2)
} > "$pack/MANIFEST"
size=$(du -sb "$pack" | cut -f1)
echo "gpu-pack: $pack holds $((size / 1048576)) MiB ($size bytes); limit ${limit_mb} MiB"
cat "$pack/MANIFEST"
if ((size > limit_mb * 1048576)); then
  echo "gpu-pack: over the limit: build for one architecture (ARCHS=90)" >&2
  exit 1
fi
