"""The independent recomputation behind ``whest dataset verify``: a fresh pilot per MLP, and exact bounds.

``pilot_moments(weights, seed, ...)`` pushes ``n`` fresh inputs through one MLP and returns, per layer
and neuron, the mean, standard deviation, skewness, kurtosis and activity of the value whose mean a
bake estimates: the activation ``y`` (plain estimator), or the control-variate residual
``r = y − φ·B`` (layers 2.., with the bake's own refitted ``B``). The inputs come from a stream of
their own, child ``seeds.AUDIT`` of the MLP's SeedSequence (``compute/seeds.py``'s table of streams),
so nothing a bake computed is re-used to judge it.

``chi2_quantile`` is the exact chi-square quantile (regularised incomplete gamma, bisection), used
for batch-means standard errors, whose sampling distribution is ``σ·sqrt(χ²_k / k)``.

Pure: arrays in, arrays out; no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from whestbench.compute.mlp import pilot_layers
from whestbench.compute.seeds import AUDIT, stream

AUDIT_SAMPLES = 8192
MIN_NORMAL_SAMPLES = 1000  # below, stored means, sds and variances of skewed ReLU outputs are too far from normal to judge
MIN_SPREAD_SAMPLES = 10_000  # below, a plain estimator's standard error is not held to 25 % (``compare``'s spread ratio)
MIN_ACTIVE_VARIANCE = 32  # a neuron active on fewer pilot inputs has no usable variance estimate (``compare``)
MIN_ACTIVE_SHAPE = 64  # ... has too rough a pilot sd/skew to be held to bounds (``plausibility``)
TRAIL_STAT_SAMPLES = 8192  # the trail's drift test pools adjacent segments to at least this many samples
MIN_STAT_SEGMENTS = 4  # ... and needs this many pooled segments to test drift


@dataclass(frozen=True)
class PilotMoments:
    """Per (layer, neuron) moments of the estimated quantity over ``n`` fresh inputs; each (depth, width) fp64."""

    n: int
    mean: np.ndarray
    sd: np.ndarray
    """sample standard deviation (ddof 1)."""
    skew: np.ndarray
    """standardised third central moment (0 where sd is 0)."""
    kurt: np.ndarray
    """standardised fourth central moment (3 for a Gaussian; 0 where sd is 0)."""
    active: np.ndarray
    """(depth, width) int64: inputs on which the neuron's activation was > 0."""
    y_sd: np.ndarray
    """the activation's own standard deviation (equals ``sd`` for the plain estimator)."""
    y_var: np.ndarray
    """population variance of the activation (ddof 0), final layer only (0 elsewhere): what
    ``avg_variance`` averages."""
    y_var_sd: np.ndarray
    """standard error of ``y_var`` (``sqrt((μ₄ − σ⁴)/n)``), final layer only."""
    corr_fro: np.ndarray
    """(depth,) control variates only (0 for plain): ``‖R‖_F`` of the residuals' correlation matrix
    across a layer's live neurons, biased upward by the pilot's noise (conservative)."""
    z_mean: np.ndarray
    """(depth, w) the pre-activations' mean (dense even where the neuron is rarely active)."""
    z_sd: np.ndarray
    """(depth, w) the pre-activations' standard deviation."""
    corr_sum: np.ndarray
    """(depth,) ``1ᵀR1`` of the estimated quantity's correlation matrix over a layer's neurons active on
    at least ``min_active`` pilot inputs: the variance of the sum of their standardised estimates."""


