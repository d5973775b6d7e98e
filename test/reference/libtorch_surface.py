#!/usr/bin/python3
"""Reference values for test/test_from_libtorch.cpp, computed by PyTorch 1.13 (Debian's
python3-torch): libtorch's method spellings, in-place forms, custom functions written the
tutorial's way, the small Sequential modules, gradient clipping and Adam with a positional
lr. Writes libtorch_surface.txt (test/torch_table.h's format: inputs and "=outputs") and
grad_fn_names.txt ("<call> <grad_fn.name()>", the names Node::name() must give).
Run: /usr/bin/python3 test/reference/libtorch_surface.py
"""
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

f32, f64 = torch.float32, torch.float64
lines = []


def put(case, name, t):
    t = torch.as_tensor(t).detach()
    dt = {f32: "f32", f64: "f64", torch.int64: "i64", torch.bool: "bool"}[t.dtype]
    vals = t.flatten().tolist()
    text = " ".join(repr(float(v)) if dt in ("f32", "f64") else str(int(v)) for v in vals)
    lines.append(f"{case} {name} {dt} {t.dim()} {' '.join(str(s) for s in t.shape)} {text}".replace("  ", " "))


def ramp(shape, scale=0.25, shift=0.0, dtype=f64):
    n = math.prod(shape)
    return ((torch.arange(n, dtype=dtype) * 7 % 11) * scale - shift).reshape(shape)


# ---- comparisons, all/any, and their in-place forms (values in f32)
a = ramp((3, 4), 0.25, 1.0, f32)
b = a.clone()
b[0, 1] += 0.5
b[2, 3] -= 0.5
b[1] = 0.25
put("compare", "a", a)
put("compare", "b", b)
for op in ("eq", "ne", "lt", "le", "gt", "ge"):
    put("compare", "=" + op, getattr(a, op)(b))
    put("compare", "=" + op + "_s", getattr(a, op)(0.25))
    put("compare", "=" + op + "_", getattr(a.clone(), op + "_")(b))
    put("compare", "=" + op + "_s_", getattr(a.clone(), op + "_")(0.25))
put("compare", "=all", a.gt(-2).all())
put("compare", "=any", a.gt(1.4).any())
put("compare", "=all0", a.ge(-0.5).all(0))
put("compare", "=any1", a.gt(1.0).any(1))

# ---- products
m1, m2, m3 = ramp((3, 4), 0.5, 2.0), ramp((4, 2), 0.25, 1.0), ramp((3, 2), 0.5, 1.0)
b1, b2 = ramp((2, 3, 4), 0.25, 1.0), ramp((2, 4, 2), 0.5, 1.0)
for k, v in {"m1": m1, "m2": m2, "m3": m3, "b1": b1, "b2": b2}.items():
    put("products", k, v)
put("products", "=mm", m1.mm(m2))
put("products", "=addmm", m3.addmm(m1, m2, beta=0.5, alpha=2))
put("products", "=bmm", b1.bmm(b2))
put("products", "=matmul", m1.matmul(m2))

# ---- in place
x, y = ramp((2, 3), 0.5, 1.5), ramp((2, 3), 0.25, 0.5) + 1
mask = x.gt(0)
idx = torch.tensor([2, 0])
for k, v in {"x": x, "y": y, "mask": mask, "idx": idx}.items():
    put("inplace", k, v)
put("inplace", "=add_s", x.clone().add_(3))
put("inplace", "=sub_", x.clone().sub_(y, alpha=2))
put("inplace", "=sub_s", x.clone().sub_(0.5))
put("inplace", "=mul_", x.clone().mul_(y))
put("inplace", "=div_", x.clone().div_(y))
put("inplace", "=div_s", x.clone().div_(4))
put("inplace", "=pow_", x.clone().pow_(2))
put("inplace", "=neg_", x.clone().neg_())
put("inplace", "=abs_", x.clone().abs_())
put("inplace", "=exp_", x.clone().exp_())
put("inplace", "=sqrt_", y.clone().sqrt_())
put("inplace", "=log_", y.clone().log_())
put("inplace", "=relu_", x.clone().relu_())
put("inplace", "=sigmoid_", x.clone().sigmoid_())
put("inplace", "=tanh_", x.clone().tanh_())
put("inplace", "=clamp_", x.clone().clamp_(-0.5, 0.75))
put("inplace", "=clamp_min_", x.clone().clamp_min_(0.2))
put("inplace", "=clamp_max_", x.clone().clamp_max_(0.2))
put("inplace", "=masked_fill_", x.clone().masked_fill_(mask, 7.0))
put("inplace", "=index_fill_", x.clone().index_fill_(1, idx, -1.0))

# ---- methods that are free functions in reel
x = ramp((3, 4), 0.25, 1.0)
pos = ramp((3, 4), 0.25, 0.0) + 0.5
i0 = torch.tensor([2, 0, 2])
g1 = torch.tensor([[1], [0], [3]])
cond = x.gt(0)
for k, v in {"x": x, "pos": pos, "i0": i0, "g1": g1, "cond": cond}.items():
    put("methods", k, v)
