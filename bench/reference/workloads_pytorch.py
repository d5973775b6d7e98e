#!/usr/bin/python3
"""W1-W8 and W14 in PyTorch (Python), the same work and output as reel's bench/w*.cpp.

    /usr/bin/python3 bench/reference/workloads_pytorch.py w1 --threads 2 --json out.jsonl

Options: --device cpu|cuda[:N], --threads N, --reps N, --json PATH ('-' for stdout),
--epochs N (W1-W3), --steps N (W3: time N steps per repetition and extrapolate
s/epoch; W4, W6, W7, W8: calls per repetition), --buffers N (W7), --compile (W1-W4,
W8: the model through torch.compile, reported as system "pytorch-compile"; compiled
and warmed up before the clock starts).

On a GPU, TF32 is off for matmuls and convolutions (as reel's default) and cuDNN
picks algorithms by measurement (cudnn.benchmark, as reel does); every time is read
after torch.cuda.synchronize().
"""
import argparse
import contextlib
import gzip
import json
import math
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

FASHION = "/usr/share/datasets/fashion-mnist"


class Ctx:
    def __init__(self, a):
        self.a = a
        torch.set_num_threads(a.threads)
        if a.device == "cpu":
            self.device, self.name, self.extra = torch.device("cpu"), "cpu", {}
        else:
            if not torch.cuda.is_available():
                sys.exit(f"--device {a.device}: no CUDA device here")
            self.device = torch.device(a.device)
            idx = self.device.index or 0
            self.name, self.extra = f"cuda:{idx}", {"gpu": torch.cuda.get_device_name(idx), "tf32": False}
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            torch.backends.cudnn.benchmark = True
        self.system = "pytorch-compile" if a.compile else "pytorch"
        if a.compile:
            self.extra["torch_compile"] = True
        if a.amp:
            self.extra["amp"] = a.amp

    def amp(self):
        """The forward's scope: torch.autocast with --amp bf16|f16, else nothing."""
        if not self.a.amp:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16 if self.a.amp == "bf16" else torch.float16)

    def model(self, m):
        """The model as timed: compiled when --compile."""
        return torch.compile(m) if self.a.compile else m

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def report(self, workload, metric, samples, **extra):
        s = sorted(samples)
        med = statistics.median(s)
        print(f"{workload:4} {self.system:9} {self.name:6} {metric:22} median {med:12.4f}  min {s[0]:12.4f}  "
              f"max {s[-1]:12.4f}  n {len(s)}")
        if not self.a.json:
            return
        rec = {"workload": workload, "system": self.system, "device": self.name, "threads": self.a.threads,
               "metric": metric, "median": med, "min": s[0], "max": s[-1], "n": len(s)}
        rec.update(self.extra)
        rec.update(extra)
        rec["samples"] = list(samples)
        line = json.dumps(rec)
        if self.a.json == "-":
            print(line)
        else:
            with open(self.a.json, "a") as f:
                f.write(line + "\n")


def idx_file(name):
    for n in (name, name + ".gz"):
        p = os.path.join(FASHION, n)
        if os.path.exists(p):
            return gzip.open(p, "rb").read() if p.endswith(".gz") else open(p, "rb").read()
    sys.exit(f"{name} not found in {FASHION}")


def fashion(split, dev):
    img = idx_file(f"{split}-images-idx3-ubyte")
    lab = idx_file(f"{split}-labels-idx1-ubyte")
    x = torch.from_numpy(np.frombuffer(img, np.uint8, offset=16).copy()).float().div_(255).view(-1, 1, 28, 28)
    y = torch.from_numpy(np.frombuffer(lab, np.uint8, offset=8).astype(np.int64))
    return x.to(dev), y.to(dev)


def train_epoch(model, opt, x_all, y_all, batch, max_steps=0, amp=contextlib.nullcontext):
    n = x_all.shape[0]
    perm = torch.randperm(n, device=x_all.device)
    steps, loss = 0, None
    for start in range(0, n, batch):
        if max_steps and steps == max_steps:
            break
        idx = perm[start:start + batch]
        with amp():
            loss = F.cross_entropy(model(x_all.index_select(0, idx)), y_all.index_select(0, idx))
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
    if not float(loss) < 1e30:
        sys.exit(f"training diverged (loss {float(loss)})")
    return steps


