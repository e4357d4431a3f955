"""Fused elementwise passes compiled with numba: ReLU in place plus fp64 column sums in one sweep.

The reference spends ~40% of a layer on ``maximum``, a float64 copy and ``sum``; one pass over the
float32 activations does the same arithmetic in the same order: for each column j the chunk sum is
``((x[0,j] + x[1,j]) + x[2,j]) + ...`` in float64, which is what numpy's axis-0 reduction of a
C-contiguous array computes. ``nogil`` lets one worker thread per core run these concurrently.

Importing this module imports numba (~0.3 s): ``pcg64`` imports it only for bakes big enough to
gain from it (``pcg64.fused_pays``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from whestbench.compute.jit import ensure_cache_dir

ensure_cache_dir()


@njit(nogil=True, cache=True, fastmath=False)
def relu_colsum_sq(x, out, out_sq, out_pre_sq=None):  # pragma: no cover - compiled
    """``x`` (n, w) float32, ReLU applied in place; ``out`` (w,) float64 <- column sums of this chunk,
    ``out_sq`` (w,) float64 <- column sums of float64(x)**2; with ``out_pre_sq`` (w,) float64 also the
    column sums of float64(x)**2 taken before the ReLU (the control-variate estimator's z₂², in the
    same sweep). numba compiles the two forms apart, the ``None`` one without its branches."""
    n, w = x.shape
    for j in range(w):
        out[j] = 0.0
        out_sq[j] = 0.0
        if out_pre_sq is not None:
            out_pre_sq[j] = 0.0
    for i in range(n):
        for j in range(w):
            v = x[i, j]
            if out_pre_sq is not None:
                p = np.float64(v)
                out_pre_sq[j] += p * p
            if v < 0.0:
                v = np.float32(0.0)
                x[i, j] = v
            d = np.float64(v)
            out[j] += d
            out_sq[j] += d * d


def load_kernels() -> None:
    """Compile (or load from numba's cache) the kernels for the arguments ``pcg64`` passes: a C-
    contiguous (n, w) float32 chunk and (w,) float64 sums."""
    x = np.zeros((1, 2), dtype=np.float32)
    out, out_sq = np.zeros(2), np.zeros(2)
    relu_colsum_sq(x, out, out_sq)
    relu_colsum_sq(x, out, out_sq, np.zeros(2))
