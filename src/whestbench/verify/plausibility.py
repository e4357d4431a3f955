"""verify's statistics past layer 1: every stored number held to a fresh, independent pilot of its MLP.

For each checked MLP, ``compute.audit.pilot_moments`` pushes ``AUDIT_SAMPLES`` fresh inputs (a stream
no bake uses) through the weights re-derived from ``mlp_seed`` (for the control-variate estimator
after refitting the bake's own controls), then holds the layer means (layers 2..depth), the size of
the standard errors and ``avg_variance`` to that pilot; what each check catches is tabled in
docs/cli.md ("What verify proves"). Each statistical check fails an honest dataset with probability
at most ``P_OVERALL / 4`` (normal and chi-square bounds with a union bound), so all four together at
most ``P_OVERALL``.
"""

from __future__ import annotations

import math
import os
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from whestbench.compute.audit import AUDIT_SAMPLES, MIN_ACTIVE_SHAPE, MIN_NORMAL_SAMPLES, PilotMoments, bonferroni_z, chi2_ratio_bounds, pilot_moments
from whestbench.compute.estimation import is_cv_block
from whestbench.compute.estimators import n_batches
from whestbench.compute.precision import EPS32
from whestbench.format.schema import DatasetMeta, is_positive_int
from whestbench.events import Event, Progress
from whestbench.work.controls import controls_for
from whestbench.work.threads import one_blas_thread

P_FAMILY_SHARE = 5  # means per neuron, means in aggregate, stderr per neuron, stderr in aggregate, avg_variance
SKEW_SAFETY = 2.0  # the pilot's skewness and kurtosis are themselves estimates: widen their terms
EXPLAINED = 1e-4  # a residual sd under this fraction of the activation's sd: the controls explain it exactly (the
# pilot's float32 residual carries ~1e-7 relative rounding; a real residual this small has no sampling to check)


@dataclass
class Audited:
    """One checked MLP: where it lives in the scan, its sample count and its pilot."""

    split: object
    index: int
    n: float
    pilot: PilotMoments | None


def choose_rows(rows: list, k: int, seed: int) -> list:
    """``k`` (fewer than ``len(rows)``) rows chosen at random with ``seed``, sorted by position."""
    picked = sorted(random.Random(seed).sample(range(len(rows)), k))
    return [rows[p] for p in picked]


def audit_rows(ds, rows, counts: np.ndarray, workers: int | None = None, on_event=None) -> list[Audited]:
    """The pilot of every row whose weights re-derive from its seed (else ``pilot`` None); ``counts``:
    the rows' sample counts, at least 1 (``run_statistics`` raises an impossible one to 1: the target
    check names it). ``on_event`` hears ``Progress("MLPs")`` as they finish (the long part of a verify)."""
    cv = is_cv_block(ds.md.get("estimator"))

    def one(item):
        (s, i), n = item
        w = s.rederived_weights(i, ds.width, ds.depth)
        if w is None:
            return Audited(s, i, float(n), None)  # protocol 2.0 or other weights: no pilot of the stored MLP
        controls = controls_for(int(s.seeds[i]), w) if cv and ds.depth > 1 else None
        return Audited(s, i, float(n), pilot_moments(w, int(s.seeds[i]), AUDIT_SAMPLES, controls, MIN_ACTIVE_SHAPE))

    workers = workers or max(1, min(len(rows), os.cpu_count() or 1, 8))
    out: list[Audited] = []
    if on_event is not None:
        on_event(Event("progress", progress=Progress("MLPs", 0, len(rows))))
    with one_blas_thread(), ThreadPoolExecutor(max_workers=workers) as pool:
        for a in pool.map(one, zip(rows, counts)):
            out.append(a)
            if on_event is not None:
                on_event(Event("progress", progress=Progress("MLPs", len(out), len(rows))))
    return out


def _where(ds, a: Audited) -> str:
    return (f"{a.split.name} " if ds.is_multi else "") + f"mlp_id {int(a.split.ids[a.index])}"


