#!/usr/bin/python3
# Reference values for test/test_fused_torch.cpp from PyTorch 1.13 (Debian's python3-torch):
# reel's fused ops against what PyTorch computes unfused, values and gradients:
#   batch_norm_relu(xs, ...) = relu(batch_norm(cat(xs, 1), ...)), add_relu(a, b) = relu(a + b),
#   batch_norm_relu_blocked(xs, ..., B) = blocks(relu(batch_norm(cat(xs, 1), ...)), B) and
#   conv2d_blocked(xb, w, b) = conv2d(unblocks(xb), w, b), with blocks(y, B) =
#   y.reshape(N, C/B, B, H, W).permute(0, 1, 3, 4, 2) (oneDNN's nChw16c for B = 16);
#   and plain 1x1 conv2d, whose weight gradient reel computes as a batched product.
# NaN, inf and empty inputs included. Run from the repository root:
#   /usr/bin/python3 test/reference/fused17.py    (writes test/reference/fused17.txt)
# The format is ops15.py's (test/torch_table.h reads both).
import math
import torch
import torch.nn.functional as F

torch.manual_seed(17)
cases = []


def case(name, inputs, outputs):
    cases.append((name, inputs, outputs))


def u(*shape):
    return (torch.rand(*shape, dtype=torch.float64) * 4 - 2).float()


def bn_relu_case(name, xs, training, block=None):
    """relu(batch_norm(cat(xs, 1))), written channel-blocked when `block` is given"""
    C = sum(x.shape[1] for x in xs)
    w, b = u(C) + 2.5, u(C)
    rm, rv = u(C), torch.rand(C) + 0.5
    leaves = [x.clone().requires_grad_() for x in xs]
    wl, bl = w.clone().requires_grad_(), b.clone().requires_grad_()
    rm2, rv2 = rm.clone(), rv.clone()
    y = F.relu(F.batch_norm(torch.cat(leaves, 1), rm2, rv2, wl, bl, training, 0.1, 1e-5))
    if block:
        y = blocks(y, block)
    g = u(*y.shape)
    y.backward(g)
    ins = {f"x{i}": x for i, x in enumerate(xs)}
    ins.update({"w": w, "b": b, "rm": rm, "rv": rv, "g": g})
    if block:
        ins["block"] = torch.tensor([block])
    outs = {"y": y.detach(), "rm": rm2, "rv": rv2, "gw": wl.grad, "gb": bl.grad}
    for i, l in enumerate(leaves):
        outs[f"gx{i}"] = l.grad if l.grad is not None else torch.zeros_like(l)
    case(name, ins, outs)


