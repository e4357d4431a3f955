"""Estimators of the layer means and of their standard errors: plain Monte Carlo, and control variates.

Plain (the default, the reference's): ``mean = Σy / N`` per neuron, and the standard error
``sqrt(s² / N)`` with the sample variance ``s² = (Σy² − N·mean²) / (N − 1)``, from the fp64 sums
and sums of squares every sampler accumulates.

Control variates (``--estimator control-variate``): every layer past the first averages the residual
``rₗ = yₗ − φ·Bₗ``, with controls ``φ(x) = [y₁ − E y₁, z₂² − E z₂²]`` of exactly known mean and ``B``
fitted on an independent pilot of ``PILOT_SAMPLES`` inputs; its standard error is by batch means
(the pcg64 chunks; ``CV_BATCH`` samples for philox). The derivation: docs/error-bars.md, "The
control-variate estimator".
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from whestbench.compute.estimation import (CONTROL_VARIATE, CV_TARGET_RULE, ESTIMATORS, EXCEED_PROBABILITY, MIN_RELIABLE_BATCHES,
                                          PILOT_SAMPLES, PLAIN, TARGET_RULE)
from whestbench.compute.mlp import pilot_layers
from whestbench.values import is_int
from whestbench.compute.stats import LayerSums
from whestbench.compute.audit import f_sf

CV_BATCH = 4096  # philox: samples per batch of the batch-means standard error (a power of two)
_RIDGE = 1e-6  # relative to the mean diagonal of the pilot's Gram matrix: keeps the solve well posed
SQRT_2PI = math.sqrt(2.0 * math.pi)  # E relu(u) = s / √(2π) for u ~ N(0, s²)
RELU_VAR = 0.5 - 1.0 / (2.0 * math.pi)  # Var relu(u) / s² for u ~ N(0, s²)


def trail_step(sampler: str, block_size: int) -> int:
    """The samples of one step of a trail's segments (and of the control variates' batches): a pcg64
    chunk (its ``block_size``), a philox batch of ``min(CV_BATCH, block_size)`` samples."""
    return int(block_size) if sampler == "pcg64" else min(CV_BATCH, int(block_size))


def layer1_means(w1: np.ndarray) -> np.ndarray:
    """``(width,)`` fp64: the exact layer-1 means ``‖W₁[:, j]‖ / √(2π)``."""
    return np.linalg.norm(np.asarray(w1, dtype=np.float64), axis=0) / SQRT_2PI


def relu_second_moments(w1: np.ndarray) -> np.ndarray:
    """``(width, width)`` fp64: ``E[relu(z_i) relu(z_k)]`` for ``z = x W₁``, ``x ~ N(0, I)``.

    For jointly Gaussian ``(u, v)`` with variances ``a², b²`` and correlation ``cos θ``:
    ``E[relu(u) relu(v)] = a·b·(sin θ + (π − θ)·cos θ) / (2π)``.
    """
    w1 = np.asarray(w1, dtype=np.float64)
    k = w1.T @ w1  # (w, w) covariance of z
    s = np.sqrt(np.diag(k))
    outer = np.outer(s, s)
    with np.errstate(divide="ignore", invalid="ignore"):
        c = np.clip(np.where(outer > 0, k / np.where(outer > 0, outer, 1.0), 1.0), -1.0, 1.0)
    theta = np.arccos(c)
    return outer * (np.sin(theta) + (np.pi - theta) * c) / (2.0 * np.pi)


@dataclass(frozen=True)
class Controls:
    """The control-variate estimator of one MLP: the controls' exact means and the pilot's coefficients."""

    mu1: np.ndarray
    """(width,) exact layer-1 means."""
    ez2sq: np.ndarray
    """(width,) exact ``E z₂²`` (layer 2's pre-activations squared); empty for depth 1."""
    coef: np.ndarray
    """(2·width, (depth−1)·width): ``B`` for layers 2..depth, side by side; empty for depth 1."""

    @property
    def depth(self) -> int:
        return 1 + self.coef.shape[1] // self.mu1.shape[0] if self.coef.size else 1

    def residual_means(self, ymean: np.ndarray, z2sq_mean: np.ndarray) -> np.ndarray:
        """Per-batch estimates ``r̄``: ``ymean`` (..., depth, width) batch means of the activations,
        ``z2sq_mean`` (..., width) batch means of ``z₂²``. Layer 1 is the exact mean."""
        ymean = np.asarray(ymean, dtype=np.float64)
        out = np.empty_like(ymean)
        out[..., 0, :] = self.mu1
        if ymean.shape[-2] > 1:
            phi = np.concatenate([ymean[..., 0, :] - self.mu1, np.asarray(z2sq_mean, dtype=np.float64) - self.ez2sq],
                                 axis=-1)  # (..., 2w)
            fit = phi @ self.coef  # (..., (depth-1)*w)
            out[..., 1:, :] = ymean[..., 1:, :] - fit.reshape(ymean.shape[:-2] + (ymean.shape[-2] - 1, ymean.shape[-1]))
        return out


def fit_controls(weights: np.ndarray, pilot_ss: np.random.SeedSequence, n_pilot: int = PILOT_SAMPLES) -> Controls:
    """The controls of the MLP ``weights`` (depth, width, width) float32, ``B`` fitted on ``n_pilot``
    inputs of ``pilot_ss`` (the float32 forward pass the samplers run).

    Deterministic: a function of the weights, the pilot stream and ``n_pilot`` (BLAS single-threaded,
    as every bake runs its units). The regression's moments are float32 products (sgemm), the solve
    fp64: any fixed ``B`` leaves the estimate unbiased, so ``B`` needs to be good, not exact, and
    this way the pilot costs ~0.5 s per MLP at 256×8 on one core rather than ~3 s in fp64.
    """
    weights = np.asarray(weights, dtype=np.float32)
    depth, width, _ = weights.shape
    mu1 = layer1_means(weights[0])
    if depth == 1:
        return Controls(mu1, np.zeros(0), np.zeros((2 * width, 0)))
    w2 = weights[1].astype(np.float64)
    ez2sq = np.einsum("ij,ik,kj->j", w2, relu_second_moments(weights[0]), w2)
    passes = pilot_layers(weights, pilot_ss, n_pilot)
    _, h = next(passes)  # (n, w) layer 1
    z2, h2 = next(passes)
    phi = np.empty((n_pilot, 2 * width), dtype=np.float32)
    np.subtract(h, mu1.astype(np.float32), out=phi[:, :width])
    np.subtract(z2 * z2, ez2sq.astype(np.float32), out=phi[:, width:])
    gram = (phi.T @ phi).astype(np.float64) / n_pilot  # (2w, 2w)
    phi_mean = phi.sum(axis=0, dtype=np.float64) / n_pilot
    cross = np.empty((2 * width, (depth - 1) * width))  # Cov(φ, y_l) for layers 2..depth, side by side
    for layer, (_, h) in enumerate(itertools.chain([(z2, h2)], passes), start=1):
        y_mean = h.sum(axis=0, dtype=np.float64) / n_pilot
        cross[:, (layer - 1) * width:layer * width] = (phi.T @ h).astype(np.float64) / n_pilot - np.outer(phi_mean, y_mean)
    ridge = _RIDGE * float(np.mean(np.diag(gram))) or _RIDGE
    coef = np.linalg.solve(gram + ridge * np.eye(2 * width), cross)
    return Controls(mu1, ez2sq, coef)


def batch_rows(controls: Controls, sums: np.ndarray, z2sq: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(n_b·r̄_b, n_b·r̄_b²)`` per batch, each (n_batches, depth, width) fp64, from the batches'
    fp64 sums of activations ``sums`` (n_batches, depth, width), of ``z₂²`` ``z2sq`` (n_batches,
    width) and their sample counts ``counts`` (n_batches,)."""
    n = np.asarray(counts, dtype=np.float64)[:, None, None]
    r = controls.residual_means(sums / n, np.asarray(z2sq) / n[:, :, 0])
    return r * n, r * r * n


def finalize_estimates(s: LayerSums, estimator: str, n_batches: int = 0, mu1: np.ndarray | None = None
                       ) -> tuple[np.ndarray, np.ndarray]:
    """``(means, stderr)``, both (depth, width) fp64, of a sampler's sums under ``estimator``.

    plain: the sample mean and ``sqrt(s²/N)`` (NaN when N < 2: one sample has no variance).
    control-variate: ``Σ n_b r̄_b / N`` and the batch-means standard error over ``n_batches``
    batches (NaN with fewer than 2); layer 1 is ``mu1`` exactly, with standard error 0.
    """
    n = float(s.count)
    if estimator == PLAIN:
        means = s.sums / n
        if s.count < 2:
            return means, np.full_like(means, np.nan)
        var = np.maximum(s.sumsq - s.sums * means, 0.0) / (n - 1.0)
        return means, np.sqrt(var / n)
    if estimator != CONTROL_VARIATE:
        raise ValueError(f"estimator must be one of {ESTIMATORS}; got {estimator!r}.")
    means = s.cv / n
    if n_batches < 2:
        stderr = np.full_like(means, np.nan)
    else:
        dev = np.maximum(s.cvsq - s.cv * means, 0.0)  # Σ n_b (r̄_b − r̄)²
        stderr = np.sqrt(dev / ((n_batches - 1) * n))
    stderr[0] = 0.0  # layer 1 is known exactly
    if mu1 is not None:
        means[0] = mu1
    return means, stderr


def n_batches(n_samples: int, batch: int) -> int:
    return -(-int(n_samples) // int(batch))


def enough_batches(n_samples: int, batch: object) -> bool:
    """Whether ``n_samples`` make ``MIN_RELIABLE_BATCHES`` control-variate batches of ``batch`` (a positive
    int): a batch-means standard error over fewer is too rough to hold to a target or to 25 %."""
    return is_int(batch, 1) and n_batches(n_samples, batch) >= MIN_RELIABLE_BATCHES


CHECK_SPAN = 256  # steps: a target is checked after 1, 2, 4, ..., 256 steps, then every 256 steps


def stop_point(needed: float, step: int, cap: int, min_samples: int = 0) -> int:
    """Samples an MLP uses in a bake to a target standard error that it reaches after ``needed``
    samples: the first check point (in ``step``-sample steps) at or after ``max(needed,
    min_samples)``, or ``cap`` (``--n-samples``) when that comes first. ``min_samples``: what the
    estimator needs before a target is judged (control variates: ``MIN_RELIABLE_BATCHES`` batches)."""
    want = max(float(needed), float(min_samples))
    if not math.isfinite(want) or want >= cap:
        return int(cap)
    return next_check_point((max(1, math.ceil(want / step)) - 1) * step, step, cap)


def chosen_stderr(stderr: np.ndarray, layer: str) -> np.ndarray:
    """The standard errors a target applies to (``--stderr-layer``): the last layer's, or all."""
    return stderr[-1:] if layer == "last" else stderr


def meets_target(stderr: np.ndarray, target: float, layer: str) -> bool:
    """Whether every chosen standard error is at most ``target`` (a NaN one never is)."""
    return bool(np.all(chosen_stderr(stderr, layer) <= target))


def cv_floor_samples(n_samples: int, step_samples: int, cv_batch: int) -> int:
    """The fewest samples a control-variate target bake gives an MLP: the first check point at or
    after ``MIN_RELIABLE_BATCHES`` batches (``stop_point`` of a target already met), capped at
    ``n_samples``. (A plain target bake may stop at the first step.)"""
    return stop_point(0.0, step_samples, n_samples, MIN_RELIABLE_BATCHES * cv_batch)


def float32_target(target: float) -> np.float32:
    """The target as the float32 the stored standard errors are compared in; a target beyond float32's
    range (1e308) is its largest value, which every finite standard error meets, as it would the
    target itself (casting it would overflow, with numpy's warning)."""
    return np.float32(min(float(target), float(np.finfo(np.float32).max)))


def is_check_point(steps: int) -> bool:
    """Whether a bake with a target standard error checks it after ``steps`` steps of an MLP (pcg64
    chunks or philox blocks): a fixed schedule, so where an MLP stops is a function of its samples
    alone — never of timing, workers or resumes."""
    return steps > 0 and ((steps & (steps - 1) == 0 and steps <= CHECK_SPAN) or steps % CHECK_SPAN == 0)


def exceed_chance(n: int, sds: np.ndarray, kurt: np.ndarray, target: float, cv_batch: int, n_pilot: int) -> float:
    """The chance (a union bound over ``sds``' neurons) that a control-variate bake of ``n`` samples
    stores a standard error above ``target`` for a neuron whose pilot standard deviation is ``sds``.

    The stored ``se²·N`` is ``σ²·χ²_ν/ν`` (batch means, ``ν = k − 1`` for ``k`` batches); the pilot's
    ``σ̂²`` is itself about ``σ²·χ²_d/d`` with Satterthwaite's ``d = 2·n_pilot/(κ − 1)`` (``κ`` the
    neuron's kurtosis, from the pilot, at least a Gaussian's 3). So ``se²·N/σ̂²`` is Fisher's
    ``F(ν, d)`` and ``P(se > E) = P(F > E²·N/σ̂²)``."""
    live = sds > 0
    if not live.any():
        return 0.0
    nu = float(n_batches(n, cv_batch) - 1)
    if nu < 1:
        return 1.0
    with np.errstate(over="ignore"):
        f = np.square(float(target) / sds[live]) * float(n)
    d = 2.0 * n_pilot / np.maximum(kurt[live] - 1.0, 2.0)
    return float(np.sum(f_sf(f, nu, d)))


def planned_samples(weights: np.ndarray, pilot_ss: np.random.SeedSequence, controls: Controls | None, target: float,
                    layer: str, step: int, cap: int, min_samples: int = 0, n_pilot: int = PILOT_SAMPLES,
                    rule: str = TARGET_RULE, cv_batch: int = 0) -> int:
    """The samples one MLP uses in a bake to the target standard error ``target``: decided before
    any of its samples is drawn, from its own pilot stream (a two-stage rule), so the count is a
    function of the weights and the pilot alone and the estimate over it exactly unbiased (why a
    stop where the running standard error meets the target is biased: docs/error-bars.md).

    The pilot's per-sample standard deviation ``σ̂`` of each chosen neuron (plain: the activation;
    control variates: the residual ``y − φ·B`` with the bake's own ``B``, fitted on this same pilot)
    gives the need ``max_j (σ̂_j / target)²``; the count is the first check point at or past it
    (``stop_point``), or ``cap``. Under ``CV_TARGET_RULE`` (``cv_batch``-sample batches) it is the
    first check point from there on where ``exceed_chance`` is at most ``EXCEED_PROBABILITY``. The
    pilot's float32 forward pass runs at one BLAS thread, as every unit does, so the count is the
    same on every run.
    """
    weights = np.asarray(weights, dtype=np.float32)
    depth, width, _ = weights.shape
    sds = np.empty((depth, width))
    kurt = np.full((depth, width), 3.0)
    exceed = rule == CV_TARGET_RULE and controls is not None
    phi = y1 = None
    for k, (z, h) in enumerate(pilot_layers(weights, pilot_ss, n_pilot)):
        v = h.astype(np.float64)
        if k == 0:
            y1 = v
        if controls is not None and k == 1:
            z64 = z.astype(np.float64)
            phi = np.concatenate([y1 - controls.mu1, z64 * z64 - controls.ez2sq], axis=1)  # (n, 2w)
        if controls is not None and k >= 1:
            v = v - phi @ controls.coef[:, (k - 1) * width:k * width]
        if controls is not None and k == 0:
            sds[k] = 0.0  # layer 1 is exact under control variates
            continue
        sds[k] = v.std(axis=0, ddof=1)
        if exceed and (layer == "all" or k == depth - 1):
            dev = v - v.mean(axis=0)
            m2 = np.mean(dev * dev, axis=0)
            with np.errstate(divide="ignore", invalid="ignore"):
                kurt[k] = np.where(m2 > 0, np.mean(dev**4, axis=0) / np.where(m2 > 0, m2, 1.0) ** 2, 3.0)
    chosen = sds[-1:] if layer == "last" else sds
    ratio = float(np.max(chosen)) / float(target)
    needed = ratio * ratio  # not ** 2 of each: a target of 1e308 (or 1e-300) would overflow a float's square
    n = stop_point(needed, step, cap, min_samples)
    if not exceed:
        return n
    chosen_kurt = kurt[-1:] if layer == "last" else kurt
    while n < cap and exceed_chance(n, chosen, chosen_kurt, target, cv_batch, n_pilot) > EXCEED_PROBABILITY:
        n = next_check_point(n, step, cap)
    return n


def next_check_point(n: int, step: int, cap: int) -> int:
    """The first check point after ``n`` samples (``step``-sample steps), or ``cap``."""
    k = n // step + 1
    while not is_check_point(k):
        k += 1
    return int(min(k * step, cap))