def _cf(z: float, skew: np.ndarray, n: float, p: float | None = None) -> np.ndarray:
    """The Cornish–Fisher widening of a two-sided normal limit ``z`` for a mean of ``n`` values of
    skewness ``skew`` — or, with ``p``, for the difference of two independent means of ``n`` and ``p``
    such values (third cumulant ``κ₃(1/n² − 1/p²)`` over variance ``σ²(1/n + 1/p)`` to the 3/2)."""
    if p is None:
        g = np.abs(skew) / math.sqrt(n)
    else:
        g = np.abs(skew) * abs(1.0 / n**2 - 1.0 / p**2) / (1.0 / n + 1.0 / p) ** 1.5
    return z + SKEW_SAFETY * g * (z * z - 1.0) / 6.0


def check_layer_means(ds, audited: list[Audited], report, p_overall: float) -> None:
    """Every mean of layers 2.. against the pilot, per neuron; and, signed, per MLP and layer (the mean
    z over its neurons, in units of its exact spread ``sqrt(1ᵀR1)/k`` from the pilot's correlations)
    and per layer over the dataset: a shift of a few standard errors on every neuron is seen."""
    live = [a for a in audited if a.pilot is not None]
    if ds.depth < 2 or not live:
        if audited and not live:
            report.skip("layer means", "no checked MLP's weights re-derive from its seed (seed protocol 2.0): no pilot")
        return
    tested = sum(int(np.count_nonzero(_testable(a.pilot)[1:])) for a in live)
    if tested == 0:
        report.skip("layer means", f"no neuron of layers 2-{ds.depth} is active on {MIN_ACTIVE_SHAPE}+ pilot inputs")
        return
    p_family = p_overall / P_FAMILY_SHARE
    z_lim = bonferroni_z(tested, p_family)
    z_group = bonferroni_z(len(live) * (ds.depth - 1) + (ds.depth - 1), p_family)
    worst = (0.0, None)
    problems = []
    layer_sum: dict[int, list[float]] = {}  # layer -> [Σ z̄/sd numerators, Σ variances] over MLPs
    for a in live:
        pm = a.pilot
        m = a.split.means[a.index].astype(np.float64)
        ok = _testable(pm, 1)
        se = pm.sd * math.sqrt(1.0 / a.n + 1.0 / pm.n)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(ok, (m - pm.mean) / np.where(ok, se, 1.0), 0.0)
        lim = _cf(z_lim, pm.skew, a.n, pm.n)
        ratio = np.abs(z) / lim
        layer, j = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
        if ratio[layer, j] > worst[0]:
            worst = (float(ratio[layer, j]), (a, layer, j, float(z[layer, j]), float(lim[layer, j])))
        bad = np.argwhere(ratio > 1.0)
        for layer, j in bad[:1]:
            problems.append(f"{_where(ds, a)} layer {layer + 1} neuron {j}: stored mean {m[layer, j]:.6g}, a fresh "
                            f"pilot gives {pm.mean[layer, j]:.6g} ± {se[layer, j]:.2g} (z = {z[layer, j]:.1f}, "
                            f"limit {lim[layer, j]:.2f})")
        # neurons too rarely active for a z-score: no mean can exceed E[max(z, 0)] ≤ (μ + sqrt(μ² + σ²))/2 for
        # a pre-activation of mean μ and sd σ (any distribution), with μ and σ from the dense pilot
        rare = ~_testable(pm)
        rare[0] = False
        if rare.any():
            mu = pm.z_mean + 6.0 * pm.z_sd / math.sqrt(pm.n)
            sig = pm.z_sd * (1.0 + 6.0 / math.sqrt(2.0 * pm.n))
            cap = 0.5 * (mu + np.sqrt(mu * mu + sig * sig)) + 6.0 * np.sqrt((mu * mu + sig * sig) / max(a.n, 1.0))
            over = rare & np.isfinite(m) & (m > cap)
            if over.any():
                layer, j = (int(v) for v in np.argwhere(over)[0])
                problems.append(f"{_where(ds, a)} layer {layer + 1} neuron {j}: stored mean {m[layer, j]:.6g}, but the "
                                f"neuron is active on {int(pm.active[layer, j])} of {pm.n:,} pilot inputs and its "
                                f"pre-activation (mean {pm.z_mean[layer, j]:.3g}, sd {pm.z_sd[layer, j]:.3g}) allows at "
                                f"most {cap[layer, j]:.3g}")
        for layer in range(1, ds.depth):
            k = int(ok[layer].sum())
            if k == 0 or pm.corr_sum[layer] <= 0:
                continue
            total = float(z[layer][ok[layer]].sum())
            var = pm.corr_sum[layer] * 1.1 + k * k / pm.n  # the pilot's estimate of 1ᵀR1, with room for its noise
            acc = layer_sum.setdefault(layer, [0.0, 0.0])
            acc[0] += total
            acc[1] += var
            g = float(np.mean(np.abs(pm.skew[layer][ok[layer]])))
            lim_g = float(_cf(z_group, np.array(g), a.n, pm.n))
            if abs(total) / math.sqrt(var) > lim_g:
                problems.append(f"{_where(ds, a)} layer {layer + 1}: its {k} means sit {total / k:+.2f} pilot standard "
                                f"errors off on average, {abs(total) / math.sqrt(var):.1f}x the spread of that average "
                                f"(limit {lim_g:.2f})")
    for layer, (total, var) in sorted(layer_sum.items()):
        if var > 0 and abs(total) / math.sqrt(var) > z_group + 0.5:
            problems.append(f"layer {layer + 1}: over {len(live)} MLP(s) the means sit {abs(total) / math.sqrt(var):.1f}x "
                            f"the spread of their average off a fresh pilot, all {'above' if total > 0 else 'below'} "
                            f"(limit {z_group + 0.5:.2f}): a shift common to the dataset")
    scope = f"{len(live)} MLP(s), {tested} neurons of layers 2-{ds.depth}"
    if problems:
        report.fail("layer means", problems, 2)
        return
    report.blind_spot = _blind_spot(live, z_lim)
    _, (a, layer, j, z, lim) = worst if worst[1] else (0, (live[0], 0, 0, 0.0, z_lim))
    report.check("layer means", True, f"{scope} against a fresh {AUDIT_SAMPLES:,}-input pilot each: max |z| = "
                 f"{abs(z):.2f} at {_where(ds, a)} layer {layer + 1} neuron {j} (limit {lim:.2f}: Bonferroni "
                 f"p={p_family:g} over {tested}, widened for skewness); signed averages per MLP and layer, and "
                 "per layer, within their spread")


