#!/usr/bin/python3
"""Writes test/reference/grad_scaler.inc: PyTorch 1.13's torch.cuda.amp.GradScaler driving SGD
(momentum 0.9) on a small linear model through a scripted series of overflows (inf, -inf and
NaN put into a gradient at chosen steps), growth_interval 3. Per step it records the scale
before and after, whether optimizer.step() ran, the growth tracker and the parameters;
test/test_grad_scaler.cpp replays the same series with reel's GradScaler. Run with Debian's
python3-torch (a CPU build):
    /usr/bin/python3 test/reference/grad_scaler.py

What is PyTorch's here and what is reproduced: the scaler is PyTorch 1.13's own Python class
(torch/cuda/amp/grad_scaler.py: the stages, unscale_ once per step, the skip decision, the
found_inf sums, update() and update(new_scale), state_dict). Three things are not runnable on
a CPU build of 1.13, and are replaced by the same formulas:
  - GradScaler disables itself without CUDA: amp_definitely_not_available is patched to False;
  - _MultiDeviceReplicator (per-device copies of the scale and found_inf) asserts a CUDA
    tensor: replaced by a subclass whose constructor does the same without the assert;
  - scale() asserts a CUDA tensor: the test does what it does after the assert,
    loss * scaler._scale (with the scale made lazily by _lazy_init_scale_growth_tracker);
  - torch._amp_foreach_non_finite_check_and_unscale_ and torch._amp_update_scale_ have only
    CUDA kernels in 1.13 (on CPU tensors: NotImplementedError). They are replaced by Python
    transcriptions of aten/src/ATen/native/cuda/AmpKernels.cu (below). The update also keeps
    the later guard against growing the scale to inf (never reached in this series).
"""
import math
import os

import numpy as np
import torch
import torch.cuda.amp.grad_scaler as gs


def non_finite_check_and_unscale_(grads, found_inf, inv_scale):
    # per element: val = opmath(val) (f32, or f64 for f64 grads); !isfinite(val) -> found_inf = 1;
    # val = inv_scale == 1 ? val : val * inv_scale
    inv = inv_scale.item()
    for g in grads:
        if not bool(torch.isfinite(g).all()):
            found_inf.fill_(1.0)
        if inv != 1.0:
            opmath = torch.float64 if g.dtype == torch.float64 else torch.float32
            g.copy_(g.to(opmath) * inv_scale.to(opmath))


def update_scale_(scale, tracker, found_inf, growth_factor, backoff_factor, growth_interval):
    # *current_scale (float) * factor (double), stored as float
    if found_inf.item():
        scale.fill_(float(np.float32(float(scale.item()) * backoff_factor)))
        tracker.fill_(0)
    else:
        successful = int(tracker.item()) + 1
        if successful == growth_interval:
            new_scale = np.float32(float(scale.item()) * growth_factor)
            if math.isfinite(new_scale):
                scale.fill_(float(new_scale))
            tracker.fill_(0)
        else:
            tracker.fill_(successful)
    return scale


torch._amp_foreach_non_finite_check_and_unscale_ = non_finite_check_and_unscale_
torch._amp_update_scale_ = update_scale_
gs.amp_definitely_not_available = lambda: False


class Replicator(gs._MultiDeviceReplicator):
    def __init__(self, master_tensor):  # the original's, less `assert master_tensor.is_cuda`
        self.master = master_tensor
        self._per_device_tensors = {}


gs._MultiDeviceReplicator = Replicator

INIT_SCALE, GROWTH, BACKOFF, INTERVAL = 1024.0, 2.0, 0.5, 3
LR, MOMENTUM = 0.05, 0.9
N, IN, OUT = 6, 4, 3

# step -> (parameter 0 = weight / 1 = bias, flat index, value) put into the scaled gradient
INJECT = {
    2: (0, 5, math.inf),
    6: (1, 2, -math.inf),
    7: (0, 0, math.nan),
    8: (0, 11, math.inf),
    13: (1, 0, math.nan),
    18: (0, 7, -math.inf),
}
EXPLICIT_UNSCALE = {4, 7, 12}  # scaler.unscale_(opt) before scaler.step(opt)
NEW_SCALE = {15: 4096.0}  # update(new_scale) instead of update()
STEPS = 20