def blocks(y, B):
    N, C, H, W = y.shape
    return y.reshape(N, C // B, B, H, W).permute(0, 1, 3, 4, 2).contiguous()


def unblocks(xb):
    N, CB, H, W, B = xb.shape
    return xb.permute(0, 1, 4, 2, 3).reshape(N, CB * B, H, W)


# ---- batch_norm_relu: three pieces, S = 5 x 5 (vector blocks and a tail)
bn_relu_case("bn_relu_train", [u(4, 3, 5, 5), u(4, 1, 5, 5) * 3, u(4, 2, 5, 5) + 1], True)
bn_relu_case("bn_relu_eval", [u(3, 2, 4, 3), u(3, 3, 4, 3)], False)
bn_relu_case("bn_relu_2d", [u(6, 2), u(6, 3)], True)  # [N, C] pieces (BatchNorm1d's shape)
x = u(2, 3, 3, 3)
x[0, 1, 1, 1] = float("nan"); x[1, 2, 0, 0] = float("inf"); x[1, 0, 2, 2] = float("-inf")
bn_relu_case("bn_relu_eval_nonfinite", [x, u(2, 1, 3, 3)], False)
x = u(2, 2, 3)
x[1, 0, 1] = float("nan"); x[0, 1, 2] = float("inf")
bn_relu_case("bn_relu_train_nonfinite", [x, u(2, 2, 3)], True)  # those channels become NaN
bn_relu_case("bn_relu_empty", [u(0, 2, 3, 3), u(0, 1, 3, 3)], False)

# ---- the channel-blocked forms
def conv_case(name, x, w, b, padding, blocked):
    """conv2d of x (unblocked first when `blocked`), values and the gradients of x, w and b"""
    xl, wl, bl = x.clone().requires_grad_(), w.clone().requires_grad_(), b.clone().requires_grad_()
    y = F.conv2d(unblocks(xl) if blocked else xl, wl, bl, padding=padding)
    g = u(*y.shape)
    y.backward(g)
    gx = xl.grad if xl.grad is not None else torch.zeros_like(x)
    case(name, {"x": x, "w": w, "b": b, "g": g, "padding": torch.tensor([padding])},
         {"y": y.detach(), "gx": gx, "gw": wl.grad, "gb": bl.grad})


# S = 5 x 5 (a 16-wide transpose and a tail); pieces of 16 + 8 + 8 channels
bn_relu_case("bn_relu_blocked_train", [u(3, 16, 5, 5), u(3, 8, 5, 5) * 3, u(3, 8, 5, 5) + 1], True, 16)
bn_relu_case("bn_relu_blocked_eval", [u(2, 32, 3, 4)], False, 16)
bn_relu_case("bn_relu_blocked_b8", [u(2, 8, 4, 4), u(2, 8, 4, 4)], True, 8)
x = u(2, 16, 3, 3)
x[0, 1, 1, 1] = float("nan"); x[1, 2, 0, 0] = float("inf"); x[1, 5, 2, 2] = float("-inf")
bn_relu_case("bn_relu_blocked_eval_nonfinite", [x], False, 16)
x = u(2, 16, 4, 5)
x[1, 3, 1, 1] = float("nan"); x[0, 9, 2, 4] = float("inf")
bn_relu_case("bn_relu_blocked_train_nonfinite", [x], True, 16)  # those channels become NaN
bn_relu_case("bn_relu_blocked_empty", [u(0, 16, 3, 3)], False, 16)
conv_case("conv_blocked", blocks(u(2, 32, 6, 5), 16), u(8, 32, 3, 3) * 0.2, u(8), 1, True)
conv_case("conv_blocked_b8", blocks(u(2, 16, 4, 4), 8), u(4, 16, 3, 3) * 0.2, u(4), 0, True)
x = u(2, 16, 6, 6)
x[0, 3, 2, 2] = float("nan"); x[1, 7, 4, 1] = float("inf")
conv_case("conv_blocked_nonfinite", blocks(x, 16), u(4, 16, 3, 3) * 0.2, u(4), 1, True)
conv_case("conv_blocked_empty", blocks(u(0, 16, 4, 4), 16), u(4, 16, 3, 3), u(4), 1, True)

# ---- add_relu: broadcasting, non-finite values, empty
a, b = u(3, 4, 5), u(4, 5)
a[0, 0, 0] = float("nan"); a[1, 1, 1] = float("inf"); b[2, 2] = float("-inf"); a[2, 3, 4] = -b[3, 4]  # a sum of 0
al, bl = a.clone().requires_grad_(), b.clone().requires_grad_()
y = F.relu(al + bl)
g = u(3, 4, 5)
y.backward(g)
case("add_relu", {"a": a, "b": b, "g": g}, {"y": y.detach(), "ga": al.grad, "gb": bl.grad})
a, b = u(0, 5), u(1, 5)
case("add_relu_empty", {"a": a, "b": b}, {"y": F.relu(a + b)})

# ---- plain 1x1 convolutions: their weight gradient is a batched product per image summed
# over the batch (cpu/dnnl_conv.cpp's backward_weight_pointwise)
conv_case("conv1x1", u(3, 16, 5, 4), u(8, 16, 1, 1) * 0.3, u(8), 0, False)
x = u(2, 8, 3, 3)
x[0, 2, 1, 1] = float("nan"); x[1, 5, 0, 2] = float("inf"); x[1, 0, 2, 0] = float("-inf")
conv_case("conv1x1_nonfinite", x, u(4, 8, 1, 1) * 0.3, u(4), 0, False)
conv_case("conv1x1_empty", u(0, 8, 3, 3), u(4, 8, 1, 1), u(4), 0, False)

# ---- write
names = {torch.float32: "f32", torch.float64: "f64", torch.int64: "i64", torch.bool: "bool"}
with open("test/reference/fused17.txt", "w") as f:
    f.write("# generated by test/reference/fused17.py from PyTorch " + torch.__version__ + "; do not edit\n")
    for name, inputs, outputs in cases:
        for key, t in list(inputs.items()) + [("=" + k, v) for k, v in outputs.items()]:
            t = t.detach().contiguous()
            vals = [("%.9g" % v) if math.isfinite(v) else ("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf"))
                    for v in t.flatten().tolist()]
            f.write(" ".join([name, key, names[t.dtype], str(t.dim())] + [str(s) for s in t.shape] + vals) + "\n")
print(f"{len(cases)} cases")
