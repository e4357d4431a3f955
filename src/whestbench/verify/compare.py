"""Compare a dataset with another bake of (some of) the same seeds: ``whest dataset verify --against``.

MLPs are matched by ``mlp_seed``; their weights must be byte-identical, and their ground truth is
compared as strictly as the two bakes allow (``compare_mode``):

- **bits**: same sampler and recorded arithmetic (the seed page's bit-equivalence);
- **gate**: philox on both (same samples), other arithmetic: held to SPEC §3's precision gate;
- **f32**: pcg64 on both, arithmetic differs or is unrecorded: within float32 rounding (SPEC §2 b);
- **stats**: the samples or the estimator differ (another sampler or estimator, or torch.randn under
  other device/chunking/batch): z-scores of the differences in units of the two bakes' stored
  standard errors, or of per-neuron variances from a pilot run where a bake stores none.

``arithmetic_identity`` says what besides the samples decides the rounding. The other bake's rows are
read with ``verify/scan.py``'s ``scan_split`` (its weights not re-derived); the results are checks
added to ``verify``'s report.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from whestbench.compute.audit import MIN_ACTIVE_VARIANCE, MIN_SPREAD_SAMPLES, bonferroni_z, chi2_mean_limit, pilot_moments, t_as_z
from whestbench.compute.estimation import is_cv_block
from whestbench.compute.estimators import enough_batches, n_batches
from whestbench.compute.mlp import weights_for_seed
from whestbench.compute.precision import GATE_MAX_ABS, GATE_MAX_BIAS, GATE_VAR_RTOL, gate_figures, gate_passes
from whestbench.format.reader import DatasetDir, open_dataset
from whestbench.format.schema import DatasetMeta, columns_for, infer_sampler, is_positive_int, positive_int
from whestbench.verify.scan import DatasetScan, scan_split
from whestbench.verify.report import VerifyReport
from whestbench.errors import InvalidDatasetError


# The seed page's tolerance for avg_variance between bit-equivalent bakes: the final
# (sum_sq/N - mean²) subtraction may differ by ~1 float64 ulp.
BIT_RTOL, BIT_ATOL = 1e-12, 1e-15
# SPEC §2 (b): pcg64 bakes on another machine or BLAS kernel agree within float32 rounding; nearly
# dead neurons move by ~1e-10 when a rare activation flips sign, hence the absolute term.
F32_ULPS, F32_ATOL, F32_VAR_RTOL = 4, 1e-6, 1e-6


def arithmetic_identity(md: dict[str, Any]) -> dict[str, Any] | None:
    """What besides the samples decides the rounding of the sums, or None when not recorded.

    Two bakes with equal identities must be bit-identical; otherwise only a tolerance applies.
    CPU: the BLAS library, version and kernel. torch: device, GPU, torch version, kernel or
    precision, and (0.16 torch bakes, whose sums depend on chunking) chunk size and batch.
    """
    ident: dict[str, Any] = {"backend": md.get("backend"), "sampler": md.get("sampler")}
    recorded = False
    blas = md.get("blas")
    if isinstance(blas, dict) and blas.get("library") not in (None, "unknown"):
        ident["blas"] = {k: blas.get(k) for k in ("library", "version", "kernel")}
        recorded = True
    for key in ("device", "cuda_device_name", "torch_version", "kernel", "precision", "matmul_precision"):
        if key in md:
            ident[key] = md[key]
            recorded = recorded or key == "device"
    if md.get("backend") == "torch" and not isinstance(md.get("sampler"), dict):
        ident |= {key: md.get(key) for key in ("chunk_size", "mlps_per_batch")}
    return ident if recorded else None


def _describe_arith(md: dict[str, Any]) -> str:
    ident = arithmetic_identity(md)
    if ident is None:
        return f"{md.get('backend')}, arithmetic not recorded"
    parts = [str(md.get("backend"))]
    if "blas" in ident:
        parts += [str(ident["blas"].get(k)) for k in ("library", "version", "kernel")]
    parts += [str(ident[key]) for key in ("device", "cuda_device_name", "kernel", "precision") if key in ident]
    return " ".join(parts)


def compare_mode(a: DatasetScan, b: DatasetScan) -> tuple[str, str]:
    """How strictly the two bakes' ground truth can agree: ``(mode, reason)``, a mode of the module docstring."""
    sa, sb = infer_sampler(a.md), infer_sampler(b.md)
    ia, ib = arithmetic_identity(a.md), arithmetic_identity(b.md)
    if sa != sb:
        return "stats", f"different samplers ({sa} vs {sb}): different samples, compared statistically"
    ea, eb = _estimator(a.md), _estimator(b.md)
    if ea != eb:
        return "stats", f"different estimators ({ea} vs {eb}): different estimates of the same means, compared statistically"
    if ia is not None and ia == ib:
        return "bits", f"same sampler ({sa}) and arithmetic ({_describe_arith(a.md)}): must be bit-identical"
    arith = f"{_describe_arith(a.md)} vs {_describe_arith(b.md)}"
    if sa == "philox":
        return "gate", (f"both philox, so the same samples; arithmetic differs ({arith}): the difference is "
                        "arithmetic error only, held to the precision gate")
    if sa == "pcg64":
        return "f32", f"both pcg64 (same samples), arithmetic differs or is unrecorded: {arith}"
    # torch.randn (0.16's torch path): which MLP gets which draws depends on device, chunk size and
    # batch, so bakes that differ in any of them drew different samples.
    return "stats", f"{sa} bakes with other device, chunking or batch draw other samples ({arith}): compared statistically"


