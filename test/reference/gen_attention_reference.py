#!/usr/bin/python3
"""Reference values for test/test_attention_modules.cpp: nn.MultiheadAttention and
nn.TransformerEncoderLayer of PyTorch 1.13 (Debian's python3-torch), f64, with their
weights, inputs, masks (as 0/1 f64), outputs, attention weights and the gradients of
sum(output * ramp) for the input and a few parameters. Writes attention_ref.safetensors
beside this file. Run: /usr/bin/python3 test/reference/gen_attention_reference.py
"""
import os

import torch

from gen_rnn_reference import save_safetensors

HERE = os.path.dirname(os.path.abspath(__file__))
torch.manual_seed(20)
out = {}


def ramp(shape):
    n = 1
    for s in shape:
        n *= s
    return (torch.arange(n, dtype=torch.float64) + 1).reshape(shape) / 16


def leaf(*shape):
    return torch.randn(*shape, dtype=torch.float64).requires_grad_()


def put_module(prefix, m):
    for name, t in m.state_dict().items():
        out[f"{prefix}.{name}"] = t.double()


def put_grads(prefix, y, named):
    gs = torch.autograd.grad((y * ramp(y.shape)).sum(), [t for _, t in named])
    for (name, _), g in zip(named, gs):
        out[f"{prefix}.grad.{name}"] = g


# mha_a: self-attention, [L, B, E], a bool key padding mask and a float attn_mask
mha = torch.nn.MultiheadAttention(8, 2).double()
for p in mha.parameters():  # non-zero biases, so that their names and roles are checked
    torch.nn.init.normal_(p, std=0.3) if p.dim() == 1 else None
x = leaf(5, 3, 8)
kpm = torch.tensor([[0, 0, 0, 1, 1], [0, 0, 0, 0, 0], [0, 1, 0, 0, 1]], dtype=torch.bool)
am = torch.randn(5, 5, dtype=torch.float64)
y, w = mha(x, x, x, key_padding_mask=kpm, attn_mask=am, need_weights=True)
put_module("mha_a", mha)
out.update({"mha_a.x": x.detach(), "mha_a.kpm": kpm.double(), "mha_a.am": am, "mha_a.y": y.detach(),
            "mha_a.w": w.detach()})
put_grads("mha_a", y, [("x", x), ("in_proj_weight", mha.in_proj_weight), ("out_proj.bias", mha.out_proj.bias)])

# mha_b: cross-attention, batch_first, key != value, a bool [B H, L, S] mask, per-head weights
mha = torch.nn.MultiheadAttention(8, 2, batch_first=True).double()
for p in mha.parameters():
    torch.nn.init.normal_(p, std=0.3) if p.dim() == 1 else None
q, k, v = leaf(2, 4, 8), leaf(2, 6, 8), leaf(2, 6, 8)
am = torch.rand(4, 4, 6) > 0.6
am[..., 0] = False  # every query keeps a key
y, w = mha(q, k, v, attn_mask=am, need_weights=True, average_attn_weights=False)
put_module("mha_b", mha)
out.update({"mha_b.q": q.detach(), "mha_b.k": k.detach(), "mha_b.v": v.detach(), "mha_b.am": am.double(),
            "mha_b.y": y.detach(), "mha_b.w": w.detach()})
put_grads("mha_b", y, [("q", q), ("k", k), ("v", v)])

# enc_post: post-norm, relu, batch_first, a key padding mask
enc = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True).double()
for name, p in enc.named_parameters():
    if name.endswith("bias") or name.startswith("norm"):
        torch.nn.init.normal_(p, mean=1.0 if name.endswith("weight") else 0.0, std=0.3)
x = leaf(2, 5, 8)
kpm = torch.tensor([[0, 0, 0, 0, 1], [0, 0, 1, 0, 0]], dtype=torch.bool)
y = enc(x, src_key_padding_mask=kpm)
put_module("enc_post", enc)
out.update({"enc_post.x": x.detach(), "enc_post.kpm": kpm.double(), "enc_post.y": y.detach()})
put_grads("enc_post", y, [("x", x), ("linear1.weight", enc.linear1.weight), ("norm1.weight", enc.norm1.weight)])

# enc_pre: pre-norm (norm_first), gelu, [T, B, E], a causal bool src_mask
enc = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, activation="gelu",
                                       norm_first=True).double()
for name, p in enc.named_parameters():
    if name.endswith("bias") or name.startswith("norm"):
        torch.nn.init.normal_(p, mean=1.0 if name.endswith("weight") else 0.0, std=0.3)
x = leaf(6, 2, 8)
causal = torch.triu(torch.ones(6, 6, dtype=torch.bool), diagonal=1)
y = enc(x, src_mask=causal)
put_module("enc_pre", enc)
out.update({"enc_pre.x": x.detach(), "enc_pre.y": y.detach()})
put_grads("enc_pre", y, [("x", x), ("self_attn.in_proj_weight", enc.self_attn.in_proj_weight)])

save_safetensors(os.path.join(HERE, "attention_ref.safetensors"), out)
print(f"wrote {len(out)} tensors")
