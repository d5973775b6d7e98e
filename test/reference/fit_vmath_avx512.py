#!/usr/bin/python3
"""Prints the constants of cpu/vmath_avx512.h:

  ln x's tables: 32 cells over m in [0.75, 1.5) indexed by the top 5 fraction bits of m's
  f32 pattern (16 cells of width 1/64 in [0.75, 1), 16 of width 1/32 in [1, 1.5)); each
  cell stores 1/c rounded to f32 and -ln(that f32) as hi + lo. The cells touching 1 use
  c = 1, so ln x near 1 is the series in r = m / c - 1 alone.

  e^r on |r| <= ln 2 / 2 (exp's polynomial): 1 + r + r^2 (c2 + ... + c6 r^4), minimax
  relative error.

  ln(1 + e) = e Q(e - 1/2) on [0, 1], degree 8 (softplus): near-minimax relative error by
  iteratively reweighted least squares on Chebyshev nodes (numpy only), then the worst
  f32 Horner error in ulp.

  erf(a) on [0, 4), 32 cells of width 1/8, degree 4 in s = 8a - (cell + 1/2): absolute
  error 7e-9 (erf's values there are >= 0.79 where it is used, a >= 0.9), near-minimax
  by reweighted least squares.

tanh(a) / a on [0, 9), 32 cells centred on i / 3.5 (i = 0..31), degree 5 in
  s = 3.5 a - i in [-1/2, 1/2], near-minimax relative error, the constant term in two
  floats (hi last): tanh x = x times that.

Phi(-a) e^(a^2 / 2) = erfc(a / sqrt 2) e^(a^2 / 2) / 2 for a in [0, 14.82) (gelu's tail
  Phi(-|x|) = e^(-x^2 / 2) times it): 32 cells centred on i / 2.125, degree 6 in
  s = 2.125 a - i, near-minimax relative error.

Phi(-a) = erfc(a / sqrt 2) / 2 for a in [0, 6) (gelu's forward without an exponential):
  32 cells centred on i / 5.25, degree 6 in s = 5.25 a - i, near-minimax relative error.

test/test_vmath.cpp checks the resulting functions over dense sweeps.
    /usr/bin/python3 test/reference/fit_vmath_avx512.py
"""
from math import erf, erfc, exp, log, log1p, sqrt, tanh

import numpy as np


def log_tables():
    inv, hi, lo = [], [], []
    for i in range(32):
        if i < 16:
            c = 1.0 if i == 0 else 1 + (i + 0.5) / 32
        else:
            c = 1.0 if i == 31 else (1 + (i + 0.5) / 32) / 2
        ic = np.float32(1 / c)
        v = -log(float(ic))
        h = np.float32(v)
        inv.append(ic)
        hi.append(h)
        lo.append(np.float32(v - float(h)))
    for name, t in (("kLogInvC", inv), ("kLogCHi", hi), ("kLogCLo", lo)):
        s = ["%.9ef" % x for x in t]
        rows = ",\n    ".join(", ".join(s[i:i + 4]) for i in range(0, 32, 4))
        print("alignas(64) inline constexpr float %s[32] = {\n    %s};" % (name, rows))


def irls(V, f):
    w = 1 / np.abs(f)
    c = np.linalg.lstsq(V * w[:, None], f * w, rcond=None)[0]
    for _ in range(60):
        r = np.abs((V @ c - f) / f)
        w = w * (1 + 20 * r / np.max(r))
        c = np.linalg.lstsq(V * w[:, None], f * w, rcond=None)[0]
    return c


def log1p_poly(deg=8):
    k = np.arange(4000)
    t = np.cos(np.pi * (k + 0.5) / 4000) * 0.5 + 0.5
    f = np.array([log1p(x) / x for x in t])
    V = np.vander(t - 0.5, deg + 1, increasing=True)
    c = irls(V, f)
    xs = np.linspace(1e-6, 1, 200001).astype(np.float32)
    c32 = c.astype(np.float32)
    s = (xs - np.float32(0.5)).astype(np.float32)
    q = np.float32(c32[-1])
    for cc in c32[-2::-1]:
        q = (q * s + cc).astype(np.float32)
    got = (q * xs).astype(np.float32).astype(np.float64)
    want = np.log1p(xs.astype(np.float64))
    ulp = np.abs(got - want) / np.spacing(want.astype(np.float32)).astype(np.float64)
    print("// ln(1 + e) / e, degree %d in e - 1/2, highest first; fit %.2e relative, f32 Horner %.2f ulp"
          % (deg, np.max(np.abs(V @ c - f) / f), ulp.max()))
    print(", ".join("%.10ef" % x for x in c[::-1]))