def _estimator(md: dict) -> str:
    est = md.get("estimator")
    return est.get("name", "plain") if isinstance(est, dict) else "plain"


def compare_with(a: DatasetScan, other: "Path | DatasetDir", report: VerifyReport, *, n_check: int | None,
                 z_max: float | None, name: str = "against") -> None:
    """Add the ``{name}: …`` checks of ``a`` (already scanned by ``verify``) against the bake at ``other``
    (``verify --against``, or ``verify --recompute``'s fresh bake of some of its MLPs; an open
    ``DatasetDir`` is not read again)."""
    handle = open_dataset(other)
    other = handle.path
    try:
        md = handle.meta(allow_partial=True).md
    except InvalidDatasetError as e:
        report.check(f"{name}: metadata", False, str(e))
        return
    width, depth, n_samples = (positive_int(md, k) for k in ("width", "depth", "n_samples"))
    if (width, depth) != (a.width, a.depth):
        report.check(f"{name}: shape", False, f"{other} is width={width} depth={depth}; {a.path} is width={a.width} depth={a.depth}")
        return
    if n_samples is None:
        report.check(f"{name}: metadata", False, f"{other}: n_samples missing or not a positive integer")
        return
    b = DatasetScan(other, md, width, depth, n_samples, [])
    try:
        for split in DatasetMeta.of(md).splits:
            b.splits.append(scan_split(handle, split, width, depth, rederive=False, columns=columns_for(md)))
    except InvalidDatasetError as e:
        report.check(f"{name}: readable", False, str(e))
        return
    b_rows = {s.seeds[i]: (s, i) for s, i in b.rows()}
    shared = [(sa, i, *b_rows[sa.seeds[i]]) for sa, i in a.rows() if sa.seeds[i] in b_rows]
    if not shared:
        report.check(f"{name}: shared MLPs", False, f"no mlp_seed in common with {other}: nothing to compare")
        return
    if n_check is not None:
        shared = shared[:n_check]
    report.check(f"{name}: shared MLPs", True, f"{len(shared)} MLP(s) matched by mlp_seed ({len(b_rows)} in {other})")

    wbad = [sa.ids[i] for sa, i, sb, j in shared if sa.weight_digests[i] != sb.weight_digests[j]]
    report.check(f"{name}: weights", not wbad, f"{len(wbad)} MLP(s) differ, first mlp_id {int(wbad[0])}" if wbad
                 else f"byte-identical for all {len(shared)}")

    targeted = any(s.n_used is not None for s in a.splits) or any(s.n_used is not None for s in b.splits)
    if not targeted and a.n_samples != b.n_samples:  # the seed page's bit-equivalence needs equal n_samples
        report.check(f"{name}: n_samples", False, f"{a.n_samples:,} vs {b.n_samples:,}: different Monte-Carlo "
                     f"estimates, not comparable bit for bit; re-bake with --n-samples {a.n_samples} to compare")
        _judge(a, b, shared, report, name, z_max, "ground truth", False, reason="different n_samples")
        return
    same, other = shared, []
    if targeted:  # MLPs stopped at a target: what counts is the samples each MLP used, not the cap
        same = [p for p in shared if a.samples(p[0], p[1]) == b.samples(p[2], p[3])]
        other = [p for p in shared if a.samples(p[0], p[1]) != b.samples(p[2], p[3])]
        mode, _ = compare_mode(a, b)
        same_target = isinstance(a.md.get("target_stderr"), dict) and a.md.get("target_stderr") == b.md.get("target_stderr")
        if other and mode == "bits" and same_target:
            sa, i, sb, j = other[0]
            report.check(f"{name}: sample counts", False,
                         f"{len(other)} of {len(shared)} MLP(s) used other sample counts, first mlp_id {int(sa.ids[i])}: "
                         f"{a.samples(sa, i):,} vs {b.samples(sb, j):,}; target bakes of the same samples, target and "
                         "arithmetic stop at the same check point (n_samples_used was edited, or a bake is wrong)")
        else:
            report.check(f"{name}: sample counts", True,
                         f"{len(same)} of {len(shared)} MLP(s) used the same number of samples in both bakes"
                         + (f"; {len(other)} used other counts (a target stopped them at other points): "
                            "different Monte-Carlo estimates, compared statistically" if other else ""))
    if same:
        _judge(a, b, same, report, name, z_max, "ground truth", True)
    if other:
        _judge(a, b, other, report, name, z_max, "ground truth, other sample counts", False,
               reason="MLPs that used other sample counts")


