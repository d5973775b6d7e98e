#!/usr/bin/python3
"""Runs W1-W14 in reel, PyTorch and libtorch side by side and prints medians and ratios.

    /usr/bin/python3 bench/compare.py                  # everything, all cores
    /usr/bin/python3 bench/compare.py --only W1,W6 --rounds 5 --reps 1
    /usr/bin/python3 bench/compare.py --only W3,W9 --busy      # also beside a competing load
    /usr/bin/python3 bench/compare.py --python <venv>/bin/python --also-python /usr/bin/python3
                                          # PyTorch 2.x (eager, torch.compile) and 1.13 in one run
    python3 bench/compare.py --device cuda --build build    # on a GPU: see bench/compare_gpu.py

Each round runs every configuration once, one after the other (A B A B ...): reel in
its default environment, then each peer (PyTorch, libtorch) in its default
environment and in each variant below. Each run does its own warm-up and `--reps`
timed repetitions; the samples of all rounds are pooled, so every configuration gets
rounds x reps timed repetitions (default 3 x 2 = 6). Ratios are reel's median over
the best peer environment's median. Every JSON line (with "env" and "round" added)
is appended to --json; the floors come from the same run (peak sgemm and the machine
probe's bandwidth from bench_w0_peak; W7's read floor from its own plain-loop probe).
Last, bench/compile_time.sh.

Raw results: the current run goes to bench/results/latest.jsonl, whose first line
({"meta": ...}) records the command, the machine, the commit and the time; the run
before it is moved to bench/results/history/<its start time>.jsonl first. Both stay out of git:
the tree keeps one file per machine kind, bench/results/<machine>.jsonl, holding the runs behind
bench/RESULTS.md's current table (copy a run's lines there when it replaces a row).
A peer that is not installed (PyTorch for --python, the ref_*_libtorch programs,
a reel program not built) is reported with the package to install and skipped.

W13 (data parallel, W3 and W4) runs three configurations per round: reel's
bench_w13_ddp under `mpirun -np 2` (one thread per rank), the same program as one
process with 2 threads, and PyTorch DDP (gloo) on 2 ranks (bench/reference/w13_ddp_pytorch.py);
besides, the progress thread, a checkpoint set's cost, the buckets summed in shared memory
against MPI alternated in one job (`--only transports`), and 2 ranks against one process
alternated block by block in one job (`--only paired`, the steadier figure for issue 44):
    /usr/bin/python3 bench/compare.py --only W13 --rounds 3 --reps 5 --no-compile
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LATEST = "bench/results/latest.jsonl"
HISTORY = "bench/results/history"
INSTALL_HINT = "scripts/install-deps.sh --bench"

# The peers' environments: the default one, and one variant each.
ENVS = {
    "default": {},
    "openblas1": {"OPENBLAS_NUM_THREADS": "1"},
    "passive": {"OMP_WAIT_POLICY": "passive"},
    "nocoretype": {"OPENBLAS_CORETYPE": None},
}

# workload: (reel program, libtorch program, PyTorch workload, arguments for all three)
WORKLOADS = {
    "W1": ("bench_w1_mlp", "ref_w1_libtorch", "w1", ["--epochs", "{reps}"]),
    "W2": ("bench_w2_conv_mlp", "ref_w2_libtorch", "w2", ["--epochs", "{reps}"]),
    "W3": ("bench_w3_cnn", "ref_w3_libtorch", "w3", ["--steps", "40", "--reps", "{reps}"]),
    "W4": ("bench_w4_vgg", "ref_w4_libtorch", "w4", ["--steps", "4", "--reps", "{reps}"]),
    "W5": ("bench_w5_overhead", "ref_w5_libtorch", "w5", ["--reps", "{reps}"]),
    "W6": ("bench_w6_optim", "ref_w6_libtorch", "w6", ["--reps", "{reps}"]),
    "W7": ("bench_w7_bias_grad", "ref_w7_libtorch", "w7", ["--reps", "{reps}"]),
    "W8": ("bench_w8_wide_fc", "ref_w8_libtorch", "w8", ["--steps", "2", "--reps", "{reps}"]),
    "W9": ("bench_w9_gru_imdb", "ref_w9_libtorch", "w9", ["--steps", "6", "--reps", "{reps}"]),
    "W12": ("bench_w12_gpt", "ref_w12_libtorch", "w12", ["--steps", "5", "--reps", "{reps}"]),
    "W10": ("bench_w10_resnet50", "ref_w10_libtorch", "w10", ["--steps", "2", "--reps", "{reps}"]),
    "W11": ("bench_w11_densenet", "ref_w11_libtorch", "w11", ["--steps", "2", "--reps", "{reps}"]),
    "W14": ("bench_w14_transcendental", "ref_w14_libtorch", "w14", ["--reps", "{reps}"]),
}
# the workloads PyTorch 2.x also runs through torch.compile (workloads_pytorch.py --compile)
COMPILE_WORKLOADS = ("W1", "W2", "W3", "W4", "W8", "W12")
# W13: (reel program, PyTorch peer script); see w13_configs
W13 = ("bench_w13_ddp", "bench/reference/w13_ddp_pytorch.py")
# mpirun refuses root unless told (CI containers); one OpenMP thread per rank
MPI_ENV = {"OMP_NUM_THREADS": "1", "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
# the workloads that take --amp (issue 19), with their metric and the targets against
# reel's own f32 time and against PyTorch's torch.autocast time (None: reported only)
# (issue 34: with AMX, W4 <= 0.35 of f32 and <= 0.5 of torch.autocast, W8 <= 0.4, W10 <= 0.35,
# W11 <= 0.5; on AVX512-BF16 without AMX W4 and W8 <= 0.6: amp_targets picks by the CPU's flags)
AMP_WORKLOADS = {"W3": ("epoch_s", None, None), "W4": ("step_ms", 0.6, 0.5), "W8": ("step_ms", 0.6, 0.5),
                 "W9": ("epoch_s", None, None), "W10": ("s_per_1000_images", None, None),
                 "W11": ("step_ms", None, None), "W12": ("step_ms", None, None)}
AMP_BEFORE_ISSUE_34 = ("W3", "W4", "W8", "W10", "W11")  # --base: the programs that took --amp before W9 and W12 did
AMP_TARGETS_AMX = {"W4": (0.35, 0.5), "W8": (0.4, 0.5), "W10": (0.35, None), "W11": (0.5, None)}
# --busy: the metric each workload is compared by under the competing load, and the targets of
# issue 34 (reel busy / reel idle, reel busy / best peer busy)
BUSY_METRICS = {"W1": "epoch_s", "W2": "epoch_s", "W3": "epoch_s", "W4": "step_ms", "W8": "step_ms", "W9": "epoch_s",
                "W10": "s_per_1000_images", "W11": "step_ms", "W12": "step_ms"}
BUSY_TARGETS = {"W3": (2.0, 1.0), "W9": (2.0, 1.0)}
W14_OPS = ("exp", "log", "tanh", "sigmoid", "gelu", "gelu_tanh", "erf", "softplus", "silu")

# Floating-point work of one training step (forward, weight gradients, input
# gradients except the first layer's), for the compute floors.
def _train_flops(layers):
    fwd = sum(layers)
    return 3 * fwd - layers[0]

# per image: conv 2*O*C*k*k*H_out*W_out, linear 2*in*out
W3_FLOP_PER_IMAGE = _train_flops([2 * 32 * 9 * 26 * 26, 2 * 64 * 288 * 24 * 24, 2 * 9216 * 128, 2 * 128 * 10])
W4_FLOP_PER_IMAGE = _train_flops([2 * 50 * 27 * 1024, 2 * 50 * 450 * 1024, 2 * 100 * 450 * 256,
                                  2 * 100 * 900 * 256, 2 * 6400 * 512, 2 * 512 * 10])
W8_FLOP_PER_SAMPLE = _train_flops([2 * 25000 * 1024, 2 * 1024 * 512, 2 * 512 * 20000])
# GRU(125, 100) over 150 steps, batch 64: forward 2 T B 3H (I + H), backward twice that
W9_GRU_FLOP_PER_STEP = 3 * 2 * 150 * 64 * 300 * (125 + 100)
# W12: the GPT step's matmul work: 6 N tokens for the weights (N = 6 x 12 C^2 + C V, without the
# embeddings), plus causal attention (4 T^2 C / 2 per sequence and layer forward, twice that backward)
W12_FLOP_PER_STEP = 6 * (6 * 12 * 384 ** 2 + 384 * 96) * 8 * 256 + 3 * 6 * 8 * 4 * 256 ** 2 * 384 / 2
# W12's SDPA rows alone: causal [1, 6, T, 64] forward and backward. The products any algorithm
# does: q k^T and p v forward, dv, dp, dq, dk backward (2 T^2 E each, halved by the mask); a
# flash kernel recomputes q k^T in backward on top (14 instead of 12), the price of O(T) memory.
def sdpa_flop(T, BH=6, E=64):
    return 12 * T * T / 2 * E * BH
W10_FLOP_PER_IMAGE = 2 * 4.09e9  # ResNet-50 forward at 224x224: 4.09 G multiply-adds (torchvision counts them as "GFLOPS")
W8_PARAMS = 25000 * 1024 + 1024 + 1024 * 512 + 512 + 512 * 20000 + 20000


def run(cmd, env_mod, jsonl, tag):
    env = dict(os.environ)
    for k, v in env_mod.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    fd, path = tempfile.mkstemp(suffix=".jsonl")
    os.close(fd)
    try:
        try:
            p = subprocess.run(cmd + ["--json", path], env=env, cwd=ROOT, capture_output=True, text=True)
        except OSError as e:  # checked beforehand; this is a program that vanished or cannot run
            print(f"  SKIPPED: cannot start {cmd[0]}: {e}", file=sys.stderr)
            return []
        if p.returncode != 0:
            print(f"  FAILED ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}", file=sys.stderr)
            return []
        recs = []
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                r = json.loads(line)
                r.update(tag)
                recs.append(r)
        with open(jsonl, "a") as f:
            for r in recs:
                f.write(json.dumps(r) + "\n")
        return recs
    finally:
        os.unlink(path)


def busy_processes():
    return max(1, (os.cpu_count() or 2) // 2)


class CompetingLoad:
    """The fixed competing load of a contention run (BENCH.md): one busy process at normal
    priority per two cores, the same for every system, started before a run and stopped after it."""

    def __enter__(self):
        spin = "while True:\n    pass\n"
        self.procs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(busy_processes())]
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()
        return False


def pooled(recs, workload, system, metric, env=None):
    s = []
    for r in recs:
        if r["workload"] == workload and r["system"] == system and r["metric"] == metric and \
                (env is None or r.get("env") == env):
            s.extend(r.get("samples", [r["median"]]))
    return statistics.median(s) if s else None


def torch_peers(recs):
    """The PyTorch peers of a run: "pytorch" (--python) and "pytorch-<version>" (each --also-python)."""
    return sorted({r["system"] for r in recs if r["system"] == "pytorch" or
                   (r["system"].startswith("pytorch-") and r["system"] != "pytorch-compile")})


def best_peer(recs, workload, metric, systems=None, suffix=""):
    best = None
    for sysname in systems or (*torch_peers(recs), "pytorch-compile", "libtorch"):
        for env in ENVS:
            m = pooled(recs, workload, sysname, metric, env + suffix)
            if m is not None and (best is None or m < best[0]):
                best = (m, f"{sysname}/{env}{suffix}")
    return best


def w13_configs(a, build, envs):
    """(system, env, command, environment changes) of W13's three configurations."""
    prog = os.path.join(build, "bench", W13[0])
    args = ["--steps", "10", "--reps", str(a.reps), "--device", "cpu"]
    mpirun = ["mpirun", "-np", "2", "--oversubscribe", prog, "--threads", "1"]
    # "default": DistributedDataParallel's default, all-reduces advanced from the gradient
    # hooks; "thread": by a progress thread (which of the two hides more)
    configs = [("reel", "default", mpirun + args, MPI_ENV),
               ("reel", "thread", mpirun + ["--progress-thread", "1"] + args, MPI_ENV),
               ("reel", "default", [prog, "--threads", "2"] + args, {}),
               # a consistent checkpoint set's cost beyond its files (issue 44: <= 2% of a step at the
               # sample's default interval, one set per epoch of 469 steps)
               ("reel", "checkpoint", mpirun + ["--only", "checkpoint"] + args, MPI_ENV),
               # the buckets summed in shared memory against MPI, alternated in one job
               # (single steps alternated: the pairs see the same machine)
               ("reel", "transports", mpirun + ["--only", "transports", "--steps", "1", "--reps", "60", "--device", "cpu"],
                MPI_ENV),
               # issue 44's ratio in one job: blocks of 2-rank steps alternated with blocks of the
               # 1-process step on both cores (rank 1 asleep), so that each pair sees the same machine
               ("reel", "paired", ["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none", prog, "--only", "paired",
                                   "--steps", "2", "--reps", str(max(20, 4 * a.reps)), "--device", "cpu"], MPI_ENV)]
    for env in envs:
        for sysname, python in a.torch_peers:
            configs.append((sysname, env, [python, os.path.join(ROOT, W13[1]), "--ranks", "2", "--threads", "1"] + args,
                            dict(ENVS[env], OMP_NUM_THREADS="1")))
    return configs


