#!/usr/bin/env bash
# ctest tensorboard_reader: write a log with reel, read it back with TensorBoard.
# Usage: run.sh WRITE_EVENTS_PROGRAM WORK_DIR VENV_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
prog=$1 work=$2 venv=$3
python=$("$here/../../scripts/python-venv.sh" "$venv")
rm -rf "$work"
mkdir -p "$work"
"$prog" "$work/run"
"$python" "$here/check_events.py" "$work/run"
