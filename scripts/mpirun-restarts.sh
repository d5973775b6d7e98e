#!/usr/bin/env bash
# Runs a data-parallel job until it finishes, starting it again after a failure (a rank
# killed, out of memory, a host lost, a collective timeout): each attempt is the same
# command, which must continue from the newest complete checkpoint set
# (train_fashion_mnist's --resume-or-start: --resume when a set exists, else afresh).
#
#   scripts/mpirun-restarts.sh --attempts 5 -- \
#     mpirun -np 4 -x OMP_NUM_THREADS=1 build/samples/train_fashion_mnist --distributed \
#       --checkpoint-every 200 --resume-or-start --out out/mlp
#
# Exit status: 0 when an attempt succeeds; 130 when one stopped on SIGINT/SIGTERM or
# --stop-after (its state is saved: not a failure to retry); else the last attempt's
# status once --attempts (default 10) have failed. A signal to this script goes to the
# attempt in progress (mpirun passes it to the ranks, which save and stop) and ends the
# loop. --delay S waits between attempts (default 1 s).
set -uo pipefail
attempts=10 delay=1
while [ $# -gt 0 ]; do
  case $1 in
    --attempts) attempts=$2; shift 2 ;;
    --delay) delay=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "mpirun-restarts.sh: unknown option $1 (usage: mpirun-restarts.sh [--attempts N] [--delay S] -- COMMAND...)" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "mpirun-restarts.sh: no command after --" >&2; exit 2; }
child=
stopping=
forward() { stopping=1; [ -n "$child" ] && kill -"$1" "$child" 2> /dev/null; }
trap 'forward INT' INT
trap 'forward TERM' TERM
rc=1
for ((i = 1; i <= attempts; ++i)); do
  echo "mpirun-restarts.sh: attempt $i of $attempts: $*" >&2
  "$@" &
  child=$!
  wait "$child"; rc=$?
  # a signal interrupts wait: wait again for the attempt to save and end
  while kill -0 "$child" 2> /dev/null; do wait "$child"; rc=$?; done
  child=
  [ "$rc" -eq 0 ] && exit 0
  [ "$rc" -eq 130 ] || [ -n "$stopping" ] && exit "$rc"
  echo "mpirun-restarts.sh: attempt $i ended with status $rc; starting again from the newest complete checkpoint set" >&2
  sleep "$delay"
done
echo "mpirun-restarts.sh: $attempts attempts failed (last status $rc)" >&2
exit "$rc"
