#!/usr/bin/python3
"""Writes test/reference/modules_ref.inc: PyTorch 1.13's values for the losses, norm
layers, Adagrad and the lr schedulers of issue 15, with the inputs they were computed
from, as C++ arrays for test/test_modules_ref.cpp. Run from the repository root:
    /usr/bin/python3 scripts/reference/modules_ref.py
The generated file is committed: tests do not need torch."""
import math
import torch
import torch.nn.functional as F

torch.manual_seed(15)
torch.set_default_dtype(torch.float64)
out = []


def arr(name, values):
    values = [float(v) for v in (values.flatten().tolist() if torch.is_tensor(values) else values)]
    body = ", ".join(repr(v) if math.isfinite(v) else ("INFINITY" if v > 0 else "-INFINITY") for v in values)
    out.append(f"inline const std::vector<double> {name} = {{{body}}};")


# ---- losses on 8 elements: input x, target t
x = torch.rand(8) * 4 - 2
t = torch.rand(8) * 4 - 2
arr("loss_x", x)
arr("loss_t", t)
arr("l1_none", F.l1_loss(x, t, reduction="none"))
arr("l1_mean", [F.l1_loss(x, t)])
arr("smooth_l1_none_b05", F.smooth_l1_loss(x, t, reduction="none", beta=0.5))
arr("smooth_l1_sum_b2", [F.smooth_l1_loss(x, t, reduction="sum", beta=2.0)])
arr("huber_none_d07", F.huber_loss(x, t, reduction="none", delta=0.7))
arr("huber_mean_d15", [F.huber_loss(x, t, delta=1.5)])

# KL: log-probabilities of 2 rows of 4, targets with a zero
logp = F.log_softmax(torch.randn(2, 4), 1)
q = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.0, 0.5, 0.25, 0.25]])
arr("kl_input", logp)
arr("kl_target", q)
arr("kl_none", F.kl_div(logp, q, reduction="none"))
arr("kl_mean", [F.kl_div(logp, q, reduction="mean")])
arr("kl_batchmean", [F.kl_div(logp, q, reduction="batchmean")])
arr("kl_sum_logtarget", [F.kl_div(logp, torch.log(q + 0.05), reduction="sum", log_target=True)])

# BCE: probabilities with saturated 0 and 1 entries, a weight
p = torch.tensor([0.1, 0.5, 0.9, 0.0, 1.0, 0.3], requires_grad=True)
y = torch.tensor([0.0, 1.0, 1.0, 0.0, 0.0, 0.7])
w = torch.tensor([1.0, 2.0, 0.5, 1.0, 1.0, 3.0])
arr("bce_input", p.detach())
arr("bce_target", y)
arr("bce_weight", w)
arr("bce_none", F.binary_cross_entropy(p, y, reduction="none"))
loss = F.binary_cross_entropy(p, y, weight=w)
loss.backward()
arr("bce_mean_weighted", [loss.detach()])
arr("bce_mean_weighted_grad", p.grad)

# cosine embedding: [4, 3], targets +1 / -1
a = torch.randn(4, 3)
b = torch.randn(4, 3)
b[1] = a[1] * 2  # parallel: cos 1
lab = torch.tensor([1.0, -1.0, -1.0, 1.0])
arr("cos_x1", a)
arr("cos_x2", b)
arr("cos_y", lab)
arr("cos_none_m02", F.cosine_embedding_loss(a, b, lab, margin=0.2, reduction="none"))
arr("cos_mean", [F.cosine_embedding_loss(a, b, lab)])

# ---- norm layers
gx = torch.randn(2, 4, 3)
gn = torch.nn.GroupNorm(2, 4)
with torch.no_grad():
    gn.weight.copy_(torch.tensor([1.0, 2.0, 0.5, -1.0]))
    gn.bias.copy_(torch.tensor([0.0, 0.1, 0.2, 0.3]))
arr("gn_x", gx)
arr("gn_y", gn(gx).detach())

ix = torch.randn(2, 3, 2, 3)
inorm = torch.nn.InstanceNorm2d(3, affine=True, track_running_stats=True, momentum=0.2)
with torch.no_grad():
    inorm.weight.copy_(torch.tensor([1.5, -0.5, 1.0]))
    inorm.bias.copy_(torch.tensor([0.1, 0.0, -0.2]))
