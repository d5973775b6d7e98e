#!/usr/bin/python3
"""Reference values for test/test_rnn.cpp from PyTorch (Debian's python3-torch, 1.13).

For every recurrent mode (RNN tanh, RNN relu, GRU, LSTM) and every combination of
bias, batch_first, bidirectional, num_layers (1, 2), a given or absent h0 (c0) and
unsorted variable lengths (through pack_padded_sequence(enforce_sorted=False)) it
stores the inputs, the parameters under PyTorch's names, the outputs and the
gradients of loss = sum(output * gy) + sum(h_n * gh) (+ sum(c_n * gc)) with respect to
the input, the initial states and every parameter; also unbatched inputs and the cells.
Everything is computed in float64 from values representable in float32, so the f32
path is checked against exact values and the f64 path to rounding.

    /usr/bin/python3 test/reference/gen_rnn_reference.py   # writes test/reference/rnn_*.safetensors
"""
import os

import torch

from safetensors_write import save_safetensors

T, B, I, H = 5, 3, 4, 3
LENGTHS = [3, 5, 1]  # unsorted; one full-length sequence, one of a single step
HERE = os.path.dirname(os.path.abspath(__file__))
MODES = {"rnn_tanh": ("RNN", "tanh"), "rnn_relu": ("RNN", "relu"), "gru": ("GRU", None), "lstm": ("LSTM", None)}


def rnd(*shape):  # float64 values exactly representable in float32
    return torch.randn(*shape).float().double()


def make_module(mode, **kw):
    cls, nonlin = MODES[mode]
    m = getattr(torch.nn, cls)(I, H, **kw, **({"nonlinearity": nonlin} if nonlin else {}))
    m = m.double()
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(rnd(*p.shape) * 0.5)
    return m


def run_case(out, key, mode, bias, batch_first, bidirectional, layers, with_h0, with_lengths, unbatched=False):
    lstm = mode == "lstm"
    D = 2 if bidirectional else 1
    m = make_module(mode, num_layers=layers, bias=bias, batch_first=batch_first, bidirectional=bidirectional)
    if unbatched:
        x = rnd(T, I)
        sshape = (layers * D, H)
    else:
        x = rnd(B, T, I) if batch_first else rnd(T, B, I)
        sshape = (layers * D, B, H)
    x.requires_grad_()
    h0 = rnd(*sshape).requires_grad_() if with_h0 else None
    c0 = rnd(*sshape).requires_grad_() if with_h0 and lstm else None
    state = None
    if with_h0:
        state = (h0, c0) if lstm else h0
    if with_lengths:
        lengths = torch.tensor(LENGTHS, dtype=torch.int64)
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=batch_first, enforce_sorted=False)
        y, hn = m(packed, state)
        y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, batch_first=batch_first, total_length=T)
        out[key + ".lengths"] = lengths
    else:
        y, hn = m(x, state)
    h_n, c_n = hn if lstm else (hn, None)
    gy, gh = rnd(*y.shape), rnd(*h_n.shape)
    loss = (y * gy).sum() + (h_n * gh).sum()
    if lstm:
        gc = rnd(*c_n.shape)
        loss = loss + (c_n * gc).sum()
        out[key + ".gc"] = gc
        out[key + ".c_n"] = c_n
    loss.backward()
    out[key + ".x"] = x
    out[key + ".gy"] = gy
    out[key + ".gh"] = gh
    out[key + ".y"] = y
    out[key + ".h_n"] = h_n
    out[key + ".grad.x"] = x.grad
    if with_h0:
        out[key + ".h0"] = h0
        out[key + ".grad.h0"] = h0.grad
        if lstm:
            out[key + ".c0"] = c0
            out[key + ".grad.c0"] = c0.grad
    for name, p in m.named_parameters():
        out[key + ".p." + name] = p
        out[key + ".grad." + name] = p.grad


def run_cell(out, key, mode, bias, batched, with_h):
    cls, nonlin = MODES[mode]
    m = getattr(torch.nn, cls + "Cell")(I, H, bias=bias, **({"nonlinearity": nonlin} if nonlin else {})).double()
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(rnd(*p.shape) * 0.5)
    x = (rnd(B, I) if batched else rnd(I)).requires_grad_()
    sshape = (B, H) if batched else (H,)
    h = rnd(*sshape).requires_grad_() if with_h else None
    c = rnd(*sshape).requires_grad_() if with_h and mode == "lstm" else None
    if mode == "lstm":
        h1, c1 = m(x, (h, c) if with_h else None)
    else:
        h1, c1 = m(x, h), None
    gh = rnd(*h1.shape)
    loss = (h1 * gh).sum()
    out[key + ".gh"] = gh
    if c1 is not None:
        gc = rnd(*c1.shape)
        loss = loss + (c1 * gc).sum()
        out[key + ".gc"] = gc
        out[key + ".c1"] = c1
    loss.backward()
    out[key + ".x"] = x
    out[key + ".h1"] = h1
    out[key + ".grad.x"] = x.grad
    if with_h:
        out[key + ".h"] = h
        out[key + ".grad.h"] = h.grad
        if c is not None:
            out[key + ".c"] = c
            out[key + ".grad.c"] = c.grad
    for name, p in m.named_parameters():
        out[key + ".p." + name] = p
        out[key + ".grad." + name] = p.grad


def main():
    for mode in MODES:
        torch.manual_seed(1234)
        out = {}
        for bias in (1, 0):
            for bf in (0, 1):
                for bi in (0, 1):
                    for layers in (1, 2):
                        for h0 in (0, 1):
                            for ln in (0, 1):
                                key = f"b{bias}_bf{bf}_bi{bi}_l{layers}_h{h0}_len{ln}"
                                run_case(out, key, mode, bool(bias), bool(bf), bool(bi), layers, bool(h0), bool(ln))
        for bi in (0, 1):
            run_case(out, f"unbatched_bi{bi}", mode, True, False, bool(bi), 2, True, False, unbatched=True)
        for bias in (1, 0):
            for batched in (1, 0):
                for with_h in (1, 0):
                    run_cell(out, f"cell_b{bias}_batched{batched}_h{with_h}", mode, bool(bias), bool(batched), bool(with_h))
        save_safetensors(os.path.join(HERE, f"rnn_{mode}.safetensors"), out)
        print(mode, len(out), "tensors")


if __name__ == "__main__":
    main()
