"""compute/estimators.py: the plain and control-variate estimators, held to independent computations.

- plain: ``sqrt(s²/N)`` from the fp64 sums of squares equals the sample standard deviation of the
  activations themselves (regenerated here from the samplers' inputs), on both samplers, every layer;
- the exact pieces (layer-1 means, the arc-cosine kernel, ``E z₂²``) agree with large Monte-Carlo
  estimates, and the controls have mean zero on samples the pilot never saw;
- control-variate: the samplers' ``cv``/``cvsq`` rows give exactly the batch-means estimate
  computed from per-sample residuals ``y − φ·B``, batch by batch (pcg64 chunks, philox batches);
- the torch engines' extra row (layer 2's squared pre-activations) matches the numpy reference.

The statistical properties of whole bakes (unbiased, honest standard errors, invariance) are in
``tests/bake/test_error_bars.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from whestbench.compute.philox import spec as philox
from whestbench.compute.estimators import (
    CHECK_SPAN,
    CV_BATCH,
    Controls,
    finalize_estimates,
    fit_controls,
    is_check_point,
    layer1_means,
    n_batches,
    relu_second_moments,
)
from whestbench.compute.mlp import weights_for_seed
from whestbench.compute.pcg64 import Pcg64Stream, chunk_rows, sample_layer_sums
from whestbench.compute.seeds import PILOT, spawn_streams, stream
from whestbench.compute.stats import LayerSums
from philox_reference import sample_layer_sums_philox  # tests/philox_reference.py

SEED = 2024


# --- helpers: the activations themselves, regenerated from the samplers' inputs --------------------


def forward(weights: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(y (n, depth, w) fp64 post-ReLU activations, z2 (n, w) fp64 layer-2 pre-activations)`` of
    float32 inputs through float32 matmuls, as the samplers run them."""
    ys, z2 = [], np.zeros((x.shape[0], weights.shape[1]))
    h = x
    for layer in range(weights.shape[0]):
        z = h @ weights[layer]
        if layer == 1:
            z2 = z.astype(np.float64)
        h = np.maximum(z, np.float32(0.0))
        ys.append(h.astype(np.float64))
    return np.stack(ys, axis=1), z2


def pcg64_inputs(sample_ss: np.random.SeedSequence, n: int, width: int) -> list[np.ndarray]:
    """The pcg64 sampler's inputs, chunk by chunk (the reference's chunk rule)."""
    rng = np.random.default_rng(sample_ss)
    chunk = chunk_rows(width)
    return [rng.standard_normal((min(chunk, n - s), width), dtype=np.float32) for s in range(0, n, chunk)]


def philox_inputs(key: tuple[int, int], n: int, width: int) -> list[np.ndarray]:
    """The philox sampler's inputs, batch by batch (``CV_BATCH`` samples, the last one ragged)."""
    return [philox.normals(key, s, min(s + CV_BATCH, n), width) for s in range(0, n, CV_BATCH)]


def sample_sd_stderr(y: np.ndarray) -> np.ndarray:
    """``std(ddof=1) / sqrt(N)`` per (layer, neuron): the textbook standard error of a mean."""
    return y.std(axis=0, ddof=1) / math.sqrt(y.shape[0])


def residuals(controls: Controls, y: np.ndarray, z2: np.ndarray) -> np.ndarray:
    """Per-sample ``r = y − φ·B`` (n, depth, w) for layers 2.., layer 1 the exact mean: the
    control-variate estimator as docs/error-bars.md defines it, one sample at a time."""
    n, depth, width = y.shape
    r = np.empty_like(y)
    r[:, 0] = controls.mu1
    if depth > 1:
        phi = np.concatenate([y[:, 0] - controls.mu1, z2**2 - controls.ez2sq], axis=1)  # (n, 2w)
        r[:, 1:] = y[:, 1:] - (phi @ controls.coef).reshape(n, depth - 1, width)
    return r