put("methods", "=index_select", x.index_select(0, i0))
put("methods", "=gather", x.gather(1, g1))
put("methods", "=add_alpha", x.add(pos, alpha=0.5))
put("methods", "=sub_alpha", x.sub(pos, alpha=2))
put("methods", "=mul", x.mul(pos))
put("methods", "=div_s", x.div(4))
put("methods", "=pow_t", pos.pow(x))
put("methods", "=maximum", x.maximum(pos - 1))
put("methods", "=neg", x.neg())
put("methods", "=rsqrt", pos.rsqrt())
put("methods", "=square", x.square())
put("methods", "=sin", x.sin())
put("methods", "=erf", x.erf())
put("methods", "=prod", pos.prod())
put("methods", "=prod1", pos.prod(1))
put("methods", "=std", x.std())
put("methods", "=var", x.var())
put("methods", "=amax0", x.amax(0))
put("methods", "=argmax", x.argmax())
put("methods", "=norm1", x.norm(1, [1]))
put("methods", "=logsumexp", x.logsumexp([1]))
put("methods", "=cumprod", pos.cumprod(1))
put("methods", "=sort_v", x.sort(1, descending=True).values)
put("methods", "=sort_i", x.sort(1, descending=True).indices)
put("methods", "=topk_v", x.topk(2).values)
put("methods", "=argsort", x.argsort(1))
put("methods", "=where", x.where(cond, pos))
put("methods", "=lerp", x.lerp(pos, 0.25))
put("methods", "=tril", x.tril())
put("methods", "=triu1", x.triu(1))
put("methods", "=roll", x.roll([1], [1]))
put("methods", "=tile", x[0].tile([2]))
put("methods", "=chunk1", x.chunk(2, 1)[1])
put("methods", "=split0", x.split([1, 2], 0)[1])
put("methods", "=scatter_add", torch.zeros(3, 4, dtype=f64).scatter_add(1, g1, pos[:, :1]))
put("methods", "=index_add", x.index_add(0, i0, pos, alpha=2))
put("methods", "=outer", x[0].outer(pos[1]))
put("methods", "=logical_and", cond.logical_and(x.lt(0.5)))
put("methods", "=isfinite", x.log().isfinite())

# ---- custom functions, the tutorial's LinearFunction and MulConstant
class LinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weight, bias=None):
        ctx.save_for_backward(input, weight, bias)
        output = input.mm(weight.t())
        if bias is not None:
            output += bias.unsqueeze(0).expand_as(output)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        input, weight, bias = ctx.saved_tensors
        grad_bias = grad_output.sum(0) if bias is not None else None
        return grad_output.mm(weight), grad_output.t().mm(input), grad_bias


class MulConstant(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, constant):
        ctx.constant = constant
        return tensor * constant

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * ctx.constant, None


x = ramp((4, 3), 0.25, 1.0).requires_grad_()
w = ramp((2, 3), 0.5, 1.0).requires_grad_()
bias = ramp((2,), 0.5, 0.25).requires_grad_()
put("custom", "x", x)
put("custom", "w", w)
put("custom", "b", bias)
yv = LinearFunction.apply(x, w, bias)
z = MulConstant.apply(yv, 5.5)
gw_only = ramp((4, 2), 0.125)
put("custom", "g", gw_only)
(z * gw_only).sum().backward()
put("custom", "=y", z)
put("custom", "=gx", x.grad)
put("custom", "=gw", w.grad)
put("custom", "=gb", bias.grad)
x.grad = None
w.grad = None
y2 = LinearFunction.apply(x, w)  # bias left out: forward's default
(y2 * gw_only).sum().backward()
put("custom", "=y_nobias", y2)
put("custom", "=gx_nobias", x.grad)
put("custom", "=gw_nobias", w.grad)

# ---- the small modules of a Sequential
x = ramp((2, 6), 0.5, 2.0)
img = ramp((1, 1, 3, 3), 0.5, 1.0)
put("modules", "x", x)
put("modules", "img", img)
put("modules", "=unflatten", nn.Unflatten(1, (2, 3))(x))
put("modules", "=log_softmax", nn.LogSoftmax(1)(x))
put("modules", "=zero_pad", nn.ZeroPad2d((1, 0, 2, 1))(img))
put("modules", "=constant_pad", nn.ConstantPad2d(1, 3.5)(img))
put("modules", "=reflection_pad", nn.ReflectionPad2d(1)(img))
put("modules", "=replication_pad", nn.ReplicationPad2d((2, 1, 0, 1))(img))
seq = nn.Sequential(nn.Unflatten(1, (2, 3)), nn.Flatten(1), nn.LeakyReLU(0.2))
put("modules", "=functional_seq", seq(x))

# ---- nn::utils::clip_grad_norm_ / clip_grad_value_, optim::Adam(params, 1e-2)
p1 = ramp((3,), 0.5, 1.0).requires_grad_()
p2 = ramp((2, 2), 0.25, 0.5).requires_grad_()
g1v, g2v = ramp((3,), 1.0, 3.0), ramp((2, 2), 0.5, 1.0)
for k, v in {"p1": p1, "p2": p2, "g1": g1v, "g2": g2v}.items():
    put("clip", k, v)
