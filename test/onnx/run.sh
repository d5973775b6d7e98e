#!/usr/bin/env bash
# ctest onnx_export: export models with reel, check and run them with onnx and onnxruntime.
# Usage: run.sh EXPORT_MODELS_PROGRAM WORK_DIR VENV_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
prog=$1 work=$2 venv=$3
python=$("$here/../../scripts/python-venv.sh" "$venv")
rm -rf "$work"
mkdir -p "$work"
"$prog" "$work"
"$python" "$here/check_onnx.py" "$work"