def accuracy(model, x, y, amp=contextlib.nullcontext):
    model.eval()
    with torch.no_grad(), amp():
        correct = sum(int((model(x[s:s + 1000]).argmax(1) == y[s:s + 1000]).sum()) for s in range(0, len(x), 1000))
    model.train()
    return correct / len(x)


def run_fashion(c, workload, make, batch, lr, default_epochs):
    a, dev = c.a, c.device
    xtr, ytr = fashion("train", dev)
    xte, yte = fashion("t10k", dev)
    epochs = a.epochs or default_epochs
    per_epoch = (len(xtr) + batch - 1) // batch
    warm = make().to(dev)
    train_epoch(warm, torch.optim.SGD(warm.parameters(), lr=lr, momentum=0.9), xtr, ytr, batch, 20, c.amp)
    torch.manual_seed(1)
    model = c.model(make().to(dev))
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    if a.compile:  # compile outside the clock: one epoch, its short last batch included
        train_epoch(model, opt, xtr, ytr, batch, amp=c.amp)
        c.sync()
        print(f"{workload}: compiled; one untimed epoch trained before the timed ones")
    times = []
    if a.steps:
        for _ in range(a.reps):
            t0 = time.perf_counter()
            done = train_epoch(model, opt, xtr, ytr, batch, a.steps, c.amp)
            c.sync()
            times.append((time.perf_counter() - t0) / done * per_epoch)
        print(f"{workload}: s/epoch extrapolated from {a.steps} of {per_epoch} steps per repetition")
        c.report(workload, "epoch_s", times, extrapolated_from_steps=a.steps)
        return
    for e in range(1, epochs + 1):
        t0 = time.perf_counter()
        train_epoch(model, opt, xtr, ytr, batch, amp=c.amp)
        c.sync()
        times.append(time.perf_counter() - t0)
        if e == 1:
            first = accuracy(model, xte, yte, c.amp)
    last = accuracy(model, xte, yte, c.amp)
    print(f"{workload}: test accuracy {first:.4f} after 1 epoch, {last:.4f} after {epochs}")
    c.report(workload, "epoch_s", times)
    c.report(workload, "test_acc_epoch1", [first])
    if epochs > 1:
        c.report(workload, f"test_acc_epoch{epochs}", [last])


def w1(c):
    run_fashion(c, "W1", lambda: nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 64),
                                               nn.ReLU(), nn.Linear(64, 10)), 128, 0.1, 3)


def w2(c):
    run_fashion(c, "W2", lambda: nn.Sequential(nn.Conv2d(1, 128, 28), nn.ReLU(), nn.Conv2d(128, 64, 1), nn.ReLU(),
                                               nn.Conv2d(64, 10, 1), nn.Flatten()), 128, 0.1, 3)


def w3(c):
    run_fashion(c, "W3", lambda: nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(0.25),
        nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, 10)), 64, 0.01, 1)


