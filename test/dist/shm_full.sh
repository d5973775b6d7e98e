#!/bin/sh
# ctest dist_shm_full: DistributedDataParallel whose buckets do not fit in /dev/shm (a mount
# namespace of this test's own, a 1 MiB tmpfs there) sums them through MPI instead, and a
# model that fits still takes shared memory. OpenMPI's own shared-memory files go to /tmp.
# Needs root (unshare -m, mount); exits 77 (skipped) where a mount namespace or a tmpfs in it
# cannot be made (a container may allow the one and not the other).
# Usage: shm_full.sh MPIRUN REEL_DIST_TESTS
mpirun=$1 tests=$2
unshare -m sh -c 'mount -t tmpfs -o size=1m tmpfs /dev/shm' 2> /dev/null ||
  { echo "dist_shm_full: skipped: cannot mount a tmpfs on /dev/shm in a mount namespace (needs root)"; exit 77; }
exec unshare -m sh -c 'mount -t tmpfs -o size=1m tmpfs /dev/shm && exec "$@"' sh \
  "$mpirun" -np 2 --oversubscribe --mca btl_vader_backing_directory /tmp "$tests" "[.ddp_shm_full]"