arr("in_x", ix)
arr("in_train_y", inorm(ix).detach())
arr("in_running_mean", inorm.running_mean)
arr("in_running_var", inorm.running_var)
inorm.eval()
arr("in_eval_y", inorm(ix).detach())

# ---- Adagrad: loss = sum(p^2 / 2 + c p), 4 steps
p0 = torch.tensor([0.5, -1.0, 2.0, 0.0])
c = torch.tensor([0.3, -0.2, 0.1, 1.0])
arr("adagrad_p0", p0)
arr("adagrad_c", c)
for name, kw in [("adagrad_plain", dict(lr=0.1)),
                 ("adagrad_all", dict(lr=0.1, lr_decay=0.05, weight_decay=0.1, initial_accumulator_value=0.2,
                                      eps=1e-6)),
                 ("adagrad_max", dict(lr=0.1, maximize=True))]:
    pp = p0.clone().requires_grad_()
    opt = torch.optim.Adagrad([pp], **kw)
    traj = []
    for _ in range(4):
        opt.zero_grad()
        (pp * pp / 2 + c * pp).sum().backward()
        opt.step()
        traj += pp.detach().tolist()
    arr(name, traj)


# ---- schedulers: lr after construction and after each of 12 steps, base lr 0.5
def lrs(make, steps=12, metrics=None):
    pp = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([pp], lr=0.5)
    s = make(opt)
    seq = [opt.param_groups[0]["lr"]]
    for i in range(steps):
        opt.step()
        s.step(metrics[i]) if metrics is not None else s.step()
        seq.append(opt.param_groups[0]["lr"])
    return seq


S = torch.optim.lr_scheduler
arr("sched_exponential", lrs(lambda o: S.ExponentialLR(o, gamma=0.9)))
arr("sched_linear", lrs(lambda o: S.LinearLR(o, start_factor=0.25, end_factor=1.0, total_iters=4)))
arr("sched_linear_down", lrs(lambda o: S.LinearLR(o, start_factor=1.0, end_factor=0.1, total_iters=5)))
arr("sched_lambda", lrs(lambda o: S.LambdaLR(o, lambda e: 1.0 / (1.0 + e))))
arr("sched_sequential", lrs(lambda o: S.SequentialLR(
    o, [S.LinearLR(o, start_factor=0.5, total_iters=3), S.ExponentialLR(o, gamma=0.8)], milestones=[3])))
arr("sched_sequential3", lrs(lambda o: S.SequentialLR(
    o, [S.ExponentialLR(o, gamma=0.5), S.LinearLR(o, start_factor=0.2, total_iters=2), S.ExponentialLR(o, gamma=0.9)],
    milestones=[2, 6])))
metrics = [1.0, 0.9, 0.95, 0.95, 0.95, 0.8, 0.85, 0.85, 0.85, 0.85, 0.85, 0.85]
arr("plateau_metrics", metrics)
arr("sched_plateau_min", lrs(lambda o: S.ReduceLROnPlateau(o, factor=0.5, patience=1, cooldown=1, min_lr=0.1),
                             metrics=metrics))
arr("sched_plateau_max_abs", lrs(lambda o: S.ReduceLROnPlateau(o, mode="max", factor=0.3, patience=0,
                                                              threshold=0.01, threshold_mode="abs"),
                                 metrics=metrics))

# ---- AveragedModel: weights w_k = w0 * (k + 1) + k / 10 for 4 updates; SWA and EMA(0.9)
from torch.optim.swa_utils import AveragedModel
w0 = torch.tensor([0.5, -1.0, 2.0])
arr("avg_w0", w0)
for name, kw in [("avg_swa", {}),
                 ("avg_ema", dict(avg_fn=lambda a, m, n: 0.9 * a + 0.1 * m))]:
    lin = torch.nn.Linear(3, 1, bias=False)
    avg = AveragedModel(lin, **kw)
    traj = []
    for k in range(4):
        with torch.no_grad():
            lin.weight.copy_((w0 * (k + 1) + k / 10).view(1, 3))
        avg.update_parameters(lin)
        traj += avg.module.weight.detach().flatten().tolist()
    arr(name, traj)

with open("test/reference/modules_ref.inc", "w") as f:
    f.write("// Generated by scripts/reference/modules_ref.py with PyTorch " + torch.__version__ + "; do not edit.\n")
    f.write("#pragma once\n#include <cmath>\n#include <vector>\n\nnamespace reel::ref {\n")
    f.write("\n".join(out))
    f.write("\n}  // namespace reel::ref\n")