def min_visible_se(lim: float, n: float, pilot_n: float = AUDIT_SAMPLES) -> float:
    """The smallest shift of one neuron's mean, in its stored standard errors (σ/√n), that the pilot
    check flags: it flags ``|m − pilot| > lim·σ·sqrt(1/n + 1/pilot_n)``, so ``lim·sqrt(1 + n/pilot_n)``
    (≈ 65 at n = 10⁶ with a limit near 5.9). Smaller errors, and an ``n_samples`` inflated with its
    standard errors scaled to match, are invisible to any pilot of this size."""
    return float(lim) * math.sqrt(1.0 + float(n) / float(pilot_n))


def _blind_spot(live: list[Audited], z_lim: float) -> str:
    """The OK line's statement of the pilot's resolution: the median over the checked neurons of
    ``min_visible_se`` with each neuron's (skewness-widened) limit, at the median sample count."""
    figures, counts = [], []
    for a in live:
        ok = _testable(a.pilot, 1)
        figures.append(min_visible_se(1.0, a.n, a.pilot.n) * _cf(z_lim, a.pilot.skew, a.n, a.pilot.n)[ok])
        counts.append(a.n)
    fig = float(np.median(np.concatenate(figures)))
    n = int(np.median(counts))
    shown = f"{fig:,.0f}" if fig >= 10 else f"{fig:.1f}"
    return (f"a single-neuron error below ~{shown} standard errors is invisible to the pilot at N={n:,}; "
            "--recompute K checks it")


def _testable(pm: PilotMoments, first: int = 0) -> np.ndarray:
    """(depth, w) bool: neurons of layers ``first + 1``.. whose pilot moments are usable (active enough,
    with spread)."""
    ok = (pm.active >= MIN_ACTIVE_SHAPE) & (pm.sd > 0)
    ok[:first] = False
    return ok


