#!/usr/bin/python3
# Reference values for test/test_edges.cpp from PyTorch 1.13 (Debian's python3-torch): the
# piecewise ops and losses at their break points (values and gradients, f32 and f64),
# binary_cross_entropy at 0 and 1, pooling with dilation, ceil_mode and divisor_override,
# convolutions with string padding, and linear at empty dims and on NaN/inf inputs. Run from
# the repository root:
#   /usr/bin/python3 test/reference/edges35.py    (writes test/reference/edges35.txt)
# A path as the argument writes there instead (PyTorch 2.x's answers, to compare).
# Format: test/torch_table.h. Each case stores its inputs, the upstream gradient "g" and
# PyTorch's outputs "=y" and gradients "=g<input>".
#
# Elementwise ops are evaluated one element at a time: PyTorch 1.13's CPU kernels have a
# vectorised body and a scalar tail that disagree at some break points (hardswish'(3) is
# 1 in the vector body, 1.5 in the scalar tail and on CUDA), so where an element lands
# would decide the answer. The scalar rule is the one PyTorch writes down; reel follows it.
#
# PyTorch 2.x answers differently at some of these points (2.15, /work/venv-torch2, run with
# an output path and compared): hardswish' is 0 at -3 and 1 at 3 (1.13: -0.5 and 1.5),
# clamp's gradient is 0 at its bounds (1.13: g), smooth_l1_loss with beta = 0 has gradient
# 0 at x = t (1.13: -g for both). reel follows 1.13, the project's reference.
import math
import sys
import torch
import torch.nn.functional as F

torch.manual_seed(35)
cases = []
DTYPES = [(torch.float32, "f32"), (torch.float64, "f64")]


def grads_of(f, inputs, g_seed):
    xs = {k: v.clone().requires_grad_(v.is_floating_point()) for k, v in inputs.items()}
    y = f(**xs)
    gen = torch.Generator().manual_seed(g_seed)
    g = (torch.rand(y.shape, generator=gen, dtype=torch.float64) * 2 - 1).to(y.dtype)
    y.backward(g)
    return y.detach(), g, {k: x.grad for k, x in xs.items() if x.requires_grad}


def case(name, f, inputs, elementwise=False):
    """inputs: name -> list (f64 values, cast per dtype) or tensor; one case per dtype."""
    for dt, tag in DTYPES:
        ins = {k: (torch.tensor(v, dtype=torch.float64) if isinstance(v, list) else v).to(dt)
               for k, v in inputs.items()}
        y, g, gr = grads_of(f, ins, len(cases))
        if elementwise:  # one element at a time (see above); g stays the whole tensor's
            shape = y.shape
            flat = {k: v.expand(shape).reshape(-1) for k, v in ins.items()}
            ys, grs = [], {k: [] for k in gr}
            for i in range(y.numel()):
                xs = {k: v[i:i + 1].clone().requires_grad_(True) for k, v in flat.items()}
                yi = f(**xs)
                yi.backward(g.reshape(-1)[i:i + 1])
                ys.append(yi.detach())
                for k in grs:
                    grs[k].append(xs[k].grad)
            y = torch.cat(ys).reshape(shape)
            gr = {k: torch.cat(v).reshape(shape) for k, v in grs.items()}
        outs = {"y": y}
        outs.update({"g" + k: v for k, v in gr.items()})
        cases.append((name + "_" + tag, dict(ins, g=g), outs))


def pts(*xs):  # each break point, and a step either side of it
    out = []
    for x in xs:
        out += [x - 0.25, x - 1e-3, x, x + 1e-3, x + 0.25]
    return out


