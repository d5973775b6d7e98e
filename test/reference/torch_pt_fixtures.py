#!/usr/bin/python3
"""Writes the torch.save fixtures of test/test_torch_pt.cpp and, beside each, what Python
reads back from it (the table the test compares reel's reader against).

    /usr/bin/python3 test/reference/torch_pt_fixtures.py test/reference/torch_pt 113
    /work/venv-torch2/bin/python test/reference/torch_pt_fixtures.py test/reference/torch_pt 2

OUT/<case>_<tag>.pt is written by this PyTorch; OUT/<case>_<tag>.txt holds, one a line,
  T <name> <reel dtype> <rank> <dims...> <values...>   every tensor torch.load gives back
  V <name> <kind> <value>                             every plain leaf (str: UTF-8 in hex)
  S <name> <name>                                     two tensors that share a storage
with names as torch_pt names them (dict keys and list indices joined by '.').
Files reel must refuse (legacy format, TorchScript, complex, code in the pickle) have no table.
"""
import collections
import io
import math
import os
import pickle
import sys
import zipfile

import torch

REEL_DTYPE = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
              torch.int64: "i64", torch.int32: "i32", torch.int16: "i32", torch.int8: "i32",
              torch.uint8: "u8", torch.bool: "bool"}


def number(x):
    if isinstance(x, bool):
        return str(int(x))
    if isinstance(x, int):
        return str(x)
    return "nan" if math.isnan(x) else repr(float(x))


def is_storage(v):
    return torch.is_storage(v) or type(v).__name__ in ("TypedStorage", "UntypedStorage")


def storage_tensor(s):
    """A storage saved by itself reads as a 1-D tensor of its elements (bytes when untyped)."""
    if type(s).__name__ == "UntypedStorage":
        return torch.tensor(list(s), dtype=torch.uint8)
    return torch.tensor(list(s), dtype=s.dtype)


def storage_ptr(t):
    return t.untyped_storage().data_ptr() if hasattr(t, "untyped_storage") else t.storage().data_ptr()


def table(obj):
    lines, tensors = [], []

    def walk(v, path):
        def child(k):
            return str(k) if path == "" else path + "." + str(k)
        if isinstance(v, dict):
            for k, x in v.items():
                walk(x, child(k))
        elif isinstance(v, (list, tuple)):
            for i, x in enumerate(v):
                walk(x, child(i))
        elif isinstance(v, torch.Tensor) or is_storage(v):
            t = storage_tensor(v) if is_storage(v) else v.detach()
            vals = t.to(torch.float64 if t.is_floating_point() else torch.int64).flatten().tolist()
            lines.append(" ".join(["T", path, REEL_DTYPE[t.dtype], str(t.dim())] + [str(s) for s in t.shape] +
                                  [number(x) for x in vals]))
            tensors.append((path, t))
        elif v is None:
            lines.append(f"V {path} None -")
        elif isinstance(v, bool):
            lines.append(f"V {path} bool {int(v)}")
        elif isinstance(v, int):
            lines.append(f"V {path} int {v}")
        elif isinstance(v, float):
            lines.append(f"V {path} float {number(v)}")
        elif isinstance(v, str):
            lines.append(f"V {path} str {v.encode().hex() or '-'}")
        else:
            raise TypeError(type(v))
    walk(obj, "")
    for i, (a, ta) in enumerate(tensors):
        for b, tb in tensors[i + 1:]:
            if ta.numel() and tb.numel() and storage_ptr(ta) == storage_ptr(tb):
                lines.append(f"S {a} {b}")
    return "\n".join(lines) + "\n"


def every_dtype():
    f = torch.tensor([0.0, -0.0, 1.5, -2.25, 3.4028234663852886e38, 1e-45, 1e-40, float("inf"),
                      float("-inf"), float("nan"), 0.1, 65504.0])
    d = torch.tensor([0.1, -1e300, 5e-324, math.pi, float("inf"), float("nan")], dtype=torch.float64)
    return collections.OrderedDict([
        ("f32", f.reshape(3, 4)),
        ("f64", d),
        ("f16", torch.tensor([0.0, -0.0, 1.0, 65504.0, 6e-8, -3.5, float("inf"), float("nan")]).half()),
        ("bf16", torch.tensor([1.0, -2.5, 3e38, 1e-38, 0.1, float("-inf")]).bfloat16().reshape(2, 3)),
        ("i64", torch.tensor([0, -1, 2**62, -2**63, 2**63 - 1, 7])),
        ("i32", torch.tensor([[0, -2**31], [2**31 - 1, 5]], dtype=torch.int32)),
        ("i16", torch.tensor([0, -32768, 32767, -5], dtype=torch.int16)),
        ("i8", torch.tensor([0, -128, 127, -1], dtype=torch.int8)),
        ("u8", torch.tensor([0, 255, 128, 1], dtype=torch.uint8)),
        ("bool", torch.tensor([True, False, True], dtype=torch.bool)),
        ("scalar", torch.tensor(2.5)),
        ("empty", torch.zeros(0, 3)),
    ])