def check_stderr_size(ds, audited: list[Audited], report, p_overall: float) -> None:
    """The stored standard errors of layers 2.. (and layer 1 where the estimator samples it) against the pilot."""
    live = [a for a in audited if a.pilot is not None and a.split.stderr is not None]
    if not live:
        return
    cv = is_cv_block(ds.md.get("estimator"))
    est = DatasetMeta.of(ds.md).estimator
    batch = est.get("batch_samples") if cv else None
    first = 1 if cv else 0  # control variates: layer 1 is exact (its stderr 0 is checked elsewhere)
    tested = sum(int(np.count_nonzero(_testable(a.pilot)[first:])) for a in live)
    alpha = (p_overall / P_FAMILY_SHARE) / max(tested, 1)
    z_lim = bonferroni_z(max(tested, 1), p_overall / P_FAMILY_SHARE / 2)  # half for the pilot's sd, half for the stored
    problems: list[str] = []
    agg: dict[int, list[tuple[float, float, str]]] = {}  # layer -> [(mean q, its sd, which MLP)] per MLP
    for a in live:
        pm = a.pilot
        s = a.split.stderr[a.index].astype(np.float64)
        m = a.split.means[a.index].astype(np.float64)
        if np.isnan(s[first:]).all():
            continue  # too few samples or batches for a standard error: NaN is checked elsewhere
        k = (n_batches(int(a.n), batch) - 1) if cv and is_positive_int(batch) else None
        root_n = math.sqrt(a.n)
        expected = pm.sd / root_n  # (depth, w)
        # pilot's own spread of log sd: (κ − 1)/(4P), widened for the kurtosis estimate
        v_pilot = SKEW_SAFETY * np.maximum(pm.kurt - 1.0, 2.0) / (4.0 * pm.n)
        if k is not None:
            lo_q, hi_q = chi2_ratio_bounds(max(k, 1), alpha)
            lo = lo_q * np.exp(-2.0 * z_lim * np.sqrt(v_pilot))
            hi = hi_q * np.exp(2.0 * z_lim * np.sqrt(v_pilot))
            q_sd_stored = math.sqrt(2.0 / max(k, 1))
        else:
            v = v_pilot + SKEW_SAFETY * np.maximum(pm.kurt - 1.0, 2.0) / (4.0 * a.n)
            lo = np.exp(-2.0 * z_lim * np.sqrt(v))
            hi = np.exp(2.0 * z_lim * np.sqrt(v))
            q_sd_stored = None
        testable = _testable(pm, first)
        explained = testable & (pm.sd <= EXPLAINED * np.maximum(pm.y_sd, 1e-300))
        ratio_ok = testable & ~explained & np.isfinite(s)
        if k is None and a.n < MIN_NORMAL_SAMPLES:
            ratio_ok[:] = False  # a plain sd of a few samples: only the zero rules below apply
        # every one of the N samples 0 (mean and standard error 0) is plausible for a rarely active neuron
        p_hi = (pm.active + 5.0 * np.sqrt(pm.active) + 10.0) / pm.n
        all_zero_ok = (m == 0) & (s == 0) & (a.n * p_hi <= 20.7)  # (1 − p)^N ≥ 1e-9
        ratio_ok &= ~all_zero_ok
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.where(ratio_ok, (s / np.where(ratio_ok, expected, 1.0)) ** 2, 1.0)
        bad = ratio_ok & ((q < lo) | (q > hi))
        # the controls explain the layer exactly: the stored standard error must be ~0 as well
        bad_explained = explained & np.isfinite(s) & (s * root_n > 1e-3 * pm.y_sd)
        # plain: a positive mean has spread, and a zero mean has none (every sample was 0)
        bad_zero = (not cv) & (a.n >= 2) & np.isfinite(s) & (((m > 0) & (s == 0)) | ((m == 0) & (s > 0)))
        for mask, why in ((bad, None), (bad_explained, "explained"), (bad_zero, "zero")):
            if mask.any():
                layer, j = (int(v) for v in np.argwhere(mask)[0])
                count = int(mask.sum())
                head = f"{_where(ds, a)} layer {layer + 1} neuron {j}" + (f" (and {count - 1} more)" if count > 1 else "")
                if why is None:
                    problems.append(f"{head}: stored standard error {s[layer, j]:.4g} is {math.sqrt(q[layer, j]):.3g}x "
                                    f"what a fresh pilot gives ({expected[layer, j]:.4g}; allowed "
                                    f"{math.sqrt(lo[layer, j]):.3g}x to {math.sqrt(hi[layer, j]):.3g}x)")
                elif why == "explained":
                    problems.append(f"{head}: the controls explain this layer exactly (pilot residual sd "
                                    f"{pm.sd[layer, j]:.2g}), but the stored standard error is {s[layer, j]:.4g}")
                else:
                    problems.append(f"{head}: stored standard error {s[layer, j]:.4g} with mean {m[layer, j]:.6g} "
                                    "(plain: a positive mean has spread, a zero mean has none)")
        for layer in range(first, ds.depth):
            sel = ratio_ok[layer]
            if not sel.any():
                continue
            width_live = int(sel.sum())
            qbar = float(np.mean(q[layer][sel]))
            pilot_part = float(np.mean(np.sqrt(SKEW_SAFETY * np.maximum(pm.kurt[layer][sel] - 1.0, 2.0) / pm.n)))
            if q_sd_stored is not None:
                # batch-means variances of correlated neurons: Var(mean q) = (2/k)·‖R‖_F²/w² (Wishart)
                stored_part = q_sd_stored * min(1.0, pm.corr_fro[layer] / width_live)
            else:
                stored_part = float(np.mean(np.sqrt(np.maximum(pm.kurt[layer][sel] - 1.0, 2.0) / a.n)))
            sd = math.hypot(pilot_part, stored_part)
            agg.setdefault(layer, []).append((qbar, sd, _where(ds, a)))
    n_layer_tests = max(1, sum(len(v) for v in agg.values()) + len(agg))
    z_agg = -NormalDist().inv_cdf(p_overall / P_FAMILY_SHARE / n_layer_tests)
    for layer, items in sorted(agg.items()):
        qs = np.array([q for q, _, _ in items])
        sds = np.array([sd for _, sd, _ in items])
        low_mlp = (1.0 - qs) / np.where(sds > 0, sds, np.inf) > z_agg
        if low_mlp.any():
            r = int(np.argmax(low_mlp))
            others = f" (and {int(low_mlp.sum()) - 1} more MLP(s))" if low_mlp.sum() > 1 else ""
            problems.append(f"{items[r][2]} layer {layer + 1}{others}: stored standard errors are, on average, "
                            f"{math.sqrt(max(float(qs[r]), 0.0)):.3g}x what a fresh pilot gives (lower limit "
                            f"{math.sqrt(max(0.0, 1.0 - z_agg * float(sds[r]))):.3g}x)")
        total_sd = math.sqrt(float(np.sum(sds**2))) / len(qs)
        qmean = float(np.mean(qs))
        if total_sd > 0 and (1.0 - qmean) / total_sd > z_agg:
            problems.append(f"layer {layer + 1}: over {len(qs)} MLP(s) the stored standard errors are, on average, "
                            f"{math.sqrt(max(qmean, 0.0)):.3g}x what fresh pilots give (lower limit "
                            f"{math.sqrt(max(0.0, 1.0 - z_agg * total_sd)):.3g}x): error bars understated")
        # the upper side: a chi-square's upper tail is the heavier one, so its limit is widened by a quarter
        # and one standard deviation more (at the thousands of degrees of freedom a dataset pools, ample)
        upper = 1.0 + (1.25 * z_agg + 1.0) * total_sd
        if total_sd > 0 and qmean > upper:
            problems.append(f"layer {layer + 1}: over {len(qs)} MLP(s) the stored standard errors are, on average, "
                            f"{math.sqrt(qmean):.3g}x what fresh pilots give (upper limit {math.sqrt(upper):.3g}x): "
                            "error bars overstated")
    if problems:
        report.fail("stderr size", problems, 3)
        return
    how = "exact chi-square bounds on the batch means" if cv else "the sample sds' spread"
    report.check("stderr size", True, f"{len(live)} MLP(s), {tested} neurons of layers {first + 1}-{ds.depth}: stored "
                 f"standard errors match a fresh pilot's sd/√N in both directions ({how}; per neuron, per MLP and "
                 f"layer, and per layer overall; p={p_overall / P_FAMILY_SHARE:g})")