p1.grad, p2.grad = g1v.clone(), g2v.clone()
total = torch.nn.utils.clip_grad_norm_([p1, p2], 1.5)
put("clip", "=total", total)
put("clip", "=g1", p1.grad)
put("clip", "=g2", p2.grad)
p1.grad, p2.grad = g1v.clone(), g2v.clone()
torch.nn.utils.clip_grad_value_([p1, p2], 0.6)
put("clip", "=g1_value", p1.grad)
put("clip", "=g2_value", p2.grad)
p1.grad, p2.grad = g1v.clone(), g2v.clone()
adam = torch.optim.Adam([p1, p2], 1e-2)
adam.step()
adam.step()
put("clip", "=p1_adam", p1)
put("clip", "=p2_adam", p2)
with torch.no_grad():
    p1.copy_(ramp((3,), 0.5, 1.0))
p1.grad = g1v.clone()
sgd = torch.optim.SGD([p1], 0.1)
sgd.step()
put("clip", "=p1_sgd", p1)

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "libtorch_surface.txt"), "w") as f:
    f.write(f"# written by libtorch_surface.py with torch {torch.__version__}; do not edit\n")
    f.write("\n".join(lines) + "\n")

# ---- grad_fn()->name() of the same calls as test_from_libtorch.cpp's "grad_fn names"
x = ramp((3, 4), 0.25, 1.0).requires_grad_()
y = (ramp((3, 4), 0.25, 0.0) + 0.5).requires_grad_()
m = ramp((4, 5), 0.25, 1.0).requires_grad_()
bb = ramp((5,), 0.25, 1.0).requires_grad_()
b3, c3 = ramp((2, 3, 4)).requires_grad_(), ramp((2, 4, 5)).requires_grad_()
img, cw = ramp((2, 3, 6, 6)).requires_grad_(), ramp((4, 3, 3, 3)).requires_grad_()
lab = torch.tensor([0, 1, 3])
calls = {
    "add": lambda: x + y, "sub": lambda: x - y, "mul": lambda: x * y, "div": lambda: x / y,
    "neg": lambda: -x, "exp": lambda: x.exp(), "log": lambda: y.log(), "sqrt": lambda: y.sqrt(),
    "relu": lambda: x.relu(), "sigmoid": lambda: x.sigmoid(), "tanh": lambda: x.tanh(),
    "gelu": lambda: F.gelu(x), "leaky_relu": lambda: F.leaky_relu(x, 0.2),
    "pow": lambda: x.pow(2.0), "pow_tensor": lambda: y.pow(x), "clamp": lambda: x.clamp(-0.5, 0.5),
    "sum": lambda: x.sum(), "sum_dim": lambda: x.sum(1), "mean": lambda: x.mean(), "mean_dim": lambda: x.mean(1),
    "mm": lambda: x.mm(m), "matmul": lambda: x.matmul(m), "bmm": lambda: b3.bmm(c3),
    "linear": lambda: F.linear(x, m.t(), bb), "addmm": lambda: torch.addmm(bb, x, m),
    "softmax": lambda: x.softmax(1), "log_softmax": lambda: x.log_softmax(1),
    "cross_entropy": lambda: F.cross_entropy(x, lab), "mse_loss": lambda: F.mse_loss(x, y),
    "conv2d": lambda: F.conv2d(img, cw), "max_pool2d": lambda: F.max_pool2d(img, 2),
    "avg_pool2d": lambda: F.avg_pool2d(img, 2), "layer_norm": lambda: F.layer_norm(x, [4]),
    "batch_norm": lambda: F.batch_norm(img, None, None, training=True),
    "view": lambda: x.view(12), "reshape": lambda: x.reshape(4, 3), "transpose": lambda: x.transpose(0, 1),
    "permute": lambda: x.permute(1, 0), "select": lambda: x.select(0, 1), "unsqueeze": lambda: x.unsqueeze(0),
    "squeeze": lambda: x.unsqueeze(0).squeeze(0),
    "expand": lambda: x[:1].expand(3, 4), "cat": lambda: torch.cat([x, y]), "stack": lambda: torch.stack([x, y]),
    "index_select": lambda: x.index_select(0, lab[:2]), "gather": lambda: x.gather(1, lab.unsqueeze(1)),
    "where": lambda: torch.where(x.gt(0), x, y), "masked_fill": lambda: x.masked_fill(x.gt(0), 0.0),
    "cumsum": lambda: x.cumsum(1), "clone": lambda: x.clone(), "to": lambda: x.to(f32),
    "embedding": lambda: F.embedding(lab, m), "maximum": lambda: torch.maximum(x, y),
}
with open(os.path.join(here, "grad_fn_names.txt"), "w") as f:
    f.write(f"# written by libtorch_surface.py with torch {torch.__version__}; do not edit\n")
    for k, fn in calls.items():
        f.write(f"{k} {fn().grad_fn.name()}\n")
