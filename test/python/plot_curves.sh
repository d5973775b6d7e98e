#!/usr/bin/env bash
# ctest plot_curves: scripts/plot_curves.py draws a sample's curves.csv (a real one,
# from train_sequence_classifier) into a PNG with matplotlib from the build's venv.
# Usage: plot_curves.sh WORK_DIR VENV_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$1 venv=$2
python=$("$here/../../scripts/python-venv.sh" "$venv")
rm -rf "$work"
mkdir -p "$work"
"$python" "$here/../../scripts/plot_curves.py" "$here/curves.csv" -o "$work/curves.png" --title "plot test"
"$python" - "$work/curves.png" <<'PY'
import sys
import matplotlib.image
img = matplotlib.image.imread(sys.argv[1])
assert img.shape[:2] == (440, 1100), img.shape  # 10 x 4 inches at 110 dpi
assert img.std() > 0.05, "an empty picture"
print("plot_curves.py wrote a", img.shape, "image")
PY
