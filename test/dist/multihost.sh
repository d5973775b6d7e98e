#!/usr/bin/env bash
# ctest dist_multihost: the README's several-hosts command, on two "hosts" made here as
# network namespaces (each its own network stack, address, host name; one file system).
# mpirun starts in host a; its launch agent (plm_rsh_agent, ssh's place) enters host b's
# namespace instead of logging in; ranks on different hosts talk over TCP (a veth pair,
# 10.200.N.0/24, addresses that exist only inside the namespaces made here). The
# Fashion-MNIST sample trains 2 hosts x 2 ranks for N steps; its weights must equal a
# 4-rank run on one host bit for bit (the same global batches; the collectives' order of
# summation depends on the rank count, not on the transport).
# Needs root (ip netns); exits 77 (skipped) where namespaces cannot be made. Every exit
# path removes the namespaces (and a namespace a killed earlier run left behind).
# Usage: multihost.sh TRAIN_FASHION_MNIST MPIRUN WORK_DIR [DATA_DIR] [STEPS]
set -uo pipefail
train=$(realpath "$1") mpirun=$2 work=$3 data=${4:-/usr/share/datasets/fashion-mnist} steps=${5:-20}
sweep=; [ -n "${REEL_MULTIHOST_SWEEP:-}" ] && sweep=$(realpath "$REEL_MULTIHOST_SWEEP")
skip() { echo "dist_multihost: SKIPPED: $*"; exit 77; }
fail() { echo "dist_multihost: FAIL: $*"; exit 1; }
[ "$(id -u)" = 0 ] || skip "not root: ip netns needs CAP_SYS_ADMIN"
command -v ip > /dev/null || skip "no ip (iproute2)"
command -v unshare > /dev/null || skip "no unshare (util-linux)"
[ -e "$data/train-images-idx3-ubyte.gz" ] || skip "no Fashion-MNIST at $data (apt-get install dataset-fashion-mnist)"

# leftovers of a run killed before its cleanup (ctest's timeout): namespaces named after a
# process that is gone
for ns in $(ip netns list 2> /dev/null | awk '{print $1}' | grep '^reelmh[0-9]*[ab]$'); do
  owner=${ns#reelmh}; owner=${owner%[ab]}
  kill -0 "$owner" 2> /dev/null && continue
  for p in $(ip netns pids "$ns" 2> /dev/null); do kill -KILL "$p" 2> /dev/null; done
  ip netns del "$ns" 2> /dev/null
  rm -rf "/etc/netns/$ns"
done

a=reelmh$$a b=reelmh$$b net=10.200.$(( $$ % 250 + 1 ))
cleanup() {
  for ns in "$a" "$b"; do
    for p in $(ip netns pids "$ns" 2> /dev/null); do kill -KILL "$p" 2> /dev/null; done
    ip netns del "$ns" 2> /dev/null
    rm -rf "/etc/netns/$ns"
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

rm -rf "$work"; mkdir -p "$work"
ip netns add "$a" 2> "$work/netns.err" || skip "cannot make a network namespace: $(cat "$work/netns.err")"
ip netns add "$b" || fail "ip netns add $b"
# host names inside the namespaces: ip netns exec puts /etc/netns/<ns>/hosts over /etc/hosts
for ns in "$a" "$b"; do
  mkdir -p "/etc/netns/$ns"
  printf '127.0.0.1 localhost\n%s.1 reel-host-a\n%s.2 reel-host-b\n' "$net" "$net" > "/etc/netns/$ns/hosts"
done
ip link add "${a}v" type veth peer name "${b}v" || skip "cannot make a veth pair"
ip link set "${a}v" netns "$a" && ip link set "${b}v" netns "$b" &&
  ip -n "$a" addr add "$net.1/24" dev "${a}v" && ip -n "$b" addr add "$net.2/24" dev "${b}v" &&
  ip -n "$a" link set "${a}v" up && ip -n "$b" link set "${b}v" up &&
  ip -n "$a" link set lo up && ip -n "$b" link set lo up || fail "configuring the namespaces"

# ssh's place: "agent [options] HOST COMMAND..." runs COMMAND in HOST's namespace, with its
# own host name (a UTS namespace), as sshd would on that machine
agent=$work/ns-agent.sh
cat > "$agent" << EOF
#!/bin/sh
while [ "\${1#-}" != "\$1" ]; do shift; done  # ssh options OpenMPI may pass
host=\$1; shift
case \$host in
  reel-host-a) ns=$a ;;
  reel-host-b) ns=$b ;;
  *) echo "ns-agent: unknown host \$host" >&2; exit 255 ;;
