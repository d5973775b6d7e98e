#!/usr/bin/env bash
# Downloads (never installs) the .deb files that scripts/gpu-check.sh unpacks on a GPU
# machine without apt: oneDNN, fmt, Catch2, nlohmann-json, the OpenCL loader oneDNN
# links, zlib (headers and library); with --data also Debian's Fashion-MNIST (31 MB).
# They land in .gpu-deps/ (ignored by git), about 9 MB without the data.
#   scripts/fetch-gpu-deps.sh [--data]
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(libdnnl2 libdnnl-dev libfmt9 libfmt-dev catch2 nlohmann-json3-dev ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-c-headers zlib1g zlib1g-dev)
if [[ "${1:-}" == "--data" ]]; then
  packages+=(dataset-fashion-mnist)
elif [[ $# -gt 0 ]]; then
  echo "usage: $0 [--data]" >&2
  exit 2
fi
mkdir -p .gpu-deps
cd .gpu-deps
# apt-get download needs no root; it fetches the candidate version of each package.
apt-get download "${packages[@]}"
ls -l ./*.deb