# ---- activations and clamps at their break points
case("relu", lambda x: F.relu(x), {"x": pts(0.0) + [-0.0]}, True)
case("leaky_relu_0.01", lambda x: F.leaky_relu(x, 0.01), {"x": pts(0.0) + [-0.0]}, True)
case("leaky_relu_0.2", lambda x: F.leaky_relu(x, 0.2), {"x": pts(0.0)}, True)
case("elu_1", lambda x: F.elu(x, 1.0), {"x": pts(0.0) + [-0.0]}, True)
case("elu_0.5", lambda x: F.elu(x, 0.5), {"x": pts(0.0)}, True)
case("hardswish", lambda x: F.hardswish(x), {"x": pts(-3.0, 0.0, 3.0)}, True)
case("hardtanh", lambda x: F.hardtanh(x), {"x": pts(-1.0, 1.0) + [float("nan")]}, True)
case("hardtanh_-2_0.5", lambda x: F.hardtanh(x, -2.0, 0.5), {"x": pts(-2.0, 0.5)}, True)
case("relu6", lambda x: F.relu6(x), {"x": pts(0.0, 6.0) + [float("nan")]}, True)
case("hardsigmoid", lambda x: F.hardsigmoid(x), {"x": pts(-3.0, 0.0, 3.0) + [float("nan")]}, True)
case("threshold", lambda x: F.threshold(x, 0.5, -2.0), {"x": pts(0.5) + [float("nan")]}, True)
case("softplus_1_20", lambda x: F.softplus(x, 1, 20), {"x": pts(20.0)}, True)
case("softplus_2_10", lambda x: F.softplus(x, 2, 10), {"x": pts(5.0)}, True)
case("clamp_-1_2", lambda x: torch.clamp(x, -1.0, 2.0), {"x": pts(-1.0, 2.0)}, True)
case("clamp_eq", lambda x: torch.clamp(x, 0.5, 0.5), {"x": pts(0.5)}, True)
case("clamp_min", lambda x: torch.clamp_min(x, 0.25), {"x": pts(0.25)}, True)
case("clamp_max", lambda x: torch.clamp_max(x, -0.5), {"x": pts(-0.5)}, True)
# clamp with tensor bounds: at each bound, crossed bounds (high wins), NaN, broadcast
CX = [0.0, 1.0, 2.0, 3.0, 1.0, 1.0, 5.0, 0.5, float("nan"), 1.0, 0.0]
CL = [1.0, 1.0, 1.0, 1.0, 2.0, 1.0, 2.0, 0.5, 0.0, float("nan"), 1.0]
CH = [2.0, 2.0, 2.0, 2.0, 1.0, 1.0, 1.0, 0.5, 1.0, 2.0, 1.0]
case("clamp_tensor", lambda x, lo, hi: torch.clamp(x, lo, hi), {"x": CX, "lo": CL, "hi": CH})
case("clamp_tensor_min", lambda x, lo: torch.clamp(x, lo, None), {"x": CX, "lo": CL})
case("clamp_tensor_max", lambda x, hi: torch.clamp(x, None, hi), {"x": CX, "hi": CH})
case("clamp_tensor_bcast", lambda x, lo, hi: torch.clamp(x, lo, hi),
     {"x": torch.tensor([[-1.0, 0.0, 0.5], [1.0, 2.0, 0.25]], dtype=torch.float64),
      "lo": torch.tensor([0.0, 0.0, 0.5], dtype=torch.float64), "hi": torch.tensor(1.0, dtype=torch.float64)})
case("abs", lambda x: torch.abs(x), {"x": pts(0.0) + [-0.0]}, True)
# maximum / minimum: ties split the gradient evenly
A = [1.0, 2.0, -0.5, 0.0, 3.0, -0.0]
B = [1.0, 1.5, -0.5, -0.0, 3.5, 0.0]
case("maximum", lambda a, b: torch.maximum(a, b), {"a": A, "b": B}, True)
case("minimum", lambda a, b: torch.minimum(a, b), {"a": A, "b": B}, True)
case("add_relu", lambda a, b: F.relu(a + b), {"a": A, "b": [-v for v in A]}, True)

