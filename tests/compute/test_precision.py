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
    assert emu.float32_ulps(a, b.astype(np.float32)).tolist() == [1, 1, 0, 1, 2, 2**23]


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


def _gate(width, depth, n, precision, seed=12345, model="nearest"):
    weights = weights_for_seed(seed, width, depth)
    x = np.random.default_rng(1).standard_normal((n, width), dtype=np.float32)  # identical samples for both
    reference = emu.layer_means(weights, x, "fp64")
    return prec.gate_figures(emu.layer_means(weights, x, precision, model), reference)


def test_one_bf16_pass_fails_the_gate():
    # The gate has teeth: a single bf16 pass is off by ~1e-2 (SPEC section 3 measured 8e-3).
    max_abs, _ = _gate(256, 8, 1 << 12, "bf16")
    assert max_abs > 100 * prec.GATE_MAX_ABS


@pytest.mark.slow  # ~30 s on a 2-core machine: the gate at its first shape, N = 2**16
def test_the_4xfp16_split_passes_the_gate_at_256x8_with_round_to_nearest():
    max_abs, max_bias = _gate(256, 8, 1 << 16, "4xfp16")
    assert max_abs <= prec.GATE_MAX_ABS and max_bias <= prec.GATE_MAX_BIAS, (max_abs, max_bias)


@pytest.mark.slow
def test_the_4xfp16_split_passes_the_gate_at_1024x16_with_round_to_nearest():
    max_abs, max_bias = _gate(1024, 16, 1 << 16, "4xfp16")
    assert max_abs <= prec.GATE_MAX_ABS and max_bias <= prec.GATE_MAX_BIAS, (max_abs, max_bias)


# --- the tensor cores' accumulator (tests/precision_emulation.py, "the hardware model") -----------


def test_a_tensor_core_step_truncates_every_term_to_two_bits_below_the_largest():
    one = np.float32(1.0)
    c = np.zeros((1, 1), dtype=np.float32)
    # 1 + 2**-25 keeps its last bit (two extra bits below 1's 24-bit significand); 2**-26 is shifted out
    a = np.array([[1.0, 2.0**-25, 2.0**-26]], dtype=np.float32)
    b = np.ones((3, 1), dtype=np.float32)
    got = emu.tc_block_fma(c, a, b)
    assert got[0, 0] == one  # 1 + 2**-25 rounded toward zero (round-to-nearest-even also gives 1 here)
    # toward zero, not to nearest: 1 + 2**-23 + 2**-24 + 2**-25 -> 1 + 2**-23 (nearest would give 1 + 2**-22)
    a = np.array([[1.0, 2.0**-23, 2.0**-24, 2.0**-25]], dtype=np.float32)
    assert emu.tc_block_fma(c, a, np.ones((4, 1), np.float32))[0, 0] == np.float32(1 + 2.0**-23)
    # negative sums shrink toward zero as well; the accumulator is aligned like a product
    a = np.array([[-1.0, -(2.0**-23), -(2.0**-24), -(2.0**-25)]], dtype=np.float32)
    assert emu.tc_block_fma(c, a, np.ones((4, 1), np.float32))[0, 0] == np.float32(-(1 + 2.0**-23))
    acc = np.full((1, 1), 2.0**-30, dtype=np.float32)  # far below 2**-25 of the product: dropped
    assert emu.tc_block_fma(acc, np.ones((1, 1), np.float32), np.ones((1, 1), np.float32))[0, 0] == one


def test_the_hardware_model_agrees_with_exact_sums_where_nothing_is_shifted_out():
    rng = np.random.default_rng(3)
    a = rng.integers(-127, 128, (40, 64)).astype(np.float32)  # int8 digits, as fp16 values
    b = rng.integers(-127, 128, (64, 24)).astype(np.float32)
    exact = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.float32)
    got = np.zeros((40, 24), dtype=np.float32)
    for k0 in range(0, 64, emu.TC_BLOCK["fp16"]):
        got = emu.tc_block_fma(got, a[:, k0 : k0 + 16], b[k0 : k0 + 16])
    assert np.array_equal(got, exact)  # integer sums below 2**24: every bit is kept


SPLITS = ["3xtf32", "4xtf32", "3xfp16", "4xfp16"]


@pytest.mark.parametrize("precision", SPLITS)
def test_the_splits_pass_the_gate_with_round_to_nearest_and_fail_under_the_hardware_model(precision):
    # The H200 run (docs/gpu.md): every split failed the gate, biased low, while the interpreter passed
    # them. Under the H100 tensor-core model the emulation fails them the same way (~95 % of the means
    # below the fp64 value; 8e-6 for fp16, 4e-5 for tf32 at 256x8), with round-to-nearest it passes them.
    # Identical samples, so few rows suffice: the deviation is arithmetic, not Monte-Carlo noise.
    weights = weights_for_seed(12345, 256, 8)
    x = np.random.default_rng(1).standard_normal((128, 256), dtype=np.float32)
    reference = emu.layer_means(weights, x, "fp64")
    near = prec.gate_figures(emu.layer_means(weights, x, precision, "nearest"), reference)
    hard_means = emu.layer_means(weights, x, precision, "hardware")
    hard = prec.gate_figures(hard_means, reference)
    assert prec.gate_passes(*near), near
    assert not prec.gate_passes(*hard) and hard[0] > 5 * prec.GATE_MAX_ABS, hard
    assert np.mean(hard_means < reference) > 0.9  # biased low: every step shrinks |acc|
    assert precision in prec.WITHDRAWN_PRECISIONS


def test_a_withdrawn_split_is_refused_in_one_line_naming_the_replacement():
    for precision in prec.WITHDRAWN_PRECISIONS:
        with pytest.raises(ValueError, match=rf"^precision {precision} is withdrawn: .*; use the integer kernel \(--gpu-kernel ozaki") as info:
            prec.check_offered(precision)
        assert "\n" not in str(info.value)
    assert prec.check_offered(prec.DEFAULT_PRECISION) == prec.DEFAULT_PRECISION
    assert set(prec.OFFERED_PRECISIONS) | set(prec.WITHDRAWN_PRECISIONS) == set(prec.PRECISIONS)


