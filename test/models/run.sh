#!/usr/bin/env bash
# ctest's models_torchvision: torchvision (Debian's python3-torchvision, installed by
# scripts/install-deps.sh) writes the four models' weights and outputs, then the
# [.torchvision] tests load them into reel's models and compare.
# Usage: test/models/run.sh REEL_TESTS OUT_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tests=$1 out=$2
/usr/bin/python3 "$here/torchvision_models.py" "$out"
REEL_TORCHVISION_DIR="$out" "$tests" "[torchvision]"
