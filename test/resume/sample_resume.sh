#!/usr/bin/env bash
# ctest sample_resume: samples/train_fashion_mnist stopped mid-run and resumed with --resume
# ends with the weights of a run that never stopped, bit for bit: once killed (SIGKILL, after
# a --checkpoint-every save, inside an epoch) and once interrupted (SIGINT: it saves, exits
# 130, and its curves.csv then matches the straight run's too). On a small generated data
# set (make_idx.py), an MLP with dropout, a shuffling loader with a worker, Adam, cosine LR.
# Usage: sample_resume.sh TRAIN_FASHION_MNIST WORK_DIR
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
train=$(realpath "$1") work=$2
rm -rf "$work"
mkdir -p "$work/data"
python3 "$here/make_idx.py" "$work/data" 4096 512 || exit 1
fail() { echo "sample_resume: $*"; exit 1; }
# 4 epochs of 64 steps: 256 steps, a checkpoint every 10
opts=(--model mlp --epochs 4 --batch-size 64 --data "$work/data" --logdir none --checkpoint-every 10)
"$train" "${opts[@]}" --out "$work/straight" > "$work/straight.log" 2>&1 || { cat "$work/straight.log"; fail "the straight run failed"; }

# Starts a run in the background and returns once it has saved its state at least once
start_run() {
  "$train" "${opts[@]}" --out "$work/$1" > "$work/$1.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 3000); do
    [ -e "$work/$1/checkpoint.safetensors" ] && break
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.01
  done
  [ -e "$work/$1/checkpoint.safetensors" ] || { cat "$work/$1.log"; fail "$1: no checkpoint appeared"; }
  sleep 0.3
}
resume() {
  "$train" "${opts[@]}" --out "$work/$1" --resume > "$work/$1.resumed.log" 2>&1 ||
    { cat "$work/$1.resumed.log"; fail "$1: the resumed run failed"; }
  grep -q "resumed at step" "$work/$1.resumed.log" || fail "$1: the run did not say where it resumed"
  step=$(grep -o "resumed at step [0-9]*" "$work/$1.resumed.log" | grep -o "[0-9]*$")
  [ "$step" -gt 0 ] && [ "$step" -lt 256 ] || fail "$1: resumed at step $step, not inside the run"
  cmp "$work/straight/mlp.safetensors" "$work/$1/mlp.safetensors" ||
    fail "$1: resumed at step $step, the weights differ from the straight run's"
  echo "$1: resumed at step $step; weights bit-identical to the straight run's"
}

start_run killed
kill -KILL "$pid"
wait "$pid" 2> /dev/null
[ -e "$work/killed/mlp.safetensors" ] && fail "killed: the run had finished before the kill"
cp -r "$work/killed" "$work/reseeded"
resume killed
# the comparison sees a continuation that differs: the same state resumed with another
# shuffling seed (other batches from the kill on) must end elsewhere
"$train" "${opts[@]}" --out "$work/reseeded" --resume --seed 2 > "$work/reseeded.log" 2>&1 ||
  { cat "$work/reseeded.log"; fail "reseeded: the resumed run failed"; }
cmp -s "$work/straight/mlp.safetensors" "$work/reseeded/mlp.safetensors" &&
  fail "a resume with another seed gave the straight run's weights: the comparison cannot tell"

start_run interrupted
kill -INT "$pid"
wait "$pid"
rc=$?
[ "$rc" -eq 130 ] || { cat "$work/interrupted.log"; fail "interrupted: exit status $rc after SIGINT, expected 130"; }
grep -q "saved the training state" "$work/interrupted.log" || fail "interrupted: no word of the saved state"
[ -e "$work/interrupted/mlp.safetensors" ] && fail "interrupted: the run had finished before SIGINT"
resume interrupted
# every column but the seconds
diff <(cut -d, -f1-6 "$work/straight/curves.csv") <(cut -d, -f1-6 "$work/interrupted/curves.csv") ||
  fail "interrupted: curves.csv differs from the straight run's"
echo "interrupted: curves.csv equal to the straight run's (but for the seconds)"

"$train" "${opts[@]}" --out "$work/none" --resume > "$work/none.log" 2>&1 && fail "--resume without a state succeeded"
grep -q "no training state at" "$work/none.log" || { cat "$work/none.log"; fail "--resume without a state: unclear message"; }
rm -rf "$work"
