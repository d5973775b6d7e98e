#!/usr/bin/env bash
# ctest's models_torchvision: torchvision (Debian's python3-torchvision, installed by
# scripts/install-deps.sh) writes the four models' weights and outputs, then the
# [.torchvision] tests load them into reel's models and compare (from safetensors and, for
# the ResNets, from torch.save's .pt: test_torch_pt.cpp). REEL_TORCH2_PYTHON=<the python
# of a PyTorch 2.x with torchvision> repeats it with that PyTorch's files.
# Usage: test/models/run.sh REEL_TESTS OUT_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tests=$1 out=$2
/usr/bin/python3 "$here/torchvision_models.py" "$out"
REEL_TORCHVISION_DIR="$out" "$tests" "[torchvision]"
rm -f "$out"/*.safetensors "$out"/*.pt  # passed: the weights (~380 MB) go (a failure keeps them)
# A PyTorch 2.x python with torchvision (e.g. a venv of PyPI's torch), when one is named,
# writes the same files again: its .pt files are read by the same tests.
if [ -n "${REEL_TORCH2_PYTHON:-}" ]; then
  "$REEL_TORCH2_PYTHON" "$here/torchvision_models.py" "$out/torch2"
  REEL_TORCHVISION_DIR="$out/torch2" "$tests" "[torchvision]"
  rm -f "$out"/torch2/*.safetensors "$out"/torch2/*.pt
fi
