#!/usr/bin/python3
# Reference values for test/test_ops15.cpp from PyTorch 1.13 (Debian's python3-torch):
# every case stores its inputs and PyTorch's outputs, and the C++ test runs the same
# call in reel on those inputs. Run from the repository root:
#   /usr/bin/python3 test/reference/ops15.py    (writes test/reference/ops15.txt)
# Format, one tensor a line: <case> <name> <dtype> <rank> <dims...> <values...>
import math
import torch
import torch.nn.functional as F

torch.manual_seed(15)
cases = []


def case(name, inputs, outputs):
    cases.append((name, inputs, outputs))


def u(*shape, dtype=torch.float32):  # distinct values, no ties
    return (torch.rand(*shape, dtype=torch.float64) * 4 - 2).to(dtype)


# ---- masks and triangles, creation
x = u(3, 4); m = torch.rand(3, 4) > 0.5
case("masked_fill", {"x": x, "mask": m}, {"y": x.masked_fill(m, -1.5)})
x = u(2, 3, 4); m = torch.rand(3, 4) > 0.5
case("masked_fill_bcast", {"x": x, "mask": m}, {"y": x.masked_fill(m, float("-inf"))})
x = u(4, 5)
case("tril", {"x": x}, {"y0": torch.tril(x), "y1": torch.tril(x, 1), "ym1": torch.tril(x, -1)})
case("triu", {"x": x}, {"y0": torch.triu(x), "y1": torch.triu(x, 1), "ym2": torch.triu(x, -2)})
x = u(2, 3, 3)
case("tril_batched", {"x": x}, {"y": torch.tril(x), "u": torch.triu(x, 1)})
case("linspace", {}, {"a": torch.linspace(0, 1, 7), "b": torch.linspace(-2, 3.5, 10), "c": torch.linspace(3, 3, 1),
                      "d": torch.linspace(5, -1, 4, dtype=torch.float64)})
case("eye", {}, {"a": torch.eye(3), "b": torch.eye(2, 4), "c": torch.eye(4, 2, dtype=torch.float64)})
case("full", {}, {"a": torch.full((2, 3), 2.5), "b": torch.arange(0, 1, 0.25), "c": torch.arange(5)})

# ---- chunk and split
x = u(7, 3)
ch = torch.chunk(x, 3, 0)
case("chunk", {"x": x}, {f"c{i}": c for i, c in enumerate(ch)})
sp = torch.split(x, [2, 5], 0)
case("split_sizes", {"x": x}, {f"s{i}": c for i, c in enumerate(sp)})

# ---- sorting, selection
x = u(4, 10)
v, i = torch.topk(x, 3)
case("topk", {"x": x}, {"v": v, "i": i})
v, i = torch.topk(x, 2, dim=0, largest=False)
case("topk_smallest_dim0", {"x": x}, {"v": v, "i": i})
x = u(4, 6)
v, i = torch.max(x, 1)
v2, i2 = torch.min(x, 0, keepdim=True)
case("max_min", {"x": x}, {"maxv": v, "maxi": i, "minv": v2, "mini": i2})
x = u(3, 8)
v, i = torch.sort(x)
vd, idd = torch.sort(x, dim=0, descending=True)
case("sort", {"x": x}, {"v": v, "i": i, "vd": vd, "id": idd, "arg": torch.argsort(x, dim=1, descending=True)})
x = torch.tensor([1.0, float("nan"), -1.0, 3.0, float("-inf")])
v, i = torch.sort(x, stable=True)
vd, idd = torch.sort(x, descending=True, stable=True)
case("sort_nan", {"x": x}, {"v": v, "i": i, "vd": vd, "id": idd})
x = torch.tensor([[2.0, 1.0, 2.0, 1.0, 2.0]])
v, i = torch.sort(x, stable=True)
vd, idd = torch.sort(x, descending=True, stable=True)
case("sort_ties", {"x": x}, {"v": v, "i": i, "vd": vd, "id": idd})

# ---- statistics and norms
x = u(3, 5)
xm = x.clone(); xm[1] = float("-inf")
case("logsumexp", {"x": x, "xm": xm}, {"a": torch.logsumexp(x, 1), "b": torch.logsumexp(x, (0, 1)),
                                        "k": torch.logsumexp(x, 0, keepdim=True), "m": torch.logsumexp(xm, 1)})
x = u(4, 5)
case("std", {"x": x}, {"a": torch.std(x, 1), "b": torch.std(x), "c": torch.std(x, 0, correction=0, keepdim=True)})
x = u(3, 4)
case("norm", {"x": x}, {"p1": torch.linalg.vector_norm(x, 1, dim=1), "p2": torch.norm(x, 2, dim=1),
                        "inf": torch.linalg.vector_norm(x, math.inf, dim=0), "fro": torch.norm(x, "fro"),
                        "p3": torch.linalg.vector_norm(x, 3, dim=1, keepdim=True),
                        "ninf": torch.linalg.vector_norm(x, -math.inf, dim=1), "p0": torch.linalg.vector_norm(x, 0)})