def exp_poly(deg=6):
    """e^r = 1 + r + r^2 (c2 + ... + c_deg r^(deg-2)) on |r| <= ln 2 / 2, minimax relative
    to e^r by reweighted least squares"""
    r = log(2) / 2 * np.cos(np.pi * (np.arange(4000) + 0.5) / 4000)
    f = np.exp(r)
    V = np.vander(r, deg + 1, increasing=True)[:, 2:]
    w = 1 / f
    for _ in range(80):
        c = np.linalg.lstsq(V * w[:, None], (f - 1 - r) * w, rcond=None)[0]
        e = np.abs((V @ c - (f - 1 - r)) / f)
        w = w * (1 + 20 * e / e.max())
    c32 = c.astype(np.float32)
    print("// e^r: c%d .. c2; fit %.2e relative with the f32 coefficients"
          % (deg, np.max(np.abs((V @ c32.astype(np.float64) - (f - 1 - r)) / f))))
    print(", ".join("%.10ef" % x for x in c32[::-1]))


def cell_table(name, fn, deg, per_unit, relative, centred=False, split_constant=False):
    """32 cells of width 1/per_unit from 0, a polynomial of degree deg in s = per_unit a -
    (cell + 1/2) each, near-minimax (relative or absolute error); printed highest first.
    centred: cell i is centred on i / per_unit instead, s = per_unit a - i.
    split_constant: the constant term as two rows, its f32 value last and the rest before it"""
    centre = 0.0 if centred else 0.5
    coef = np.zeros((deg + 1, 32))
    worst = 0
    k = np.arange(200)
    s = np.cos(np.pi * (k + 0.5) / 200) * 0.5
    V = np.vander(s, deg + 1, increasing=True)
    for i in range(32):
        f = np.array([fn(x) for x in (i + centre + s) / per_unit])
        w = 1 / f if relative else np.ones_like(f)
        c = np.linalg.lstsq(V * w[:, None], f * w, rcond=None)[0]
        for _ in range(30):
            r = np.abs((V @ c - f) * (1 / f if relative else 1))
            w = w * (1 + 20 * r / max(r.max(), 1e-300))
            c = np.linalg.lstsq(V * w[:, None], f * w, rcond=None)[0]
        worst = max(worst, np.max(np.abs((V @ c - f) * (1 / f if relative else 1))))
        coef[:, i] = c
    print("// degree %d per cell, highest first; fit %.2e %s" % (deg, worst, "relative" if relative else "absolute"))
    rows = [coef[d].astype(np.float32) for d in range(deg, -1, -1)]
    if split_constant:
        rows.insert(-1, (coef[0] - rows[-1].astype(np.float64)).astype(np.float32))
    print("alignas(64) inline constexpr float %s[%d][32] = {" % (name, len(rows)))
    for row in rows:
        s32 = ["%.9ef" % x for x in row]
        print("    {" + ",\n     ".join(", ".join(s32[i:i + 4]) for i in range(0, 32, 4)) + "},")
    print("};")


if __name__ == "__main__":
    log_tables()
    log1p_poly()
    exp_poly()
    cell_table("kErf", erf, 4, 8.0, False)
    cell_table("kTanhOverX", lambda a: tanh(a) / a, 5, 3.5, True, centred=True, split_constant=True)
    cell_table("kPhiTailOverPdf", lambda a: 0.5 * erfc(a / sqrt(2)) * exp(a * a / 2), 6, 2.125, True, centred=True)
    cell_table("kPhiTail", lambda a: 0.5 * erfc(a / sqrt(2)), 6, 5.25, True, centred=True)