def fmt(x, digits=4):
    return "-" if x is None else f"{x:.{digits}g}"


def table(recs):
    rows = []  # (what, reel, reference, reference value, ratio, target, met)

    def vs_peer(wl, metric, target, what=None, systems=None):
        r = pooled(recs, wl, "reel", metric, "default")
        b = best_peer(recs, wl, metric, systems)
        if r is None or b is None or b[0] <= 0:  # a peer's figure of 0 measured nothing (a peak under the baseline)
            return
        ratio = r / b[0]
        rows.append((what or f"{wl} {metric}", r, b[1], b[0], ratio, f"<= {target:.3g}", ratio <= target))

    def floor_row(what, value, floor, target, lower_is_better=True):
        if value is None or floor is None:
            return
        ratio = value / floor
        ok = ratio <= target if lower_is_better else floor / value >= target
        shown = ratio if lower_is_better else floor / value
        rows.append((what, value, "floor", floor, shown, ("<= " if lower_is_better else ">= ") + f"{target:.3g}", ok))

    gflops = pooled(recs, "peak", "reel", "sgemm_gflops")
    # the bandwidth floor: the machine probe (bench_w0_peak's STREAM, independent of reel's
    # ops) where it ran; reel's own a += b (W6) only without it, as before round five
    gbs = pooled(recs, "peak", "reel", "probe_bandwidth_gbs")
    if not gbs:
        add_ms = pooled(recs, "W6", "reel", "add_inplace_ms")
        gbs = 12 * 1e7 / (add_ms * 1e-3) / 1e9 if add_ms else None
    vs_peer("W1", "epoch_s", 0.5)
    w1 = pooled(recs, "W1", "reel", "epoch_s", "default")
    w2 = pooled(recs, "W2", "reel", "epoch_s", "default")
    if w1 and w2:
        rows.append(("W2 epoch_s / reel W1", w2, "reel W1", w1, w2 / w1, "<= 1.1", w2 / w1 <= 1.1))
    vs_peer("W2", "epoch_s", 1e9, "W2 epoch_s (vs peers, no target)")
    vs_peer("W3", "epoch_s", 0.7)
    vs_peer("W4", "step_ms", 0.8)
    for metric, target in (("forward_record_us_per_op", 1 / 3), ("backward_us_per_op", 0.5),
                           ("forward_nograd_us_per_op", 0.5)):
        vs_peer("W5", metric, target, f"W5 {metric} vs libtorch", ("libtorch",))
    if gbs:
        floor_row("W6 adam_step_ms vs 28 B/param", pooled(recs, "W6", "reel", "adam_step_ms"), 28e7 / (gbs * 1e6), 1.25)
        floor_row("W6 sgd_momentum_step_ms vs 20 B", pooled(recs, "W6", "reel", "sgd_momentum_step_ms"),
                  20e7 / (gbs * 1e6), 1.25)
    vs_peer("W6", "adam_step_ms", 1e9, "W6 adam_step_ms (vs peers)")
    # issue 42: reel's in-place add within 10% of the peers' add_ on the same bytes
    vs_peer("W6", "add_inplace_ms", 1.1, "W6 a += b (add_inplace_ms) vs peers")
    # the machine probe's read-only sum (bench_w0_peak) where the program reported it, else
    # the program's own plain OpenMP read
    w7_floor = pooled(recs, "W7", "reel", "machine_read_floor_ms")
    floor_row("W7 bias_grad_ms (fraction of the machine's read floor)" if w7_floor else
              "W7 bias_grad_ms (fraction of its plain-read floor)", pooled(recs, "W7", "reel", "bias_grad_ms"),
              w7_floor or pooled(recs, "W7", "reel", "read_floor_ms"), 0.8, lower_is_better=False)
    vs_peer("W7", "bias_grad_ms", 1e9, "W7 bias_grad_ms (vs peers)")
    vs_peer("W8", "step_ms", 0.6)
    # W8's own floor: a += b on its DRAM-sized working set (W6's may sit in L3)
    w8_floor = pooled(recs, "W8", "reel", "adam_floor_ms")
    if w8_floor is None and gbs:
        w8_floor = 28 * W8_PARAMS / (gbs * 1e6)
    floor_row("W8 optimizer_ms vs Adam floor", pooled(recs, "W8", "reel", "optimizer_ms"), w8_floor, 1.3)
    if gflops:  # compute floors: reported, no target
        for what, wl, metric, flop in (("W3 epoch_s vs compute floor", "W3", "epoch_s", 60000 * W3_FLOP_PER_IMAGE),
                                       ("W4 step_ms vs compute floor", "W4", "step_ms", 1e3 * 64 * W4_FLOP_PER_IMAGE),
                                       ("W8 fwd+bwd ms vs compute floor", "W8", None, 1e3 * 128 * W8_FLOP_PER_SAMPLE)):
            if metric:
                v = pooled(recs, wl, "reel", metric)
            else:
                f, b = pooled(recs, wl, "reel", "forward_ms"), pooled(recs, wl, "reel", "backward_ms")
                v = f + b if f and b else None
            floor_row(what + " (floor/time)", v, flop / (gflops * 1e9), 0.0, lower_is_better=False)
    vs_peer("W9", "epoch_s", 0.6)
    # W13: 2 ranks x 1 thread against 1 process x 2 threads, and against PyTorch DDP (gloo)
    for m, target_1p, target_peer in (("w4", 1.05, 0.7), ("w3", 1e9, 1e9)):  # issue 44: W4 <= 1.05
        ddp = pooled(recs, "W13", "reel", f"{m}_ddp_step_ms", "default")
        one = pooled(recs, "W13", "reel", f"{m}_1proc_step_ms", "default")
        if ddp and one:
            rows.append((f"W13 {m} 2 ranks / 1 process 2 threads", ddp, "reel 1x2", one, ddp / one,
                         f"<= {target_1p:.3g}", ddp / one <= target_1p))
        vs_peer("W13", f"{m}_ddp_step_ms", target_peer, f"W13 {m} ddp_step_ms vs PyTorch DDP", torch_peers(recs))
        hidden = pooled(recs, "W13", "reel", f"{m}_hidden_share", "default")
        exposed = pooled(recs, "W13", "reel", f"{m}_exposed_wait_ms", "default")
        if hidden is None and exposed is not None:  # buckets summed in shared memory: no stand-alone all-reduce
            rows.append((f"W13 {m} wait for the buckets' sums at backward's end (shared memory), ms", exposed,
                         "step ms", ddp, exposed / ddp if ddp else 0.0, "1e+09", True))
        if hidden is not None:
            rows.append((f"W13 {m} all-reduce hidden (share)", hidden, "all-reduce alone ms",
                         pooled(recs, "W13", "reel", f"{m}_allreduce_ms", "default"), hidden, "1e+09", True))
            for env in ("default", "thread"):
                step = pooled(recs, "W13", "reel", f"{m}_ddp_step_ms", env)
                h = pooled(recs, "W13", "reel", f"{m}_hidden_share", env)
                if step is not None and h is not None:
                    rows.append((f"W13 {m} progress {'hooks' if env == 'default' else 'thread'}: step_ms, hidden",
                                 step, "hidden share", h, 0.0, "1e+09", True))
            sent = pooled(recs, "W13", "reel", f"{m}_bytes_sent_per_step", "default")
            rows.append((f"W13 {m} MB sent per rank per step", sent / 1e6, "-", None, 0.0, "1e+09", True))
    pair = pooled(recs, "W13", "reel", "w4_ddp_over_1proc_paired", "paired")
    if pair is not None:
        rows.append(("W13 w4 2 ranks / 1 process 2 threads, blocks alternated in one job (median pair)",
                     pooled(recs, "W13", "reel", "w4_paired_ddp_step_ms", "paired"), "reel 1x2",
                     pooled(recs, "W13", "reel", "w4_paired_1proc_step_ms", "paired"), pair, "<= 1.05", pair <= 1.05))
    shm = pooled(recs, "W13", "reel", "w4_ddp_shm_step_ms", "transports")
    over_mpi = pooled(recs, "W13", "reel", "w4_ddp_mpi_step_ms", "transports")
    paired = pooled(recs, "W13", "reel", "w4_shm_over_mpi_paired", "transports")
    if shm and over_mpi and paired:
        rows.append(("W13 w4 buckets in shared memory / through MPI (single steps alternated; median pair)", shm,
                     "MPI ms", over_mpi, paired, "1e+09", True))
    files = pooled(recs, "W13", "reel", "checkpoint_files_ms", "checkpoint")
    sets = pooled(recs, "W13", "reel", "checkpoint_set_ms", "checkpoint")
    step = pooled(recs, "W13", "reel", "w4_ddp_step_ms", "checkpoint")
    extra = pooled(recs, "W13", "reel", "checkpoint_consistency_ms", "checkpoint")  # paired set - files, per save
    if files and sets and step and extra is not None:
        rows.append(("W13 w4 checkpoint set ms / its files alone", sets, "files ms", files, sets / files, "1e+09", True))
        for every, target in ((469, 0.02), (50, 1e9), (1, 1e9)):
            share = extra / (every * step)
            rows.append((f"W13 w4 consistency / step, a set every {every}", extra, "step ms", step, share,
                         f"<= {target:.3g}", share <= target))
    if gflops:
        floor_row("W9 step_ms vs GRU GEMM floor (floor/time)", pooled(recs, "W9", "reel", "step_ms"),
                  1e3 * W9_GRU_FLOP_PER_STEP / (gflops * 1e9), 0.0, lower_is_better=False)
    # W10: ResNet-50 features per 1000 images (issue 17: <= 0.7), its compute floor
    vs_peer("W10", "s_per_1000_images", 0.7)
    if gflops:
        floor_row("W10 s_per_1000_images vs compute floor (floor/time)", pooled(recs, "W10", "reel", "s_per_1000_images"),
                  1000 * W10_FLOP_PER_IMAGE / (gflops * 1e9), 0.0, lower_is_better=False)
    # W11: DenseNet-121 training step (issue 17: <= 0.7) and peak memory (<= PyTorch's)
    vs_peer("W11", "step_ms", 0.7)
    vs_peer("W11", "peak_rss_mb", 1.0, systems=torch_peers(recs))
    # W12: the GPT step against the eager peers (issue 42: <= 0.6), its compute floor, and SDPA alone
    vs_peer("W12", "step_ms", 0.6, systems=(*torch_peers(recs), "libtorch"))  # the eager peers; issue 42
    vs_peer("W12", "step_ms", 1e9, "W12 step_ms vs torch.compile (no target)", ("pytorch-compile",))
    if gflops:
        floor_row("W12 step_ms vs compute floor (floor/time)", pooled(recs, "W12", "reel", "step_ms"),
                  1e3 * W12_FLOP_PER_STEP / (gflops * 1e9), 0.0, lower_is_better=False)
    for T in (256, 1024, 4096):
        # issue 42: <= 1.0 of PyTorch 2.15 (its fused CPU flash attention) at T = 1024 and 4096
        vs_peer("W12", f"sdpa_T{T}_ms", 1.0 if T >= 1024 else 1e9, f"W12 sdpa_T{T}_ms (vs peers)")
        if gflops:
            floor_row(f"W12 sdpa_T{T}_ms vs compute floor (floor/time)", pooled(recs, "W12", "reel", f"sdpa_T{T}_ms"),
                      1e3 * sdpa_flop(T) / (gflops * 1e9), 0.0, lower_is_better=False)
        vs_peer("W12", f"sdpa_T{T}_peak_mb", 1e9, f"W12 sdpa_T{T}_peak_mb (vs peers)")
    # W14: each op's forward and backward against the peers and against the bandwidth floor
    # of its traffic (8 B/element forward, 12 backward), measured in reel's run
    for op in W14_OPS:
        for way in ("fwd", "bwd"):
            vs_peer("W14", f"{op}_{way}_ms", 0.8)
            floor_row(f"W14 {op}_{way}_ms vs floor", pooled(recs, "W14", "reel", f"{op}_{way}_ms", "default"),
                      pooled(recs, "W14", "reel", f"floor_{way}_ms", "default"), 1.5)
        # the same count of elements from the L2: ~1.0 means the op is bound by its instructions, not memory
        cached, streamed = (pooled(recs, "W14", "reel", f"{op}_fwd{m}_ms", "default") for m in ("_from_cache", ""))
        if cached and streamed:
            rows.append((f"W14 {op}_fwd from cache / streaming", cached, "streaming ms", streamed, cached / streamed,
                         "1e+09", True))
    # mixed precision: reel's autocast run against its own f32 run and against PyTorch's autocast run
    if "bf16_features" not in RUN_META:  # a run from before issue 34: this machine's
        RUN_META["cpu"], RUN_META["bf16_features"] = cpu_info()
    amx = "amx_bf16" in RUN_META["bf16_features"]
    for dt in ("bf16", "f16"):
        env = f"amp-{dt}"
        for wl, (metric, own, peer) in AMP_WORKLOADS.items():
            if dt == "bf16" and amx and wl in AMP_TARGETS_AMX:
                own, peer = AMP_TARGETS_AMX[wl]
            amp = pooled(recs, wl, "reel", metric, env)
            f32 = pooled(recs, wl, "reel", metric, "default")
            torch_amp = pooled(recs, wl, "pytorch", metric, env)
            if amp is None:
                continue
            if f32:
                rows.append((f"{wl} {metric} --amp {dt} / reel f32", amp, "reel/default", f32, amp / f32,
                             f"<= {own:.3g}" if own else "1e+09", own is None or amp / f32 <= own))
            if torch_amp:
                rows.append((f"{wl} {metric} --amp {dt} vs torch.autocast", amp, f"pytorch/{env}", torch_amp,
                             amp / torch_amp, f"<= {peer:.3g}" if peer else "1e+09",
                             peer is None or amp / torch_amp <= peer))
        if gflops:
            f, b = pooled(recs, "W8", "reel", "forward_ms", env), pooled(recs, "W8", "reel", "backward_ms", env)
            if f and b:
                floor_row(f"W8 --amp {dt} fwd+bwd vs f32 compute floor (floor/time)", f + b,
                          1e3 * 128 * W8_FLOP_PER_SAMPLE / (gflops * 1e9), 0.0, lower_is_better=False)
    # a contention run (--busy): each workload beside the competing load, against reel's own idle
    # time and against the best peer in its best environment under the same load (issue 34)
    for wl, metric in BUSY_METRICS.items():
        busy = pooled(recs, wl, "reel", metric, "default+busy")
        idle = pooled(recs, wl, "reel", metric, "default")
        if busy is None:
            continue
        own, peer = BUSY_TARGETS.get(wl, (None, None))
        if idle:
            rows.append((f"{wl} {metric} busy / reel idle", busy, "reel/default", idle, busy / idle,
                         f"<= {own:.3g}" if own else "1e+09", own is None or busy / idle <= own))
        b = best_peer(recs, wl, metric, suffix="+busy")
        if b and b[0] > 0:
            rows.append((f"{wl} {metric} busy vs best peer busy", busy, b[1], b[0], busy / b[0],
                         f"<= {peer:.3g}" if peer else "1e+09", peer is None or busy / b[0] <= peer))
    # --base: every metric of this build against the same program of the earlier build, same run
    for wl, metric in sorted({(r["workload"], r["metric"]) for r in recs if r["system"] == "reel-base"}):
        for env in ("default", "amp-bf16", "amp-f16"):
            now, before = pooled(recs, wl, "reel", metric, env), pooled(recs, wl, "reel-base", metric, env)
            if now and before:
                rows.append((f"{wl} {metric} ({env}) / before", now, "reel-base", before, now / before, "<= 1.03",
                             now / before <= 1.03))
    c_reel = pooled(recs, "compile", "reel", "compile_s")
    c_torch = pooled(recs, "compile", "libtorch", "compile_s")
    if c_reel and c_torch:
        rows.append(("compile_s", c_reel, "libtorch", c_torch, c_reel / c_torch, "<= 0.1", c_reel / c_torch <= 0.1))
    print()
    print(f"CPU: {RUN_META.get('cpu') or 'unknown'}; bf16 features: "
          f"{' '.join(RUN_META.get('bf16_features') or []) or 'none (autocast bf16 runs in f32)'}")
    if gflops:
        print(f"peak sgemm (oneDNN, reel::matmul 2048^3): {gflops:.1f} GFLOP/s")
    if gbs:
        print(f"a += b on 10M floats: {gbs:.2f} GB/s (12 B/element)")
    print(f"{'measure':46} {'reel':>10} {'against':>22} {'value':>10} {'ratio':>7} {'target':>9}  met")
    for what, r, ref, v, ratio, target, ok in rows:
        met = "-" if target.endswith("1e+09") or target == ">= 0" else ("yes" if ok else "NO")
        target = "-" if met == "-" else target
        print(f"{what:46} {fmt(r):>10} {ref:>22} {fmt(v):>10} {ratio:7.3f} {target:>9}  {met}")
    print()
    print("medians per system and environment:")
    keys = sorted({(r["workload"], r["metric"]) for r in recs})
    for wl, metric in keys:
        cells = []
        for sysname in ("reel", "reel-base", *torch_peers(recs), "pytorch-compile", "libtorch"):
            for env in [e + busy for busy in ("", "+busy") for e in list(ENVS) + ["amp-bf16", "amp-f16"]]:
                m = pooled(recs, wl, sysname, metric, env)
                if m is not None:
                    cells.append(f"{sysname}/{env} {fmt(m)}")
        print(f"  {wl:7} {metric:26} " + "; ".join(cells))


