#!/usr/bin/python3
"""Fits the two polynomials of cpu/vmath.h's f32 erf/erfc and prints their coefficients:

  erf(a) / a = P(a^2)                 on [0, 0.9], degree 6 in a^2
  erfc(a) e^(a^2) a = Q(1/a - 0.5972)  for a in [0.9, 12], degree 11, centred (f32 Horner
                                       on uncentred coefficients loses 6 ulp to cancellation)

Near-minimax relative error by iteratively reweighted least squares on Chebyshev nodes
(numpy only), then the worst relative error of f32 Horner evaluation with the coefficients
rounded to f32. test/test_vmath.cpp checks the resulting functions over dense sweeps.
    /usr/bin/python3 test/reference/fit_erf.py
"""
from math import erf, erfc, exp, sqrt, pi

import numpy as np


def irls(V, f):
    w = 1 / np.abs(f)
    c = np.linalg.lstsq(V * w[:, None], f * w, rcond=None)[0]
    for _ in range(40):
        r = np.abs((V @ c - f) / f)
        w = w * (1 + 20 * r / np.max(r))
        c = np.linalg.lstsq(V * w[:, None], f * w, rcond=None)[0]
    return c


def horner32(c, t):
    c32 = np.array(c, dtype=np.float32)
    t = t.astype(np.float32)
    p = np.full_like(t, c32[-1])
    for k in c32[-2::-1]:
        p = (p * t + k).astype(np.float32)
    return p.astype(np.float64)


def nodes(lo, hi, n=3000):
    return (np.cos(np.linspace(0, np.pi, n)) + 1) / 2 * (hi - lo) + lo


def main():
    t = nodes(0, 0.81)
    f = np.array([erf(sqrt(v)) / sqrt(v) if v > 0 else 2 / sqrt(pi) for v in t])
    ca = irls(np.vander(t, 7, increasing=True), f)
    xs = np.linspace(1e-4, 0.9, 100001).astype(np.float32).astype(np.float64)
    ref = np.array([erf(v) / v for v in xs])
    print("P (a^0 first): relative error %.3g" % np.max(np.abs(horner32(ca, (xs * xs).astype(np.float32)) - ref) / ref))
    print("  " + ", ".join("%.9ef" % v for v in np.float32(ca)))

    lo, hi = 1 / 12, 1 / 0.9
    mid = float(np.float32((lo + hi) / 2))
    u = nodes(lo, hi)
    f = np.array([erfc(1 / v) * exp(1 / v ** 2) / v for v in u])
    cb = irls(np.vander(u - mid, 12, increasing=True), f)
    us = np.linspace(lo, hi, 100001).astype(np.float32).astype(np.float64)
    ref = np.array([erfc(1 / v) * exp(1 / v ** 2) / v for v in us])
    s = (us.astype(np.float32) - np.float32(mid)).astype(np.float32)
    print("Q (s^0 first, s = 1/a - %.9ef): relative error %.3g" % (mid, np.max(np.abs(horner32(cb, s) - ref) / ref)))
    print("  " + ", ".join("%.9ef" % v for v in np.float32(cb)))


if __name__ == "__main__":
    main()