def main():
    g = torch.Generator().manual_seed(19)
    x = torch.randn(N, IN, generator=g)
    y = torch.randn(N, OUT, generator=g)
    model = torch.nn.Linear(IN, OUT)
    with torch.no_grad():
        model.weight.copy_(torch.randn(OUT, IN, generator=g) * 0.5)
        model.bias.copy_(torch.randn(OUT, generator=g) * 0.5)
    w0, b0 = model.weight.detach().clone(), model.bias.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    scaler = gs.GradScaler(init_scale=INIT_SCALE, growth_factor=GROWTH, backoff_factor=BACKOFF,
                           growth_interval=INTERVAL)
    assert scaler.is_enabled()
    rows = []
    for step in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        if scaler._scale is None:  # GradScaler.scale after its CUDA assert
            scaler._lazy_init_scale_growth_tracker(loss.device)
        scaled = loss * scaler._scale
        scaled.backward()
        inject = INJECT.get(step)
        if inject:
            p = [model.weight, model.bias][inject[0]]
            p.grad.view(-1)[inject[1]] = inject[2]
        scale_before = scaler.get_scale()
        if step in EXPLICIT_UNSCALE:
            scaler.unscale_(opt)
        before = [t.detach().clone() for t in (model.weight, model.bias)]
        scaler.step(opt)
        stepped = not all(torch.equal(a, b) for a, b in zip(before, (model.weight, model.bias)))
        assert stepped == (inject is None)
        if step in NEW_SCALE:
            scaler.update(NEW_SCALE[step])
        else:
            scaler.update()
        rows.append(dict(step=step, inject=inject, unscale=step in EXPLICIT_UNSCALE,
                         new_scale=NEW_SCALE.get(step, 0.0), scale_before=scale_before, stepped=stepped,
                         scale_after=scaler.get_scale(), tracker=scaler._get_growth_tracker(),
                         loss=loss.item(), weight=model.weight.detach().flatten().tolist(),
                         bias=model.bias.detach().tolist()))
    state = scaler.state_dict()

    def vec(t):
        return "{" + ", ".join(repr(float(v)) for v in (t.flatten().tolist() if hasattr(t, "flatten") else t)) + "}"

    def val(v):
        return {math.inf: "kInf", -math.inf: "-kInf"}.get(v, "kNaN" if v != v else repr(v))

    out = [f"// Generated by test/reference/grad_scaler.py from PyTorch {torch.__version__}: do not edit.",
           f"constexpr double kRefInitScale = {INIT_SCALE!r}, kRefGrowth = {GROWTH!r}, kRefBackoff = {BACKOFF!r};",
           f"constexpr int64_t kRefInterval = {INTERVAL};",
           f"constexpr double kRefLr = {LR!r}, kRefMomentum = {MOMENTUM!r};",
           f"constexpr int64_t kRefN = {N}, kRefIn = {IN}, kRefOut = {OUT};",
           f"const std::vector<double> kRefX = {vec(x)};",
           f"const std::vector<double> kRefY = {vec(y)};",
           f"const std::vector<double> kRefW0 = {vec(w0)};",
           f"const std::vector<double> kRefB0 = {vec(b0)};",
           f"// state_dict() after the last step",
           f"constexpr double kRefFinalScale = {state['scale']!r};",
           f"constexpr int64_t kRefFinalTracker = {state['_growth_tracker']};",
           "// {step, inject {param (-1: none), flat index, value}, explicit unscale, update(new_scale) (0: update()),",
           "//  scale before, stepped, scale after, growth tracker after, loss (unscaled), weight, bias}",
           "const RefStep kRefSteps[] = {"]
    for r in rows:
        inj = r["inject"] or (-1, 0, 0.0)
        out.append(f"    {{{r['step']}, {{{inj[0]}, {inj[1]}, {val(inj[2])}}}, {str(r['unscale']).lower()}, "
                   f"{r['new_scale']!r}, {r['scale_before']!r}, {str(r['stepped']).lower()}, {r['scale_after']!r}, "
                   f"{r['tracker']}, {r['loss']!r},\n     {vec(r['weight'])},\n     {vec(r['bias'])}}},")
    out.append("};")
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "grad_scaler.inc")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    for r in rows:
        print(r["step"], r["inject"], "unscale" if r["unscale"] else "", r["scale_before"], "->", r["scale_after"],
              "stepped" if r["stepped"] else "SKIPPED", "tracker", r["tracker"])
    print("wrote", path)


if __name__ == "__main__":
    main()