def _judge(a: DatasetScan, b: DatasetScan, shared, report: VerifyReport, name: str, z_max: float | None,
           check: str, same_counts: bool, reason: str = "") -> None:
    """The ``{name}: {check}`` verdict on ``shared`` pairs of MLPs. ``same_counts``: every pair used the
    same samples, so the bakes' sampler and arithmetic decide how closely they must agree; otherwise
    they are different estimates, compared statistically (``reason`` says why)."""
    (ma, mb), (fa, fb), (va, vb) = (_stacked(shared, column) for column in ("means", "final", "avg_var"))
    delta = ma.astype(np.float64) - mb.astype(np.float64)
    max_d = float(np.max(np.abs(delta)))
    n_diff = int(np.count_nonzero(ma.view(np.uint32) != mb.view(np.uint32)))
    bit_equal = n_diff == 0 and np.array_equal(fa.view(np.uint32), fb.view(np.uint32))
    bit_identical = bit_equal and bool(np.all(np.isclose(va, vb, rtol=BIT_RTOL, atol=BIT_ATOL)))
    var_rel = float(np.max(np.abs(va - vb) / np.maximum(np.abs(vb), 1e-300)))
    diffs = f"max |Δmean| = {max_d:.3g} ({n_diff} of {delta.size} values differ), max rel Δ avg_variance = {var_rel:.3g}"

    if not same_counts:
        _compare_stats(a, b, shared, delta, report, name, z_max, reason, check=check)
        _spread_ratio(a, b, shared, report, name, check)
        return
    mode, reason = compare_mode(a, b)
    if mode == "stats":
        _spread_ratio(a, b, shared, report, name, check)
    _judge_stderr(shared, report, name, mode)
    if mode == "bits":
        head = "bit-identical" if bit_identical else "NOT bit-identical"
        report.check(f"{name}: {check}", bit_identical,
                     f"{head} ({reason}); means exact, avg_variance rtol={BIT_RTOL:g} atol={BIT_ATOL:g}: {diffs}")
    elif mode == "gate":
        # the precision gate's one implementation, MLP by MLP (each MLP's per-layer bias, the worst taken)
        figures = [gate_figures(x, y) for x, y in zip(ma, mb)]
        gate_abs, gate_bias = max(f[0] for f in figures), max(f[1] for f in figures)
        var_ok = bool(np.all(np.isclose(va, vb, rtol=GATE_VAR_RTOL, atol=0)))
        ok = gate_passes(gate_abs, gate_bias) and var_ok
        report.check(f"{name}: {check}", ok, f"{'bit-identical' if bit_equal else 'not bit-identical'} ({reason}): "
                     f"{diffs}; max |mean Δ| per layer = {gate_bias:.3g} (gate: max |Δ| <= {GATE_MAX_ABS:g}, "
                     f"|mean Δ| <= {GATE_MAX_BIAS:g} per layer, avg_variance rtol {GATE_VAR_RTOL:g})")
    elif mode == "f32":
        both = np.maximum(np.abs(ma), np.abs(mb))
        tol = F32_ULPS * np.spacing(both).astype(np.float64) + F32_ATOL
        ok = bool(np.all(np.abs(delta) <= tol)) and var_rel <= F32_VAR_RTOL
        report.check(f"{name}: {check}", ok, f"bit-identical: {diffs}; {reason}" if bit_identical else
                     f"NOT bit-identical, {'within' if ok else 'BEYOND'} float32 rounding: {diffs} (tolerance "
                     f"{F32_ULPS} float32 ulps + {F32_ATOL:g}, avg_variance {F32_VAR_RTOL:g} relative); {reason}; "
                     "bit equality needs the same machine and BLAS kernel")
    else:
        _compare_stats(a, b, shared, delta, report, name, z_max, reason, check=check)