def check_avg_variance(ds, audited: list[Audited], report, p_overall: float) -> None:
    """``avg_variance`` against its definition (plain: the stored final-layer standard errors) and the pilot."""
    problems: list[str] = []
    relation = 0
    cv = is_cv_block(ds.md.get("estimator"))
    z_lim = bonferroni_z(len(audited), p_overall / P_FAMILY_SHARE)
    for a in audited:
        s, i = a.split, a.index
        v = float(s.avg_var[i])
        final = s.final[i].astype(np.float64)
        # a dead last layer (every final mean 0) has variance exactly 0, and so has a one-sample bake
        alive = bool(np.any(s.final[i] > 0)) and a.n >= 2
        # control variates: Σy²/N − mean² around the control-variate mean, which is not the sample
        # mean, so a few-sample bake can store a small negative value; only finiteness is required
        if not math.isfinite(v) or (not cv and (v < 0 or (alive and v <= 0))):
            problems.append(f"{_where(ds, a)}: avg_variance {v} is not a positive finite variance")
            continue
        if not cv and s.stderr is not None and a.n >= 2 and np.isfinite(s.stderr[i, -1]).all():
            se = s.stderr[i, -1].astype(np.float64)
            pop = se * se * (a.n - 1.0)  # Σ(y − mean)²/N per neuron, from sqrt(s²/N) stored in float32
            want = float(np.mean(pop))
            # float32 storage of se (2^-24 relative, squared) and 0.16's float32-rounded mean in the subtraction
            tol = 4.0 * EPS32 * want + float(np.mean(2.0 * np.abs(final) * np.spacing(np.abs(s.final[i])))) + 1e-300
            relation += 1
            if not abs(v - want) <= tol:
                problems.append(f"{_where(ds, a)}: avg_variance {v:.9g}, but its stored final-layer standard errors give "
                                f"mean_j(stderr_j²·(N−1)) = {want:.9g} (plain estimator: they must agree within "
                                f"float32 rounding, {tol:.2g})")
                continue
        pm = a.pilot
        if pm is None or a.n < MIN_NORMAL_SAMPLES:
            continue  # a variance of a few samples is too skewed to hold to a normal bound (plain: the relation holds it)
        want = float(np.mean(pm.y_var[-1]))
        # the pilot's error and the stored value's own (its N samples): the sd of a mean of correlated
        # estimates is at most the mean of their sds
        sd = float(np.mean(pm.y_var_sd[-1])) * math.sqrt(1.0 + pm.n / a.n)
        skew_term = SKEW_SAFETY * float(np.mean(np.sqrt(np.maximum(pm.kurt[-1], 3.0)))) / math.sqrt(pm.n) * (z_lim**2 - 1) / 6
        lim = (z_lim + skew_term) * sd + 1e-12
        if abs(v - want) > lim:
            problems.append(f"{_where(ds, a)}: avg_variance {v:.6g}, a fresh pilot's final-layer variance is "
                            f"{want:.6g} (allowed ±{lim:.2g})")
    if problems:
        report.fail("avg_variance", problems, 2)
        return
    var = np.array([float(a.split.avg_var[a.index]) for a in audited]) if audited else np.zeros(1)
    what = []
    if relation:
        what.append(f"{relation} MLP(s) equal mean_j(stderr_j²·(N−1)) within float32 rounding")
    piloted = sum(a.pilot is not None for a in audited)
    if piloted:
        what.append(f"{piloted} within the spread of a fresh pilot's final-layer variance")
    report.check("avg_variance", True, f"finite (range {var.min():.4g} to {var.max():.4g}); " + "; ".join(what or ["no pilot"]))