def python_has_torch(python):
    """None when `python` imports torch, else why not (never raises)."""
    exe = shutil.which(python) if not os.path.isabs(python) else python
    if not exe or not os.access(exe, os.X_OK):
        return f"{python} not found"
    try:
        p = subprocess.run([exe, "-c", "import torch"], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{python} did not run: {e}"
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["exit status %d" % p.returncode])[-1]
        return f"{python} cannot import torch ({last})"
    return None


def missing(what, why, fix):
    print(f"missing peer: {what}: {why}\n  to get it: {fix}\n  carrying on without it", file=sys.stderr)


# the run's meta line (write_meta, or the last one load_records read): the results header
RUN_META = {}


def load_records(path):
    with open(path) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    for r in recs:
        if "meta" in r:
            RUN_META.update(r["meta"])
    return [r for r in recs if "meta" not in r]


def cpu_info():
    """The CPU's model name and which of its flags serve bf16 products (issue 34's targets
    differ for AMX and AVX512-BF16-only CPUs)."""
    name, flags = "", []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and not name:
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    have = set(line.split(":", 1)[1].split())
                    flags = [x for x in ("amx_bf16", "amx_tile", "avx512_bf16") if x in have]
    except OSError:
        pass
    return name, flags


def rotate_latest(jsonl):
    """Moves the previous run's lines out of the way, named by the time that run started."""
    if not os.path.exists(jsonl) or os.path.getsize(jsonl) == 0:
        return
    with open(jsonl) as f:
        first = f.readline()
    try:
        stamp = json.loads(first)["meta"]["started"]
    except (ValueError, KeyError, TypeError):
        stamp = datetime.datetime.fromtimestamp(os.path.getmtime(jsonl), datetime.timezone.utc).isoformat()
    stamp = stamp.replace(":", "").replace("+0000", "Z")[:17]
    history = os.path.join(ROOT, HISTORY)
    os.makedirs(history, exist_ok=True)
    dest = os.path.join(history, f"{stamp}.jsonl")
    n = 1
    while os.path.exists(dest):
        n += 1
        dest = os.path.join(history, f"{stamp}_{n}.jsonl")
    os.replace(jsonl, dest)
    print(f"previous run moved to {os.path.relpath(dest, ROOT)}")


