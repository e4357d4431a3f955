"""The fused kernel's precisions and the precision gate (SPEC section 3).

The fused GPU kernel (``philox/triton_kernel.py``) multiplies float32 operands split into parts of 11
significant bits on tensor cores (``FP16_LO_SCALE`` scales the fp16 low parts); the tests' numpy
emulation of those splits is ``tests/precision_emulation.py``.

The gate: on identical samples, a fast arithmetic's per-layer means may differ from an fp64-matmul
reference by at most ``GATE_MAX_ABS`` per neuron and ``GATE_MAX_BIAS`` per layer (mean over its
neurons). At N = 1e9 the Monte-Carlo standard error of a mean is ~2.5e-5, so the gate keeps the
arithmetic's bias below 1/25 of it. Every user of the thresholds (tests, ``verify --against``,
benchmarks) reads them from here.
"""

from __future__ import annotations

import numpy as np

PRECISIONS = ("ieee", "3xtf32", "4xtf32", "3xfp16", "4xfp16")
"""Every arithmetic the fused kernel can compile (the tests and the emulation run them all)."""
WITHDRAWN_PRECISIONS = ("3xtf32", "4xtf32", "3xfp16", "4xfp16")
"""Splits no longer offered: they pass the gate with round-to-nearest accumulation but fail it under the
H100 tensor-core accumulator model (truncating, rounding toward zero; tests/precision_emulation.py), as
they failed on an H200 (docs/gpu-kernel.md)."""
OFFERED_PRECISIONS = tuple(p for p in PRECISIONS if p not in WITHDRAWN_PRECISIONS)
DEFAULT_PRECISION = "ieee"  # fp32 FMAs, rounded to nearest: the only fused-kernel precision still offered
REPLACEMENT = "the integer kernel (--gpu-kernel ozaki, compute/philox/ozaki.py)"
FP16_LO_SCALE = 4096.0  # 2**12: keeps the fp16 low part of a residual out of the subnormal range

EPS32 = 2.0**-24  # float32 rounding, relative (the unit roundoff)
GATE_MAX_ABS = 1e-6  # max over layers and neurons of |mean - fp64 mean|
GATE_MAX_BIAS = 1e-7  # max over layers of |mean over neurons of (mean - fp64 mean)|
GATE_VAR_RTOL = 1e-5  # avg_variance under the gate (verify --against): sums of squares carry the same
# ~1e-6 relative arithmetic error as means
SEGMENT_GATE_ULPS = 2  # an audit segment's value against one regenerated in another precision class:
SEGMENT_VAR_RTOL = 1e-4  # GATE_MAX_ABS plus 2 float32 ulps of the value; a segment's variance, rtol 1e-4
# (a segment holds 1/32 of the samples, so its variance carries more of the arithmetic's rounding)


# --- the precision gate (SPEC section 3) ---------------------------------------------------------


def check_offered(precision: str) -> str:
    """``precision`` if the fused kernel still offers it; else ValueError, one line naming the replacement."""
    if precision in WITHDRAWN_PRECISIONS:
        raise ValueError(f"precision {precision} is withdrawn: its split fails the precision gate under the H100 "
                         f"tensor-core accumulator model (docs/gpu-kernel.md); use {REPLACEMENT}.")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(OFFERED_PRECISIONS)}; got {precision!r}.")
    return precision


def gate_figures(means: np.ndarray, reference: np.ndarray) -> tuple[float, float]:
    """``(max |delta|, max over layers of |mean over neurons of delta|)`` for ``(depth, width)`` means."""
    delta = np.asarray(means, dtype=np.float64) - np.asarray(reference, dtype=np.float64)
    return float(np.max(np.abs(delta))), float(np.max(np.abs(delta.mean(axis=1))))


def gate_passes(max_abs: float, max_bias: float) -> bool:
    return max_abs <= GATE_MAX_ABS and max_bias <= GATE_MAX_BIAS
