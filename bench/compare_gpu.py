"""compare.py --device cuda: W1-W12 on one GPU, reel against PyTorch eager and
torch.compile (W1-W4, W8, W12), rounds alternating A B C A B C, medians of the pooled samples.

Every program times GPU work after a synchronize (reel: cuda::synchronize, PyTorch:
torch.cuda.synchronize) and runs with TF32 off. The targets (issue #6, "Fast on the GPU"):
  - W1-W4 step or epoch time, reel eager <= 0.8x PyTorch eager;
  - W2 epoch / W1 epoch (reel) <= 1.15;
  - W6 (Adam, SGD-momentum) and W7 (bias gradient) reach >= 80% of the device-to-device
    copy bandwidth floor measured in the same program;
  - W8 step time <= 1.1x PyTorch eager;
  - issue 46: W9-W11 and the W12 step <= 0.8x PyTorch eager, W12's SDPA <= 1.0x at T >= 1024.
torch.compile is shown beside, with no target.
"""
import os
import statistics

# workload: (reel program, PyTorch workload, arguments, whether a torch.compile run applies)
GPU_WORKLOADS = {
    "W1": ("bench_w1_mlp", "w1", ["--epochs", "{reps}"], True),
    "W2": ("bench_w2_conv_mlp", "w2", ["--epochs", "{reps}"], True),
    "W3": ("bench_w3_cnn", "w3", ["--steps", "200", "--reps", "{reps}"], True),
    "W4": ("bench_w4_vgg", "w4", ["--steps", "20", "--reps", "{reps}"], True),
    "W5": ("bench_w5_overhead", "w5", ["--reps", "{reps}"], False),
    "W6": ("bench_w6_optim", "w6", ["--reps", "{reps}"], False),
    "W7": ("bench_w7_bias_grad", "w7", ["--reps", "{reps}"], False),
    "W8": ("bench_w8_wide_fc", "w8", ["--steps", "10", "--reps", "{reps}"], True),
    "W9": ("bench_w9_gru_imdb", "w9", ["--steps", "40", "--reps", "{reps}"], False),
    "W10": ("bench_w10_resnet50", "w10", ["--steps", "10", "--reps", "{reps}"], False),
    "W11": ("bench_w11_densenet", "w11", ["--steps", "10", "--reps", "{reps}"], False),
    "W12": ("bench_w12_gpt", "w12", ["--steps", "10", "--reps", "{reps}"], True),
}


def gpu_runs(a, build, jsonl, run):
    """Runs every configuration of the chosen workloads, round after round; returns the records."""
    only = [w.strip().upper() for w in a.only.split(",") if w.strip()] or list(GPU_WORKLOADS)
    # --threads only when given (its default is None: "--threads None" stopped every program)
    common = (["--threads", str(a.threads)] if a.threads else []) + ["--device", a.device]
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference", "workloads_pytorch.py")
    recs = []
    for wl in only:
        reel, py, extra, compiles = GPU_WORKLOADS[wl]
        extra = [x.format(reps=a.reps) for x in extra]
        configs = []
        if os.path.isfile(os.path.join(build, "bench", reel)):
            configs.append(("reel", [os.path.join(build, "bench", reel)]))
        if a.python:  # None: compare.py found no PyTorch and said so
            configs.append(("pytorch", [a.python, script, py]))
        if a.python and compiles and not a.no_torch_compile:
            configs.append(("pytorch-compile", [a.python, script, py, "--compile"]))
        for rnd in range(1, a.rounds + 1):
            for sysname, cmd in configs:
                print(f"{wl} round {rnd}: {sysname} on {a.device}", flush=True)
                recs += run(cmd + extra + common, {}, jsonl, {"env": "default", "round": rnd})
    return recs


def _pooled(recs, workload, system, metric):
    s = []
    for r in recs:
        if r["workload"] == workload and r["system"] == system and r["metric"] == metric:
            s.extend(r.get("samples", [r["median"]]))
    return statistics.median(s) if s else None