x = u(3, 4)
case("normalize", {"x": x}, {"a": F.normalize(x), "b": F.normalize(x, p=1, dim=0)})
a = u(4, 5); b = u(4, 5); c = u(5)
case("cosine_similarity", {"a": a, "b": b, "c": c},
     {"ab": F.cosine_similarity(a, b), "ac": F.cosine_similarity(a, c, dim=-1), "ab0": F.cosine_similarity(a, b, 0)})

# ---- scans
x = u(3, 4)
xz = x.clone(); xz[0, 1] = 0; xz[2, 0] = 0; xz[2, 3] = 0
case("cumsum", {"x": x}, {"a": torch.cumsum(x, 1), "b": torch.cumsum(x, 0)})
case("cumprod", {"x": x, "xz": xz}, {"a": torch.cumprod(x, 1), "b": torch.cumprod(x, 0), "z": torch.cumprod(xz, 1)})

# ---- tests of values
x = torch.tensor([float("nan"), float("inf"), float("-inf"), 1.5, -0.0, 0.0])
case("isnan_isinf", {"x": x}, {"nan": torch.isnan(x), "inf": torch.isinf(x), "fin": torch.isfinite(x),
                               "n2n": torch.nan_to_num(x), "n2n_args": torch.nan_to_num(x, 1.0, 2.0, -3.0)})
x = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [2.0, 3.0, -1.0]])
case("any_all", {"x": x}, {"any1": torch.any(x, 1), "all1": torch.all(x, 1), "any": torch.any(x), "all": torch.all(x),
                           "all0k": torch.all(x, 0, keepdim=True)})

# ---- clamping, lerp, products
x = u(3, 4); y = u(3, 4); w = torch.rand(3, 4)
case("clamp_lerp", {"x": x, "y": y, "w": w}, {"cmin": torch.clamp_min(x, 0.25), "cmax": torch.clamp_max(x, -0.5),
                                              "ls": torch.lerp(x, y, 0.3), "lt": torch.lerp(x, y, w)})
a = u(3); b = u(4); i2 = u(2, 4); m1 = u(2, 3); m2 = u(3, 4)
bi = u(2, 2, 4); b1 = u(2, 2, 3); b2 = u(2, 3, 4)
case("products", {"a": a, "b": b, "i2": i2, "m1": m1, "m2": m2, "bi": bi, "b1": b1, "b2": b2},
     {"outer": torch.outer(a, b), "addmm": torch.addmm(i2, m1, m2, beta=0.5, alpha=2.0),
      "addmm_row": torch.addmm(b, m1, m2), "baddbmm": torch.baddbmm(bi, b1, b2, beta=2.0, alpha=-1.0)})

# ---- einsum
p = u(3, 4); q = u(4, 5); r = u(5, 2); bp = u(2, 3, 4); bq = u(2, 4, 5); v3 = u(3); v4 = u(4)
att_q = u(2, 3, 4, 5); att_k = u(2, 3, 6, 5); e1 = u(1, 3, 4)
case("einsum", {"p": p, "q": q, "r": r, "bp": bp, "bq": bq, "v3": v3, "v4": v4, "aq": att_q, "ak": att_k, "e1": e1},
     {"mm": torch.einsum("ij,jk->ik", p, q), "bmm": torch.einsum("bij,bjk->bik", bp, bq),
      "t": torch.einsum("ij->ji", p), "all": torch.einsum("ij->", p), "outer": torch.einsum("i,j->ij", v3, v4),
      "implicit": torch.einsum("ij,jk", p, q), "chain": torch.einsum("ij,jk,kl->il", p, q, r),
      "ell": torch.einsum("...ij,...jk->...ik", e1, bq), "att": torch.einsum("bhqd,bhkd->bhqk", att_q, att_k),
      "rowsum": torch.einsum("ij->i", p), "upper": torch.einsum("bA", p), "dot": torch.einsum("i,i->", v4, v4), "mv": torch.einsum("ij,j->i", p, v4)})

# ---- repeat, tile, flip, roll
x = u(2, 3)
case("repeat_flip_roll", {"x": x}, {"rep": x.repeat(2, 1, 3), "tile": torch.tile(x, (2,)), "flip": torch.flip(x, (0, 1)),
                                    "flip1": torch.flip(x, (1,)), "roll": torch.roll(x, (1, -2), (0, 1)),
                                    "rollflat": torch.roll(x, 4)})