esac
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$host; \$*"
EOF
chmod +x "$agent"

export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
opts=(--distributed --model mlp --epochs 1 --steps-per-epoch "$steps" --global-batch-size 64 --data "$data"
      --logdir none)
# the README's command (docs: "Several machines"), with the agent in ssh's place; both
# "hosts" share this machine's cores, so the ranks yield when they wait (mpirun does that
# itself for ranks it knows to be oversubscribed on one host) and are not bound: each
# host's mpirun binds its first rank to core 0, so two "hosts" put their ranks on the same
# core, and a busy-polling rank then holds it for a scheduler tick (4 ms at HZ = 250) before
# its peer runs: every TCP message took 4 ms until --bind-to none (2026-11-28)
cd "$work" || exit 1
start=$(date +%s.%N)
timeout 300 ip netns exec "$a" unshare --uts sh -c 'hostname reel-host-a; exec "$@"' sh \
  "$mpirun" -H reel-host-a:2,reel-host-b:2 --mca plm_rsh_agent "$agent" \
  --mca oob_tcp_if_include "$net.0/24" --mca btl_tcp_if_include "$net.0/24" \
  --mca mpi_yield_when_idle 1 --bind-to none \
  -x OMP_NUM_THREADS "$train" "${opts[@]}" --out two_hosts > two_hosts.log 2>&1 ||
  { cat two_hosts.log; fail "2 hosts x 2 ranks failed"; }
two_s=$(echo "$(date +%s.%N) - $start" | bc)
grep -q "4 ranks (data-parallel)" two_hosts.log || { cat two_hosts.log; fail "not 4 ranks: $(head -3 two_hosts.log)"; }
start=$(date +%s.%N)
timeout 300 "$mpirun" --oversubscribe -np 4 "$train" "${opts[@]}" --out one_host > one_host.log 2>&1 ||
  { cat one_host.log; fail "4 ranks on one host failed"; }
one_s=$(echo "$(date +%s.%N) - $start" | bc)
cmp two_hosts/mlp.safetensors one_host/mlp.safetensors ||
  fail "2 hosts x 2 ranks and 4 ranks on one host end with different weights after $steps steps"
# the per-step time each run printed (img/s of its epoch), for bench/RESULTS.md
echo "2 hosts x 2 ranks (TCP over a veth pair) and 4 ranks on one host: weights bit-identical after $steps steps"
echo "  two hosts: $(grep -o '[0-9]* img/s' two_hosts.log | tail -1), whole job ${two_s%.*} s;" \
  "one host: $(grep -o '[0-9]* img/s' one_host.log | tail -1), whole job ${one_s%.*} s"
# REEL_MULTIHOST_SWEEP=<bench_w13_ddp>: also the all-reduce alone, 4 B to 64 MiB, one rank a
# host (TCP between them) and two ranks on one host (shared memory): docs/distributed.md's
# latency and bandwidth figures. REEL_MULTIHOST_MCA: more mpirun options for the TCP sweep
# ("--mca mpi_event_tick_rate 0"), to try OpenMPI's progress settings.
if [ -n "$sweep" ]; then
  echo "all-reduce alone, 1 rank on each of 2 hosts (TCP):"
  timeout 300 ip netns exec "$a" unshare --uts sh -c 'hostname reel-host-a; exec "$@"' sh \
    "$mpirun" -H reel-host-a:1,reel-host-b:1 --mca plm_rsh_agent "$agent" \
    --mca oob_tcp_if_include "$net.0/24" --mca btl_tcp_if_include "$net.0/24" --bind-to none ${REEL_MULTIHOST_MCA:-} \
    -x OMP_NUM_THREADS "$sweep" --only sweep --reps 1 2>&1 | grep -v '^W13'
  echo "all-reduce alone, 2 ranks on one host (shared memory):"
  timeout 300 "$mpirun" -np 2 "$sweep" --only sweep --reps 1 2>&1 | grep -v '^W13'
fi
