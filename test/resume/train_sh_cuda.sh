#!/usr/bin/env bash
# ctest train_sh_cuda: scripts/train.sh configures the CUDA backend only where a GPU driver
# is (libcuda.so.1 in the loader's cache) or when REEL_CUDA asks, whether or not nvcc is
# installed. The loader's cache is played by a stand-in ldconfig first on PATH.
# Usage: train_sh_cuda.sh WORK_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
train_sh=$here/../../scripts/train.sh
work=$1
rm -rf "$work"
mkdir -p "$work/driver" "$work/nodriver"
printf '#!/bin/sh\necho "	libcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1"\n' > "$work/driver/ldconfig"
printf '#!/bin/sh\necho "	libc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6"\n' > "$work/nodriver/ldconfig"
chmod +x "$work/driver/ldconfig" "$work/nodriver/ldconfig"
choice() { env PATH="$work/$1:$PATH" REEL_TRAIN_PRINT_CONFIGURE=1 ${2:+REEL_CUDA=$2} "$train_sh" | grep -o 'REEL_CUDA=[A-Z]*'; }
check() {
  got=$(choice "$1" "${2:-}")
  [ "$got" = "$3" ] || { echo "train.sh with ${1}${2:+, REEL_CUDA=$2}: $got, expected $3"; exit 1; }
  echo "${1}${2:+, REEL_CUDA=$2}: $got"
}
check nodriver "" REEL_CUDA=OFF
check driver "" REEL_CUDA=ON
check nodriver ON REEL_CUDA=ON
check driver OFF REEL_CUDA=OFF
rm -rf "$work"
