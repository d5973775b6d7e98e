#!/usr/bin/env bash
# ctest plot_curves: scripts/plot_curves.py draws a sample's curves.csv (a real one,
# from train_sequence_classifier) into a PNG with matplotlib from the build's venv.
# Then the README's command as written, with Debian's python3 (install-deps.sh installs
# python3-matplotlib): the picture lands beside the CSV, titled with the run's folder and figures.
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
mkdir -p "$work/out/mlp"
cp "$here/curves.csv" "$work/out/mlp/curves.csv"
title=$(cd "$work" && /usr/bin/python3 "$here/../../scripts/plot_curves.py" out/mlp/curves.csv)
echo "$title"
[ "$title" = "out/mlp/curves.png: out/mlp: 3 epochs, test accuracy 100.00% (best 100.00%), test loss 0.0024" ] ||
  { echo "unexpected default title"; exit 1; }
[ -s "$work/out/mlp/curves.png" ] || { echo "no out/mlp/curves.png"; exit 1; }
# train_gpt's curves (losses per evaluation step, the unigram baseline, the schedule)
mkdir -p "$work/runs/small"
printf 'step,train_loss,val_loss,lr,unigram_baseline\n0,4.7,4.78,0.001,3.38\n100,2.7,2.71,0.0009,3.38\n600,2.3,2.31,0.0001,3.38\n' \
  > "$work/runs/small/curves.csv"
title=$(cd "$work" && /usr/bin/python3 "$here/../../scripts/plot_curves.py" runs/small/curves.csv)
echo "$title"
[ "$title" = "runs/small/curves.png: runs/small: 600 steps, validation loss 2.310 nats/char (best 2.310, unigram baseline 3.380)" ] ||
  { echo "unexpected default title"; exit 1; }
[ -s "$work/runs/small/curves.png" ] || { echo "no runs/small/curves.png"; exit 1; }