def _fmt(x):
    return "-" if x is None else f"{x:.4g}"


def gpu_table(recs):
    rows = []  # (what, reel value, against, their value, ratio, target text, met or None)

    def vs(wl, metric, target, peer="pytorch"):
        r, p = _pooled(recs, wl, "reel", metric), _pooled(recs, wl, peer, metric)
        if r is None or p is None:
            return
        rows.append((f"{wl} {metric}", r, peer, p, r / p, None if target is None else f"<= {target:g}",
                     None if target is None else r / p <= target))

    for wl, metric in (("W1", "epoch_s"), ("W2", "epoch_s"), ("W3", "epoch_s"), ("W4", "step_ms")):
        vs(wl, metric, 0.8)
        vs(wl, metric, None, "pytorch-compile")
    w1, w2 = _pooled(recs, "W1", "reel", "epoch_s"), _pooled(recs, "W2", "reel", "epoch_s")
    if w1 and w2:
        rows.append(("W2 epoch_s / W1 epoch_s (reel)", w2, "reel W1", w1, w2 / w1, "<= 1.15", w2 / w1 <= 1.15))
    for metric in ("forward_record_us_per_op", "backward_us_per_op", "forward_nograd_us_per_op"):
        vs("W5", metric, None)
    copy_ms = _pooled(recs, "W6", "reel", "d2d_copy_ms")
    if copy_ms:
        gbs = 8e7 / (copy_ms * 1e-3) / 1e9
        for metric, nbytes in (("adam_step_ms", 28), ("sgd_momentum_step_ms", 20)):
            v = _pooled(recs, "W6", "reel", metric)
            if v:
                floor = nbytes * 1e7 / (gbs * 1e6)
                rows.append((f"W6 {metric} (floor/time)", v, f"{nbytes} B at d2d", floor, floor / v, ">= 0.8",
                             floor / v >= 0.8))
    vs("W6", "adam_step_ms", None)
    read_floor, bias = _pooled(recs, "W7", "reel", "read_floor_ms"), _pooled(recs, "W7", "reel", "bias_grad_ms")
    if read_floor and bias:
        rows.append(("W7 bias_grad_ms (floor/time)", bias, "d2d read floor", read_floor, read_floor / bias, ">= 0.8",
                     read_floor / bias >= 0.8))
    vs("W7", "bias_grad_ms", None)
    vs("W8", "step_ms", 1.1)
    vs("W8", "step_ms", None, "pytorch-compile")
    # issue 46: W9, W10, W11 and the W12 step <= 0.8x PyTorch eager; SDPA <= 1.0x at T = 1024 and 4096
    vs("W9", "epoch_s", 0.8)
    vs("W10", "s_per_1000_images", 0.8)
    vs("W11", "step_ms", 0.8)
    vs("W12", "step_ms", 0.8)
    vs("W12", "step_ms", None, "pytorch-compile")
    for T in (256, 1024, 4096):
        vs("W12", f"sdpa_T{T}_ms", 1.0 if T >= 1024 else None)
    gpu = next((r["gpu"] for r in recs if "gpu" in r), "unknown GPU")
    print(f"\nGPU: {gpu}; TF32 off on both sides")
    print(f"{'measure':40} {'reel':>10} {'against':>18} {'value':>10} {'ratio':>7} {'target':>8}  met")
    for what, r, ref, v, ratio, target, ok in rows:
        met = "-" if ok is None else ("yes" if ok else "NO")
        print(f"{what:40} {_fmt(r):>10} {ref:>18} {_fmt(v):>10} {ratio:7.3f} {target or '-':>8}  {met}")
    print("\nmedians per system:")
    for wl, metric in sorted({(r["workload"], r["metric"]) for r in recs}):
        cells = [f"{s} {_fmt(m)}" for s in ("reel", "pytorch", "pytorch-compile")
                 if (m := _pooled(recs, wl, s, metric)) is not None]
        print(f"  {wl:4} {metric:26} " + "; ".join(cells))
    return rows