# ---- losses at their break points (reduction none, so each element's gradient shows)
D = [-2.0, -1.0 - 1e-3, -1.0, -0.5, -1e-3, 0.0, 1e-3, 0.5, 1.0, 1.0 + 1e-3, 2.0]
T = [0.25] * len(D)
X = [t + d for t, d in zip(T, D)]
case("l1_loss", lambda x, t: F.l1_loss(x, t, reduction="none"), {"x": X, "t": T}, True)
case("smooth_l1_loss_1", lambda x, t: F.smooth_l1_loss(x, t, reduction="none", beta=1.0), {"x": X, "t": T}, True)
case("smooth_l1_loss_0.5", lambda x, t: F.smooth_l1_loss(x, t, reduction="none", beta=0.5),
     {"x": [v / 2 + 0.25 for v in D], "t": T}, True)
case("smooth_l1_loss_0", lambda x, t: F.smooth_l1_loss(x, t, reduction="none", beta=0.0), {"x": X, "t": T}, True)
case("huber_loss_1", lambda x, t: F.huber_loss(x, t, reduction="none", delta=1.0), {"x": X, "t": T}, True)
case("huber_loss_2", lambda x, t: F.huber_loss(x, t, reduction="none", delta=2.0),
     {"x": [2 * v + 0.25 for v in D], "t": T}, True)
case("l1_loss_mean", lambda x, t: F.l1_loss(x, t), {"x": X, "t": T})
case("smooth_l1_loss_sum", lambda x, t: F.smooth_l1_loss(x, t, reduction="sum"), {"x": X, "t": T})
# binary_cross_entropy at the ends of [0, 1] (clamped logs, PyTorch's float EPSILON in the rule)
BX = [0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.5, 1e-6, 1 - 1e-6, 0.25]
BT = [0.0, 1.0, 0.5, 1.0, 0.0, 0.5, 0.5, 0.0, 1.0, 1.0]
case("bce", lambda x, t: F.binary_cross_entropy(x, t, reduction="none"), {"x": BX, "t": BT}, True)
case("bce_mean", lambda x, t: F.binary_cross_entropy(x, t), {"x": BX, "t": BT})

# kl_div where the target is 0 (xlogy: the term is 0, the target's gradient NaN) or negative (NaN)
KX = [-1.0, 0.0, -2.0, -0.5, 0.0, -3.0, -1.0]
KT = [0.0, 0.0, 1e-30, 0.5, 1.0, 0.25, -0.5]
case("kl_div", lambda x, t: F.kl_div(x, t, reduction="none"), {"x": KX, "t": KT}, True)
case("kl_div_log_target", lambda x, t: F.kl_div(x, t, reduction="none", log_target=True),
     {"x": KX, "t": [-100.0, 0.0, -1.0, -0.5, 0.0, -2.0, 1.0]}, True)
# vector norms at 0 (PyTorch's gradient there: 0) and the inf-norm's ties
NX = torch.tensor([[0.0, 0.0, 0.0], [1.0, -1.0, 1.0], [2.0, -2.0, 0.5]], dtype=torch.float64)
case("norm_2", lambda x: torch.linalg.vector_norm(x, 2, dim=1), {"x": NX})
case("norm_1", lambda x: torch.linalg.vector_norm(x, 1, dim=1), {"x": NX})
case("norm_inf", lambda x: torch.linalg.vector_norm(x, math.inf, dim=1), {"x": NX})
case("norm_3", lambda x: torch.linalg.vector_norm(x, 3, dim=1), {"x": NX})

# ---- reductions with ties: max/min along a dim pass the gradient to the index they
# return (the first), amax/amin and the whole-tensor max/min split it evenly
R = torch.tensor([[1.0, 3.0, 3.0, 2.0], [-1.0, -1.0, -1.0, -1.0], [0.0, -0.0, 5.0, 5.0]], dtype=torch.float64)
case("max_dim", lambda x: torch.max(x, 1)[0], {"x": R})
case("min_dim", lambda x: torch.min(x, 1)[0], {"x": R})
case("max_dim0", lambda x: torch.max(x, 0)[0], {"x": R})
case("amax", lambda x: torch.amax(x, 1), {"x": R})
case("amin", lambda x: torch.amin(x, 1), {"x": R})
case("amax_all", lambda x: torch.amax(x), {"x": R})
case("amin_all", lambda x: torch.amin(x, (0, 1)), {"x": R})

