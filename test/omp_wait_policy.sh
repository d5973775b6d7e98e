#!/bin/sh
# usage: omp_wait_policy.sh PROGRAM — PROGRAM links libreel; OMP_DISPLAY_ENV makes libgomp
# print the settings it read at start-up.
prog="$1"
shown() { env "$@" OMP_DISPLAY_ENV=verbose "$prog" --list-tests 2>&1 | grep -E "GOMP_SPINCOUNT|OMP_WAIT_POLICY"; }
check() {  # check EXPECTED ENV...
  expected="$1"; shift
  if ! shown "$@" | grep -qF "$expected"; then
    echo "expected $expected with $*, libgomp read:"; shown "$@"; exit 1
  fi
}
check "GOMP_SPINCOUNT = '10000'" -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT
check "GOMP_SPINCOUNT = '1234'" -u OMP_WAIT_POLICY GOMP_SPINCOUNT=1234
check "OMP_WAIT_POLICY = 'ACTIVE'" -u GOMP_SPINCOUNT OMP_WAIT_POLICY=active
echo "libgomp read reel's spin count, and the user's settings when given"
