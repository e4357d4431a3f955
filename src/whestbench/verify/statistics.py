"""verify's statistics: the estimator, a target bake's promise (each MLP's planning pilot run again),
layer 1 against its exact value and the stored standard errors' form; then the audit pilot's checks
of ``plausibility`` (``pilot=False`` leaves those out, and only those).

Layer 1 has a closed form. With ``x ~ N(0, I)`` the pre-activation of neuron j is ``N(0, s_j²)``,
``s_j = ‖W₁[:, j]‖``, so ``E relu = s_j/√(2π)`` and ``Var relu = s_j²/2 − s_j²/(2π)``. Each stored
layer-1 mean is turned into a z-score with the standard error ``sqrt(Var relu / N)``; the largest
|z| must stay under a Bonferroni threshold, and their mean square under a chi-square one.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from whestbench.compute.audit import MIN_NORMAL_SAMPLES, P_OVERALL, bonferroni_z, chi2_mean_limit
from whestbench.compute.estimation import (
    CV_TARGET_RULE, EXCEED_PROBABILITY, MIN_RELIABLE_BATCHES, TARGET_RULE, Estimation, is_cv_block,
)
from whestbench.compute.estimators import (
    RELU_VAR, SQRT_2PI, chosen_stderr, cv_floor_samples, enough_batches, is_check_point, layer1_means, meets_target,
    relu_second_moments,
)
from whestbench.events import Event
from whestbench.format.schema import DatasetMeta, is_positive_int
from whestbench.verify import plausibility
from whestbench.verify.report import VerifyReport
from whestbench.verify.scan import DatasetScan
from whestbench.work.units import _planned


def _ids(ds: DatasetScan, rows) -> str:
    """``mlp_id 0, 3, 5`` (``split:id`` in a multi-split dataset), the first 20."""
    ids = ", ".join(f"{s.name}:{int(s.ids[i])}" if ds.is_multi else str(int(s.ids[i])) for s, i in rows[:20])
    return f"mlp_id {ids}{' ...' if len(rows) > 20 else ''}"


def run_statistics(ds: DatasetScan, report: VerifyReport, *, n_check: int | None, z_max: float | None,
                sample_mlps: int | None = None, sample_seed: int = 0, pilot: bool = True, on_event=None) -> None:
    """The statistical checks; ``pilot=False`` leaves out the audit pilot's (keeping the estimator, the
    target with its planning pilots, layer 1 against its closed form, the stored standard errors), as a
    re-run's check does."""
    rows = list(ds.rows())[:n_check]  # all of them when n_check is None
    if not rows:
        report.skip("layer-1 means", "the dataset has no rows")
        return
    total = sum(len(s.ids) for s in ds.splits)
    report.coverage["statistics"] = (f"{_ids(ds, rows)} only (--n-check {n_check})" if len(rows) < total
                                     else "the 1 MLP" if total == 1 else f"all {total:,} MLPs")
    if sample_mlps is not None and sample_mlps < len(rows):
        rows = plausibility.choose_rows(rows, sample_mlps, sample_seed)
        report.coverage["statistics"] = f"{_ids(ds, rows)} (random, --sample-seed {sample_seed})"
        report.check("sample", True, f"statistics on {len(rows)} MLP(s) chosen at random with --sample-seed "
                     f"{sample_seed}: {_ids(ds, rows)} (integrity covered every row)")
    if not pilot:  # the checks above the audit pilot only: say so, never "all N MLPs" alone
        report.coverage["statistics"] += (" for layer 1's exact means, the estimator, the target and the standard "
                                          "errors' form; the audit pilot (layers 2.., avg_variance, error-bar size) "
                                          "did not run")
    counts = np.array([ds.samples(s, i) for s, i in rows], dtype=np.float64)  # n_samples, or where a target stopped
    n = np.maximum(counts, 1.0)[:, None]  # an impossible count (< 1) is named by the target check
    sigma = np.stack([s.sigma1[i] for s, i in rows])  # (m, w) f64
    mean1 = np.stack([s.means[i, 0] for s, i in rows]).astype(np.float64)  # (m, w)
    exact = sigma / SQRT_2PI
    est = ds.md.get("estimator")  # schema.validate_metadata refused an unknown one
    if isinstance(est, dict):  # none: a whestbench 0.16 dataset, plain means and no standard errors
        report.check("estimator", True, f"{est.get('name')} (version {est.get('version')})")
    if ds.md.get("target_stderr") is not None and on_event is not None:
        on_event(Event("stage", message="target check: each MLP's count and stop against its planning pilot"))
    _target_checks(ds, rows, report)
    if is_cv_block(ds.md.get("estimator")):
        _exact_layer1(rows, mean1, exact, report)
        _stderr_checks(ds, rows, counts, None, report)
    else:
        se = sigma * np.sqrt(RELU_VAR / n)
        with np.errstate(divide="ignore", invalid="ignore"):
            # A zero weight column gives a neuron that is always 0: its mean must be exactly 0.
            z = np.where(se > 0, (mean1 - exact) / np.where(se > 0, se, 1.0), np.where(mean1 == exact, 0.0, np.inf))
        k = z.size
        thr = z_max if z_max is not None else bonferroni_z(k)
        r, j = np.unravel_index(int(np.argmax(np.abs(z))), z.shape)
        s, i = rows[r]
        where = f"{s.name} " if ds.is_multi else ""
        max_z = float(np.abs(z[r, j]))
        mean_z2 = float(np.mean(z**2))
        chi_thr = chi2_mean_limit(len(rows))
        signed, signed_lim, signed_what = _layer1_signed(ds, rows, z, n[:, 0])
        ok = max_z <= thr and mean_z2 <= chi_thr and signed <= signed_lim
        scope = f"{len(rows)} MLP(s) x {ds.width} neurons" + (f" (first {n_check})" if n_check is not None else "")
        report.check("layer-1 means", ok, f"{scope} vs exact ‖W₁[:,j]‖/√(2π): max |z| = {max_z:.2f} at {where}mlp_id "
                     f"{int(s.ids[i])} neuron {j} (limit {thr:.2f}"
                     f"{'' if z_max is not None else f', Bonferroni p={P_OVERALL:g} over {k}'}); "
                     f"mean z² = {mean_z2:.2f} (limit {chi_thr:.2f}){signed_what}")
        _stderr_checks(ds, rows, counts, se, report)
    if not pilot:
        return
    audited = plausibility.audit_rows(ds, rows, n[:, 0], on_event=on_event)
    plausibility.check_layer_means(ds, audited, report, P_OVERALL)
    plausibility.check_avg_variance(ds, audited, report, P_OVERALL)
    plausibility.check_stderr_size(ds, audited, report, P_OVERALL)