def w4(c):
    dev, steps = c.device, c.a.steps or 5
    torch.manual_seed(1)
    model = nn.Sequential(
        nn.Conv2d(3, 50, 3, padding=1), nn.ReLU(), nn.Conv2d(50, 50, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Dropout(0.25), nn.Conv2d(50, 100, 3, padding=1), nn.ReLU(), nn.Conv2d(100, 100, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2), nn.Dropout(0.25), nn.Flatten(), nn.Linear(6400, 512), nn.ReLU(), nn.Dropout(0.5),
        nn.Linear(512, 10)).to(dev)
    model = c.model(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(64, 3, 32, 32, device=dev)
    y = torch.randint(0, 10, (64,), device=dev)

    def step():
        with c.amp():
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    for _ in range(3):
        step()
    ms, ips = [], []
    for _ in range(c.a.reps):
        t0 = time.perf_counter()
        for _ in range(steps):
            loss = step()
        float(loss)
        s = (time.perf_counter() - t0) / steps
        ms.append(1e3 * s)
        ips.append(64 / s)
    c.report("W4", "step_ms", ms)
    c.report("W4", "images_per_s", ips)


def w5(c):
    kops, iters = 300, 200
    torch.manual_seed(0)
    x = torch.randn(8, device=c.device).requires_grad_()
    w = torch.randn(8, device=c.device).requires_grad_()

    def chain():
        y = x
        for i in range(kops):
            k = i % 4
            y = y + 0.5 if k == 0 else y * w if k == 1 else torch.relu(y) if k == 2 else torch.tanh(y)
        return y

    fwd, bwd, nog = [], [], []
    for rep in range(c.a.reps + 2):
        f = b = 0.0
        for _ in range(iters):
            t0 = time.perf_counter()
            loss = chain().sum()
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            f += t1 - t0
            b += t2 - t1
        with torch.no_grad():
            t0 = time.perf_counter()
            for _ in range(iters):
                chain().sum()
            n = time.perf_counter() - t0
        if rep < 2:
            continue
        k = 1e6 / (iters * (kops + 1))
        fwd.append(f * k)
        bwd.append(b * k)
        nog.append(n * k)
    c.report("W5", "forward_record_us_per_op", fwd)
    c.report("W5", "backward_us_per_op", bwd)
    c.report("W5", "forward_nograd_us_per_op", nog)


def w6_sizes():
    w = [1 + (i * 37) % 23 for i in range(100)]
    s = [10_000_000 * wi // sum(w) for wi in w[:99]]
    return s + [10_000_000 - sum(s)]


def time_ms(c, f, calls, warm=2):
    for _ in range(warm):
        f()
    out = []
    for _ in range(c.a.reps):
        c.sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            f()
        c.sync()
        out.append(1e3 * (time.perf_counter() - t0) / calls)
    return out


def w6(c):
    dev, steps = c.device, c.a.steps or 10
    torch.manual_seed(1)
    params = []
    for n in w6_sizes():
        p = torch.randn(n, device=dev).requires_grad_()
        p.grad = torch.randn(n, device=dev) * 1e-3
        params.append(p)
    a = torch.randn(10_000_000, device=dev)
    b = torch.randn(10_000_000, device=dev)

    def add():
        a.add_(b)

    add_ms = time_ms(c, add, steps)
    adam = torch.optim.Adam(params, lr=1e-3)
    adam_ms = time_ms(c, adam.step, steps)
    sgd = torch.optim.SGD(params, lr=0.01, momentum=0.9)
    sgd_ms = time_ms(c, sgd.step, steps)
    c.report("W6", "add_inplace_ms", add_ms)
    c.report("W6", "adam_step_ms", adam_ms)
    c.report("W6", "sgd_momentum_step_ms", sgd_ms)


def w7(c):
    dev, calls, nbuf = c.device, c.a.steps or 48, c.a.buffers
    torch.manual_seed(1)
    grads = [torch.randn(64, 64, 32, 32, device=dev) for _ in range(nbuf)]
    it = [0]

    def f():
        grads[it[0] % nbuf].sum((0, 2, 3))
        it[0] += 1

    c.report("W7", "bias_grad_ms", time_ms(c, f, calls, warm=nbuf))


def w8(c):
    dev, steps = c.device, c.a.steps or 3
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(25000, 1024), nn.ReLU(), nn.Linear(1024, 512), nn.ReLU(),
                          nn.Linear(512, 20000)).to(dev)
    model = c.model(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(128, 25000, device=dev)
    y = torch.randint(0, 20000, (128,), device=dev)
    acc = [0.0, 0.0, 0.0]

    def step():
        t0 = time.perf_counter()
        with c.amp():
            loss = F.cross_entropy(model(x), y)
        c.sync()
        t1 = time.perf_counter()
        loss.backward()
        c.sync()
        t2 = time.perf_counter()
        opt.step()
        opt.zero_grad()
        c.sync()
        t3 = time.perf_counter()
        acc[0] += t1 - t0
        acc[1] += t2 - t1
        acc[2] += t3 - t2

    for _ in range(2):
        step()
    fwd, bwd, optm, tot = [], [], [], []
    for _ in range(c.a.reps):
        acc[:] = [0.0, 0.0, 0.0]
        for _ in range(steps):
            step()
        k = 1e3 / steps
        fwd.append(acc[0] * k)
        bwd.append(acc[1] * k)
        optm.append(acc[2] * k)
        tot.append(sum(acc) * k)
    c.report("W8", "step_ms", tot)
    c.report("W8", "forward_ms", fwd)
    c.report("W8", "backward_ms", bwd)
    c.report("W8", "optimizer_ms", optm)


def w9(c):
    """GRU-IMDB (bench/w9_gru_imdb.cpp): Embedding-GRU-last step-Linear, Adam, batch 64, 150 tokens."""
    dev, steps = c.device, c.a.steps if c.a.steps else 40
    N, T, B, V, E, H = 25000, 150, 64, 30000, 125, 100
    torch.manual_seed(1)
    emb, gru, fc = nn.Embedding(V, E).to(dev), nn.GRU(E, H, batch_first=True).to(dev), nn.Linear(H, 2).to(dev)
    opt = torch.optim.Adam(list(emb.parameters()) + list(gru.parameters()) + list(fc.parameters()), lr=1e-3)
    ids = torch.randint(0, V, (N, T), device=dev)
    labels = torch.randint(0, 2, (N,), device=dev)
    bi = [0]

    def step():
        start = bi[0] * B % N
        n = min(B, N - start)
        bi[0] += 1
        with c.amp():
            out, _ = gru(emb(ids[start:start + n]))
            loss = F.cross_entropy(fc(out[:, -1]), labels[start:start + n])
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    for _ in range(3):
        step()
    epoch, ms = [], []
    for _ in range(c.a.reps):
        bi[0] = 0
        count = steps if steps > 0 else (N + B - 1) // B
        t0 = time.perf_counter()
        for _ in range(count):
            loss = step()
        float(loss)
        s = time.perf_counter() - t0
        epoch.append(s / count * N / B if steps > 0 else s)
        ms.append(1e3 * s / count)
    c.report("W9", "epoch_s", epoch)
    c.report("W9", "step_ms", ms)
def w10(c):
    """ResNet-50 feature extraction (bench/w10_resnet50.cpp): torchvision's resnet50, eval,
    no grad, batch 32 of 224x224x3, forward to the pooled 2048-d vector."""
    import torchvision
    dev, batches, B = c.device, c.a.steps if c.a.steps else 3, 32
    torch.manual_seed(1)
    net = torchvision.models.resnet50().to(dev).eval()
    net.fc = nn.Identity()  # the pooled vector
    x = torch.randn(B, 3, 224, 224, device=dev)
    with torch.no_grad():
        with c.amp():
            float(net(x).sum())
        per_1000, ms = [], []
        for _ in range(c.a.reps):
            t0 = time.perf_counter()
            for _ in range(batches):
                with c.amp():
                    f = net(x)
            float(f.sum())
            s = time.perf_counter() - t0
            per_1000.append(s / (batches * B) * 1000)
            ms.append(1e3 * s / batches)
    c.report("W10", "s_per_1000_images", per_1000)
    c.report("W10", "batch_ms", ms)


def w11(c):
    """DenseNet-121 training step (bench/w11_densenet.cpp): torchvision's densenet121, batch 16
    of 224x224x3, cross-entropy over 1000 classes, SGD lr 0.01 momentum 0.9; ms per step and
    the process's peak resident memory (VmHWM)."""
    import torchvision
    dev, steps, B = c.device, c.a.steps if c.a.steps else 2, 16
    torch.manual_seed(1)
    net = torchvision.models.densenet121().to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(B, 3, 224, 224, device=dev)
    y = torch.randint(0, 1000, (B,), device=dev)

    def step():
        with c.amp():
            loss = F.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    float(step())
    ms = []
    for _ in range(c.a.reps):
        t0 = time.perf_counter()
        for _ in range(steps):
            loss = step()
        float(loss)
        ms.append(1e3 * (time.perf_counter() - t0) / steps)
    with open("/proc/self/status") as fh:
        hwm = [int(line.split()[1]) / 1e3 for line in fh if line.startswith("VmHWM:")][0]
    c.report("W11", "step_ms", ms)
    c.report("W11", "peak_rss_mb", [hwm])


class GPTBlock(nn.Module):
    """reel's nn::TransformerEncoderLayer(norm_first, gelu, batch_first) with causal
    self-attention: F.scaled_dot_product_attention where PyTorch has it (2.x), else the
    composition PyTorch 1.13's MultiheadAttention computes."""

    def __init__(self, C, H, p):
        super().__init__()
        self.H, self.p = H, p
        self.norm1, self.norm2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.in_proj, self.out_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.linear1, self.linear2 = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.drop, self.drop1, self.drop2 = nn.Dropout(p), nn.Dropout(p), nn.Dropout(p)

    def attention(self, x):
        B, T, C = x.shape
        q, k, v = self.in_proj(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        p = self.p if self.training else 0.0
        if hasattr(F, "scaled_dot_product_attention"):
            o = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        else:
            s = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.H)
            s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
            o = F.dropout(F.softmax(s, dim=-1), p, self.training) @ v
        return self.out_proj(o.transpose(1, 2).reshape(B, T, C))

    def forward(self, x):
        x = x + self.drop1(self.attention(self.norm1(x)))
        return x + self.drop2(self.linear2(self.drop(F.gelu(self.linear1(self.norm2(x))))))


class GPT(nn.Module):
    def __init__(self, V, T, L=6, H=6, C=384, p=0.2):
        super().__init__()
        self.wte, self.wpe, self.drop = nn.Embedding(V, C), nn.Embedding(T, C), nn.Dropout(p)
        self.h = nn.ModuleList(GPTBlock(C, H, p) for _ in range(L))
        self.ln_f, self.lm_head = nn.LayerNorm(C), nn.Linear(C, V, bias=False)

    def forward(self, idx):
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device)))
        for b in self.h:
            x = b(x)
        return self.lm_head(self.ln_f(x))