def views():
    torch.manual_seed(1)
    base = torch.randn(4, 6)
    w = torch.nn.Parameter(torch.randn(3, 5))
    return {
        "base": base,
        "transposed": base.t(),               # strides (1, 6), same storage as base
        "sliced": base[1:3, ::2],             # offset 6, strides (6, 2)
        "row": base[2],                        # offset 12
        "expanded": torch.arange(3.0).expand(4, 3),  # stride 0
        "permuted": torch.randn(2, 3, 4).permute(2, 0, 1),
        "tied": [w, w],                        # one Parameter twice (the memo)
        "half_view": torch.arange(10, dtype=torch.float16)[3:8],
        "long_narrow": torch.arange(20).reshape(4, 5)[:, 1:4],
        "storage": torch.tensor([1.5, -2.0, 3.25]).storage(),  # a typed storage saved by itself
    }


def views_untyped():
    d = views()
    if hasattr(torch.Tensor, "untyped_storage"):  # PyTorch 2.x: an untyped storage saved by itself (bytes)
        d["untyped"] = torch.tensor([1, 258], dtype=torch.int16).untyped_storage()
    return d


def nested():
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    return {
        "model": model.state_dict(),           # an OrderedDict with _metadata
        "optimizer": opt.state_dict(),         # int keys, lists, None, floats, bools
        "epoch": 7, "lr": 0.1, "best": -1.5e-300, "name": "résumé ✓", "empty_name": "",
        "flags": [True, False, None], "shape": (2, 3), "big": 2**62, "neg": -2**40,
        "small": -129, "byte": 200, "word": 40000, "history": [1.5, -2.25, float("inf")],
        "nothing": {}, "inner": {"deep": {"deeper": [torch.ones(2), (3, "x")]}},
    }


def linear():
    torch.manual_seed(3)
    return torch.nn.Linear(4, 3).state_dict()


def refused(out, tag):
    """Files reel must refuse, each with the reason its message names."""
    torch.save({"w": torch.ones(2)}, f"{out}/legacy_{tag}.pt", _use_new_zipfile_serialization=False)
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), f"{out}/script_{tag}.pt")
    torch.save({"c": torch.ones(2, dtype=torch.complex64)}, f"{out}/complex_{tag}.pt")

    # a valid archive whose pickle calls os.system: torch.load (weights_only=False) would run it
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo reel-must-not-run-this",))
    good = io.BytesIO()
    torch.save({"w": torch.ones(2)}, good)
    with zipfile.ZipFile(io.BytesIO(good.getvalue())) as z, zipfile.ZipFile(f"{out}/evil_{tag}.pt", "w") as o:
        for info in z.infolist():
            data = z.read(info.filename)
            if info.filename.endswith("data.pkl"):
                data = pickle.dumps({"w": Evil()}, protocol=2)
            o.writestr(info, data)


def main(out, tag):
    os.makedirs(out, exist_ok=True)
    cases = {"dtypes": every_dtype(), "views": views_untyped(), "nested": nested(), "linear": linear()}
    for name, obj in cases.items():
        torch.save(obj, f"{out}/{name}_{tag}.pt")
        back = torch.load(f"{out}/{name}_{tag}.pt")
        with open(f"{out}/{name}_{tag}.txt", "w") as f:
            f.write(f"# torch {torch.__version__}: test/reference/torch_pt_fixtures.py\n" + table(back))
    # protocol 4: framing, MEMOIZE, SHORT_BINUNICODE, STACK_GLOBAL
    torch.save(cases["nested"], f"{out}/nested_p4_{tag}.pt", pickle_protocol=4)
    refused(out, tag)
    print(f"torch {torch.__version__}: wrote {out}/*_{tag}.pt")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