# Standard errors under the gate or float32 rounding: a square root of a difference of sums, so a
# relative arithmetic error of the sums (~1e-6) can grow where the variance is small against the mean².
SE_GATE_RTOL, SE_F32_RTOL = 1e-3, 1e-4


SPREAD_MEDIAN = (0.8, 1.25)  # per MLP and layer: the median ratio of two honest bakes' stderr·√N
SPREAD_NEURON = (0.2, 5.0)  # per neuron: a gross misstatement, whatever the neuron's sparsity


def _spread_ratio(a: DatasetScan, b: DatasetScan, shared, report: VerifyReport, name: str, check: str) -> None:
    """``{name}: standard errors, …``: bakes of other samples with the same estimator estimate the same
    per-sample spread: ``stderr·√N`` of the two must agree (per MLP and layer, the median ratio within
    0.8–1.25; per neuron within 0.2–5), so neither side's error bars can be scaled to pass the z-test."""
    if _estimator(a.md) != _estimator(b.md) or any(sa.stderr is None or sb.stderr is None for sa, _, sb, _ in shared):
        return
    def rough(ds, s, i) -> bool:  # too few samples or batches for a standard error to be held to 25 %
        n = ds.samples(s, i)
        est = DatasetMeta.of(ds.md).estimator
        batch = est.get("batch_samples")
        if is_cv_block(est):
            return not enough_batches(n, batch)
        return n < MIN_SPREAD_SAMPLES

    problems, worst = [], 1.0
    for sa, i, sb, j in shared:
        if rough(a, sa, i) or rough(b, sb, j):
            continue
        ra = sa.stderr[i].astype(np.float64) * np.sqrt(a.samples(sa, i))
        rb = sb.stderr[j].astype(np.float64) * np.sqrt(b.samples(sb, j))
        for layer in range(ra.shape[0]):
            live = np.isfinite(ra[layer]) & np.isfinite(rb[layer]) & (rb[layer] > 0) & (ra[layer] > 0)
            zero = np.isfinite(ra[layer]) & np.isfinite(rb[layer]) & ((ra[layer] > 0) != (rb[layer] > 0))
            if zero.any():
                problems.append(f"mlp_id {int(sa.ids[i])} layer {layer + 1}: {int(zero.sum())} standard error(s) 0 in one "
                                "bake and not in the other")
                continue
            if not live.any():
                continue
            ratio = ra[layer][live] / rb[layer][live]
            med = float(np.median(ratio))
            worst = max(worst, med, 1 / med)
            if not SPREAD_MEDIAN[0] <= med <= SPREAD_MEDIAN[1]:
                problems.append(f"mlp_id {int(sa.ids[i])} layer {layer + 1}: stderr·√N is {med:.3g}x the other bake's "
                                f"(median over neurons; allowed {SPREAD_MEDIAN[0]:g}-{SPREAD_MEDIAN[1]:g})")
            elif ratio.min() < SPREAD_NEURON[0] or ratio.max() > SPREAD_NEURON[1]:
                k = int(np.argmax(np.abs(np.log(ratio))))
                problems.append(f"mlp_id {int(sa.ids[i])} layer {layer + 1}: one neuron's stderr·√N is {ratio[k]:.3g}x "
                                f"the other bake's (allowed {SPREAD_NEURON[0]:g}-{SPREAD_NEURON[1]:g})")
        if len(problems) >= 3:
            break
    label = f"{name}: standard errors" + (", other sample counts" if "other" in check else "")
    report.check(label, not problems, "; ".join(problems[:3]) if problems else
                 f"the same per-sample spread in both bakes (stderr·√N, median ratio per MLP and layer within "
                 f"{1 / worst:.3g}-{worst:.3g})")


