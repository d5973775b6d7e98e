#!/usr/bin/python3
"""Reference values for test/test_semantics.cpp, computed by PyTorch 1.13 (Debian's
python3-torch): NaN rules (issue 13 item 8) and the PyTorch options reel follows
(item 10). Writes semantics.txt beside this file, one line per tensor:

    name v0 v1 ...        (f64, flattened row-major; nan, inf, -inf spelled so)

Inputs are written too, so the C++ test needs no random generator of PyTorch's.
Each backward uses the incoming gradient ramp(shape): element k is (k + 1) / 8.
Run: /usr/bin/python3 test/reference/semantics.py
"""
import math
import os

import torch
import torch.nn.functional as F

torch.manual_seed(13)
f64 = torch.float64
nan, inf = math.nan, math.inf
lines = []


def put(name, t):
    t = torch.as_tensor(t).detach().to(f64).flatten().tolist()
    lines.append(name + " " + " ".join(repr(v) for v in t))


def ramp(shape):
    n = math.prod(shape)
    return (torch.arange(n, dtype=f64) + 1).reshape(shape) / 8


def leaf(t):
    return t.detach().clone().to(f64).requires_grad_()


def backward(y, *xs):
    """The gradients of sum(y * ramp) with respect to xs."""
    gs = torch.autograd.grad((y * ramp(y.shape)).sum(), xs, allow_unused=True)
    return [torch.zeros_like(x) if g is None else g for x, g in zip(xs, gs)]


# ---- item 8: NaN rules
x = leaf(torch.tensor([nan, -1.0, 0.0, 2.0, -0.0]))
y = torch.relu(x)
put("relu.x", x), put("relu.y", y), put("relu.gx", backward(y, x)[0])

x = leaf(torch.tensor([0.0, 2.0, -1.5]))
for p in [0.0, 1.0, 2.0, 0.5, -1.0]:
    y = torch.pow(x, p)
    put(f"pow_scalar.{p}.y", y), put(f"pow_scalar.{p}.gx", backward(y, x)[0])
a = leaf(torch.tensor([0.0, 2.0, 0.0, 0.0, -1.0, 3.0]))
b = leaf(torch.tensor([0.0, 0.0, 2.0, -1.0, 2.0, 0.5]))
y = torch.pow(a, b)
ga, gb = backward(y, a, b)
put("pow.a", a), put("pow.b", b), put("pow.y", y), put("pow.ga", ga), put("pow.gb", gb)

x = leaf(torch.tensor([[1.0, nan, 3.0, 0.0], [2.0, 5.0, 4.0, -1.0], [4.0, -2.0, nan, 0.0]]))
put("extremum.x", x)
for f in ["max", "min"]:
    y = getattr(x, f)()  # over all elements
    put(f"{f}.all.y", y), put(f"{f}.all.gx", backward(y, x)[0])
    # along dim 1: rows 0 and 2 hold one NaN each. (No ties: reel's max along dims splits
    # ties evenly, as torch.amax, and so two NaNs in one row, as torch's max() over all;
    # torch.max(dim) gives all to the first.)
    y = getattr(x, f)(1).values
    put(f"{f}.dim1.y", y), put(f"{f}.dim1.gx", backward(y, x)[0])
    put(f"arg{f}.dim1", getattr(torch, f"arg{f}")(x, 1))
    put(f"arg{f}.all", getattr(torch, f"arg{f}")(x))

a = leaf(torch.tensor([nan, 1.0, nan, 2.0, 3.0, -1.0]))
b = leaf(torch.tensor([1.0, nan, nan, 2.0, 1.0, 4.0]))
put("binary.a", a), put("binary.b", b)
for f in ["maximum", "minimum"]:
    y = getattr(torch, f)(a, b)
    ga, gb = backward(y, a, b)
    put(f"{f}.y", y), put(f"{f}.ga", ga), put(f"{f}.gb", gb)

x = leaf(torch.tensor([[inf, 1.0, 2.0], [inf, inf, 0.0], [-inf, 0.0, 1.0], [-inf, -inf, -inf], [1.0, 2.0, 3.0]]))
put("softmax.x", x)
for f in ["softmax", "log_softmax"]:
    y = getattr(torch, f)(x, 1)
    put(f"{f}.y", y), put(f"{f}.gx", backward(y, x)[0])

# ---- item 10: options
a, b = leaf(torch.rand(2, 3) * 2 - 1), leaf(torch.rand(3) * 2 - 1)
put("alpha.a", a), put("alpha.b", b)
for f, alpha in [("add", 2.5), ("sub", -0.75)]:
    y = getattr(torch, f)(a, b, alpha=alpha)
    ga, gb = backward(y, a, b)
    put(f"{f}_alpha.y", y), put(f"{f}_alpha.ga", ga), put(f"{f}_alpha.gb", gb)

x = torch.tensor([[3.0, 7.0, 7.0, 1.0], [7.0, 0.0, -2.0, -2.0], [5.0, 6.0, -2.0, 0.0]])
put("argall.x", x), put("argall.argmax", torch.argmax(x)), put("argall.argmin", torch.argmin(x))
put("argall.argmax_t", torch.argmax(x.t())), put("argall.argmin_t", torch.argmin(x.t()))

