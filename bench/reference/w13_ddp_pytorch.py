#!/usr/bin/python3
"""W13's peer: W3 and W4 under PyTorch DistributedDataParallel (gloo), 2 ranks on this
machine, each rank one thread and half of each 64-example batch; the same work and
output as reel's bench/w13_ddp.cpp under mpirun (metric {w3,w4}_ddp_step_ms).

    /usr/bin/python3 bench/reference/w13_ddp_pytorch.py --ranks 2 --steps 10 --reps 5 --json out.jsonl

The script starts its ranks itself (torch.multiprocessing, a TCP rendezvous on
127.0.0.1); rank 0 reports. --threads is the per-rank thread count (default 1).
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


def make(name):
    if name == "w3":
        return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Dropout(0.25), nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Dropout(0.5),
                             nn.Linear(128, 10)), (1, 28, 28)
    return nn.Sequential(
        nn.Conv2d(3, 50, 3, padding=1), nn.ReLU(), nn.Conv2d(50, 50, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Dropout(0.25), nn.Conv2d(50, 100, 3, padding=1), nn.ReLU(), nn.Conv2d(100, 100, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2), nn.Dropout(0.25), nn.Flatten(), nn.Linear(6400, 512), nn.ReLU(), nn.Dropout(0.5),
        nn.Linear(512, 10)), (3, 32, 32)


def report(a, workload, metric, samples, **extra):
    s = sorted(samples)
    med = statistics.median(s)
    print(f"{workload:4} {'pytorch':9} {'cpu':6} {metric:22} median {med:12.4f}  min {s[0]:12.4f}  "
          f"max {s[-1]:12.4f}  n {len(s)}", flush=True)
    if not a.json:
        return
    rec = {"workload": workload, "system": "pytorch", "device": "cpu", "threads": a.threads, "metric": metric,
           "median": med, "min": s[0], "max": s[-1], "n": len(s), "torch": torch.__version__, "backend": "gloo"}
    rec.update(extra)
    rec["samples"] = list(samples)
    line = json.dumps(rec)
    if a.json == "-":
        print(line)
    else:
        with open(a.json, "a") as f:
            f.write(line + "\n")


def worker(rank, a, port):
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=a.ranks)
    for name in a.only.split(","):
        torch.manual_seed(1)
        model, image = make(name)
        ddp = nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
        torch.manual_seed(100 + rank)
        per = 64 // a.ranks
        x = torch.randn(per, *image)
        y = torch.randint(0, 10, (per,))

        def step():
            loss = F.cross_entropy(ddp(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss

        for _ in range(3):
            step()
        ms = []
        for _ in range(a.reps):
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(a.steps):
                loss = step()
            loss.item()
            ms.append(1e3 * (time.perf_counter() - t0) / a.steps)
        if rank == 0:
            report(a, "W13", f"{name}_ddp_step_ms", ms, ranks=a.ranks)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="threads per rank")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--only", default="w3,w4")
    p.add_argument("--json", default="")
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    if a.device != "cpu":
        sys.exit("W13's PyTorch peer runs on the CPU (gloo)")
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(a, port), nprocs=a.ranks, join=True)


if __name__ == "__main__":
    main()
