#!/usr/bin/python3
"""Writes test/reference/user_optimizers.inc: Lion and Adafactor stepping two f64 parameters
(a [4, 3] matrix and a [3] vector) through six fixed gradients, the parameters after every
step; test/test_user_optimizer.cpp writes both optimizers as a user would (subclasses of
optim::Optimizer, outside the library) and checks them against this table.

Where the formulas come from:
  - Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms") is not in
    PyTorch. Its update is written below in torch ops as the reference implementation
    does (lucidrains/lion-pytorch, lion_pytorch.py update_fn, the paper's Program 1):
        p *= 1 - lr wd;  p -= lr sign(b1 m + (1 - b1) g);  m = b2 m + (1 - b2) g
  - Adafactor is torch.optim.Adafactor from PyTorch 2.5 on (torch/optim/_adafactor.py,
    _single_tensor_adafactor). Debian's python3-torch (1.13) has none, so its update is
    transcribed below in torch ops, line for line; where a PyTorch 2.x is present (the
    venv scripts/python-venv.sh makes, or /work/venv-torch2) the script also runs
    torch.optim.Adafactor itself and asserts the transcription gives the same values.
Run with either:
    /usr/bin/python3 test/reference/user_optimizers.py
    /work/venv-torch2/bin/python test/reference/user_optimizers.py
"""
import math
import os

import numpy as np
import torch

torch.set_default_dtype(torch.float64)
STEPS = 6
rng = np.random.default_rng(45)
W0 = rng.standard_normal((4, 3))
B0 = rng.standard_normal(3)
GW = [rng.standard_normal((4, 3)) * 0.1 for _ in range(STEPS)]
GB = [rng.standard_normal(3) * 0.1 for _ in range(STEPS)]

LION = dict(lr=0.02, betas=(0.9, 0.99), weight_decay=0.1)
ADAFACTOR = dict(lr=0.05, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0, weight_decay=0.01)


def lion(params):
    lr, (b1, b2), wd = LION["lr"], LION["betas"], LION["weight_decay"]
    state = [torch.zeros_like(p) for p in params]
    out = []
    for t in range(STEPS):
        for p, m, g in zip(params, state, (torch.tensor(GW[t]), torch.tensor(GB[t]))):
            p.mul_(1 - lr * wd)
            update = m.clone().mul_(b1).add(g, alpha=1 - b1).sign_()
            p.add_(update, alpha=-lr)
            m.mul_(b2).add_(g, alpha=1 - b2)
        out.append([p.clone() for p in params])
    return out


def adafactor_transcribed(params):
    # torch/optim/_adafactor.py: _init_group's state, _single_tensor_adafactor's update
    o = ADAFACTOR
    lr, beta2_decay, d, wd = o["lr"], o["beta2_decay"], o["d"], o["weight_decay"]
    eps1, eps2 = o["eps"]
    state = []
    for p in params:
        if p.dim() > 1:
            row = p.new_zeros(p.shape[:-1]).unsqueeze(-1)
            col = p.new_zeros(p.shape[:-2] + p.shape[-1:]).unsqueeze(-2)
            state.append({"step": 0.0, "row_var": row, "col_var": col})
        else:
            state.append({"step": 0.0, "variance": torch.zeros_like(p)})
    out = []
    for t in range(STEPS):
        for p, st, grad in zip(params, state, (torch.tensor(GW[t]), torch.tensor(GB[t]))):
            e1 = torch.finfo(p.dtype).eps if eps1 is None else eps1
            st["step"] += 1
            step_float = st["step"]
            one_minus_beta2_t = step_float ** beta2_decay
            rho_t = min(lr, 1 / (step_float ** 0.5))
            alpha = max(eps2, p.norm(2).item() / (p.numel() ** 0.5)) * rho_t
            if wd != 0:
                p.mul_(1 - lr * wd)
            if grad.dim() > 1:
                row_mean = torch.linalg.vector_norm(grad, dim=-1, keepdim=True).square_().div_(grad.size(-1))
                st["row_var"].lerp_(row_mean, one_minus_beta2_t)
                col_mean = torch.linalg.vector_norm(grad, dim=-2, keepdim=True).square_().div_(grad.size(-2))
                st["col_var"].lerp_(col_mean, one_minus_beta2_t)
                var_estimate = st["row_var"] @ st["col_var"]
                var_estimate.div_(st["row_var"].mean(dim=-2, keepdim=True).clamp_(min=e1))
            else:
                st["variance"].lerp_(grad * grad, one_minus_beta2_t)
                var_estimate = st["variance"].clone()
            update = var_estimate.clamp_(min=e1 * e1).rsqrt_()
            update.mul_(grad)
            denom = max(1.0, update.norm(2).item() / ((update.numel() ** 0.5) * d))
            p.add_(update, alpha=-alpha / denom)
        out.append([p.clone() for p in params])
    return out