# ---- max pooling with ties: the first maximum of each window takes its gradient
P1 = torch.tensor([[[1.0, 3.0, 3.0, 3.0, 2.0, 2.0, -1.0, -1.0]]], dtype=torch.float64)
case("max_pool1d_ties", lambda x: F.max_pool1d(x, 2, 1), {"x": P1})
case("max_pool1d_ties_pad", lambda x: F.max_pool1d(x, 3, 2, 1), {"x": P1})
P2 = torch.tensor([[[[1.0, 2.0, 2.0, 0.0], [2.0, 2.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0], [-1.0, 0.0, 0.0, -1.0]]]],
                  dtype=torch.float64)
case("max_pool2d_ties", lambda x: F.max_pool2d(x, 2, 1), {"x": P2})
case("max_pool2d_ties_s2", lambda x: F.max_pool2d(x, 2, 2), {"x": P2})


def u(*shape):
    return torch.rand(*shape, dtype=torch.float64) * 4 - 2


# ---- pooling options: 1-d ceil_mode and dilation, 2-d dilation and divisor_override
x1 = u(2, 3, 11)
case("max_pool1d_ceil", lambda x: F.max_pool1d(x, 3, 2, 1, ceil_mode=True), {"x": x1})
case("max_pool1d_dil", lambda x: F.max_pool1d(x, 3, 2, 1, dilation=2), {"x": x1})
case("max_pool1d_dil_ceil", lambda x: F.max_pool1d(x, 2, 3, 0, dilation=3, ceil_mode=True), {"x": x1})
case("avg_pool1d_ceil", lambda x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True), {"x": x1})
case("avg_pool1d_ceil_nopad", lambda x: F.avg_pool1d(x, 4, 3, 1, ceil_mode=True, count_include_pad=False),
     {"x": x1})
x2 = u(2, 2, 7, 8)
case("max_pool2d_dil", lambda x: F.max_pool2d(x, 3, 1, 1, dilation=2), {"x": x2})
case("max_pool2d_dil_ceil", lambda x: F.max_pool2d(x, (2, 3), (2, 1), (1, 0), dilation=(2, 3), ceil_mode=True),
     {"x": x2})
case("avg_pool2d_div", lambda x: F.avg_pool2d(x, 3, 2, 1, divisor_override=2), {"x": x2})
case("avg_pool2d_div_ceil", lambda x: F.avg_pool2d(x, (3, 2), 2, (1, 0), ceil_mode=True, divisor_override=5),
     {"x": x2})

# ---- string padding: "same" (stride 1; odd extra padding goes right) and "valid"
xc1 = u(2, 4, 9)
w1o, w1e, b1 = u(6, 2, 3), u(6, 2, 4), u(6)
case("conv1d_same_odd", lambda x, w, b: F.conv1d(x, w, b, padding="same", groups=2), {"x": xc1, "w": w1o, "b": b1})
case("conv1d_same_even", lambda x, w, b: F.conv1d(x, w, b, padding="same", groups=2), {"x": xc1, "w": w1e, "b": b1})
case("conv1d_same_dil", lambda x, w: F.conv1d(x, w, None, padding="same", dilation=3, groups=2),
     {"x": xc1, "w": w1e})
case("conv1d_valid", lambda x, w, b: F.conv1d(x, w, b, padding="valid", stride=2, groups=2),
     {"x": xc1, "w": w1e, "b": b1})
xc2 = u(2, 3, 6, 7)
w2o, w2e, b2 = u(4, 3, 3, 3), u(4, 3, 2, 4), u(4)
case("conv2d_same_odd", lambda x, w, b: F.conv2d(x, w, b, padding="same"), {"x": xc2, "w": w2o, "b": b2})
case("conv2d_same_even", lambda x, w, b: F.conv2d(x, w, b, padding="same"), {"x": xc2, "w": w2e, "b": b2})
case("conv2d_same_dil", lambda x, w: F.conv2d(x, w, None, padding="same", dilation=(2, 1)), {"x": xc2, "w": w2e})
case("conv2d_valid", lambda x, w, b: F.conv2d(x, w, b, padding="valid", stride=(1, 2)), {"x": xc2, "w": w2e, "b": b2})

