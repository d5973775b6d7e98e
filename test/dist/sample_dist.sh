#!/usr/bin/env bash
# ctest dist_sample: train_fashion_mnist --distributed loses nothing when a rank is lost,
# and resumes on another number of ranks.
# - Killed and restarted: scripts/mpirun-restarts.sh runs the 2-rank job with
#   --resume-or-start while rank 1, then rank 0, then rank 1 again is killed (SIGKILL) at a
#   random moment (in a step, an all-reduce or a checkpoint: one is written every step).
#   Each time the whole job ends within 30 s, mpirun's message names the lost rank, no
#   process of it is left; the loop resumes from the newest complete set and the run ends
#   with the weights of a run never killed, bit for bit.
# - Resized: stopped at a step (--stop-after) on W ranks, resumed on W' (4->2, 2->3, 2->1,
#   1->2) with the global batch kept: each epoch's train and test loss equal the 2-rank
#   straight run's to 1e-4 (the sums' order differs); 2->2 ends bit for bit equal.
# - Refused: another global batch, a batch that does not split over the ranks, a damaged
#   rank file (named), --resume with no set.
# On small generated data sets (make_idx.py: 576 training images, 12 steps of 48 an epoch; the
# killed run 3456, 72 steps).
# Usage: sample_dist.sh TRAIN_FASHION_MNIST MPIRUN MAKE_IDX RESTARTS WORK_DIR
set -uo pipefail
train=$(realpath "$1") mpirun=$2 make_idx=$3 restarts=$4 work=$5
rm -rf "$work"
mkdir -p "$work/data" "$work/data_long"
python3 "$make_idx" "$work/data" 576 96 || exit 1
# The killed run's data: 72 steps an epoch, 576 in its 8 epochs. On a fast machine (a Zen 5,
# ~36,000 images/s) the 576-image set's 96 steps took a few hundred ms after mpirun's start,
# so the first kill landed at the run's end and the test failed ("only 1 kills landed").
python3 "$make_idx" "$work/data_long" 3456 96 || exit 1
fail() { echo "dist_sample: FAIL: $*"; exit 1; }
export OMP_NUM_THREADS=1 OMPI_MCA_rmaps_base_oversubscribe=1
root=(); [ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
base=(--distributed --model mlp --global-batch-size 48 --logdir none)
opts=("${base[@]}" --epochs 2 --data "$work/data")
long=("${base[@]}" --epochs 8 --data "$work/data_long")
# the resized runs without dropout: its masks are drawn per rank (W-dependent), the rest of a
# step depends on the global batch alone
nodrop=(--dropout 0)
job() {  # job NP OUT [options...]
  local np=$1 out=$2; shift 2
  timeout 300 "$mpirun" "${root[@]}" -np "$np" "$train" "${opts[@]}" --out "$work/$out" "$@"
}
job 2 straight "${nodrop[@]}" > "$work/straight.log" 2>&1 || { cat "$work/straight.log"; fail "the straight 2-rank run failed"; }
[ -s "$work/straight/mlp.safetensors" ] || fail "the straight run wrote no weights"
# the killed run is longer (8 epochs of the larger set, 576 steps): room for three kills
timeout 300 "$mpirun" "${root[@]}" -np 2 "$train" "${long[@]}" --out "$work/straight8" > "$work/straight8.log" 2>&1 ||
  { cat "$work/straight8.log"; fail "the straight 8-epoch run failed"; }

# ---- killed and restarted
# the pids of the job writing to OUT: mpirun and its ranks (ranks: with their OMPI rank)
job_pids() { pgrep -f "train_fashion_mnist .*--out $work/$1( |\$)"; }
rank_pid() {
  for p in $(job_pids "$1"); do
    tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$p"; return; }
  done
}
newest_step() { ls -d "$work/$1"/checkpoints/step-*/MANIFEST 2> /dev/null | sort | tail -1 | sed 's/.*step-0*\([0-9]*\).*/\1/'; }
bash "$restarts" --attempts 6 --delay 0.2 -- "$mpirun" "${root[@]}" -np 2 "$train" "${long[@]}" --out "$work/killed" \
  --checkpoint-every 1 --resume-or-start > "$work/killed.log" 2>&1 &
loop=$!
kills=0
for victim in 1 0 1; do
  after=$(( kills * 150 + 40 ))  # each kill later in the run (576 steps)
  for _ in $(seq 1 2000); do
    s=$(newest_step killed); [ -n "$s" ] && [ "$s" -ge "$after" ] && break
    kill -0 "$loop" 2> /dev/null || break
    sleep 0.01
  done
  sleep "0.0$(( RANDOM % 10 ))"  # a random moment of a step or a few (a step: 2-10 ms)
  pid=$(rank_pid killed "$victim")
  [ -n "$pid" ] || break  # the job finished first
  pids=$(job_pids killed | grep -vx "$loop" | tr '\n' ' ')
  kill -KILL "$pid"
  start=$(date +%s.%N)
  for _ in $(seq 1 3000); do
    alive=0; for p in $pids; do [ "$p" = "$pid" ] && continue; kill -0 "$p" 2> /dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.01
  done
  took=$(echo "$(date +%s.%N) - $start" | bc)
  [ $alive = 0 ] || fail "kill $((kills + 1)) (rank $victim): a process of the job outlived it by 30 s"
  kills=$((kills + 1))
  echo "kill $kills: rank $victim (pid $pid) at step ~$(newest_step killed): the job ended in ${took% *} s"
done
wait "$loop"; rc=$?
[ "$rc" -eq 0 ] || { cat "$work/killed.log"; fail "the restart loop ended with status $rc"; }
[ "$kills" -ge 2 ] || fail "only $kills kills landed inside the run"
for v in 1 0; do
  grep -q "process rank $v with PID" "$work/killed.log" || { cat "$work/killed.log"; fail "no message names lost rank $v"; }
done
[ "$(grep -c "resumed at step" "$work/killed.log")" -ge 2 ] || fail "the restarts did not resume: $(grep -c resumed "$work/killed.log")"
[ -z "$(job_pids killed)" ] || fail "processes left behind: $(job_pids killed)"
cmp "$work/straight8/mlp.safetensors" "$work/killed/mlp.safetensors" ||
  fail "killed $kills times and restarted: the weights differ from the straight run's"
echo "killed $kills times, restarted by mpirun-restarts.sh, resumed at steps" \
  "$(grep -o 'resumed at step [0-9]*' "$work/killed.log" | grep -o '[0-9]*$' | tr '\n' ' ')- weights bit-identical"
[ "$(ls -d "$work/killed/checkpoints"/step-* | wc -l)" -le 2 ] || fail "more than 2 sets kept: $(ls "$work/killed/checkpoints")"

# ---- resized: W ranks to step K, then W' ranks
close_curves() {  # the train and test losses of two curves.csv, to 1e-4 relative
  python3 - "$1" "$2" << 'EOF'
import csv, sys
a, b = (list(csv.DictReader(open(p))) for p in sys.argv[1:3])
assert len(a) == len(b), (len(a), len(b))
for x, y in zip(a, b):
    for k in ("train_loss", "test_loss", "train_accuracy"):
        u, v = float(x[k]), float(y[k])
        assert abs(u - v) <= 1e-4 * max(abs(u), 1e-3), (k, u, v)
EOF
}
for case in "4 2 7" "2 3 7" "2 1 17" "1 2 5" "2 2 7"; do
  set -- $case
  w=$1 w2=$2 k=$3 out=resize_$1_$2
  job "$w" "$out" "${nodrop[@]}" --stop-after "$k" > "$work/$out.log" 2>&1; rc=$?
  [ "$rc" -eq 130 ] || { cat "$work/$out.log"; fail "$w ranks --stop-after $k: status $rc, expected 130"; }
  job "$w2" "$out" "${nodrop[@]}" --resume > "$work/$out.resumed.log" 2>&1 ||
    { cat "$work/$out.resumed.log"; fail "$w -> $w2 ranks: the resumed run failed"; }
  grep -q "resumed at step $k .*written by $w ranks" "$work/$out.resumed.log" ||
    fail "$w -> $w2: $(grep resumed "$work/$out.resumed.log")"
  if [ "$w" != "$w2" ]; then
    grep -q "global batch 48 kept: $((48 / w2)) a rank" "$work/$out.resumed.log" || fail "$w -> $w2: no word of the batch"
  fi
  close_curves "$work/straight/curves.csv" "$work/$out/curves.csv" ||
    fail "$w -> $w2 ranks at step $k: the curves left the straight run's"
  if [ "$w" = "$w2" ]; then
    cmp "$work/straight/mlp.safetensors" "$work/$out/mlp.safetensors" || fail "2 -> 2 at step $k: the weights differ"
  fi
  echo "$w -> $w2 ranks at step $k: the losses continue the straight run's$([ "$w" = "$w2" ] && echo ', weights bit-identical')"
done

# ---- refused
job 3 resize_2_3 --resume --global-batch-size 96 > "$work/batch.log" 2>&1 && fail "another global batch was accepted"
grep -q "trained with a global batch of 48 images .* pass --global-batch-size 48" "$work/batch.log" ||
  { cat "$work/batch.log"; fail "another global batch: unclear message"; }
job 5 fresh5 > "$work/split.log" 2>&1 && fail "48 images over 5 ranks were accepted"
grep -q "48 images do not split evenly over 5 ranks" "$work/split.log" || { cat "$work/split.log"; fail "unclear split message"; }
newest=$(ls -d "$work/resize_2_1/checkpoints"/step-* | sort | tail -1)
printf 'x' >> "$newest/rank0.safetensors"
job 2 resize_2_1 --resume > "$work/damaged.log" 2>&1 && fail "a damaged set was resumed from"
grep -q "is damaged: rank 0's file $newest/rank0.safetensors" "$work/damaged.log" ||
  { cat "$work/damaged.log"; fail "a damaged set: the file is not named"; }
job 2 none --resume > "$work/none.log" 2>&1 && fail "--resume without a set succeeded"
grep -q "no complete training state set in" "$work/none.log" || { cat "$work/none.log"; fail "--resume without a set"; }
echo "refused: another global batch, 48 over 5 ranks, a damaged rank file (named), --resume without a set"
rm -rf "$work"