# ---- scatter family
x = u(3, 5)
perm = torch.stack([torch.randperm(3)[:2] for _ in range(5)], 1)  # [2, 5], distinct rows per column
src = u(2, 5)
dup = torch.tensor([[0, 1, 2, 0, 1], [0, 1, 2, 0, 2], [2, 2, 2, 1, 1]])
src3 = u(3, 5)
ia = torch.tensor([0, 4, 4, 2])
srca = u(3, 4)
case("scatter", {"x": x, "perm": perm, "src": src, "dup": dup, "src3": src3, "ia": ia, "srca": srca},
     {"sc": torch.scatter(x, 0, perm, src), "scv": torch.scatter(x, 1, dup[:, :2], 7.0),
      "sa": torch.scatter_add(x, 0, dup, src3), "ia": torch.index_add(x, 1, ia, srca, alpha=2.0)})
x = u(4, 3, 2)
r0 = torch.tensor([0, 2, 2, 3]); r1 = torch.tensor([1, 0, 0, 2]); vals = u(4, 2)
rn = torch.tensor([-1, 0]); cn = torch.tensor([[1], [2]])
case("index_put", {"x": x, "r0": r0, "r1": r1, "vals": vals, "rn": rn, "cn": cn},
     {"acc": x.index_put((r0, r1), vals, accumulate=True),
      "set": x.index_put((torch.tensor([0, 2, 3]), torch.tensor([1, 0, 2])), vals[:3]),
      "bc": x.index_put((rn, cn), torch.tensor(9.0))})

# ---- padding and resampling
x = u(1, 2, 3, 4)
case("pad", {"x": x}, {"c": F.pad(x, (1, 2), value=0.5), "c2": F.pad(x, (1, 1, 2, 0)), "crop": F.pad(x, (-1, 1, 0, -1)),
                       "refl": F.pad(x, (2, 1, 1, 2), mode="reflect"), "rep": F.pad(x, (2, 3, 1, 0), mode="replicate"),
                       "circ": F.pad(x, (1, 2, 3, 1), mode="circular")})
x1 = u(1, 2, 5); x2 = u(1, 2, 3, 4)
case("interpolate", {"x1": x1, "x2": x2},
     {"n_size": F.interpolate(x1, size=7), "n_scale": F.interpolate(x1, scale_factor=1.5),
      "n2": F.interpolate(x2, scale_factor=2), "n2_size": F.interpolate(x2, size=(5, 3)),
      "lin": F.interpolate(x1, scale_factor=2.5, mode="linear"),
      "lin_ac": F.interpolate(x1, size=8, mode="linear", align_corners=True),
      "bil": F.interpolate(x2, size=(5, 7), mode="bilinear"),
      "bil_ac": F.interpolate(x2, size=(5, 7), mode="bilinear", align_corners=True),
      "bil_down": F.interpolate(x2, size=(2, 3), mode="bilinear")})

# ---- 1-d convolution and pooling, transposed convolution
x = u(2, 4, 9); w = u(6, 2, 3); b = u(6)
case("conv1d", {"x": x, "w": w, "b": b}, {"y": F.conv1d(x, w, b, stride=2, padding=1, groups=2),
                                          "yd": F.conv1d(x, w[:, :2].repeat(1, 2, 1), None, dilation=2)})
x = u(2, 4, 5, 5); w = u(4, 3, 3, 3); b = u(3); wg = u(4, 2, 3, 3)
case("conv_transpose2d", {"x": x, "w": w, "b": b, "wg": wg},
     {"y": F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
      "yg": F.conv_transpose2d(x, wg, None, stride=(1, 2), padding=(0, 1), groups=2),
      "yd": F.conv_transpose2d(x, w, None, dilation=2, padding=1)})
x = u(2, 3, 10)
case("pool1d", {"x": x}, {"max": F.max_pool1d(x, 3, 2, 1), "avg": F.avg_pool1d(x, 3, 2, 1),
                          "avg_nopad": F.avg_pool1d(x, 3, 2, 1, count_include_pad=False),
                          "max_default": F.max_pool1d(x, 2), "ada": F.adaptive_avg_pool1d(x, 4)})

# ---- write
names = {torch.float32: "f32", torch.float64: "f64", torch.int64: "i64", torch.bool: "bool"}
with open("test/reference/ops15.txt", "w") as f:
    f.write("# generated by test/reference/ops15.py from PyTorch " + torch.__version__ + "; do not edit\n")
    for name, inputs, outputs in cases:
        for key, t in list(inputs.items()) + [("=" + k, v) for k, v in outputs.items()]:
            t = t.contiguous()
            vals = t.flatten().tolist()
            if t.dtype == torch.bool:
                vals = [int(v) for v in vals]
            elif t.dtype in (torch.float32, torch.float64):
                vals = [(("%.9g" % v) if t.dtype == torch.float32 else repr(float(v))) if math.isfinite(v) else ("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf"))
                        for v in vals]
            f.write(" ".join([name, key, names[t.dtype], str(t.dim())] + [str(s) for s in t.shape] + [str(v) for v in vals]) + "\n")
print(f"{len(cases)} cases")