def adafactor_torch(params):
    opt = torch.optim.Adafactor(params, **ADAFACTOR)
    out = []
    for t in range(STEPS):
        params[0].grad = torch.tensor(GW[t])
        params[1].grad = torch.tensor(GB[t])
        opt.step()
        out.append([p.detach().clone() for p in params])
    return out


def fresh():
    return [torch.tensor(W0), torch.tensor(B0)]


lion_out = lion(fresh())
ada_out = adafactor_transcribed(fresh())
checked = "transcription only (this PyTorch has no torch.optim.Adafactor)"
if hasattr(torch.optim, "Adafactor"):
    ref = adafactor_torch([p.requires_grad_() for p in fresh()])
    for a, b in zip(ada_out, ref):
        for x, y in zip(a, b):
            assert torch.allclose(x, y, rtol=1e-14, atol=0), (x, y)
    checked = "transcription checked against torch.optim.Adafactor of PyTorch " + torch.__version__


def flat(a):
    return "{" + ", ".join(repr(float(v)) for v in np.asarray(a).reshape(-1)) + "}"


def rows(seq):
    return "{\n    " + ",\n    ".join(flat(x) for x in seq) + "}"


here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "user_optimizers.inc"), "w") as f:
    f.write("// Generated by test/reference/user_optimizers.py (PyTorch %s; Adafactor: %s): do not edit.\n"
            % (torch.__version__, checked))
    f.write("constexpr int kUoSteps = %d;\n" % STEPS)
    f.write("constexpr double kLionLr = %r, kLionBeta1 = %r, kLionBeta2 = %r, kLionWd = %r;\n"
            % (LION["lr"], LION["betas"][0], LION["betas"][1], LION["weight_decay"]))
    f.write("constexpr double kAdaLr = %r, kAdaBeta2Decay = %r, kAdaEps2 = %r, kAdaD = %r, kAdaWd = %r;\n"
            % (ADAFACTOR["lr"], ADAFACTOR["beta2_decay"], ADAFACTOR["eps"][1], ADAFACTOR["d"],
               ADAFACTOR["weight_decay"]))
    f.write("const std::vector<double> kUoW0 = %s;\n" % flat(W0))
    f.write("const std::vector<double> kUoB0 = %s;\n" % flat(B0))
    f.write("// the gradients of step 1, 2, ...\n")
    f.write("const std::vector<std::vector<double>> kUoGradW = %s;\n" % rows(GW))
    f.write("const std::vector<std::vector<double>> kUoGradB = %s;\n" % rows(GB))
    f.write("// the parameters after step 1, 2, ...\n")
    f.write("const std::vector<std::vector<double>> kLionW = %s;\n" % rows([o[0].detach() for o in lion_out]))
    f.write("const std::vector<std::vector<double>> kLionB = %s;\n" % rows([o[1].detach() for o in lion_out]))
    f.write("const std::vector<std::vector<double>> kAdaW = %s;\n" % rows([o[0].detach() for o in ada_out]))
    f.write("const std::vector<std::vector<double>> kAdaB = %s;\n" % rows([o[1].detach() for o in ada_out]))
print("wrote user_optimizers.inc;", checked)
