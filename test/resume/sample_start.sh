#!/usr/bin/env bash
# ctest sample_start: what the Fashion-MNIST sample promises before it trains.
# - It starts without OpenMPI: no NEEDED entry of train_fashion_mnist names MPI or NCCL, and
#   nothing it loads (ldd) is libmpi or libnccl.
# - Two models' runs with the default --out and --logdir write apart (out/<model>,
#   runs/train_fashion_mnist/<model>), and evaluate_fashion_mnist finds the checkpoint.
# - Under mpirun (a launcher's world of 2) without --distributed it warns; --distributed
#   without mpirun refuses, saying how to start it; with mpirun -np 2 --distributed (where
#   mpirun is installed) it trains on 2 ranks.
# - train_gpt writes what the README says: curves.csv and gpt.safetensors under --out (on a
#   small generated text, two steps).
# Usage: sample_start.sh TRAIN_FASHION_MNIST EVALUATE_FASHION_MNIST TRAIN_GPT WORK_DIR
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
train=$(realpath "$1") evaluate=$(realpath "$2") gpt=$(realpath "$3") work=$4
rm -rf "$work"
mkdir -p "$work/data"
python3 "$here/make_idx.py" "$work/data" 512 128 || exit 1
fail() { echo "sample_start: $*"; exit 1; }
cd "$work" || exit 1

needed=$(objdump -p "$train" | awk '$1 == "NEEDED" {print $2}')
echo "train_fashion_mnist NEEDED:" $needed
grep -Eq 'mpi|nccl' <<< "$needed" && fail "train_fashion_mnist links MPI or NCCL"
ldd "$train" | grep -E 'libmpi|libnccl' && fail "train_fashion_mnist loads MPI or NCCL through its libraries"

quick=(--epochs 1 --steps-per-epoch 2 --batch-size 32 --data "$work/data")
for m in mlp cnn; do
  "$train" --model "$m" "${quick[@]}" > "$m.log" 2>&1 || { cat "$m.log"; fail "--model $m failed"; }
  "$evaluate" --model "$m" --data "$work/data" > "$m.eval" 2>&1 || { cat "$m.eval"; fail "evaluate --model $m failed"; }
  grep -q "out/$m/$m.safetensors: test accuracy" "$m.eval" || fail "evaluate --model $m read: $(cat "$m.eval")"
done
for m in mlp cnn; do
  [ -s "out/$m/curves.csv" ] || fail "no out/$m/curves.csv"
  [ "$(find "runs/train_fashion_mnist/$m" -maxdepth 1 -name 'events.out.tfevents.*' | wc -l)" -eq 1 ] ||
    fail "runs/train_fashion_mnist/$m: not one event file"
done
cmp -s out/mlp/curves.csv out/cnn/curves.csv && fail "the two models wrote the same curves"
echo "default outputs: out/mlp, out/cnn, runs/train_fashion_mnist/{mlp,cnn} apart; evaluate reads them"

OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 "$train" "${quick[@]}" --out w --logdir none > warn.log 2>&1 ||
  { cat warn.log; fail "the run under a launcher's world of 2 failed"; }
grep -q "warning: started by mpirun as one of 2 processes without --distributed" warn.log ||
  fail "no warning under a world of 2 without --distributed: $(cat warn.log)"
"$train" "${quick[@]}" --out plain --logdir none > plain.log 2>&1 || fail "a plain run failed"
grep -q warning plain.log && fail "a plain run warned: $(cat plain.log)"
"$train" --distributed "${quick[@]}" --out d --logdir none > alone.log 2>&1 && fail "--distributed without mpirun ran"
grep -Eq "not started by mpirun .*mpirun -np 2|is not there: it is built when MPI is found" alone.log ||
  fail "--distributed without mpirun: $(cat alone.log)"
echo "mpirun mistakes: $(head -c 150 warn.log | tr '\n' ' ')...; $(head -c 150 alone.log | tr '\n' ' ')..."

if command -v mpirun > /dev/null && [ -x "$(dirname "$train")/train_fashion_mnist_distributed" ]; then
  root=(); [ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
  OMP_NUM_THREADS=1 timeout 300 mpirun "${root[@]}" --oversubscribe -np 2 "$train" --distributed "${quick[@]}" \
    --out dist --logdir none > mpi.log 2>&1 || { cat mpi.log; fail "mpirun -np 2 --distributed failed"; }
  grep -q "2 ranks (data-parallel)" mpi.log || fail "mpirun -np 2 --distributed: $(cat mpi.log)"
  grep -q warning mpi.log && fail "mpirun --distributed warned: $(cat mpi.log)"
  [ -s dist/mlp.safetensors ] || fail "mpirun -np 2 --distributed wrote no weights"
  set_dir=$(ls -d dist/checkpoints/step-* | tail -1)
  [ -s "$set_dir/rank0.safetensors" ] && [ -s "$set_dir/rank1.safetensors" ] && [ -s "$set_dir/MANIFEST" ] ||
    fail "mpirun -np 2 --distributed: not a complete set of both ranks' states: $(ls -R dist)"
  echo "mpirun -np 2 train_fashion_mnist --distributed: 2 ranks through train_fashion_mnist_distributed"
fi
mkdir -p text
python3 -c "
import random
r = random.Random(1)
words = ['the', 'cat', 'sat', 'on', 'a', 'mat', 'and', 'dog', 'ran', 'far']
print('\n'.join(' '.join(r.choice(words) for _ in range(12)) for _ in range(3000)))" > text/words
"$gpt" --small --steps 2 --eval-interval 1 --eval-iters 1 --batch-size 4 --sample-chars 20 --data text --out gpt \
  --logdir none > gpt.log 2>&1 || { cat gpt.log; fail "train_gpt failed"; }
[ -s gpt/curves.csv ] && [ -s gpt/gpt.safetensors ] || fail "train_gpt wrote: $(ls gpt)"
[ "$(head -1 gpt/curves.csv)" = "step,train_loss,val_loss,lr,unigram_baseline" ] || fail "train_gpt's curves.csv: $(head -1 gpt/curves.csv)"
echo "train_gpt: wrote $(ls gpt | tr '\n' ' ')"
cd / && rm -rf "$work"
