#!/usr/bin/python3
"""The coefficients of kernels/cpu/vmath-avx2.c's erf8, fitted here (numpy's Chebyshev least
squares on 6000 Chebyshev nodes, in double, then rounded to float):

  below T:  Q(u) = erf(sqrt u) / sqrt u - 1 on u in [0, T^2], degree D1 in u
  from T:   L(s) = log erfc(T + s) on s in [0, 3.93 - T], degree D2 in s; its constant term is
            also printed as float + the rest (ERF_L0_LO), which the kernel adds back

    /usr/bin/python3 tools/fit-erf.py [T D1 D2]     (default 1.125 7 10: the kernel's)

Needs numpy (Debian's python3-numpy). Check any change with the test sweep
(build/test-kernels -p /kernels/vmath) and, better, over every float in [0, 4.5)."""
import math
import sys

import numpy as np
from numpy.polynomial import chebyshev as C
from numpy.polynomial import polynomial as P

HI = 3.93  # erf(3.93) rounds to 1.0f


def fit_power(f, lo, hi, deg):
    """f on [lo, hi] as a power series in (x - lo), from a Chebyshev fit."""
    k = np.arange(6000)
    t = np.cos(np.pi * (k + 0.5) / 6000)
    mid, half = (lo + hi) / 2, (hi - lo) / 2
    c = C.chebfit(t, f(mid + half * t), deg)
    pt = C.cheb2poly(c)  # in t = (s + lo - mid) / half
    base = np.array([(lo - mid) / half, 1 / half])
    res, term = np.zeros(1), np.array([1.0])
    for a in pt:
        res = P.polyadd(res, a * term)
        term = P.polymul(term, base)
    return res


def main():
    T, d1, d2 = (float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) == 4 else (1.125, 7, 10)
    erf, erfc = np.vectorize(math.erf), np.vectorize(math.erfc)

    def q(u):
        r = np.sqrt(np.maximum(u, 1e-300))
        return np.where(u > 0, erf(r) / r, 2 / math.sqrt(math.pi)) - 1

    qc = fit_power(q, 0.0, T * T, d1)
    lc = fit_power(lambda a: np.log(erfc(a)), T, HI, d2)
    print("#define ERF_T %.9gf" % T)
    print("#define ERF_L0_LO %.9ef" % (lc[0] - np.float64(np.float32(lc[0]))))
    print("q[] = {%s};" % ", ".join("%.9ef" % np.float32(c) for c in qc))
    print("l[] = {%s};" % ", ".join("%.9ef" % np.float32(c) for c in lc))


if __name__ == "__main__":
    main()
