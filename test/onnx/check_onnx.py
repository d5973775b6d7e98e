"""Checks the models export_models wrote: the ONNX checker (full_check: shape inference
too) passes, and onnxruntime's CPU provider gives reel's outputs within 1e-5 on a batch
size other than the exported one. Usage: check_onnx.py DIR"""
import json
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort

DTYPES = {"f32": np.float32, "f64": np.float64, "i64": np.int64, "i32": np.int32}


def main():
    d = sys.argv[1]
    with open(os.path.join(d, "manifest.json")) as f:
        cases = json.load(f)
    assert len(cases) == 11, cases
    worst = 0.0
    for c in cases:
        path = os.path.join(d, c["name"] + ".onnx")
        model = onnx.load(path)
        onnx.checker.check_model(model, full_check=True)
        x = np.fromfile(os.path.join(d, c["name"] + ".input.bin"), DTYPES[c["input_dtype"]]).reshape(c["input_shape"])
        want = np.fromfile(os.path.join(d, c["name"] + ".output.bin"), np.float32).reshape(c["output_shape"])
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        assert sess.get_inputs()[0].shape[0] == "batch", sess.get_inputs()[0].shape
        got, = sess.run(None, {sess.get_inputs()[0].name: x})
        assert got.shape == want.shape, (c["name"], got.shape, want.shape)
        err = float(np.max(np.abs(got - want) / (1 + np.abs(want))))
        worst = max(worst, err)
        ops = sorted({n.op_type for n in model.graph.node})
        print(f"{c['name']:12} max |ort - reel| / (1 + |reel|) = {err:.2e}  ops: {', '.join(ops)}")
        assert err <= 1e-5, f"{c['name']}: onnxruntime differs from reel by {err:.3g}"
    print(f"onnx {onnx.__version__}, onnxruntime {ort.__version__}: {len(cases)} models agree within {worst:.2e}")


if __name__ == "__main__":
    main()
