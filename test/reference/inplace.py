#!/usr/bin/python3
"""Reference values for test/test_inplace.cpp: in-place ops inside graphs, as PyTorch 1.13
(Debian's python3-torch) records them. Writes inplace.txt beside this file, one line per
tensor or outcome:

    CASE.y v0 v1 ...      the case's result, f64, flattened row-major
    CASE.gx / .gu / .gw   the gradients of sum(y * ramp) w.r.t. the inputs x, u, w
                          (a gradient PyTorch leaves undefined, or gives as zeros, is
                          written as zeros: reel may leave it undefined where no path leads)
    CASE.error 1          PyTorch refuses the case (at the op or at backward)
    CASE.gg ...           double backward: d/dx sum(d/dx sum(y)), where the case asks for it

The inputs are fixed formulas of the element index (below, and the same in the C++ test),
so the test needs no random numbers of PyTorch's. Each case is a function of (x, u, w)
written exactly as the C++ test writes it; keep the two in step.
Run: /usr/bin/python3 test/reference/inplace.py
"""
import math
import os

import torch
import torch.nn.functional as F

f64 = torch.float64
lines = []


def put(name, t):
    t = torch.as_tensor(t).detach().to(f64).flatten().tolist()
    lines.append(name + " " + " ".join(repr(v) for v in t))


def ramp(shape):
    n = math.prod(shape)
    return (torch.arange(n, dtype=f64) + 1).reshape(shape) / 8


def inputs():
    k = torch.arange(6, dtype=f64).reshape(2, 3)
    x = (k - 2.5) * 0.7  # -1.75 .. 1.75: clamp and relu cut some
    u = (k + 1) * 0.3  # positive: log, sqrt, div
    w = torch.cos(k) * 0.5
    return [t.clone().requires_grad_() for t in (x, u, w)]


def pos(t):  # a positive non-leaf made from t
    return t * t + 0.5


def mask23():
    return torch.tensor([[True, False, True], [False, False, True]])


CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


# ---- the table
@case
def add_self_twice(x, u, w):  # y = x * 2; y += x -> 3
    y = x * 2
    y += x
    return y


@case
def mul_scalar(x, u, w):
    b = x * 1
    b.mul_(3)
    return b


@case
def clamp_cut(x, u, w):
    y = x * 2
    y.clamp_(-1, 1)
    return y


@case
def div_by_self(x, u, w):
    y = x * x
    y.div_(x)
    return y


@case
def sub_operand(x, u, w):
    y = x * 1
    y -= u * 2
    return y


@case
def narrow_add(x, u, w):
    y = x * 1
    y.narrow(0, 0, 1).add_(w.narrow(0, 1, 1))
    return y


@case
def zeros_grow(x, u, w):
    y = torch.zeros(2, 3, dtype=f64)
    y += x * 3
    return y


# ---- every op on a non-leaf
@case
def add_scalar(x, u, w):
    y = x * 1
    y.add_(2.5)
    return y


@case
def add_alpha(x, u, w):
    y = x * 1
    y.add_(u, alpha=-0.5)
    return y


@case
def add_broadcast(x, u, w):
    y = x * 1
    y.add_(w[1])
    return y


@case
def sub_scalar(x, u, w):
    y = x * 1
    y.sub_(1.25)
    return y


@case
def mul_tensor(x, u, w):
    y = x * 1
    y.mul_(u)
    return y


@case
def div_scalar(x, u, w):
    y = x * 1
    y.div_(4)
    return y


@case
def div_tensor(x, u, w):
    y = x * 1
    y.div_(u)
    return y


@case
def pow_(x, u, w):
    y = x * 1
    y.pow_(3)
    return y


@case
def neg_(x, u, w):
    y = x * 1
    y.neg_()
    return y


@case
def abs_(x, u, w):
    y = x * 1
    y.abs_()
    return y


@case
def exp_(x, u, w):
    y = x * 1
    y.exp_()
    return y


@case
def log_(x, u, w):
    y = pos(x)
    y.log_()
    return y


@case
def sqrt_(x, u, w):
    y = pos(x)
    y.sqrt_()
    return y


@case
def relu_(x, u, w):
    y = x * 1
    y.relu_()
    return y


@case
def sigmoid_(x, u, w):
    y = x * 1
    y.sigmoid_()
    return y


@case
def tanh_(x, u, w):
    y = x * 1
    y.tanh_()
    return y


@case
def clamp_min_(x, u, w):
    y = x * 1
    y.clamp_min_(-0.5)
    return y


@case
def clamp_max_(x, u, w):
    y = x * 1
    y.clamp_max_(0.5)
    return y


@case
def masked_fill_(x, u, w):
    y = x * 1
    y.masked_fill_(mask23(), 0.25)
    return y


@case
def index_fill_(x, u, w):
    y = x * 1
    y.index_fill_(1, torch.tensor([0, 2]), -1.5)
    return y


@case
def fill_(x, u, w):
    y = x * 1
    y.narrow(1, 1, 1).fill_(7)
    return y


@case
def zero_(x, u, w):
    y = x * 2
    y[1].zero_()
    return y


@case
def copy_(x, u, w):
    y = x * 1
    y.copy_(u * 3)
    return y


@case
def copy_broadcast(x, u, w):
    y = x * 1
    y.copy_(w[0])
    return y


@case
def scatter_(x, u, w):
    y = x * 1
    y.scatter_(1, torch.tensor([[2, 0], [1, 2]]), u[:, :2] * 1)
    return y


@case
def index_put_(x, u, w):
    y = x * 1
    y.index_put_((torch.tensor([0, 1]), torch.tensor([2, 0])), w[0, :2] * 2)
    return y