def _target_checks(ds: DatasetScan, rows, report: VerifyReport) -> None:
    """A bake to a target standard error keeps its promise: each MLP used at most ``n_samples``,
    stopped only at a check point, and an MLP that stopped early has every chosen standard error
    at or under the target."""
    target = ds.md.get("target_stderr")
    if target is None:
        return
    value, layer = target["value"], target["layer"]  # valid: schema.validate_metadata refused the dataset otherwise
    if any(s.n_used is None for s, _ in rows):
        report.check("target", False, "a bake to a target standard error must store n_samples_used; the column is missing")
        return
    step = DatasetMeta.of(ds.md).sampler(rows[0][0].name).get("block_size")
    est = DatasetMeta.of(ds.md).estimator
    batch = est.get("batch_samples")
    cv = is_cv_block(est)
    cap = ds.n_samples
    if target.get("rule") in (TARGET_RULE, CV_TARGET_RULE):
        _planned_counts(ds, rows, report, float(value), layer, step, cv, batch)
        return
    problems = []
    for s, i in rows:
        used = int(s.n_used[i])
        who = f"mlp_id {int(s.ids[i])}"
        if not 1 <= used <= cap:
            problems.append(f"{who} used {used:,} samples, outside 1..n_samples={cap:,}")
        elif used < cap:
            if is_positive_int(step) and (used % step or not is_check_point(used // step)):
                problems.append(f"{who} stopped at {used:,} samples, not a check point (multiples of {step:,})")
            elif cv and is_positive_int(batch) and not enough_batches(used, batch):
                problems.append(f"{who} stopped at {used:,} samples, before {MIN_RELIABLE_BATCHES} batches")
            elif s.stderr is not None and not meets_target(s.stderr[i], np.float32(value), layer):
                problems.append(f"{who} stopped early at {used:,} samples with a standard error of "
                                f"{float(np.nanmax(chosen_stderr(s.stderr[i], layer))):.4g} > target {value:g}")
        if len(problems) >= 3:
            break
    report.check("target", not problems, "; ".join(problems) if problems else
                 f"{_stops(ds, rows, cap)} (sequential rule of whestbench 0.17.0 bakes: each early stop at a check point, "
                 f"its standard errors at or under the target {value:g}, {layer} layer)")


def _layer1_signed(ds: DatasetScan, rows, z: np.ndarray, n: np.ndarray) -> tuple[float, float, str]:
    """The signed check of layer 1: ``(worst |Σz| / sd, its limit, what to print)``. Per MLP, the sum
    of its neurons' z-scores has variance ``1ᵀR1``, R the exact correlation of ``relu(x W₁)`` (the
    arc-cosine kernel), so a shift of every mean by a fraction of a standard error shows; and over the
    dataset, per-MLP sums add. MLPs under 1,000 samples (too skewed) or whose weights do not re-derive
    are left out."""
    sums, variances, worst, where = [], [], 0.0, ""
    for (s, i), zr, count in zip(rows, z, n):
        if count < MIN_NORMAL_SAMPLES or not np.all(np.isfinite(zr)):
            continue
        w = s.rederived_weights(i, ds.width, ds.depth)
        if w is None:
            continue
        w1 = w[0].astype(np.float64)
        mu = layer1_means(w1)
        cov = relu_second_moments(w1) - np.outer(mu, mu)
        sd = np.sqrt(np.maximum(np.diag(cov), 0.0))
        live = sd > 0
        if not live.any():
            continue
        corr = cov[np.ix_(live, live)] / np.outer(sd[live], sd[live])
        total, var = float(zr[live].sum()), float(corr.sum())
        sums.append(total)
        variances.append(var)
        if abs(total) / math.sqrt(var) > worst:
            worst, where = abs(total) / math.sqrt(var), f"mlp_id {int(s.ids[i])}"
    if not sums:
        return 0.0, math.inf, ""
    lim = bonferroni_z(len(sums) + 1)
    overall = abs(sum(sums)) / math.sqrt(sum(variances))
    text = (f"; signed: per MLP worst |Σz|/sd = {worst:.2f} at {where}, over the dataset {overall:.2f} "
            f"(limit {lim:.2f}; sd from the exact correlations of relu(x W₁))")
    return max(worst, overall), lim, text


def _stops(ds: DatasetScan, rows, cap: int) -> str:
    """How the MLPs of a target bake stopped, from the real counts."""
    early = sum(int(s.n_used[i]) < cap for s, i in rows)
    est = DatasetMeta.of(ds.md).estimator
    step = DatasetMeta.of(ds.md).sampler(rows[0][0].name).get("block_size")  # rows: never empty (run_statistics returns first)
    if is_cv_block(est) and isinstance(step, int) and isinstance(est.get("batch_samples"), int):
        floor = cv_floor_samples(cap, step, est["batch_samples"])
        if floor < cap and all(int(s.n_used[i]) == floor for s, i in rows):
            return (f"all {len(rows)} MLP(s) stopped at {floor:,} samples, the control-variate floor "
                    f"({MIN_RELIABLE_BATCHES} batches): the floor, not the target, decided every count")
    if early == len(rows):
        return f"all {early} MLP(s) stopped before n_samples={cap:,}"
    if early == 0:
        return f"none of the {len(rows)} MLP(s) stopped before n_samples={cap:,} (the cap decided every count)"
    return f"{early} of {len(rows)} MLP(s) stopped before n_samples={cap:,}, {len(rows) - early} used all of it"


def _planned_counts(ds: DatasetScan, rows, report: VerifyReport, value: float, layer: str, step, cv: bool,
                    batch) -> None:
    """The two-stage rule: each MLP's count is what its own pilot plans (``estimators.planned_samples``),
    a function of the seed and the recipe alone: recompute it and require equality."""
    if not is_positive_int(step) or (cv and not is_positive_int(batch)):
        report.check("target", False, "a target bake must record its sampler's block_size (and, for control "
                     "variates, batch_samples): the planned counts cannot be recomputed (was metadata.json edited?)")
        return
    estimation = Estimation.from_metadata(ds.md)
    min_samples = estimation.min_samples(batch)
    problems, checked = [], 0
    for s, i in rows:
        seed = int(s.seeds[i])
        if s.rederived_weights(i, ds.width, ds.depth) is None:
            continue  # weights that do not re-derive: the weights check has said so
        want = _planned(seed, ds.width, ds.depth, estimation, step, ds.n_samples, min_samples, batch if cv else 0)
        used = int(s.n_used[i])
        checked += 1
        if used != want:
            problems.append(f"mlp_id {int(s.ids[i])} used {used:,} samples; its pilot plans {want:,} for a standard "
                            f"error of {value:g} ({layer} layer)")
        if len(problems) >= 3:
            break
    report.check("target", not problems, "; ".join(problems) + " (n_samples_used or the target was edited, or the "
                 "bake is wrong)" if problems else f"{_stops(ds, rows, ds.n_samples)}; all {checked} counts equal what "
                 f"each MLP's own pilot plans for a standard error of {value:g} ({layer} layer), fixed before "
                 f"sampling (unbiased){_against_target(rows, value, layer, estimation)}")


def _against_target(rows, value: float, layer: str, estimation: Estimation) -> str:
    """How the stored standard errors came out against the target: the largest ratio to E (per MLP, its
    largest chosen one), and how many MLPs ended above E, beside what the rule promises."""
    worst = [float(np.nanmax(chosen_stderr(s.stderr[i], layer), initial=0.0)) / value
             for s, i in rows if s.stderr is not None]
    if not worst:
        return ""
    above = sum(r > 1.0 for r in worst)
    promise = (f"the rule plans at most {EXCEED_PROBABILITY:.0%} of MLPs above E" if estimation.target_rule == CV_TARGET_RULE
               else "the rule aims at about E, not at most E")
    return (f"; stored standard errors vs E: largest {max(worst):.3g}x, {above} of {len(worst)} MLP(s) above E "
            f"({promise})")


def _exact_layer1(rows, mean1: np.ndarray, exact: np.ndarray, report: VerifyReport) -> None:
    """The control-variate estimator stores layer 1's exact means: equal within float32 rounding."""
    tol = 2 * np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64) + 1e-12  # stored in float32
    bad = np.abs(mean1 - exact) > tol
    if bad.any():
        r, j = (int(v) for v in np.argwhere(bad)[0])
        s, i = rows[r]
        report.check("layer-1 means", False, f"control-variate estimator: layer 1 must be the exact ‖W₁[:,j]‖/√(2π); "
                     f"mlp_id {int(s.ids[i])} neuron {j} is {mean1[r, j]:.9g}, exact {exact[r, j]:.9g}")
    else:
        report.check("layer-1 means", True, f"{len(rows)} MLP(s): exact ‖W₁[:,j]‖/√(2π) within float32 rounding "
                     "(control-variate estimator)")


def undefined_stderr(md: dict[str, Any], n: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """(m, depth, w) bool: where the estimator has no standard error and stores NaN — plain: fewer
    than 2 samples; control variates: layers 2.. with fewer than 2 batches (layer 1 is exact)."""
    est = DatasetMeta.of(md).estimator
    undefined = np.zeros(shape, dtype=bool)
    if is_cv_block(est):
        batch = est.get("batch_samples")
        if is_positive_int(batch):
            undefined[:, 1:] = (np.ceil(n / batch) < 2)[:, None, None]
    else:
        undefined[:] = (n < 2)[:, None, None]
    return undefined


def _stderr_checks(ds: DatasetScan, rows, n: np.ndarray, analytic_se: np.ndarray | None, report: VerifyReport) -> None:
    """The stored standard errors: finite and >= 0 (NaN where the estimator has none), control
    variates' layer 1 exactly 0, and (plain estimator) layer 1's equal to the exact
    ``sqrt(Var relu / N)`` within the sampling error of a sample standard deviation (``n``: the rows' counts)."""
    if any(s.stderr is None for s, _ in rows):
        report.skip("stderr", "no all_layer_stderr column (a whestbench 0.16 dataset)")
        return
    se = np.stack([s.stderr[i] for s, i in rows]).astype(np.float64)  # (m, depth, w)
    undefined = undefined_stderr(ds.md, n, se.shape)
    bad = np.where(undefined, ~np.isnan(se), ~np.isfinite(se) | (se < 0))
    if bad.any():
        r, layer, j = (int(v) for v in np.argwhere(bad)[0])
        s, i = rows[r]
        want = "NaN (too few samples for one)" if undefined[r, layer, j] else "finite and >= 0"
        report.check("stderr", False, f"{int(bad.sum())} standard error(s) not {want}, first mlp_id {int(s.ids[i])} "
                     f"layer {layer + 1} neuron {j}: {se[r, layer, j]}")
        return
    cv = is_cv_block(ds.md.get("estimator"))
    if cv and np.any(se[:, 0] != 0):
        r, j = (int(v) for v in np.argwhere(se[:, 0] != 0)[0])
        s, i = rows[r]
        report.check("stderr", False, f"control-variate estimator: layer 1 is exact, so its standard error must be 0; "
                     f"mlp_id {int(s.ids[i])} layer 1 neuron {j} is {se[r, 0, j]:.4g}")
        return
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a layer that is all NaN: "nan" in the summary
        detail = "per layer, median (max): " + ", ".join(
            f"{np.nanmedian(se[:, k]):.3g} ({np.nanmax(se[:, k]):.3g})" for k in range(se.shape[1]))
    if undefined.any():
        detail += f"; NaN where too few samples for one ({int(undefined.any(axis=(1, 2)).sum())} MLP(s))"
    if analytic_se is None:
        report.check("stderr", True, f"finite and >= 0; {detail}")
        return
    live = (analytic_se > 0) & ~undefined[:, 0]
    # a sample sd's relative error is about sqrt((kurtosis - 1) / 4N); relu of a Gaussian: kurtosis < 6
    tol = 6.0 * np.sqrt(5.0 / (4.0 * np.maximum(n, 1.0)))[:, None] + 1e-3
    ratio = np.where(live, se[:, 0] / np.where(live, analytic_se, 1.0), 1.0)
    bad = live & (np.abs(ratio - 1.0) > tol)
    if bad.any():
        r, j = (int(v) for v in np.argwhere(bad)[0])
        s, i = rows[r]
        report.check("stderr", False, f"layer-1 standard error of mlp_id {int(s.ids[i])} neuron {j} is {se[r, 0, j]:.4g}, "
                     f"exact sqrt(Var relu / N) = {analytic_se[r, j]:.4g}")
    else:
        report.check("stderr", True, f"layer 1 matches the exact sqrt(Var relu / N) (max ratio off by "
                     f"{float(np.max(np.abs(ratio - 1.0))):.2g}); {detail}")


