#!/usr/bin/env bash
# Trains the Fashion-MNIST sample: installs what is missing (build dependencies and
# Debian's dataset-fashion-mnist), builds, and runs samples/train_fashion_mnist.
# Usage: scripts/train.sh [sample options, e.g. --model cnn --epochs 10]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --data
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREEL_BUILD_BENCH=OFF > /dev/null
cmake --build build -j "$(nproc)" --target train_fashion_mnist evaluate_fashion_mnist
exec build/samples/train_fashion_mnist "$@"
