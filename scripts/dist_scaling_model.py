#!/usr/bin/env python3
"""The data-parallel step model of docs/distributed.md, as a table.

A step on W ranks (each its own share of the batch) takes

    T(W) = T_c + max(T_last(W), T_ar(W) - H)

T_c:    one rank's compute (forward, backward, optimizer) for its share of the batch;
T_ar:   all the buckets' ring all-reduces, each 2 (W - 1) alpha + 2 (W - 1) / W * S_k / beta
        (alpha: one message's latency; beta: the link's bandwidth; S_k: bucket k's bytes);
H:      the backward still to run when the first bucket is ready: what the all-reduces
        can hide behind (DistributedDataParallel starts each bucket as it fills);
T_last: the last bucket's all-reduce, which starts when backward ends: never hidden.

Efficiency E(W) = T_c / T(W) (1: perfect weak scaling, each rank keeping its batch). A
model "stops scaling" at the first W where E < 0.8.

Usage: dist_scaling_model.py [--alpha-us A] [--beta-gbs B ...]  (defaults: docs/distributed.md's
measured alpha; links of 10, 25, 100 Gb/s)
"""
import argparse

MiB = 1024 * 1024

# name: (T_c in ms, buckets in MiB in launch order, H as a share of T_c)
# W4: 3.44 M parameters (13.1 MiB), PyTorch's bucket rule (1 MiB first, then 25 MiB): the
#     classifier's bucket [fc2 + fc1, 12.5 MiB] is ready first; the convolutions' backward
#     (~95% of the backward FLOPs, backward ~2/3 of the step) is left to hide it behind.
# GPT (W12): 10.7 M parameters (40.8 MiB): buckets 1, 25, 14.8 MiB; gradients arrive
#     evenly over the layers, so the first two buckets hide behind the backward of the
#     layers below them, the last (the embeddings and first layers) does not.
MODELS = {
    "W4 (CPU, 2 cores, batch 32 a rank)": (69.0, [12.5, 0.6], 0.60),
    "W4 (H200, batch 64 a rank)": (2.37, [12.5, 0.6], 0.60),
    "GPT (CPU, 2 cores, batch 8 a rank)": (954.0, [1.0, 25.0, 14.8], 0.40),
    "GPT (H200, batch 8 a rank)": (22.8, [1.0, 25.0, 14.8], 0.40),
}


def step_ms(tc, buckets, h_share, w, alpha_s, beta_bps):
    def ar(mib):
        return 2 * (w - 1) * alpha_s + 2 * (w - 1) / w * mib * MiB / beta_bps

    total = sum(ar(b) for b in buckets) * 1e3
    last = ar(buckets[-1]) * 1e3
    return tc + max(last, total - h_share * tc)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--alpha-us", type=float, default=30.0, help="per-message latency, µs")
    p.add_argument("--links-gbps", type=float, nargs="*", default=[10, 25, 100])
    p.add_argument("--ranks", type=int, nargs="*", default=[2, 8, 16, 32, 64, 128, 256])
    a = p.parse_args()
    alpha = a.alpha_us * 1e-6
    for name, (tc, buckets, h) in MODELS.items():
        print(f"\n{name}: T_c {tc} ms, buckets {buckets} MiB, hideable {h:.0%} of T_c")
        print("link      " + "".join(f"{w:>9}" for w in a.ranks) + "   E < 0.8 from")
        for gbps in a.links_gbps:
            beta = gbps * 1e9 / 8
            effs = [tc / step_ms(tc, buckets, h, w, alpha, beta) for w in a.ranks]
            stop = next((w for w, e in zip(a.ranks, effs) if e < 0.8), None)
            print(f"{gbps:>4g} Gb/s " + "".join(f"{e:>9.2f}" for e in effs) +
                  f"   {stop if stop else '> ' + str(a.ranks[-1])}")


if __name__ == "__main__":
    main()
