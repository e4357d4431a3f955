"""verify's checks of the audit trail (``audit/<split>.parquet``): no extra compute, every row.

``trail`` (exact: no false alarm by construction) rebuilds from each MLP's segments what the bake stored
and requires equality within the float32 rounding of the combination:

- the segments are ``segment_bounds(N)`` of the MLP's ``n_samples_used`` (or ``n_samples``): an inflated
  N fails here; pcg64: segment 0 starts at the MLP's own sample stream;
- the stored means are ``Σ n_s m_s / N`` (control variates: the segments' ``cv_means``, layers 2..);
- the standard errors satisfy ``se²·(k−1)·N = A + B`` with ``A = Σ n_s v_s`` (within) and
  ``B = Σ n_s (m_s − M)²`` (between), ``k = N`` plain and the batch count under control variates;
- ``avg_variance = mean_j(Σ n_s (v_s + m_s²)/N − final²)``.

``trail drift`` (statistical, conservative): per MLP and layer, the layer-averaged standardized trend of
the segment means over the bake, and the largest excursion of their cumulative sum (a Brownian bridge),
both Bonferroni-bounded at ``P_OVERALL``; a device that goes wrong part-way through a bake shows here.
docs/error-bars.md ("Checking the error bars from the trail") derives both.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np

from whestbench.compute.audit import MIN_STAT_SEGMENTS, P_OVERALL, TRAIL_STAT_SAMPLES, bonferroni_z, t_quantile
from whestbench.compute.estimation import is_cv_block
from whestbench.compute.estimators import n_batches
from whestbench.compute.precision import EPS32
from whestbench.compute.segments import MAX_SEGMENTS, segment_bounds
from whestbench.format.schema import DatasetMeta
from whestbench.compute.seeds import spawn_streams
from whestbench.format.trail import audit_path, iter_trail
from whestbench.verify.report import VerifyReport
from whestbench.verify.scan import DatasetScan, SplitScan
from whestbench.verify.trail_contract import STALE
from whestbench.verify.trail_segments import MIN_ACTIVE, MIN_TEST_SEGMENTS, SegmentTests, add_mlp
from whestbench.verify.trail_segments import finish as finish_segments
from whestbench.errors import REDO


def check_trail(ds: DatasetScan, report: VerifyReport, checksums: str) -> None:
    """The ``trail`` and ``trail drift`` checks of every split that has an audit block (``checksums``: the
    dataset's checksum state, ``checksums.checksum_state``)."""
    multi = ds.is_multi
    for s in ds.splits:
        prefix = f"{s.name}: " if multi else ""
        level = DatasetMeta(ds.md).block(s.name)
        block = level.get("audit")  # the split's block is a dict: the metadata validated
        if block is None:
            continue
        try:
            path = ds.path / str(block["file"])
            segments, step, aligned = int(block["segments"]), int(block["step_samples"]), bool(block["aligned"])
            if not (0 < segments <= MAX_SEGMENTS and step > 0) or block["file"] != audit_path(s.name):
                raise ValueError("out of range")
        except (KeyError, TypeError, ValueError) as e:
            report.check(f"{prefix}trail", False, f"the metadata's audit block is malformed ({type(e).__name__}: {e})")
            continue
        if checksums == "stale":
            report.skip(f"{prefix}trail", f"{STALE}: the trail is not checked")
            continue
        if not path.is_file():
            report.check(f"{prefix}trail", False, f"{block['file']} is missing: the metadata says the bake kept an "
                         f"audit trail there. {REDO}")
            continue
        entry = DatasetMeta(ds.md).entry(s.name)  # the split's keys over the top level's
        cv = is_cv_block(entry.get("estimator"))
        sampler = (entry.get("sampler") or {}).get("name")  # a sampler block is a dict: the metadata validated
        _check_split(ds, s, report, prefix, path, segments, step, aligned, cv, sampler == "pcg64")


def _check_split(ds: DatasetScan, s: SplitScan, report: VerifyReport, prefix: str, path: Path, segments: int,
                 step: int, aligned: bool, cv: bool, pcg64: bool) -> None:
    problems: list[str] = []
    drift: list[tuple[float, str]] = []  # (statistic / limit, where) of the drift tests
    n_tests = max(1, len(s.ids) * (ds.depth - (1 if cv else 0)) * 2)
    z_limit = bonferroni_z(n_tests, P_OVERALL)
    x_limit = math.sqrt(math.log(2.0 * n_tests / P_OVERALL) / 2.0)
    counted = 0
    seg_counts: set[int] = set()
    layers = ds.depth * (ds.width + 1)
    seg_tests = SegmentTests(n_tests=max(1, len(s.ids) * segments * layers * 2), n_mlps=len(s.ids))
    try:
        for k, rec in enumerate(iter_trail(path, ds.depth, ds.width)):
            if k >= len(s.ids):
                problems.append(f"holds more MLPs than the {len(s.ids)} rows")
                break
            mlp = int(s.ids[k])
            where = f"mlp_id {mlp}"
            if rec.mlp_id != mlp:
                problems.append(f"row {k} is mlp_id {mlp}, the trail's MLP {k} is {rec.mlp_id}")
                break
            n = ds.samples(s, k)
            seg_counts.add(len(rec.bounds))
            why = _exact(ds, s, k, rec, n, segments, step, aligned, cv, pcg64)
            if why:
                problems.append(f"{where}: {why}")
            else:
                k_eff = float(n_batches(n, step)) if cv else float(n)
                widen = _t_widening(n_tests, k_eff - 1.0) if cv else 1.0  # batch means: Student-t
                drift += _drift(rec, ds.depth, cv, k_eff, z_limit * widen, x_limit * widen, where)
                add_mlp(seg_tests, rec, cv, k_eff, step, where)
            counted += 1
            if len(problems) > 3:
                break
    except (OSError, ValueError, KeyError, TypeError) as e:
        problems.append(f"{path.name} is unreadable or not an audit trail ({type(e).__name__}: {e})")
    if not problems and counted != len(s.ids):
        problems.append(f"holds {counted} MLP(s), the split has {len(s.ids)} rows")
    if problems:
        report.check(f"{prefix}trail", False, "; ".join(problems[:3]) + (" …" if len(problems) > 3 else ""))
        return
    if not counted:
        report.skip(f"{prefix}trail", "the split has no rows")
        return
    finish_segments(seg_tests)
    est = "control-variate estimates (layers 2..)" if cv else "means"
    counts = "-".join(map(str, sorted({min(seg_counts), max(seg_counts)})))
    report.check(f"{prefix}trail", True, (
        f"{counted} MLP(s) with {counts} segment(s) each: sample ranges, {est}, standard errors"
        f"{', n_samples_used' if s.n_used is not None else ', n_samples'} and avg_variance equal the segments' "
        "combination within float32 rounding"
        + ("" if drift else f"; too few segments of {TRAIL_STAT_SAMPLES:,}+ samples ({MIN_STAT_SEGMENTS} needed) to test drift")
        + ("" if seg_tests.worst else f"; no neuron with {MIN_ACTIVE:,}+ active samples in each of {MIN_TEST_SEGMENTS}+ "
           "full segments to compare the segments with each other")))
    _report_segments(report, prefix, seg_tests)
    if drift:
        bad = [(r, w) for r, w in drift if r > 1.0]
        worst = max(drift)
        report.check(f"{prefix}trail drift", not bad, (
            f"{len(bad)} MLP layer test(s) find drift across the bake: " + "; ".join(w for _, w in sorted(bad, reverse=True)[:3])
            if bad else f"{len(drift)} trend and jump test(s) over MLPs and layers within their limits (largest "
            f"{worst[0]:.2f} of its limit, {worst[1]}; Bonferroni p={P_OVERALL:g})"))


def _exact(ds: DatasetScan, s: SplitScan, k: int, rec, n: int, segments: int, step: int, aligned: bool, cv: bool,
           pcg64: bool) -> str | None:
    want = segment_bounds(n, step, segments, aligned)
    got = [tuple(map(int, b)) for b in rec.bounds]
    if got != want or not np.array_equal(rec.segments, np.arange(len(got))):
        total = int(rec.bounds[-1, 1]) if len(got) else 0
        return (f"the trail's {len(got)} segment(s) cover samples [0, {total:,}), but {n:,} samples "
                f"({'n_samples_used' if s.n_used is not None else 'n_samples'}) make {len(want)} other ones")
    copied = _copied(rec)
    if copied:
        return copied
    for name, v in rec.values.items():
        if not np.all(np.isfinite(v)):
            return f"trail {name} holds non-finite values"
        if name != "cv_means" and np.any(v < 0):
            return f"trail {name} holds negative values"
    if pcg64:
        first = np.random.default_rng(spawn_streams(int(s.seeds[k]))[1]).bit_generator.state
        if rec.states is None or rec.states[0] != first:
            return "segment 0's generator state is not the MLP's sample stream"
    sizes = rec.sizes[:, None, None]
    big_n = float(n)
    m = rec.values["means"].astype(np.float64)
    v = rec.values["var"].astype(np.float64)
    if not cv:
        mean_src, var_src, first_layer = m, v, 0
    elif "cv_means" in rec.values:  # layers 2..: the control-variate estimates
        mean_src, var_src, first_layer = rec.values["cv_means"].astype(np.float64), rec.values["cv_var"].astype(np.float64), 1
    else:  # control variates at depth 1: the one layer is exact (the layer-1 check holds it)
        mean_src, var_src, first_layer = m, v, ds.depth
    stored = s.means[k].astype(np.float64)
    est = (sizes * mean_src).sum(0) / big_n
    tol = 2 * EPS32 * (np.abs(stored) + (sizes * np.abs(mean_src)).sum(0) / big_n) + 1e-30
    off = np.abs(stored - est) > tol
    off[:first_layer] = False
    if off.any():
        layer, j = map(int, np.argwhere(off)[0])
        return (f"layer {layer + 1} neuron {j}: stored mean {stored[layer, j]:.9g}, the segments combine to "
                f"{est[layer, j]:.9g} ({int(off.sum())} neuron(s) off)")
    # standard errors: se²·(k−1)·N = A + B
    if s.stderr is not None:
        k_eff = big_n if not cv else float(n_batches(n, step))
        se = s.stderr[k].astype(np.float64)
        if k_eff >= 2:
            d = mean_src - est
            a = (sizes * var_src).sum(0)
            b = (sizes * d * d).sum(0)
            e = 2 * EPS32 * (np.abs(mean_src) + np.abs(est))
            room = 4 * (2 * EPS32 * (a + b) + 2 * EPS32 * a + (sizes * (2 * np.abs(d) * e + e * e)).sum(0)
                        + 2.0**-48 * (sizes * (var_src + mean_src**2)).sum(0)) + 1e-300
            lhs = se * se * (k_eff - 1) * big_n
            bad = np.abs(lhs - (a + b)) > room
            bad[:first_layer] = False
            bad &= np.isfinite(se)
            if bad.any():
                layer, j = map(int, np.argwhere(bad)[0])
                want_se = math.sqrt((a + b)[layer, j] / ((k_eff - 1) * big_n))
                return (f"layer {layer + 1} neuron {j}: stored standard error {se[layer, j]:.6g}, the segments' "
                        f"scatter and spread give {want_se:.6g} at N = {n:,} ({int(bad.sum())} neuron(s) off)")
    # avg_variance (the plain sums of y, also under control variates)
    second = (sizes[:, 0] * (v[:, -1] + m[:, -1] ** 2)).sum(0) / big_n
    final = s.final[k].astype(np.float32).astype(np.float64)
    want_av = float(np.mean(second - final**2))
    room_av = 8 * EPS32 * float(np.mean(second)) + 1e-30
    if abs(float(s.avg_var[k]) - want_av) > room_av:
        return f"avg_variance {float(s.avg_var[k]):.9g}, the segments give {want_av:.9g}"
    return None


def _report_segments(report: VerifyReport, prefix: str, tests: SegmentTests) -> None:
    """The ``trail segments`` check: each family's worst segment (or MLP) against its limit (none when no
    neuron could be tested: the ``trail`` line says so)."""
    if not tests.worst:
        return
    if tests.bad:
        report.check(f"{prefix}trail segments", False, f"{len(tests.bad)} segment test(s) find an outlier no honest "
                     "bake makes (a forged, copied or cut segment): " + "; ".join(w for _, w in sorted(tests.bad, reverse=True)[:3]))
        return
    parts = [f"{family} ({tests.tested[family]:,} tests; largest {r:.2f} of its limit)" for family, (r, _) in tests.worst.items()]
    report.check(f"{prefix}trail segments", True, "each segment's mean and variance among the MLP's other segments' "
                 f"and the means' scatter against the variances, within their limits (Bonferroni p={P_OVERALL:g} "
                 "each): " + "; ".join(parts))


def _copied(rec) -> str | None:
    """Two segments of one MLP with identical means (every neuron of every layer, bit for bit, not all 0):
    no honest bake draws them (each is its own samples), so a trail holding them was copied to fake samples."""
    seen: dict[bytes, int] = {}
    for i, row in enumerate(rec.values["means"]):
        if not np.any(row):
            continue  # an MLP whose every neuron is dead has all-zero segments, honestly
        key = np.ascontiguousarray(row).tobytes()
        if key in seen:
            return (f"segments {seen[key]} and {i} hold identical means (every neuron of every layer): no bake draws "
                    "that; a copied segment fakes samples never drawn")
        seen[key] = i
    return None


@functools.lru_cache(maxsize=64)
def _t_widening(n_tests: int, dof: float) -> float:
    """How much wider Student's t on ``dof`` degrees of freedom is than the normal at the Bonferroni
    tail of ``n_tests`` tests: the drift statistics of control variates are standardized by a
    batch-means spread (``dof = k − 1``, 31 at the floor: ×1.49 at 10⁻⁸), not by a known one."""
    if dof < 1:
        return 1.0
    p = 1.0 - P_OVERALL / (2.0 * n_tests)
    return t_quantile(p, dof) / bonferroni_z(n_tests, P_OVERALL)


def _pool(sizes: np.ndarray) -> list[tuple[int, int]]:
    """Runs of adjacent segments holding at least TRAIL_STAT_SAMPLES samples each (a short tail joins its neighbour)."""
    runs, start, acc = [], 0, 0.0
    for i, c in enumerate(sizes):
        acc += c
        if acc >= TRAIL_STAT_SAMPLES:
            runs.append((start, i + 1))
            start, acc = i + 1, 0.0
    if start < len(sizes):  # the short tail joins the last run (or is the only one)
        runs[-1:] = [(runs[-1][0] if runs else start, len(sizes))]
    return runs


def _drift(rec, depth: int, cv: bool, k_eff: float, z_limit: float, x_limit: float, where: str
           ) -> list[tuple[float, str]]:
    """``(statistic / limit, text)`` of the trend and jump tests of each layer (none: too few segments).

    Per neuron, the segment means standardized by the neuron's total spread; averaged over the layer's
    neurons (jointly normal, so the average has at most unit variance whatever their correlations):
    trend ``Z = mean_j z_j`` (|Z| ≤ z_limit) and bridge ``K = max_c |mean_j W_jc|`` (≤ x_limit, as
    ``P(max|B| > x) ≤ 2e^{−2x²}`` bounds a scaled Brownian bridge too)."""
    runs = _pool(rec.sizes)
    if len(runs) < MIN_STAT_SEGMENTS:
        return []
    if cv and "cv_means" not in rec.values:  # control variates at depth 1: nothing sampled is stored
        return []
    name_m, name_v = ("cv_means", "cv_var") if cv else ("means", "var")
    m0, v0, c0 = rec.values[name_m].astype(np.float64), rec.values[name_v].astype(np.float64), rec.sizes
    n_s = np.array([c0[a:b].sum() for a, b in runs])
    m = np.stack([(c0[a:b, None, None] * m0[a:b]).sum(0) / c0[a:b].sum() for a, b in runs])
    big_n = n_s.sum()
    mean = (n_s[:, None, None] * m).sum(0) / big_n
    # the per-sample spread the stored standard error stands for: (A + B)/(k − 1), k = N or the batch count
    spread = (c0[:, None, None] * (v0 + (m0 - mean) ** 2)).sum(0)
    sd = np.sqrt(spread / max(k_eff - 1.0, 1.0))
    t = (np.cumsum(n_s) - n_s / 2) / big_n
    tc = t - (n_s * t).sum() / big_n
    out = []
    for layer in range(1 if cv else 0, depth):
        ok = sd[layer] > 0
        if not ok.any():
            continue
        dev = (m[:, layer, ok] - mean[layer, ok]) / sd[layer, ok]  # (runs, J)
        z = (n_s * tc) @ dev / math.sqrt((n_s * tc * tc).sum())  # per neuron ~ N(0, 1)
        trend = abs(float(z.mean()))
        bridge = np.cumsum(n_s[:, None] * dev, axis=0) / math.sqrt(big_n)  # per neuron: a Brownian bridge
        jump = float(np.max(np.abs(bridge.mean(axis=1))))
        out.append((trend / z_limit, f"{where} layer {layer + 1} trend |Z| = {trend:.2f} (limit {z_limit:.2f})"))
        out.append((jump / x_limit, f"{where} layer {layer + 1} jump max|W| = {jump:.2f} (limit {x_limit:.2f})"))
    return out