def pilot_moments(weights: np.ndarray, seed: int, n: int = AUDIT_SAMPLES, controls=None,
                  min_active: int = 64) -> PilotMoments:
    """Moments of one MLP's estimated quantity over ``n`` inputs of ``seeds.stream(seed, AUDIT)``.

    ``weights``: (depth, width, width) float32. ``controls``: an ``estimators.Controls`` (the bake's
    refitted control variates) for the control-variate estimator, else None (plain). The forward
    pass is float32 like the bakes'; its rounding (~1e-7 relative) is far below the pilot's
    statistical error (~1/sqrt(n)).
    """
    weights = np.asarray(weights, dtype=np.float32)
    depth, width, _ = weights.shape
    vals = np.empty((depth, n, width), dtype=np.float32)  # the estimated quantity, per layer
    ys = vals if controls is None else np.empty((depth, n, width), dtype=np.float32)  # the activations
    y_sd = np.empty((depth, width))
    z_sum = np.empty((depth, width))
    z_sq = np.empty((depth, width))
    phi = None
    for layer, (z, h) in enumerate(pilot_layers(weights, stream(seed, AUDIT), n)):
        z_sum[layer] = z.sum(axis=0, dtype=np.float64)
        z_sq[layer] = np.square(z).sum(axis=0, dtype=np.float64)
        ys[layer] = h
        if controls is not None and layer == 1:
            phi = np.concatenate([ys[0] - controls.mu1.astype(np.float32),
                                  z * z - controls.ez2sq.astype(np.float32)], axis=1)  # (n, 2w)
        if controls is not None and layer >= 1:
            coef = controls.coef[:, (layer - 1) * width:layer * width].astype(np.float32)
            np.subtract(h, phi @ coef, out=vals[layer])  # (n, w) residual
        elif controls is not None:
            vals[layer] = h
    # moments per layer in fp64 accumulation over float32 deviations (~1e-7 relative: far below 1/sqrt(n))
    mean = np.empty((depth, width))
    m2, m3, m4 = (np.empty((depth, width)) for _ in range(3))
    active = np.empty((depth, width), dtype=np.int64)
    corr_fro = np.zeros(depth)
    for layer in range(depth):
        v = vals[layer]  # (n, w)
        mean[layer] = v.sum(axis=0, dtype=np.float64) / n
        dev = v - mean[layer].astype(np.float32)
        sq = dev * dev
        m2[layer] = sq.sum(axis=0, dtype=np.float64) / n
        m3[layer] = (sq * dev).sum(axis=0, dtype=np.float64) / n
        m4[layer] = (sq * sq).sum(axis=0, dtype=np.float64) / n
        if controls is not None:
            live = m2[layer] > 0
            if live.any():
                d = dev[:, live] / np.sqrt(m2[layer][live]).astype(np.float32)  # (n, k) standardised
                corr = (d.T @ d).astype(np.float64) / n  # (k, k)
                corr_fro[layer] = math.sqrt(float(np.sum(corr * corr)))
        active[layer] = np.count_nonzero(ys[layer] > 0, axis=0)  # the activations themselves
    if controls is not None:  # the activations' own spread
        for layer in range(depth):
            y_sd[layer] = ys[layer].std(axis=0, dtype=np.float64, ddof=1)
    final = ys[-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        skew = np.where(m2 > 0, m3 / np.where(m2 > 0, m2, 1.0) ** 1.5, 0.0)
        kurt = np.where(m2 > 0, m4 / np.where(m2 > 0, m2, 1.0) ** 2, 0.0)
    sd = np.sqrt(m2 * n / max(n - 1, 1))
    if controls is None:
        y_sd = sd
    corr_sum = np.zeros(depth)
    for layer in range(depth):
        sel = (active[layer] >= min_active) & (m2[layer] > 0)
        if sel.any():
            total = ((vals[layer][:, sel] - mean[layer][sel].astype(np.float32))
                     / np.sqrt(m2[layer][sel]).astype(np.float32)).sum(axis=1, dtype=np.float64)  # (n,)
            corr_sum[layer] = float(np.mean(total * total))
    fmean = final.sum(axis=0, dtype=np.float64) / n
    fdev = final - fmean.astype(np.float32)
    fsq = fdev * fdev
    y_var = np.zeros((depth, width))
    y_var_sd = np.zeros((depth, width))
    y_var[-1] = fsq.sum(axis=0, dtype=np.float64) / n  # only the final layer's: what avg_variance averages
    y_var_sd[-1] = np.sqrt(np.maximum((fsq * fsq).sum(axis=0, dtype=np.float64) / n - y_var[-1] ** 2, 0.0) / n)
    z_mean = z_sum / n
    z_sd = np.sqrt(np.maximum(z_sq / n - z_mean**2, 0.0) * n / max(n - 1, 1))
    return PilotMoments(n, mean, sd, skew, kurt, active, y_sd, y_var, y_var_sd, corr_fro, z_mean, z_sd, corr_sum)


# ----------------------------------------------------------------------------------------------
# Bounds


P_OVERALL = 1e-6
"""False-alarm probability of each statistical check of verify for a correct dataset (whole dataset)."""


def bonferroni_z(n_tests: int, p_overall: float = P_OVERALL) -> float:
    """Two-sided |z| limit that ``n_tests`` standard normal scores exceed with probability ≤ ``p_overall``
    whatever their correlations (union bound; neurons of one MLP share their inputs): 48 tests give
    5.6, 10⁴ give 6.5, 10⁶ give 7.1."""
    return -NormalDist().inv_cdf(p_overall / (2 * max(int(n_tests), 1)))


def _gamma_p(a: float, x: float) -> float:
    """Regularised lower incomplete gamma P(a, x) (series below a + 1, continued fraction above)."""
    if x <= 0:
        return 0.0
    log_front = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1.0:
        term = total = 1.0 / a
        ap = a
        for _ in range(100_000):
            ap += 1.0
            term *= x / ap
            total += term
            if abs(term) < abs(total) * 1e-16:
                break
        return min(1.0, total * math.exp(log_front))
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, 100_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-16:
            break
    return max(0.0, 1.0 - math.exp(log_front) * h)


def chi2_cdf(x: float, k: float) -> float:
    """P(χ²_k ≤ x)."""
    return _gamma_p(k / 2.0, x / 2.0)


def chi2_quantile(p: float, k: float) -> float:
    """The ``p`` quantile of χ²_k, exact to ~1e-10 relative (bisection on the exact CDF)."""
    if not 0.0 < p < 1.0 or k <= 0:
        raise ValueError(f"chi2_quantile needs 0 < p < 1 and k > 0; got p={p}, k={k}")
    return _invert_cdf(lambda x: chi2_cdf(x, k), p, max(1.0, k), 1e-12)


def _invert_cdf(cdf, p: float, hi: float, rtol: float) -> float:
    """The ``x ≥ 0`` with ``cdf(x) = p`` for an increasing ``cdf``, by bisection: ``hi`` doubled until
    it brackets ``p``, then the bracket halved until it is ``rtol`` of its upper end."""
    lo = 0.0
    while cdf(hi) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if cdf(mid) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= rtol * hi:
            break
    return 0.5 * (lo + hi)


def beta_inc(a, b, x) -> np.ndarray:
    """The regularised incomplete beta ``I_x(a, b)``, elementwise over broadcast arrays (float64): the
    continued fraction (modified Lentz) on whichever of ``x`` and ``1 − x`` lies below the mean."""
    a, b, x = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (a, b, x)))
    flip = x >= (a + 1.0) / (a + b + 2.0)
    p, q, y = np.where(flip, b, a), np.where(flip, a, b), np.where(flip, 1.0 - x, x)
    inside = (x > 0.0) & (x < 1.0)
    y = np.where(inside, y, 0.5)
    tiny = 1e-300
    h = np.ones_like(y)
    idx = np.flatnonzero(inside)  # the elements still iterating
    pp, qq, yy = p.ravel()[idx], q.ravel()[idx], y.ravel()[idx]
    c = np.ones_like(yy)
    d = 1.0 - (pp + qq) * yy / (pp + 1.0)
    d = 1.0 / np.where(np.abs(d) < tiny, tiny, d)
    hh = d.copy()
    hflat = h.reshape(-1)
    for m in range(1, 100_000):
        if not idx.size:
            break
        for num in (m * (qq - m) * yy / ((pp + 2 * m - 1) * (pp + 2 * m)),
                    -(pp + m) * (pp + qq + m) * yy / ((pp + 2 * m) * (pp + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / np.where(np.abs(d) < tiny, tiny, d)
            c = 1.0 + num / c
            c = np.where(np.abs(c) < tiny, tiny, c)
            hh = hh * d * c
        done = np.abs(d * c - 1.0) < 1e-15
        if done.any():
            hflat[idx[done]] = hh[done]
            keep = ~done
            idx, pp, qq, yy, c, d, hh = idx[keep], pp[keep], qq[keep], yy[keep], c[keep], d[keep], hh[keep]
    def lg(v: np.ndarray) -> np.ndarray:  # log Γ over the (few) distinct values
        vals, inverse = np.unique(v, return_inverse=True)
        return np.array([math.lgamma(u) for u in vals])[inverse].reshape(v.shape)

    front = np.exp(lg(p + q) - lg(p) - lg(q) + p * np.log(y) + q * np.log1p(-y)) * h / p
    out = np.where(flip, 1.0 - front, front)
    return np.where(x <= 0.0, 0.0, np.where(x >= 1.0, 1.0, out))


def f_sf(f, d1, d2) -> np.ndarray:
    """P(F > f) for Fisher's F on ``(d1, d2)`` degrees of freedom, elementwise: ``I_{d2/(d2 + d1 f)}(d2/2, d1/2)``."""
    f, d1, d2 = (np.asarray(v, dtype=np.float64) for v in (f, d1, d2))
    return beta_inc(d2 / 2.0, d1 / 2.0, d2 / (d2 + d1 * np.maximum(f, 0.0)))


def t_two_sided(t, dof) -> np.ndarray:
    """P(|T| ≥ |t|) for Student's t on ``dof`` degrees of freedom, elementwise: ``I_{ν/(ν+t²)}(ν/2, ½)``."""
    t, dof = np.asarray(t, dtype=np.float64), np.asarray(dof, dtype=np.float64)
    return beta_inc(dof / 2.0, 0.5, dof / (dof + t * t))


NORMAL_DOF = 1e7
"""Degrees of freedom past which Student's t is taken for the normal (they differ by under 1e-6 at |t| ≤ 7)."""


def t_as_z(t, dof) -> np.ndarray:
    """Student-t scores on ``dof`` degrees of freedom as the standard normal scores of the same two-sided
    tail (``P(|Z| ≥ |z|) = P(|T| ≥ |t|)``, same sign), elementwise: a z formed from k batch means
    (``dof = k − 1``) can then be judged by every normal limit (Bonferroni, χ² of the mean z², signed
    means). ``dof`` ≥ ``NORMAL_DOF`` (a plain estimator's N − 1) leaves ``t`` as it is; NaN stays NaN."""
    t = np.asarray(t, dtype=np.float64)
    dof = np.broadcast_to(np.asarray(dof, dtype=np.float64), t.shape)
    out = t.copy()
    conv = np.isfinite(t) & (dof < NORMAL_DOF) & (t != 0)
    if conv.any():
        tail = t_two_sided(t[conv], dof[conv])
        inv = np.vectorize(lambda p: -NormalDist().inv_cdf(p / 2.0) if p > 0.0 else math.inf, otypes=[float])
        out[conv] = np.sign(t[conv]) * inv(tail)
    return out


def t_cdf(t: float, dof: float) -> float:
    """P(T ≤ t) for Student's t on ``dof`` degrees of freedom: ``1 − I_{ν/(ν+t²)}(ν/2, ½)/2`` for t ≥ 0."""
    if dof <= 0:
        raise ValueError(f"t_cdf needs dof > 0; got {dof}")
    tail = 0.5 * float(t_two_sided(t, dof))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, dof: float) -> float:
    """The ``p`` quantile of Student's t on ``dof`` degrees of freedom, exact to ~1e-12 (bisection on
    ``t_cdf``): 2.0395 at p = 0.975 and 31 degrees of freedom (32 batch means), 1.96 as dof → ∞.
    Where a z is formed from k batch means (a control-variate standard error), its limit is this
    quantile on k − 1 degrees of freedom, not the normal's."""
    if not 0.0 < p < 1.0 or not dof > 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and dof > 0; got p={p}, dof={dof}")
    if p < 0.5:
        return -t_quantile(1.0 - p, dof)
    if dof >= NORMAL_DOF:
        return NormalDist().inv_cdf(p)
    return _invert_cdf(lambda t: t_cdf(t, dof), p, max(1.0, NormalDist().inv_cdf(p)), 1e-13)


def wilson_hilferty(k: int, z: float) -> float:
    """The χ²_k / k quantile at the standard normal's ``z`` (Wilson–Hilferty's cube-root approximation)."""
    return (1.0 - 2.0 / (9.0 * k) + z * math.sqrt(2.0 / (9.0 * k))) ** 3


def chi2_mean_limit(n_groups: int, p: float = P_OVERALL) -> float:
    """Upper limit for the mean of z² over the neurons of ``n_groups`` independent MLPs.

    Neurons of one MLP are correlated (shared inputs), so each MLP counts as one degree of
    freedom: the sum of its w correlated z² has variance at most 2w², like w·χ²₁. The limit is
    the χ²_k / k quantile at ``1 − p`` with k = n_groups (Wilson–Hilferty), conservative for
    correlated neurons: 10.9 for 3 MLPs, 1.23 for 1000 (where a bias of half a standard error in
    every mean fails while noise does not).
    """
    return wilson_hilferty(max(int(n_groups), 1), -NormalDist().inv_cdf(p))


def chi2_ratio_bounds(k: int, alpha: float) -> tuple[float, float]:
    """``(lo, hi)`` with P(χ²_k / k < lo) = P(χ²_k / k > hi) = alpha/2: where an honest batch-means
    variance estimate over ``k`` degrees of freedom lies, relative to the true variance."""
    if k > 20_000:  # Wilson–Hilferty: relative error of the quantile < 1e-6 here, and exact gamma sums get slow
        z = -NormalDist().inv_cdf(alpha / 2)
        return wilson_hilferty(k, -z), wilson_hilferty(k, z)
    return chi2_quantile(alpha / 2, k) / k, chi2_quantile(1 - alpha / 2, k) / k