def write_meta(jsonl, a):
    def out(cmd):
        try:
            return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""
    cpu, bf16 = cpu_info()
    meta = {"started": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "command": " ".join(["bench/compare.py"] + sys.argv[1:]),
            "commit": out(["git", "rev-parse", "--short", "HEAD"]), "cpu": cpu, "bf16_features": bf16,
            "cores": os.cpu_count(),
            "kernel": platform.release(), "python": a.python or "/usr/bin/python3", "device": a.device}
    os.makedirs(os.path.dirname(jsonl), exist_ok=True)
    with open(jsonl, "a") as f:
        f.write(json.dumps({"meta": meta}) + "\n")
    RUN_META.update(meta)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build-bench", help="reel's build directory (bench_* and ref_* programs)")
    p.add_argument("--threads", type=int, default=None,
                   help="threads for every system (default: the peers get all cores; reel runs its default, "
                        "all cores while they are free, without --threads)")
    p.add_argument("--base", default="",
                   help="a second reel build directory (an earlier commit's): its bench programs run beside this "
                        "build's in every round as system reel-base, and each metric gets a row this / base "
                        "(target <= 1.03: issue 34's 'no workload slower than before')")
    p.add_argument("--busy", action="store_true",
                   help="a contention run: every configuration also runs beside a fixed competing load "
                        "(one busy process at normal priority per two cores, started here), tagged env <env>+busy")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=2, help="timed repetitions per run (W1/W2: epochs)")
    p.add_argument("--only", default="", help="comma-separated workloads, e.g. W1,W6")
    p.add_argument("--peer-envs", default=",".join(ENVS), help="peer environments to run")
    p.add_argument("--json", default=LATEST, help="file the JSON lines are appended to (the default one is "
                   f"moved to {HISTORY}/ when a new run starts)")
    p.add_argument("--no-compile", action="store_true", help="skip bench/compile_time.sh")
    p.add_argument("--from-json", default="", help="only print the table of an earlier run's JSON lines")
    p.add_argument("--device", default="cpu", help="cpu, or cuda[:N]: reel against PyTorch on that GPU")
    p.add_argument("--python", default="", help="the Python with PyTorch (default: /usr/bin/python3 on the CPU, "
                   "python3 from PATH on a GPU)")
    p.add_argument("--also-python", action="append", default=[],
                   help="a further Python with another PyTorch (repeatable), run beside --python's in every round as "
                        "system pytorch-<its torch version> (issue 42's table: PyTorch 2.15 and 1.13 in one run)")
    p.add_argument("--amp", default="", choices=["", "bf16", "f16"],
                   help="W3, W4, W8, W9, W10, W11, W12 also with the forward under autocast in that dtype: reel --amp and "
                        "PyTorch's torch.autocast, tagged env amp-<dtype>")
    p.add_argument("--no-torch-compile", action="store_true",
                   help="skip the torch.compile runs (on the CPU: W1-W4, W8, W12's, run when --python is not "
                        "Debian's PyTorch 1.13)")
    a = p.parse_args()
    gpu = a.device != "cpu"
    if a.from_json:
        recs = load_records(a.from_json)
        if any(str(r.get("device", "")).startswith("cuda") for r in recs):
            import compare_gpu
            compare_gpu.gpu_table(recs)
        else:
            table(recs)
        return
    build = os.path.join(ROOT, a.build) if not os.path.isabs(a.build) else a.build
    jsonl = os.path.abspath(os.path.join(ROOT, a.json) if a.json == LATEST else a.json)
    if a.json == LATEST:
        rotate_latest(jsonl)
    write_meta(jsonl, a)
    a.python = a.python or ("python3" if gpu else "/usr/bin/python3")
    no_torch = python_has_torch(a.python)
    if no_torch:
        missing("PyTorch", no_torch, f"{INSTALL_HINT} (Debian's python3-torch), or --python with a venv's python")
    a.torch_peers = [] if no_torch else [("pytorch", a.python)]
    for python in a.also_python:
        why = python_has_torch(python)
        if why:
            missing(f"PyTorch from {python}", why, "a venv's python that imports torch")
            continue
        version = subprocess.run([python, "-c", "import torch; print('.'.join(torch.__version__.split('.')[:2]))"],
                                 capture_output=True, text=True).stdout.strip()
        a.torch_peers.append((f"pytorch-{version}", python))
    bench_dir = os.path.join(build, "bench")
    if not os.path.isdir(bench_dir):
        missing("reel's benchmark programs", f"{bench_dir} does not exist",
                f"cmake -S . -B {a.build} -G Ninja -DCMAKE_BUILD_TYPE=Release -DREEL_BUILD_BENCH=ON && "
                f"ninja -C {a.build} bench/all")
    if gpu:
        import compare_gpu
        if no_torch:
            a.python = None
        compare_gpu.gpu_table(compare_gpu.gpu_runs(a, build, jsonl, run))
        print(f"\nJSON lines appended to {jsonl}")
        return
    only = [w.strip().upper() for w in a.only.split(",") if w.strip()] or list(WORKLOADS) + ["W13"]
    unknown = [w for w in only if w not in WORKLOADS and w != "W13"]
    if unknown:
        p.error(f"unknown workload(s) {','.join(unknown)}; known: {','.join(WORKLOADS)}")
    envs = [e for e in a.peer_envs.split(",") if e]
    threads = a.threads or os.cpu_count()
    common = ["--threads", str(threads), "--device", "cpu"]
    # reel's default keeps the count following the load; --threads pins it (bench/reel_bench.h)
    reel_common = common if a.threads else ["--device", "cpu"]
    exists = lambda prog: os.path.isfile(os.path.join(bench_dir, prog))  # noqa: E731
    recs = []
    if exists("bench_w0_peak"):
        recs += run([os.path.join(bench_dir, "bench_w0_peak"), "--reps", "5"] + common, {}, jsonl,
                    {"env": "default", "round": 0})
    no_libtorch = [WORKLOADS[wl][1] for wl in only if wl in WORKLOADS and not exists(WORKLOADS[wl][1])]
    if no_libtorch and os.path.isdir(bench_dir):
        missing("libtorch", f"{', '.join(no_libtorch)} not built in {bench_dir}",
                f"{INSTALL_HINT} (Debian's libtorch-dev), then reconfigure {a.build} with -DREEL_BUILD_BENCH=ON")
    for wl in only:
        if wl == "W13":
            for rnd in range(1, a.rounds + 1):
                for sysname, env, cmd, env_mod in w13_configs(a, build, envs):
                    print(f"W13 round {rnd}: {sysname} ({env}) {os.path.basename(cmd[0])}", flush=True)
                    renamed = sysname.startswith("pytorch-")
                    recs += run(cmd, env_mod, jsonl, {"env": env, "round": rnd, **({"system": sysname} if renamed else {})})
            continue
        reel, ref, py, extra = WORKLOADS[wl]
        extra = [x.format(reps=a.reps) for x in extra]
        configs = []
        base = os.path.join(os.path.abspath(a.base), "bench", reel) if a.base else ""
        base = base if base and os.path.isfile(base) else ""
        if exists(reel):
            configs.append(("reel", "default", [os.path.join(bench_dir, reel)]))
            if base:
                configs.append(("reel-base", "default", [base]))
        elif os.path.isdir(bench_dir):
            print(f"{wl}: {reel} not built in {bench_dir}; skipping reel's side", file=sys.stderr)
        for env in envs:
            for sysname, python in a.torch_peers:
                configs.append((sysname, env, [python, os.path.join(ROOT, "bench/reference/workloads_pytorch.py"), py]))
            if exists(ref):
                configs.append(("libtorch", env, [os.path.join(bench_dir, ref)]))
        if wl in COMPILE_WORKLOADS and not no_torch and a.python != "/usr/bin/python3" and not a.no_torch_compile:
            # a PyTorch 2.x from --python: also torch.compile (a peer like the others: "best peer" is the best
            # of eager, compiled and libtorch; W12 also states its eager ratio apart)
            script = os.path.join(ROOT, "bench/reference/workloads_pytorch.py")
            configs.append(("pytorch-compile", "default", [a.python, script, py, "--compile"]))
        if a.amp and wl in AMP_WORKLOADS:  # the mixed-precision runs, side by side with the f32 ones
            amp_env = f"amp-{a.amp}"
            if exists(reel):
                configs.append(("reel", amp_env, [os.path.join(bench_dir, reel), "--amp", a.amp]))
                if base and wl in AMP_BEFORE_ISSUE_34:
                    configs.append(("reel-base", amp_env, [base, "--amp", a.amp]))
            if not no_torch:
                configs.append(("pytorch", amp_env, [a.python, os.path.join(ROOT, "bench/reference/workloads_pytorch.py"),
                                                     py, "--amp", a.amp]))
        for rnd in range(1, a.rounds + 1):
            for sysname, env, cmd in configs:
                args = cmd + extra + (reel_common if sysname.startswith("reel") else common)
                print(f"{wl} round {rnd}: {sysname} ({env})", flush=True)
                # the earlier build's programs report themselves as reel: the tag renames them
                # (and a further PyTorch's as pytorch-<version>)
                renamed = sysname == "reel-base" or (sysname.startswith("pytorch-") and sysname != "pytorch-compile")
                tag = {"env": env, "round": rnd, **({"system": sysname} if renamed else {})}
                recs += run(args, ENVS.get(env, {}), jsonl, tag)
                if a.busy:
                    print(f"{wl} round {rnd}: {sysname} ({env}) beside {busy_processes()} busy processes", flush=True)
                    with CompetingLoad():
                        recs += run(args, ENVS.get(env, {}), jsonl, dict(tag, env=f"{env}+busy"))
    if not a.no_compile:
        fd, path = tempfile.mkstemp(suffix=".jsonl")
        os.close(fd)
        subprocess.run(["bash", os.path.join(ROOT, "bench/compile_time.sh"), "--json", path], cwd=ROOT)
        with open(path) as f:
            # bc prints ".91" for 0.91: give such numbers their leading zero
            crecs = [dict(json.loads(re.sub(r": \.", ": 0.", line)), env="default", round=0) for line in f if line.strip()]
        os.unlink(path)
        with open(jsonl, "a") as f:
            for r in crecs:
                f.write(json.dumps(r) + "\n")
        recs += crecs
    table(recs)
    print(f"\nJSON lines appended to {jsonl}")


if __name__ == "__main__":
    main()
