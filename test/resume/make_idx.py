#!/usr/bin/env python3
"""Writes a small Fashion-MNIST-shaped data set (gzipped IDX files, the names and format of
Debian's dataset-fashion-mnist) into DIR: N_TRAIN and N_TEST 28x28 images whose label is
which quarter of the image is brightest, so that a model can learn it.
Usage: make_idx.py DIR N_TRAIN N_TEST"""
import gzip
import random
import struct
import sys


def write(path, magic, dims, payload):
    with gzip.open(path, "wb") as f:
        f.write(struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims) + payload)


def make(n, rng):
    images, labels = bytearray(), bytearray()
    for _ in range(n):
        label = rng.randrange(4)
        img = [rng.randrange(64) for _ in range(784)]
        for r in range(14):
            for c in range(14):
                img[(r + 14 * (label // 2)) * 28 + c + 14 * (label % 2)] += 128
        images += bytes(img)
        labels.append(label)
    return bytes(images), bytes(labels)


def main():
    out, n_train, n_test = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(7)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        images, labels = make(n, rng)
        write(f"{out}/{prefix}-images-idx3-ubyte.gz", 0x803, (n, 28, 28), images)
        write(f"{out}/{prefix}-labels-idx1-ubyte.gz", 0x801, (n,), labels)


main()