def peak_rss_mb(f):
    """f's peak resident memory beyond what was resident before (Linux: VmHWM after a reset).
    Blocks past 64 KiB are mmap'ed (a fixed glibc threshold), so freed ones leave the resident
    set and an earlier call's memory does not hide this one's."""
    import ctypes
    ctypes.CDLL("libc.so.6").mallopt(-3, 65536)  # M_MMAP_THRESHOLD
    def status(key):
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(key):
                    return int(line.split()[1]) / 1e3
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    base = status("VmRSS:")
    f()
    return status("VmHWM:") - base


def w12(c):
    """As bench/w12_gpt.cpp: a training step of the char-level GPT at batch 8, block 256,
    then causal SDPA [1, 6, T, 64] forward + backward at T = 256, 1024, 4096."""
    dev, steps, B, T, V = c.device, c.a.steps or 5, 8, 256, 96
    torch.manual_seed(1)
    if not c.a.sdpa_only:
        model = GPT(V, T).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
        fwd = c.model(model)
        x = torch.randint(0, V, (B, T), device=dev)
        y = torch.randint(0, V, (B, T), device=dev)

        def step():
            with c.amp():
                loss = F.cross_entropy(fwd(x).view(B * T, V), y.view(B * T))
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            return loss

        for _ in range(2):
            step()
        ms = []
        for _ in range(c.a.reps):
            t0 = time.perf_counter()
            for _ in range(steps):
                loss = step()
            loss.item()
            ms.append(1e3 * (time.perf_counter() - t0) / steps)
        c.report("W12", "step_ms", ms, sdpa=hasattr(F, "scaled_dot_product_attention"))
    for L in (256, 1024, 4096):
        q, k, v = (torch.randn(1, 6, L, 64, device=dev, requires_grad=True) for _ in range(3))
        g = torch.randn(1, 6, L, 64, device=dev)

        def once():  # under --amp, the forward under autocast, as the step's
            with c.amp():
                if hasattr(F, "scaled_dot_product_attention"):
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                else:
                    s = (q @ k.transpose(-2, -1)) / 8.0
                    s = s.masked_fill(torch.ones(L, L, dtype=torch.bool, device=dev).triu(1), float("-inf"))
                    o = F.softmax(s, dim=-1) @ v
            torch.autograd.grad(o, (q, k, v), g.to(o.dtype))

        once()
        peak = peak_rss_mb(once) if dev.type == "cpu" else None
        calls = 1 if L >= 4096 else 3 if L >= 1024 else 20
        ms = []
        for _ in range(c.a.reps):
            c.sync()
            t0 = time.perf_counter()
            for _ in range(calls):
                once()
            c.sync()
            ms.append(1e3 * (time.perf_counter() - t0) / calls)
        c.report("W12", f"sdpa_T{L}_ms", ms)
        if peak is not None:
            c.report("W12", f"sdpa_T{L}_peak_mb", [peak], measure="peak RSS (VmHWM) beyond the resident base")


