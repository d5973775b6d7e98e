"""Reads a log written by write_events with TensorBoard's own EventAccumulator and
checks every value against expected.json (the exact inputs). Usage: check_events.py LOGDIR"""
import json
import os
import struct
import sys
import zlib

import numpy as np
from tensorboard.backend.event_processing import event_accumulator as ea


def load(path):
    # size_guidance 0: keep every event (the default reservoirs drop some)
    acc = ea.EventAccumulator(path, size_guidance={k: 0 for k in (ea.SCALARS, ea.HISTOGRAMS, ea.IMAGES, ea.TENSORS)})
    acc.Reload()
    return acc


def decode_png(data):
    """The pixels of an 8-bit, filter-0, non-interlaced PNG (what reel writes) as [H, W, C]."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        crc, = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        assert crc == zlib.crc32(kind + body), f"bad CRC in {kind}"
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, colour, _, _, interlace = ihdr
    assert depth == 8 and interlace == 0
    c = {0: 1, 4: 2, 2: 3, 6: 4}[colour]
    raw = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(h, w * c + 1)
    assert (raw[:, 0] == 0).all(), "expected filter 0 on every row"
    return raw[:, 1:].reshape(h, w, c)


def main():
    logdir = sys.argv[1]
    with open(os.path.join(logdir, "expected.json")) as f:
        exp = json.load(f)
    acc = load(logdir)
    tags = acc.Tags()
    assert sorted(tags["scalars"]) == ["loss/train"], tags
    assert sorted(tags["histograms"]) == ["constant", "fc.weight"], tags
    assert sorted(tags["images"]) == ["grey", "rgb"], tags
    assert sorted(tags["tensors"]) == ["notes"], tags

    want = np.array(exp["scalars"], np.float32)  # simple_value is a float32
    got = acc.Scalars("loss/train")
    assert [e.step for e in got] == list(range(len(want))), [e.step for e in got]
    assert np.array_equal(np.array([e.value for e in got], np.float32), want)
    s = np.array(exp["scalars"])
    for folder, tag, values in (("loss_train", "loss", s), ("loss_test", "loss", 2 * s), ("acc_top1_train", "acc/top1", 1 - s)):
        sub = load(os.path.join(logdir, folder))
        assert sub.Tags()["scalars"] == [tag], (folder, sub.Tags())
        vals = sub.Scalars(tag)
        assert np.array_equal(np.array([e.value for e in vals], np.float32), np.array(values, np.float32)), folder
    assert sorted(d for d in os.listdir(logdir) if os.path.isdir(os.path.join(logdir, d))) == \
        ["acc_top1_train", "loss_test", "loss_train"]

    for tag, values, bins, step in (("fc.weight", np.array(exp["histogram"]), 20, 3),
                                    ("constant", np.full(10, 0.25), 5, 4)):
        h, = acc.Histograms(tag)
        hv = h.histogram_value
        counts, edges = np.histogram(values, bins=bins)
        assert h.step == step
        assert hv.min == values.min() and hv.max == values.max() and hv.num == values.size, (tag, hv)
        assert np.isclose(hv.sum, values.sum(), rtol=1e-12) and np.isclose(hv.sum_squares, (values ** 2).sum(), rtol=1e-12)
        assert list(hv.bucket_limit) == list(edges[1:]), (tag, list(hv.bucket_limit), list(edges[1:]))
        assert list(hv.bucket) == list(counts.astype(float)), (tag, list(hv.bucket), list(counts))

    rgb, = acc.Images("rgb")
    want = np.clip(np.rint(np.array(exp["rgb"]) * 255), 0, 255).astype(np.uint8).reshape(5, 7, 3)
    assert (rgb.step, rgb.width, rgb.height) == (5, 7, 5)
    assert np.array_equal(decode_png(rgb.encoded_image_string), want)
    grey, = acc.Images("grey")
    assert (grey.step, grey.width, grey.height) == (6, 4, 3)
    assert np.array_equal(decode_png(grey.encoded_image_string),
                          np.array(exp["grey"], np.uint8).reshape(3, 4, 1))

    text, = acc.Tensors("notes")
    assert text.step == 7
    assert list(text.tensor_proto.string_val) == [b"reel **writes** this"], text.tensor_proto
    assert acc.SummaryMetadata("notes").plugin_data.plugin_name == "text"
    print(f"tensorboard {__import__('tensorboard').__version__} read back {len(got)} scalars, "
          "2 histograms, 2 images and a text exactly")


if __name__ == "__main__":
    main()
