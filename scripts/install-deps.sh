#!/usr/bin/env bash
# Installs with apt-get whatever of reel's Debian 12 build dependencies is missing.
# Usage: scripts/install-deps.sh [--data] [--bench]
#   --data   also Fashion-MNIST (dataset-fashion-mnist) and the text corpus of samples/train_gpt
#            (fortunes: ~2.5 MB of plain text under /usr/share/games/fortunes)
#   --bench  also the peers the benchmarks compare against (PyTorch, libtorch, OpenBLAS)
set -euo pipefail
# ocl-icd-opencl-dev: Debian's dnnl-config.cmake calls find_package(OpenCL REQUIRED)
# (oneDNN is built with its OpenCL GPU runtime), and libdnnl-dev only recommends it.
# libonnx-dev, libprotobuf-dev, protobuf-compiler: the ONNX exporter (onnx/); python3-venv: the
# venv of the TensorBoard/onnxruntime/plot tests (scripts/python-venv.sh, from PyPI).
pkgs=(cmake ninja-build g++ libdnnl-dev ocl-icd-opencl-dev libfmt-dev catch2 zlib1g-dev
  libonnx-dev libprotobuf-dev protobuf-compiler python3-venv)
# dist/ (data-parallel training; its tests run under mpirun)
pkgs+=(libopenmpi-dev openmpi-bin)
# nn/models' test: torchvision writes the reference weights and outputs (test/models)
pkgs+=(python3-torchvision)
# scripts/plot_curves.py draws with matplotlib (the README's command, with Debian's python3)
pkgs+=(python3-matplotlib)
# the Google Benchmark adapter's test (test/gbench: <reel/measure/gbench.h>, docs/benchmarking.md)
pkgs+=(libbenchmark-dev)
for arg in "$@"; do
  case "$arg" in
    --data) pkgs+=(dataset-fashion-mnist fortunes) ;;
    --bench) pkgs+=(python3-torch libtorch-dev libopenblas0-pthread) ;;
    *) echo "install-deps.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -q || true  # a stale list can still resolve; install decides
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# With the CUDA toolkit: the cuDNN frontend's headers (PyPI, into .deps/, with python3 from
# above; cuda/attention_cudnn.cpp)
if command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  "$(dirname "$0")/fetch-cudnn-frontend.sh"
fi