@case
def index_put_accumulate(x, u, w):
    y = x * 1
    y.index_put_((torch.tensor([0, 0]), torch.tensor([1, 1])), u[1, :2] * 1, accumulate=True)
    return y


@case
def eq_(x, u, w):  # a comparison written in place: no gradient through it
    y = x * 1
    y.gt_(0)
    return y + u


# ---- views
@case
def select_mul(x, u, w):
    y = x * 1
    y.select(1, 2).mul_(u[0, 0])
    return y


@case
def index_add(x, u, w):  # y[0] += w
    y = x * 1
    y[0] += w[1]
    return y


@case
def slice_step(x, u, w):
    y = x * 1
    y[:, ::2] *= u[:, ::2]
    return y


@case
def transpose_add(x, u, w):
    y = x * 1
    y.t().add_(w.t())
    return y


@case
def narrow_of_narrow(x, u, w):
    y = x * 1
    y.narrow(1, 1, 2).narrow(0, 1, 1).exp_()
    return y


@case
def view_mul(x, u, w):
    y = x * 1
    y.view(6).narrow(0, 1, 4).mul_(u.view(6)[:4])
    return y


@case
def expand_refused(x, u, w):
    y = (x * 1)[:, :1].expand(2, 3)
    y.add_(1)
    return y


@case
def view_then_base_written(x, u, w):  # a view made before its base is written in place
    y = x * 1
    a = y[0]
    y.mul_(u)
    return a * 2


@case
def other_view_after_write(x, u, w):  # a second view of the base after a write through the first
    y = x * 1
    a = y[1]
    y[0].mul_(w[0])
    return a * 3 + y[0]


@case
def view_of_plain_base(x, u, w):  # y does not require grad; a write through a view makes it
    y = torch.zeros(2, 3, dtype=f64)
    y[1] += x[0] * 3
    y[0, 1:] -= u[1, :2]
    return y


# ---- chains
@case
def chain_ok(x, u, w):
    y = x * 1
    y.mul_(2).add_(u).tanh_()
    return y


@case
def chain(x, u, w):  # tanh_ saved its output; sub_ overwrites it
    y = x * 1
    y.mul_(2).add_(u).tanh_()
    y.sub_(w)
    return y


@case
def chain_views(x, u, w):
    y = x * 1
    y[0] += u[1]
    y[:, 1] *= w[0, 1]
    y.exp_()
    return y


# ---- NaN, inf, empty
@case
def nonfinite_operand(x, u, w):
    y = x * 1
    y.mul_(torch.tensor([[math.nan, math.inf, 1.0], [-math.inf, 2.0, 0.0]], dtype=f64))
    y.add_(u)
    return y


@case
def overflow_exp_(x, u, w):
    y = x * 500
    y.exp_()
    return y


@case
def empty_view_add(x, u, w):
    y = x * 1
    y.narrow(0, 0, 0).add_(u.narrow(0, 0, 0))
    e = x[:0] * 1
    e.mul_(w[:0])
    return y + e.sum()


# ---- refused
@case
def leaf_refused(x, u, w):
    x.add_(1)
    return x


@case
def view_of_leaf_refused(x, u, w):
    x[0].mul_(2)
    return x


@case
def saved_then_written(x, u, w):  # mul saved y; then y is overwritten
    y = x * 1
    z = y * y
    y.add_(1)
    return z


@case
def saved_output_written(x, u, w):  # sigmoid saved its output; then it is overwritten
    y = x.sigmoid()
    y.mul_(2)
    return y


@case
def operand_aliases_self(x, u, w):  # mul_ saved its operand, which is self
    y = x * 1
    y.mul_(y)
    return y


@case
def int_from_float_refused(x, u, w):
    y = torch.zeros(2, 3, dtype=torch.int64)
    y += x
    return y


# ---- mixed dtypes
@case
def f32_from_f64(x, u, w):
    y = x.float() * 1
    y += u
    return y.double()


# ---- modules written with +=
@case
def residual_block(x, u, w):
    lin1 = (u * 0.5).t()  # [3, 2]
    lin2 = w * 0.5  # [2, 3]
    out = torch.relu(x.t() @ lin2)  # [3, 3]
    out = out @ lin1  # [3, 2]
    residual = x.t() * 1
    out += residual
    out.relu_()
    return out


@case
def vae_reparam(x, u, w):
    mu = x * 0.5
    log_var = u - 1
    eps = w * 1
    std = log_var.div(2).exp_()
    z = eps.mul(std).add_(mu)
    return z


DOUBLE = {"double_backward"}


@case
def double_backward(x, u, w):  # y = x^3 through an in-place mul_
    y = x * x
    y.mul_(x)
    return y


def main():
    for name, fn in CASES.items():
        x, u, w = inputs()
        try:
            y = fn(x, u, w)
            gs = torch.autograd.grad((y * ramp(y.shape)).sum(), (x, u, w), allow_unused=True)
        except RuntimeError as e:
            lines.append(f"{name}.error 1")
            lines.append(f"# {name}: {str(e).splitlines()[0][:160]}")
            continue
        put(name + ".y", y)
        for key, g, t in zip(("gx", "gu", "gw"), gs, (x, u, w)):
            put(f"{name}.{key}", g if g is not None else torch.zeros_like(t))
        if name in DOUBLE:
            x, u, w = inputs()
            (g,) = torch.autograd.grad(fn(x, u, w).sum(), (x,), create_graph=True)
            (gg,) = torch.autograd.grad(g.sum(), (x,))
            put(name + ".gg", gg)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inplace.txt")
    with open(path, "w") as f:
        f.write("# written by test/reference/inplace.py under PyTorch " + torch.__version__ + "\n")
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
