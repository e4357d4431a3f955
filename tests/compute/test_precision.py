"""The split-precision arithmetic emulated in numpy, and the precision gate it is held to (SPEC section 3).

These run without triton or a GPU: ``compute/precision.py`` is numpy only. The kernel's own
arithmetic is checked against this emulation in ``test_philox_triton.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from whestbench.compute import precision as prec
from whestbench.compute.mlp import weights_for_seed
import precision_emulation as emu  # tests/precision_emulation.py


def test_round_tf32_keeps_ten_mantissa_bits_ties_to_even():
    one = np.float32(1.0)
    ulp = np.float32(2.0**-10)  # tf32 spacing at 1
    x = np.array([1 + 2.0**-11, 1 + 3 * 2.0**-11, 1 + 2.0**-11 + 2.0**-20, -(1 + 3 * 2.0**-11)], dtype=np.float32)
    want = np.array([one, one + 2 * ulp, one + ulp, -(one + 2 * ulp)], dtype=np.float32)
    assert np.array_equal(emu.round_tf32(x), want)


def test_round_fp16_is_numpys_float16_conversion():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(200_000) * np.exp(rng.uniform(-25, 10, 200_000))).astype(np.float32)
    x = x[np.abs(x) < 60_000]  # subnormal to large fp16 values
    assert np.array_equal(emu.round_fp16(x), x.astype(np.float16).astype(np.float32))


@pytest.mark.parametrize("precision", ["3xtf32", "4xtf32", "3xfp16", "4xfp16"])
def test_a_split_keeps_about_22_bits_of_each_operand(precision):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 256)).astype(np.float32)
    b = (rng.standard_normal((256, 256)) * np.sqrt(2 / 256)).astype(np.float32)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    err = np.abs(emu.emulate_matmul(a, b, precision) - exact) / scale
    assert err.max() < 2.0**-19  # fp32 accumulation over K=256 dominates; one bf16 pass is ~2**-9


def test_float32_ulps_counts_representable_steps_across_zero():
    one, tiny = np.float32(1.0), np.float32(1e-45)  # tiny: the smallest subnormal
    a = np.array([one, one, 0.0, -0.0, tiny, np.float32(2.0)], dtype=np.float32)
    b = np.array([np.nextafter(one, np.float32(2)), np.nextafter(one, np.float32(0)), -0.0, -tiny, -tiny, one])
    assert prec.float32_ulps(a, b.astype(np.float32)).tolist() == [1, 1, 0, 1, 2, 2**23]


def test_gate_figures_are_the_largest_error_and_the_largest_signed_layer_bias():
    rng = np.random.default_rng(5)
    ref = rng.uniform(0.1, 1.0, (3, 8))  # (depth, width) means
    delta = np.zeros((3, 8))
    delta[0, :4], delta[0, 4:] = 2e-6, -2e-6  # a layer whose errors cancel: large, but no bias
    delta[1, 2] = -3e-6  # one neuron off: the largest error, bias = -3e-6 / 8 on its layer
    delta[2] = 5e-7  # a whole layer shifted: bias = 5e-7
    max_abs, max_bias = prec.gate_figures(ref + delta, ref)
    assert max_abs == pytest.approx(3e-6, rel=1e-6)
    assert max_bias == pytest.approx(5e-7, rel=1e-6)  # not 2e-6 (|delta| averaged) nor 3e-6/24 (overall)
    assert prec.gate_figures(ref, ref + delta) == pytest.approx((max_abs, max_bias), rel=1e-12)


def test_the_gate_passes_at_its_thresholds_and_fails_just_above():
    assert prec.gate_passes(prec.GATE_MAX_ABS, prec.GATE_MAX_BIAS)
    assert not prec.gate_passes(prec.GATE_MAX_ABS * 1.01, 0.0)
    assert not prec.gate_passes(0.0, prec.GATE_MAX_BIAS * 1.01)


def _emulated_layer_means(weights: np.ndarray, x: np.ndarray, precision: str, *, chunk: int = 16384) -> np.ndarray:
    """``(depth, width)`` fp64 per-layer means of ``relu`` activations over the rows of ``x``.

    ``precision`` ``"fp64"`` runs the forward pass in fp64 (the gate's reference); anything
    ``emulate_matmul`` takes runs it in float32 with that matmul, summing in fp64 as the kernel does.
    """
    depth = weights.shape[0]
    sums = np.zeros((depth, weights.shape[2]))
    parts = [] if precision == "fp64" else [emu.split_weights(w, precision) for w in weights]
    for r0 in range(0, x.shape[0], chunk):
        if precision == "fp64":
            h = np.asarray(x[r0 : r0 + chunk], dtype=np.float64)
            for layer in range(depth):
                h = np.maximum(h @ weights[layer].astype(np.float64), 0.0)
                sums[layer] += h.sum(axis=0)
        else:
            h = np.asarray(x[r0 : r0 + chunk], dtype=np.float32)
            for layer in range(depth):
                h = np.maximum(emu.emulate_matmul(h, parts[layer], precision), np.float32(0.0))
                sums[layer] += h.sum(axis=0, dtype=np.float64)
    return sums / x.shape[0]


def _gate(width, depth, n, precision, seed=12345):
    weights = weights_for_seed(seed, width, depth)
    x = np.random.default_rng(1).standard_normal((n, width), dtype=np.float32)  # identical samples for both
    reference = _emulated_layer_means(weights, x, "fp64")
    return prec.gate_figures(_emulated_layer_means(weights, x, precision), reference)


def test_one_bf16_pass_fails_the_gate():
    # The gate has teeth: a single bf16 pass is off by ~1e-2 (SPEC section 3 measured 8e-3).
    max_abs, _ = _gate(256, 8, 1 << 12, "bf16")
    assert max_abs > 100 * prec.GATE_MAX_ABS


@pytest.mark.slow  # ~30 s on a 2-core machine: the gate at its first shape, N = 2**16
def test_the_default_split_passes_the_gate_at_256x8():
    max_abs, max_bias = _gate(256, 8, 1 << 16, prec.DEFAULT_PRECISION)
    assert max_abs <= prec.GATE_MAX_ABS and max_bias <= prec.GATE_MAX_BIAS, (max_abs, max_bias)


@pytest.mark.slow
def test_the_default_split_passes_the_gate_at_1024x16():
    max_abs, max_bias = _gate(1024, 16, 1 << 16, prec.DEFAULT_PRECISION)
    assert max_abs <= prec.GATE_MAX_ABS and max_bias <= prec.GATE_MAX_BIAS, (max_abs, max_bias)


