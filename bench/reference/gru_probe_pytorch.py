#!/usr/bin/python3
"""W9's GRU layer in PyTorch on a GPU: the peer of bench/gpu_rnn_probe.cpp's rows.

nn.GRU(125, 100, batch_first=True) on x [64, 150, 125], f32, TF32 off and cudnn.benchmark
on as workloads_pytorch.py sets them: the forward alone and forward + backward, each the
median of 20 repetitions after 3 warm-ups, in microseconds, from CUDA events around the call
with torch.cuda.synchronize() before each repetition (the probe's clock, so the rows compare).
x needs no gradient and the gradients are set to none before each repetition, as in the probe.
Then, where torch.profiler works, the 8 kernels with the most CUDA time in one forward +
backward: which cuDNN kernels (persistent or not) PyTorch's call runs for this layer.

    python3 bench/reference/gru_probe_pytorch.py      (gpu-run.sh's rnn_probe step)

Prints `rnn_probe pytorch ...` lines; exit 77 without a GPU.
"""
import statistics
import sys

import torch
import torch.nn as nn

T, B, I, H = 150, 64, 125, 100
WARM, REPS = 3, 20


def median_us(gru, x, gy, backward):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for rep in range(WARM + REPS):
        gru.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        start.record()
        y, _ = gru(x)
        if backward:
            y.backward(gy)
        stop.record()
        torch.cuda.synchronize()
        if rep >= WARM:
            ms.append(start.elapsed_time(stop))
    return 1e3 * statistics.median(ms)


def top_kernels(gru, x, gy, n=8):
    """(name, CUDA us) of the n kernels with the most time in one forward + backward."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        y, _ = gru(x)
        y.backward(gy)
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        # the field's name moved between releases (cuda_time_total, then device_time_total)
        us = getattr(e, "device_time_total", None)
        if us is None:
            us = getattr(e, "cuda_time_total", 0)
        if us > 0:
            rows.append((e.key, us, e.count))
    rows.sort(key=lambda r: -r[1])
    return rows[:n]


def main():
    if not torch.cuda.is_available():
        print("rnn_probe pytorch skipped: no CUDA device")
        return 77
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    torch.manual_seed(1)
    gru = nn.GRU(I, H, batch_first=True).to(dev)
    x = torch.randn(B, T, I, device=dev)
    gy = torch.randn(B, T, H, device=dev)
    fwd, fwd_bwd = median_us(gru, x, gy, False), median_us(gru, x, gy, True)
    print(f"rnn_probe pytorch torch={torch.__version__} cudnn={torch.backends.cudnn.version()} "
          f"fwd_us={fwd:.1f} fwd_bwd_us={fwd_bwd:.1f}", flush=True)
    try:
        kernels = top_kernels(gru, x, gy)
    except Exception as e:  # the profiler is a nicety: its absence must not fail the step
        print(f"rnn_probe pytorch kernels unavailable ({type(e).__name__}: {e})")
        return 0
    if not kernels:
        print("rnn_probe pytorch kernels none recorded")
    for rank, (name, us, count) in enumerate(kernels, 1):
        print(f"rnn_probe pytorch kernel={rank} cuda_us={us:.1f} calls={count} name={name[:160]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
