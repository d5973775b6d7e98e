#!/bin/sh
# fault.sh MPIRUN PROGRAM MODE: runs PROGRAM MODE on two ranks, expects the job to end
# within 60 s, with a non-zero exit and the failure named on stderr.
mpirun=$1; prog=$2; mode=$3
err=$(mktemp); trap 'rm -f "$err"' EXIT
start=$(date +%s)
# the hangs: a 2 s collective timeout
case $mode in hang*) export REEL_DIST_TIMEOUT=2 ;; esac
timeout 90 "$mpirun" -np 2 --oversubscribe "$prog" "$mode" >/dev/null 2>"$err"
rc=$?
elapsed=$(( $(date +%s) - start ))
cat "$err" >&2
if [ $rc -eq 0 ]; then echo "FAIL: the job exited 0"; exit 1; fi
if [ $rc -eq 124 ]; then echo "FAIL: the job hung (killed by timeout after 90 s)"; exit 1; fi
if [ $elapsed -gt 60 ]; then echo "FAIL: the job took $elapsed s to end"; exit 1; fi
case $mode in
  throw) want="rank 1: uncaught exception: rank 1 ran into a bad batch" ;;
  abort) want="signal 9" ;;
  mismatch) want="all_reduce: the ranks passed different tensors: rank 0 [3, 4] f32, rank 1 [3, 5] f32" ;;
  hang) want="rank 0: all_reduce [its shape check] (collective #2 of this rank) did not complete within 2 s; rank(s) 1 did not arrive" ;;
  hang_ddp) want="rank 0: all_reduce_async [DistributedDataParallel's bucket 1 of 1" ;;
esac
case $mode in hang*)
  if [ $elapsed -gt 20 ]; then echo "FAIL: a 2 s timeout took $elapsed s to end the job"; exit 1; fi
  grep -q "did not arrive" "$err" || { echo "FAIL: the timeout does not say which rank did not arrive"; exit 1; } ;;
esac
if ! grep -qF "$want" "$err"; then echo "FAIL: stderr lacks: $want"; exit 1; fi
echo "ok: $mode ended the job in $elapsed s with exit $rc"