# ---- linear with an empty inner dim (K = 0: y is the bias), an empty batch, and NaN/inf
# inputs (appended last: the cases above keep their seeds)
EMPTY = torch.empty(3, 0, dtype=torch.float64)
case("linear_k0", lambda x, w, b: F.linear(x, w, b), {"x": EMPTY, "w": torch.empty(4, 0, dtype=torch.float64),
                                                     "b": u(4)})
case("linear_relu_k0", lambda x, w, b: F.relu(F.linear(x, w, b)),
     {"x": EMPTY, "w": torch.empty(4, 0, dtype=torch.float64), "b": u(4)})
case("linear_n0", lambda x, w, b: F.linear(x, w, b), {"x": torch.empty(0, 5, dtype=torch.float64), "w": u(4, 5),
                                                     "b": u(4)})
XNF = u(2, 3)
XNF[0, 1], XNF[1, 2] = float("nan"), float("inf")
case("linear_nonfinite", lambda x, w, b: F.linear(x, w, b), {"x": XNF, "w": u(4, 3), "b": u(4)})

# ---- split and chunk (one node; its gradient joins the parts': an unused part gets
# zeros), an empty part and an empty input, NaN/inf inputs; layer_norm on NaN/inf rows, 7
# rows (blocks of four rows and a short one), no affine, and an empty batch (appended last:
# the cases above keep their seeds)
XS = u(5, 4)
XS[1, 2], XS[3, 0], XS[4, 3] = float("nan"), float("inf"), float("-inf")
case("split_sizes_empty_part", lambda x: (lambda p: torch.cat([p[2] * 3.0, torch.sin(p[0]), p[1] * 5.0], 0))(
    torch.split(x, [2, 0, 3], 0)), {"x": XS})
case("split_unused_part", lambda x: (lambda p: p[1] * p[1])(torch.split(x, 2, 1)), {"x": XS})
XC = u(3, 7)
XC[0, 4], XC[2, 1] = float("inf"), float("nan")
case("chunk_three", lambda x: (lambda c: torch.cat([c[0] * c[1], c[2]], 1))(torch.chunk(x, 3, 1)), {"x": XC})
case("split_empty_input", lambda x: torch.split(x, 2, 0)[0] * 2.0, {"x": torch.empty(0, 3, dtype=torch.float64)})
XL = u(7, 5)
XL[2, 3], XL[5, 0] = float("nan"), float("inf")
case("layer_norm_nonfinite", lambda x, w, b: F.layer_norm(x, [5], w, b), {"x": XL, "w": u(5), "b": u(5)})
case("layer_norm_rows7", lambda x, w, b: F.layer_norm(x, [5], w, b), {"x": u(7, 5), "w": u(5), "b": u(5)})
case("layer_norm_plain", lambda x: F.layer_norm(x, [3, 5]), {"x": u(2, 3, 5)})
case("layer_norm_empty", lambda x, w, b: F.layer_norm(x, [5], w, b),
     {"x": torch.empty(0, 5, dtype=torch.float64), "w": u(5), "b": u(5)})

# ---- write
names = {torch.float32: "f32", torch.float64: "f64", torch.int64: "i64", torch.bool: "bool"}


def fmt(v, dt):
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return ("%.9g" % v) if dt == torch.float32 else repr(float(v))


with open(sys.argv[1] if len(sys.argv) > 1 else "test/reference/edges35.txt", "w") as f:
    f.write("# generated by test/reference/edges35.py from PyTorch " + torch.__version__ + "; do not edit\n")
    for name, inputs, outputs in cases:
        for key, t in list(inputs.items()) + [("=" + k, v) for k, v in outputs.items()]:
            t = t.contiguous()
            vals = [fmt(v, t.dtype) for v in t.flatten().tolist()]
            f.write(" ".join([name, key, names[t.dtype], str(t.dim())] + [str(s) for s in t.shape] + vals) + "\n")
print(f"{len(cases)} cases")