W14_OPS = {
    "exp": torch.exp, "log": torch.log, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
    "gelu": F.gelu, "gelu_tanh": lambda v: F.gelu(v, approximate="tanh"), "erf": torch.erf,
    "softplus": F.softplus, "silu": F.silu,
}


def w14(c):
    """As bench/w14_transcendental.cpp: ms per forward (no grad) and per backward
    (torch.autograd.grad of a recorded forward) on 4M floats."""
    dev, calls, n = c.device, c.a.steps or 10, 4 << 20
    torch.manual_seed(1)
    x = torch.rand(n, device=dev) * 12 - 6
    xpos = torch.rand(n, device=dev) * 10 + 1e-3
    g = torch.randn(n, device=dev)
    fwd = {k: [] for k in W14_OPS}
    bwd = {k: [] for k in W14_OPS}

    def forward_ms(f, v):
        with torch.no_grad():
            c.sync()
            t0 = time.perf_counter()
            for _ in range(calls):
                f(v)
            c.sync()
            return 1e3 * (time.perf_counter() - t0) / calls

    def backward_ms(f, v):
        leaf = v.detach().requires_grad_()
        total = 0.0
        for _ in range(calls):
            y = f(leaf)
            c.sync()
            t0 = time.perf_counter()
            torch.autograd.grad(y, leaf, g)
            c.sync()
            total += time.perf_counter() - t0
        return 1e3 * total / calls

    for k, f in W14_OPS.items():
        forward_ms(f, xpos if k == "log" else x)
        backward_ms(f, xpos if k == "log" else x)
    for _ in range(c.a.reps):
        for k, f in W14_OPS.items():
            fwd[k].append(forward_ms(f, xpos if k == "log" else x))
            bwd[k].append(backward_ms(f, xpos if k == "log" else x))
    for k in W14_OPS:
        c.report("W14", f"{k}_fwd_ms", fwd[k])
        c.report("W14", f"{k}_bwd_ms", bwd[k])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workload", choices=[f"w{i}" for i in range(1, 12)] + ["w12", "w14"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--json", default="")
    p.add_argument("--epochs", type=int, default=0)
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--buffers", type=int, default=24)
    p.add_argument("--compile", action="store_true", help="torch.compile the model (W1-W4, W8, W12)")
    p.add_argument("--amp", default="", choices=["", "bf16", "f16"],
                   help="the forward under torch.autocast in that dtype (W3, W4, W8, W9, W10, W11, W12)")
    p.add_argument("--sdpa-only", type=int, default=0, help="W12: only the attention op, not the GPT step")
    a = p.parse_args()
    if a.compile and a.workload in ("w5", "w6", "w7", "w14"):
        sys.exit(f"--compile: {a.workload} has no model to compile")
    if a.amp and a.workload not in ("w3", "w4", "w8", "w9", "w10", "w11", "w12"):
        sys.exit(f"--amp: only W3, W4, W8, W9, W10, W11 and W12 take it, not {a.workload}")
    globals()[a.workload](Ctx(a))


if __name__ == "__main__":
    main()