def batch_means_estimate(batches: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, stderr)`` of the batch-means estimator from per-sample residuals, batch by batch:
    ``mean = Σ n_b r̄_b / N``, ``stderr² = Σ n_b (r̄_b − mean)² / ((b − 1) N)``."""
    counts = np.array([len(r) for r in batches], dtype=np.float64)
    rbar = np.stack([r.mean(axis=0) for r in batches])  # (b, depth, w)
    total = counts.sum()
    mean = np.einsum("b,bij->ij", counts, rbar) / total
    var = np.einsum("b,bij->ij", counts, (rbar - mean) ** 2) / ((len(batches) - 1) * total)
    return mean, np.sqrt(var)


def zscores(samples: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """z of the sample mean of ``samples`` (n, ...) against ``expected``, in its own standard error."""
    se = samples.std(axis=0, ddof=1) / math.sqrt(samples.shape[0])
    return (samples.mean(axis=0) - expected) / se


# --- plain --------------------------------------------------------------------------------------


def test_plain_stderr_is_the_sample_sd_over_sqrt_n_from_the_sums_of_squares():
    rng = np.random.default_rng(1)
    y = np.maximum(rng.standard_normal((5000, 3, 7)) + 0.3, 0.0)  # (n, depth, w)
    s = LayerSums(sums=y.sum(axis=0), sumsq=(y**2).sum(axis=0), count=len(y))
    means, stderr = finalize_estimates(s, "plain")
    np.testing.assert_allclose(means, y.mean(axis=0), rtol=1e-13)
    np.testing.assert_allclose(stderr, sample_sd_stderr(y), rtol=1e-10)


def test_plain_stderr_of_one_sample_is_nan_and_of_a_constant_neuron_zero():
    one = LayerSums(sums=np.ones((2, 3)), sumsq=np.ones((2, 3)), count=1)
    assert np.isnan(finalize_estimates(one, "plain")[1]).all()
    dead = LayerSums(sums=np.zeros((1, 2)), sumsq=np.zeros((1, 2)), count=100)
    assert finalize_estimates(dead, "plain")[1].tolist() == [[0.0, 0.0]]


@pytest.mark.parametrize("fused", [False, True], ids=["numpy", "fused"])
def test_pcg64_plain_stderr_is_the_sample_sd_of_the_activations_every_layer(fused):
    width, depth, n = 16, 3, chunk_rows(16) + 3001  # a full chunk and a ragged one
    weight_ss, sample_ss, _ = spawn_streams(SEED)
    weights = weights_for_seed(SEED, width, depth)
    y = np.concatenate([forward(weights, x)[0] for x in pcg64_inputs(spawn_streams(SEED)[1], n, width)])
    sums = sample_layer_sums(weights, sample_ss, n, fused=fused)
    np.testing.assert_allclose(sums.sumsq, (y**2).sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(finalize_estimates(sums, "plain")[1], sample_sd_stderr(y), rtol=1e-9)


def test_philox_plain_stderr_is_the_sample_sd_of_the_activations_every_layer():
    width, depth, n = 12, 3, 2 * CV_BATCH + 777
    weights = weights_for_seed(SEED, width, depth)
    sample_ss = spawn_streams(SEED)[1]
    y = np.concatenate([forward(weights, x)[0] for x in philox_inputs(philox.philox_key(sample_ss), n, width)])
    sums = sample_layer_sums_philox(weights, sample_ss, n)
    np.testing.assert_allclose(sums.sumsq, (y**2).sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(finalize_estimates(sums, "plain")[1], sample_sd_stderr(y), rtol=1e-9)


# --- the exact pieces ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gaussian_layer1():
    """A width-12 MLP (one dead layer-1 neuron: a zero weight column) and 2**18 fp64 inputs."""
    w = weights_for_seed(SEED, 12, 2).astype(np.float64)
    w[0][:, 5] = 0.0
    x = np.random.default_rng(7).standard_normal((1 << 18, 12))
    return w, x


def test_layer1_means_are_the_norms_over_sqrt_2pi_and_match_monte_carlo(gaussian_layer1):
    w, x = gaussian_layer1
    exact = layer1_means(w[0])
    np.testing.assert_allclose(exact, np.linalg.norm(w[0], axis=0) / math.sqrt(2 * math.pi), rtol=1e-15)
    y = np.maximum(x @ w[0], 0.0)
    live = exact > 0
    assert exact[5] == 0.0 and not y[:, 5].any()
    z = zscores(y[:, live], exact[live])
    assert np.max(np.abs(z)) < 5 and np.mean(z**2) < 2.5


def test_relu_second_moments_have_the_arc_cosine_kernels_special_values():
    a = np.array([[1.0, 2.0, -1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 3.0, 0.0]])  # columns: u, 2u, -u, 3v, dead
    m = relu_second_moments(a)
    assert m[0, 0] == pytest.approx(0.5)  # E relu(u)² = ‖w‖²/2
    assert m[0, 1] == pytest.approx(1.0)  # parallel: 2·E relu(u)²
    assert m[0, 2] == pytest.approx(0.0, abs=1e-15)  # opposite: never both positive
    assert m[0, 3] == pytest.approx(3.0 / (2 * math.pi))  # orthogonal: independent, E relu = ‖w‖/√(2π)
    assert not m[4].any() and not m[:, 4].any()  # a zero column: 0, not NaN
    np.testing.assert_array_equal(m, m.T)


def test_relu_second_moments_match_monte_carlo(gaussian_layer1):
    w, x = gaussian_layer1
    y = np.maximum(x @ w[0], 0.0)
    exact = relu_second_moments(w[0])
    iu = np.triu_indices(12)
    products = (y[:, :, None] * y[:, None, :])[:, iu[0], iu[1]]  # (n, pairs)
    live = exact[iu] > 0
    z = zscores(products[:, live], exact[iu][live])
    assert np.max(np.abs(z)) < 5.5 and np.mean(z**2) < 2.5


def test_exact_second_moment_of_layer_2_preactivations_matches_monte_carlo(gaussian_layer1):
    w, x = gaussian_layer1
    controls = fit_controls(w.astype(np.float32), stream(SEED, PILOT), n_pilot=2048)
    z2 = np.maximum(x @ w[0].astype(np.float32).astype(np.float64), 0.0) @ w[1].astype(np.float32).astype(np.float64)
    z = zscores(z2**2, controls.ez2sq)
    assert np.max(np.abs(z)) < 5 and np.mean(z**2) < 2.5


def test_the_pilot_stream_is_none_of_the_mlps_three_streams():
    pilot = stream(SEED, PILOT).generate_state(4)
    for ss in spawn_streams(SEED):
        assert not np.array_equal(ss.generate_state(4), pilot)
    assert stream(SEED, PILOT).spawn_key == (3,)


def test_fit_controls_is_deterministic():
    w = weights_for_seed(SEED, 8, 3)
    a, b = fit_controls(w, stream(SEED, PILOT)), fit_controls(w, stream(SEED, PILOT))
    for name in ("mu1", "ez2sq", "coef"):
        assert getattr(a, name).tobytes() == getattr(b, name).tobytes(), name
    assert a.coef.shape == (16, 16) and a.depth == 3


def test_depth_one_controls_give_the_exact_layer_1_and_nothing_else():
    w = weights_for_seed(SEED, 6, 1)
    c = fit_controls(w, stream(SEED, PILOT))
    assert c.depth == 1 and c.coef.size == 0 and c.ez2sq.size == 0
    np.testing.assert_array_equal(c.residual_means(np.zeros((1, 6)), np.zeros(6)), c.mu1[None])


def test_the_controls_have_mean_zero_on_samples_the_pilot_never_saw():
    """``residual_means − ymean = −φ̄·B``: over 400 independent batches its mean is 0 within its
    standard error, every neuron of every layer (unbiased for any fixed ``B``)."""
    width, depth = 8, 4
    w = weights_for_seed(SEED, width, depth)
    controls = fit_controls(w, stream(SEED, PILOT))
    rng = np.random.default_rng(123)
    shifts = []
    for _ in range(400):
        y, z2 = forward(w, rng.standard_normal((512, width), dtype=np.float32))
        ymean = y.mean(axis=0)
        r = controls.residual_means(ymean, (z2**2).mean(axis=0))
        np.testing.assert_array_equal(r[0], controls.mu1)
        shifts.append((r - ymean)[1:])
    shifts = np.array(shifts)  # (batches, depth-1, w)
    moved = shifts.std(axis=0) > 0  # a neuron the pilot never saw active gets no correction: shift 0
    assert moved.mean() > 0.8 and not shifts[:, ~moved].any()
    z = zscores(shifts[:, moved], np.zeros(int(moved.sum())))
    assert np.max(np.abs(z)) < 4.5 and 0.5 < np.mean(z**2) < 1.6


def test_residual_means_of_a_hand_worked_example():
    # width 2, depth 3: φ = (ȳ₁ − μ₁, mean z₂² − E z₂²) = (1, 0.5, 2, 4) for the first batch, so
    # φ·B = (2, 1.5 | 2, 6) and r̄ = ȳ − φ·B = (2, 1.5 | 8, 2) for layers 2 and 3; layer 1 is μ₁.
    # The second batch sits at the controls' exact means (φ = 0): its estimate is its own means.
    controls = Controls(
        mu1=np.array([0.5, 0.25]),
        ez2sq=np.array([2.0, 1.0]),
        coef=np.array([[1.0, 0.0, 0.0, 2.0], [0.0, 1.0, 0.0, 0.0], [0.5, 0.0, 1.0, 0.0], [0.0, 0.25, 0.0, 1.0]]),
    )  # rows: φ; columns: layer 2's neurons, then layer 3's
    ymean = np.array([[[1.5, 0.75], [4.0, 3.0], [10.0, 8.0]], [[0.5, 0.25], [4.0, 3.0], [10.0, 8.0]]])
    z2sq_mean = np.array([[4.0, 5.0], [2.0, 1.0]])
    want = np.array([[[0.5, 0.25], [2.0, 1.5], [8.0, 2.0]], [[0.5, 0.25], [4.0, 3.0], [10.0, 8.0]]])
    assert np.array_equal(controls.residual_means(ymean, z2sq_mean), want)  # every step exact in binary


# --- control variates on the samplers: the batch-means estimate --------------------------------


@pytest.mark.parametrize("fused", [False, True], ids=["numpy", "fused"])
def test_pcg64_control_variate_is_the_batch_means_estimate_over_its_chunks(fused):
    width, depth = 16, 4
    n = 3 * chunk_rows(width) + 1234  # four chunks, the last one ragged
    weights = weights_for_seed(SEED, width, depth)
    controls = fit_controls(weights, stream(SEED, PILOT))
    sums = sample_layer_sums(weights, spawn_streams(SEED)[1], n, fused=fused, controls=controls)
    batches = [residuals(controls, *forward(weights, x)) for x in pcg64_inputs(spawn_streams(SEED)[1], n, width)]
    want_mean, want_se = batch_means_estimate(batches)
    means, stderr = finalize_estimates(sums, "control-variate", n_batches(n, chunk_rows(width)), controls.mu1)
    np.testing.assert_allclose(means, want_mean, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(stderr[1:], want_se[1:], rtol=1e-6)
    assert not stderr[0].any()  # layer 1 is exact


def test_pcg64_control_variate_sums_are_the_same_bits_fused_or_not():
    width, depth, n = 16, 3, 2 * chunk_rows(16) + 9
    weights = weights_for_seed(SEED, width, depth)
    controls = fit_controls(weights, stream(SEED, PILOT))
    a = sample_layer_sums(weights, spawn_streams(SEED)[1], n, fused=True, controls=controls)
    b = sample_layer_sums(weights, spawn_streams(SEED)[1], n, fused=False, controls=controls)
    for name in ("sums", "sumsq", "cv", "cvsq"):
        assert getattr(a, name).tobytes() == getattr(b, name).tobytes(), name


def test_pcg64_stream_resumed_from_its_state_gives_the_same_control_variate_bits():
    width, depth, n = 16, 3, 3 * chunk_rows(16) + 9
    weights = weights_for_seed(SEED, width, depth)
    controls = fit_controls(weights, stream(SEED, PILOT))
    whole = sample_layer_sums(weights, spawn_streams(SEED)[1], n, controls=controls)
    first = Pcg64Stream(weights, spawn_streams(SEED)[1], n, controls=controls)
    first.step()
    later = Pcg64Stream(weights, spawn_streams(SEED)[1], n, controls=controls)
    later.restore(*first.state())
    while not later.done:
        later.step()
    got = later.result()
    for name in ("sums", "sumsq", "cv", "cvsq"):
        assert getattr(got, name).tobytes() == getattr(whole, name).tobytes(), name


def test_philox_control_variate_is_the_batch_means_estimate_over_its_batches():
    width, depth = 12, 4
    n = 5 * CV_BATCH + 321  # a ragged last batch, inside one canonical block
    weights = weights_for_seed(SEED, width, depth)
    controls = fit_controls(weights, stream(SEED, PILOT))
    sample_ss = spawn_streams(SEED)[1]
    sums = sample_layer_sums_philox(weights, sample_ss, n, controls=controls)
    batches = [residuals(controls, *forward(weights, x)) for x in philox_inputs(philox.philox_key(sample_ss), n, width)]
    want_mean, want_se = batch_means_estimate(batches)
    means, stderr = finalize_estimates(sums, "control-variate", n_batches(n, CV_BATCH), controls.mu1)
    np.testing.assert_allclose(means, want_mean, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(stderr[1:], want_se[1:], rtol=1e-6)
    assert not stderr[0].any()


def test_control_variate_stderr_needs_two_batches():
    width, depth = 8, 3
    weights = weights_for_seed(SEED, width, depth)
    controls = fit_controls(weights, stream(SEED, PILOT))
    sums = sample_layer_sums_philox(weights, spawn_streams(SEED)[1], 1000, controls=controls)
    _, stderr = finalize_estimates(sums, "control-variate", 1, controls.mu1)
    assert not stderr[0].any() and np.isnan(stderr[1:]).all()


def test_an_unknown_estimator_is_refused():
    with pytest.raises(ValueError, match="estimator must be one of"):
        finalize_estimates(LayerSums(np.ones((1, 1)), np.ones((1, 1)), 2), "antithetic")


# --- the torch engines' extra row -------------------------------------------------------------


@pytest.mark.parametrize("engine", ["numba", "torch"])
def test_torch_engines_sum_layer_2_preactivations_squared_like_the_reference(engine):
    pytest.importorskip("torch")
    from whestbench.compute.philox.torch_engine import block_batches_torch

    width, depth, n = 12, 3, 3 * CV_BATCH + 50
    seeds = [SEED, SEED + 1]
    weights = np.stack([weights_for_seed(s, width, depth) for s in seeds])
    keys = np.array([philox.philox_key(spawn_streams(s)[1]) for s in seeds], dtype=np.uint32)
    runs = [block_batches_torch(weights, keys, 0, n, "cpu", engine=engine, chunk_size=c) for c in (512, 1 << 16)]
    (raw, counts), (raw_big, counts_big) = runs
    assert raw.tobytes() == raw_big.tobytes() and counts.tolist() == counts_big.tolist()  # the chunk never matters
    for b in range(len(seeds)):
        ref, ref_counts = philox.block_batches(weights[b], (int(keys[b, 0]), int(keys[b, 1])), 0, n)
        assert counts.tolist() == ref_counts.tolist() == [CV_BATCH] * 3 + [50]
        per = ref_counts[:, None, None].astype(np.float64)
        np.testing.assert_allclose(raw[b] / per, ref / per, rtol=1e-6, atol=1e-8)  # sums, squares and z₂²
        assert np.all(raw[b, :, 2 * depth] > 0)


def test_without_z2sq_the_torch_engines_leave_the_extra_row_zero():
    pytest.importorskip("torch")
    from whestbench.compute.philox.torch_engine import block_batches_torch

    weights = weights_for_seed(SEED, 8, 3)[None]
    keys = np.array([philox.philox_key(spawn_streams(SEED)[1])], dtype=np.uint32)
    raw, _ = block_batches_torch(weights, keys, 0, 5000, "cpu", engine="numba", z2sq=False)
    assert not raw[0, :, -1].any()


# --- the target's check points -----------------------------------------------------------------


def test_check_points_are_powers_of_two_up_to_the_span_then_every_span():
    points = [s for s in range(1, 4 * CHECK_SPAN + 1) if is_check_point(s)]
    assert points == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 768, 1024] and CHECK_SPAN == 256
    assert not is_check_point(0)