# pooling: an unbatched [C, H, W] input, windows that ceil_mode adds, and the 2x2 window
# on odd sizes (the CPU's fast path must leave the clipped last windows to the general loop)
x = leaf(torch.randn(2, 5, 7))
put("pool.x", x)
pools = {
    "max_k3s2_ceil": lambda x: F.max_pool2d(x, 3, 2, 0, ceil_mode=True, return_indices=True),
    "max_k2s2_ceil": lambda x: F.max_pool2d(x, 2, 2, 0, ceil_mode=True, return_indices=True),
    "max_k3s2p1_ceil": lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True, return_indices=True),
    "max_k2s1": lambda x: F.max_pool2d(x, 2, 1, 0, return_indices=True),
    "avg_k3s2_ceil": lambda x: F.avg_pool2d(x, 3, 2, 0, ceil_mode=True),
    "avg_k2s2_ceil": lambda x: F.avg_pool2d(x, 2, 2, 0, ceil_mode=True),
    "avg_k3s2p1_ceil": lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True),
    "avg_k3s2p1_ceil_nopad": lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
    "adaptive_3x4": lambda x: F.adaptive_avg_pool2d(x, (3, 4)),
}
for name, f in pools.items():
    r = f(x)
    y, idx = (r if isinstance(r, tuple) else (r, None))
    put(f"pool.{name}.shape", torch.tensor(y.shape))
    put(f"pool.{name}.y", y)
    if idx is not None:
        put(f"pool.{name}.indices", idx)
    put(f"pool.{name}.gx", backward(y, x)[0])

# class losses: [N, C] rows with class weights, ignore_index and label smoothing, and
# [N, C, d1, d2] scores with [N, d1, d2] labels
logits = leaf(torch.randn(6, 4) * 2)
labels = torch.tensor([2, 0, -100, 3, 2, 1])
weight = torch.tensor([0.5, 2.0, 1.0, 0.25], dtype=f64)
put("ce.x", logits), put("ce.labels", labels), put("ce.weight", weight)
configs = {
    "w_mean": dict(weight=weight),
    "w_sum": dict(weight=weight, reduction="sum"),
    "w_none": dict(weight=weight, reduction="none"),
    "w_ls_mean": dict(weight=weight, label_smoothing=0.2),
    "w_ls_none": dict(weight=weight, label_smoothing=0.2, reduction="none"),
    "w_ls_ign0_mean": dict(weight=weight, label_smoothing=0.3, ignore_index=0),
}
# ignore_index 0 reads the labels with -100 made 0 (two rows ignored)
labels0 = torch.where(labels == -100, 0, labels)
put("ce.labels0", labels0)
for name, kw in configs.items():
    lab = labels0 if kw.get("ignore_index") == 0 else labels
    y = F.cross_entropy(logits, lab, **kw)
    put(f"ce.{name}.y", y), put(f"ce.{name}.gx", backward(y, logits)[0])
    lp = leaf(F.log_softmax(logits, 1))
    kw_nll = {k: v for k, v in kw.items() if k != "label_smoothing"}
    y = F.nll_loss(lp, lab, **kw_nll)
    put(f"nll.{name}.y", y), put(f"nll.{name}.gx", backward(y, lp)[0])

sx = leaf(torch.randn(2, 3, 4, 2))
sl = torch.tensor([[[0, 2], [1, 1], [-100, 0], [2, 2]], [[1, 0], [0, 0], [2, -100], [1, 2]]])
sw = torch.tensor([1.5, 0.5, 1.0], dtype=f64)
put("spatial.x", sx), put("spatial.labels", sl), put("spatial.weight", sw)
configs = {
    "mean": dict(),
    "none": dict(reduction="none"),
    "sum_ls": dict(reduction="sum", label_smoothing=0.1),
    "w_mean": dict(weight=sw),
    "w_ls_none": dict(weight=sw, label_smoothing=0.25, reduction="none"),
}
for name, kw in configs.items():
    y = F.cross_entropy(sx, sl, **kw)
    put(f"spatial.ce.{name}.y", y), put(f"spatial.ce.{name}.gx", backward(y, sx)[0])
for name, kw in {"mean": dict(), "w_none": dict(weight=sw, reduction="none")}.items():
    y = F.nll_loss(sx, sl, **kw)
    put(f"spatial.nll.{name}.y", y), put(f"spatial.nll.{name}.gx", backward(y, sx)[0])

bx = leaf(torch.randn(3, 4) * 3)
bt = leaf(torch.rand(3, 4))
bw = torch.rand(3, 1, dtype=f64) + 0.5
bpw = torch.tensor([0.5, 1.0, 2.0, 4.0], dtype=f64)
put("bce.x", bx), put("bce.t", bt), put("bce.weight", bw), put("bce.pos_weight", bpw)
configs = {
    "w_mean": dict(weight=bw),
    "pw_none": dict(pos_weight=bpw, reduction="none"),
    "w_pw_sum": dict(weight=bw, pos_weight=bpw, reduction="sum"),
    "w_pw_mean": dict(weight=bw, pos_weight=bpw),
}
for name, kw in configs.items():
    y = F.binary_cross_entropy_with_logits(bx, bt, **kw)
    gx, gt = backward(y, bx, bt)
    put(f"bce.{name}.y", y), put(f"bce.{name}.gx", gx), put(f"bce.{name}.gt", gt)

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "semantics.txt")
with open(out, "w") as f:
    f.write(f"# written by semantics.py with torch {torch.__version__}; do not edit\n")
    f.write("\n".join(lines) + "\n")
print(f"{out}: {len(lines)} tensors")