def _judge_stderr(shared, report: VerifyReport, name: str, mode: str) -> None:
    """``{name}: standard errors``: the stored error bars (and sample counts) of bakes of the same samples
    must agree as closely as their means: bit for bit, or within the arithmetic's tolerance. Bakes of
    other samples are not compared here (each one's error bars are held to a pilot by verify)."""
    if mode == "stats" or any(sa.stderr is None or sb.stderr is None for sa, _, sb, _ in shared):
        return
    sa_, sb_ = _stacked(shared, "stderr")  # (m, depth, w) f32
    nan_a, nan_b = np.isnan(sa_), np.isnan(sb_)
    both = ~nan_a & ~nan_b
    rel = np.zeros(sa_.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel[both] = np.abs(sa_[both].astype(np.float64) - sb_[both]) / np.maximum(np.abs(sb_[both].astype(np.float64)), 1e-30)
    rel[both & (sa_ == sb_)] = 0.0
    bits = bool(np.array_equal(sa_.view(np.uint32), sb_.view(np.uint32)))
    tol = {"bits": 0.0, "gate": SE_GATE_RTOL, "f32": SE_F32_RTOL}[mode]
    where_bad = (nan_a != nan_b) | (rel > tol) if mode != "bits" else sa_.view(np.uint32) != sb_.view(np.uint32)
    na = [sa.n_used[i] if sa.n_used is not None else None for sa, i, _, _ in shared]
    nb = [sb.n_used[j] if sb.n_used is not None else None for _, _, sb, j in shared]
    n_bad = [k for k, (x, y) in enumerate(zip(na, nb)) if x is not None and y is not None and int(x) != int(y)]
    problems = []
    if where_bad.any():
        r, layer, j = (int(v) for v in np.argwhere(where_bad)[0])
        sa, i = shared[r][0], shared[r][1]
        problems.append(f"{int(where_bad.sum())} standard error(s) differ, first mlp_id {int(sa.ids[i])} layer {layer + 1} "
                        f"neuron {j}: {float(sa_[r, layer, j]):.9g} vs {float(sb_[r, layer, j]):.9g} "
                        f"(ratio {float(sa_[r, layer, j]) / float(sb_[r, layer, j]) if sb_[r, layer, j] else float('inf'):.9g})")
    if n_bad:
        sa, i = shared[n_bad[0]][0], shared[n_bad[0]][1]
        problems.append(f"n_samples_used differs for {len(n_bad)} MLP(s), first mlp_id {int(sa.ids[i])}: "
                        f"{int(na[n_bad[0]]):,} vs {int(nb[n_bad[0]]):,}")
    want = "bit-identical" if mode == "bits" else f"within {tol:g} relative"
    report.check(f"{name}: standard errors", not problems, "; ".join(problems) + f" (must be {want})" if problems else
                 f"{'bit-identical' if bits else f'max relative difference {float(rel.max(initial=0.0)):.2g}, {want}'}"
                 f" for {sa_.size} standard errors" + (", n_samples_used equal" if any(x is not None for x in na) else ""))


def _compare_stats(a, b, shared, delta, report: VerifyReport, name: str, z_max: float | None, reason: str,
                   check: str = "ground truth") -> None:
    """z-scores of Δmean in units of both bakes' standard errors: the stored ones (``all_layer_stderr``)
    when both bakes have them, else per-neuron variances from a pilot run."""
    if all(sa.stderr is not None and sb.stderr is not None for sa, _, sb, _ in shared):
        se = np.stack([np.hypot(sa.stderr[i].astype(np.float64), sb.stderr[j].astype(np.float64))
                       for sa, i, sb, j in shared])  # (m, depth, w)
        dof = np.stack([_welch_dof(sa.stderr[i], _dof(a, sa, i), sb.stderr[j], _dof(b, sb, j))
                        for sa, i, sb, j in shared])  # (m, depth, w): Student-t's, where a side is batch means
        note = ""
        for k, (sa, i, sb, j) in enumerate(shared):
            unknown = np.isnan(se[k])  # a side too small for a standard error (one sample, one batch)
            if unknown.any():
                w = weights_for_seed(sa.seeds[i], a.width, a.depth)
                pm = pilot_moments(w, int(sa.seeds[i]))  # the plain estimator's variance: conservative for control variates
                fill = unknown & (pm.active >= MIN_ACTIVE_VARIANCE)  # else no usable variance: left out (NaN)
                se[k][fill] = np.sqrt(pm.sd**2 / a.samples(sa, i) + pm.sd**2 / b.samples(sb, j))[fill]
                note = "; pilot variances where a bake has too few samples for a standard error"
            dof[k][unknown] = np.inf  # a pilot's variance: 8,191 degrees of freedom, normal
        usable = se > 0  # exact on both sides (layer 1 of control variates, dead neurons): no noise to compare
        exact = se == 0
        with np.errstate(divide="ignore", invalid="ignore"):
            zt = t_as_z(np.where(usable, delta / np.where(usable, se, 1.0), 0.0), dof)  # normal scores of the t-scores
        zs = [z[u].ravel() for z, u in zip(zt, usable)]
        zl = [_layer_means(z, np.ones_like(z), u) for z, u in zip(zt, usable)]
        exact_bad = float(np.max(np.abs(delta[exact]), initial=0.0))
        _z_verdict(report, name, z_max, reason + "; in units of the two bakes' stored standard errors", zs, delta,
                   (f"; where both are exact |Δ| <= {exact_bad:.2g}" if exact.any() else "") + note,
                   extra_ok=exact_bad <= 1e-6, check=check, layer_means=zl)
        return
    zs, zl, skipped = [], [], 0
    for (sa, i, sb, j), d in zip(shared, delta):
        w = sa.rederived_weights(i, a.width, a.depth)
        if w is None:
            skipped += 1  # protocol 2.0 or altered weights: the seed does not give the stored MLP
            continue
        pm = pilot_moments(w, int(sa.seeds[i]))  # verify's audit pilot: each neuron's variance and activity
        se = np.sqrt(pm.sd**2 / a.samples(sa, i) + pm.sd**2 / b.samples(sb, j))  # (depth, w)
        usable = pm.active >= MIN_ACTIVE_VARIANCE
        zs.append((d[usable] / se[usable]).ravel())
        zl.append(_layer_means(d, se, usable))
    if not zs:
        report.check(f"{name}: {check}", False, f"{reason}: no MLP's weights re-derive from its seed, so no variances to compare with")
        return
    note = f"; {skipped} MLP(s) skipped (weights do not re-derive)" if skipped else ""
    _z_verdict(report, name, z_max, reason, zs, delta, note, check=check, layer_means=zl)


def _stacked(shared, column: str) -> tuple[np.ndarray, np.ndarray]:
    """``column`` of the shared pairs' MLPs stacked, the first bake's and the second's: ``(m, ...)`` each."""
    return (np.stack([getattr(sa, column)[i] for sa, i, _, _ in shared]),
            np.stack([getattr(sb, column)[j] for _, _, sb, j in shared]))


def _dof(ds, s, i: int) -> float:
    """The degrees of freedom of MLP ``i``'s stored standard errors: ``k − 1`` for the batch means of
    control variates (``k`` batches), ``N − 1`` for the plain estimator."""
    n = ds.samples(s, i)
    est = DatasetMeta.of(ds.md).estimator
    batch = est.get("batch_samples")
    if is_cv_block(est) and is_positive_int(batch):
        return float(n_batches(n, batch) - 1)
    return n - 1.0


def _welch_dof(se_a: np.ndarray, nu_a: float, se_b: np.ndarray, nu_b: float) -> np.ndarray:
    """Welch–Satterthwaite's degrees of freedom of ``sqrt(se_a² + se_b²)``: where one side is a
    control-variate batch-means standard error (31 degrees of freedom at the floor), the z formed with
    it is Student-t's, not the normal's."""
    va, vb = np.square(se_a.astype(np.float64)), np.square(se_b.astype(np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        den = va * va / max(nu_a, 1.0) + vb * vb / max(nu_b, 1.0)
        return np.where(den > 0, (va + vb) ** 2 / np.where(den > 0, den, 1.0), np.inf)


def _layer_means(d: np.ndarray, se: np.ndarray, usable: np.ndarray) -> np.ndarray:
    """(depth,) one MLP's mean z-score per layer over its usable neurons (NaN where none)."""
    out = np.full(d.shape[0], np.nan)
    for layer in range(d.shape[0]):
        u = usable[layer]
        if u.any():
            out[layer] = float(np.mean(d[layer][u] / se[layer][u]))
    return out


def _signed(layer_means: list[np.ndarray] | None) -> tuple[float, float, str]:
    """The signed test of Δmean per layer over the MLPs: ``Σ_r z̄_r / √m``, where each MLP's mean z over
    a layer has a variance of at most 1 whatever its neurons' correlations: a shift of a few standard
    errors common to a layer shows even when no single neuron's does. ``(|Z| worst, limit, text)``."""
    if not layer_means:
        return 0.0, math.inf, ""
    zl = np.stack(layer_means)  # (m, depth)
    worst, at = 0.0, 0
    for layer in range(zl.shape[1]):
        col = zl[:, layer][np.isfinite(zl[:, layer])]
        if col.size:
            value = abs(float(col.sum())) / math.sqrt(col.size)
            if value > worst:
                worst, at = value, layer
    lim = bonferroni_z(zl.shape[1])
    return worst, lim, f", signed mean per layer {worst:.2f} at layer {at + 1} (limit {lim:.2f})"


def _z_verdict(report: VerifyReport, name: str, z_max: float | None, reason: str, zs: list[np.ndarray], delta: np.ndarray,
               note: str, extra_ok: bool = True, check: str = "ground truth",
               layer_means: list[np.ndarray] | None = None) -> None:
    z = np.concatenate(zs)  # the callers pass at least one MLP's
    if z.size == 0:
        report.check(f"{name}: {check}", extra_ok, f"statistical ({reason}): no noisy mean to compare{note}")
        return
    thr = z_max if z_max is not None else bonferroni_z(z.size)
    max_z, mean_z2 = float(np.max(np.abs(z))), float(np.mean(z**2))
    chi_thr = chi2_mean_limit(len(zs))
    signed, signed_lim, signed_text = _signed(layer_means)
    ok = max_z <= thr and mean_z2 <= chi_thr and signed <= signed_lim and extra_ok
    report.check(f"{name}: {check}", ok, f"statistical ({reason}): max |z| of Δmean = {max_z:.2f} over {z.size} means "
                 f"(limit {thr:.2f}), mean z² = {mean_z2:.2f} (limit {chi_thr:.2f}){signed_text}, max |Δmean| = "
                 f"{float(np.max(np.abs(delta))):.3g}{note}")
