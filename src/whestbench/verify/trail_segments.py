"""verify's ``trail segments`` check: each segment's stored numbers against the MLP's other segments.

The exact ``trail`` check proves the stored columns are the segments' combination; it cannot tell whether
the segments are samples. A forger who packs a shift into one segment (so a spot check must draw that very
segment) must cut that segment's stored variance to keep the combined standard error, and one who claims
more samples than were drawn must make the segments' means scatter less than their variances say. Both
leave a segment (or an MLP) that is an outlier among the honest ones, at no cost to check:

- **means** (per segment, neuron and layer): ``z = (m_s − M₋ₛ) / (S₋ₛ·sqrt(1/n_s + 1/(N − n_s)))``, the
  segment's mean against the other segments' ``M₋ₛ``, in the per-sample spread ``S₋ₛ²`` those others give
  (``(A + B)/(k − 1)``: within plus between, k the samples or, under control variates, the batches), so the
  outlier cannot widen its own yardstick; Student's t on ``k₋ₛ − 1`` degrees of freedom, two-sided;
- **variances** (per segment, one-sided: a variance cut): ``w_s = sqrt(n_s)·(v_s/v̄ − 1)`` has the same
  spread in every segment (``sqrt(κ − 1)``, whatever the neuron's kurtosis κ), so ``w_s`` against the
  others' mean and standard deviation is Student's t on ``K − 2`` degrees of freedom (a prediction
  interval); per neuron, and per layer on the layer-average ``v_s/v̄``;
- **spread** (plain, per MLP and over the dataset): the means' scatter ``B/(K − 1)`` over the variances'
  ``A/N`` averages 1 over neurons; its average over any set of neurons has at most the moment generating
  function of one ``χ²_{K−1}/(K−1)`` (Jensen), so Chernoff's ``(x·e^{1−x})^{d/2}`` bounds its tail whatever
  the neurons' correlations (``d`` adds over independent MLPs): a trail rescaled to claim N ×4 (means kept,
  ranges ×4, error bars /2, exact check satisfied) has ratio ≈ 4.

Every limit is Bonferroni at ``P_OVERALL`` over the tests made (segments × neurons × MLPs, each family).
Only neurons whose every segment holds at least ``MIN_ACTIVE`` active samples (a lower bound:
``n_s·m²/(v + m²)``, Cauchy–Schwarz) and segments of at least half the largest's samples are tested:
their means and variances are near normal. docs/cli.md states the false-alarm rate measured on honest
bakes (``benchmarks/trail_false_alarms.py``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

from whestbench.compute.audit import NORMAL_DOF, P_OVERALL, t_quantile

MIN_ACTIVE = 1000  # active samples (lower bound) per segment below which a neuron's segments are not near normal
MIN_TEST_SEGMENTS = 6  # the variance test's K − 2 degrees of freedom need at least 4


@functools.lru_cache(maxsize=4096)
def t_limit(tail: float, dof: float) -> float:
    """The ``1 − tail`` quantile of Student's t on ``dof`` degrees of freedom (normal at ``NORMAL_DOF``)."""
    return t_quantile(1.0 - tail, min(float(dof), NORMAL_DOF))


def chernoff_limit(p: float, dof: float) -> float:
    """The ``x > 1`` with ``(x·e^{1−x})^{dof/2} = p``: a bound on the upper tail of the average of any
    (correlated) variables each distributed as ``χ²_dof/dof``."""
    target = math.log(p) * 2.0 / dof  # ln x + 1 − x = target < 0
    lo, hi = 1.0, 2.0
    while math.log(hi) + 1.0 - hi > target:
        hi *= 2.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if math.log(mid) + 1.0 - mid > target:
            lo = mid
        else:
            hi = mid
    return hi


@dataclass
class SegmentTests:
    """The worst of each family over a split's MLPs, as ``(statistic / limit, text)``; ``n_tests`` the
    Bonferroni count of the per-segment families, ``n_mlps`` of the per-MLP one (set before the first MLP)."""

    n_tests: int
    n_mlps: int
    worst: dict[str, tuple[float, str]] = field(default_factory=dict)
    bad: list[tuple[float, str]] = field(default_factory=list)
    tested: dict[str, int] = field(default_factory=dict)
    spread_sum: float = 0.0  # Σ over MLPs of (K − 1)·(average ratio), and Σ (K − 1): the dataset's pooled spread
    spread_dof: float = 0.0
    spread_mlps: int = 0

    def note(self, family: str, ratio: float, text: str, count: int) -> None:
        self.tested[family] = self.tested.get(family, 0) + count
        if family not in self.worst or ratio > self.worst[family][0]:
            self.worst[family] = (ratio, text)
        if ratio > 1.0:
            self.bad.append((ratio, text))


def _active(n_s: np.ndarray, m: np.ndarray, v: np.ndarray) -> np.ndarray:
    """(L, J) neurons whose every segment holds at least MIN_ACTIVE active samples (lower bound), pooled
    moments standing in for each segment's."""
    big_n = n_s.sum()
    mean = (n_s[:, None, None] * m).sum(0) / big_n
    second = (n_s[:, None, None] * (v + m * m)).sum(0) / big_n
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(second > 0, mean * mean / np.where(second > 0, second, 1.0), 0.0)
    return frac * n_s.min() >= MIN_ACTIVE


def add_mlp(tests: SegmentTests, rec, cv: bool, k_eff: float, step: int, where: str) -> None:
    """Add one MLP's segment tests (``rec``: its ``TrailRecord``; ``k_eff``: the samples, or the batches
    under control variates; ``step``: the batch size)."""
    n_s = rec.sizes
    keep = n_s >= 0.5 * n_s.max()
    if keep.sum() < MIN_TEST_SEGMENTS:
        return
    n_s = n_s[keep]
    m_y, v_y = rec.values["means"].astype(np.float64)[keep], rec.values["var"].astype(np.float64)[keep]
    live_y = _active(n_s, m_y, v_y)
    if live_y.any():
        _variances(tests, n_s, m_y, v_y, live_y, where)
    if cv:
        if "cv_means" not in rec.values:
            return
        m, v, first = rec.values["cv_means"].astype(np.float64)[keep], rec.values["cv_var"].astype(np.float64)[keep], 1
        k_s = np.ceil(n_s / step)  # batches per segment
    else:
        m, v, first, k_s = m_y, v_y, 0, n_s
    live = live_y.copy()
    live[:first] = False
    if not live.any():  # no neuron for the means or the spread
        return
    _means(tests, n_s, m, v, k_s, live, cv, where)
    if not cv:
        _spread(tests, n_s, m, v, live, where)


def _means(tests: SegmentTests, n_s, m, v, k_s, live, cv: bool, where: str) -> None:
    big_n, k_all = n_s.sum(), k_s.sum()
    a_s = n_s[:, None, None] * v  # within
    tot_n = big_n - n_s  # the others' samples, per segment
    sum_m = (n_s[:, None, None] * m).sum(0)
    m_rest = (sum_m[None] - n_s[:, None, None] * m) / tot_n[:, None, None]  # M₋ₛ
    # the others' between-segment sum about M₋ₛ: Σ_{t≠s} n_t m_t² − (N − n_s)·M₋ₛ²
    sq = (n_s[:, None, None] * m * m).sum(0)
    b_rest = np.maximum((sq[None] - n_s[:, None, None] * m * m) - tot_n[:, None, None] * m_rest**2, 0.0)
    a_rest = a_s.sum(0)[None] - a_s
    dof = (k_all - k_s) - 1.0  # per segment
    s2 = (a_rest + b_rest) / np.maximum(dof, 1.0)[:, None, None]
    se = np.sqrt(s2 * (1.0 / n_s + 1.0 / tot_n)[:, None, None])
    ok = live[None] & (se > 0)
    z = np.where(ok, np.abs(m - m_rest) / np.where(ok, se, 1.0), 0.0)
    tail = P_OVERALL / (2.0 * tests.n_tests)
    limits = np.array([t_limit(tail, d if cv else NORMAL_DOF) for d in dof])
    ratio = z / limits[:, None, None]
    s, layer, j = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    tests.note("means", float(ratio[s, layer, j]), f"{where} segment {s} layer {layer + 1} neuron {j}: mean "
               f"{float(z[s, layer, j]):.1f} of its standard errors from the other segments' (limit "
               f"{float(limits[s]):.1f})", int(ok.sum()))


def _variances(tests: SegmentTests, n_s, m, v, live, where: str) -> None:
    k = len(n_s)
    big_n = n_s.sum()
    vbar = (n_s[:, None, None] * v).sum(0) / big_n  # (L, J)
    ok = live & (vbar > 0)
    if not ok.any():
        return
    rel = np.where(ok[None], v / np.where(ok, vbar, 1.0)[None], 1.0)  # (K, L, J) v_s / v̄
    # per neuron, and per layer on the layer-average ratio
    layer_rel = np.stack([rel[:, layer, ok[layer]].mean(1) if ok[layer].any() else np.ones(k)
                          for layer in range(rel.shape[1])], axis=1)  # (K, L)
    limit = t_limit(P_OVERALL / tests.n_tests, k - 2)
    for family, r, mask in (("variances", rel, ok), ("layer variances", layer_rel[:, :, None], ok.any(1)[:, None])):
        w = np.sqrt(n_s).reshape((k,) + (1,) * (r.ndim - 1)) * (r - 1.0)
        total, total2 = w.sum(0), (w * w).sum(0)
        rest_mean = (total[None] - w) / (k - 1)
        rest_var = np.maximum(((total2[None] - w * w) - (k - 1) * rest_mean**2) / (k - 2), 0.0)
        sd = np.sqrt(rest_var * (1.0 + 1.0 / (k - 1)))
        good = mask[None] & (sd > 0)
        t = np.where(good, (rest_mean - w) / np.where(good, sd, 1.0), 0.0)  # one-sided: a variance cut
        s, *pos = np.unravel_index(int(np.argmax(t)), t.shape)
        at = f"layer {pos[0] + 1}" + (f" neuron {pos[1]}" if family == "variances" else " (its neurons' average)")
        tests.note(family, float(t[(s, *pos)]) / limit, f"{where} segment {s} {at}: variance "
                   f"{float(r[(s, *pos)]):.2f} of the MLP's, {float(t[(s, *pos)]):.1f} of the other segments' spreads "
                   f"below them (limit {limit:.1f})", int(good.sum()))


def _spread(tests: SegmentTests, n_s, m, v, live, where: str) -> None:
    big_n, k = n_s.sum(), len(n_s)
    mean = (n_s[:, None, None] * m).sum(0) / big_n
    b = (n_s[:, None, None] * (m - mean) ** 2).sum(0) / (k - 1)
    a = (n_s[:, None, None] * v).sum(0) / big_n
    ok = live & (a > 0)
    if not ok.any():
        return
    avg = float(np.mean(b[ok] / a[ok]))
    limit = chernoff_limit(P_OVERALL / (tests.n_mlps + 1), k - 1)  # + 1: the dataset's pooled test
    tests.note("spread", avg / limit, f"{where}: the segments' means scatter {avg:.2f}× what their variances say "
               f"(limit {limit:.2f})", 1)
    tests.spread_sum += (k - 1) * avg
    tests.spread_dof += k - 1
    tests.spread_mlps += 1


def finish(tests: SegmentTests) -> None:
    """The dataset's pooled spread test (every plain MLP's ratio, weighted by its degrees of freedom)."""
    if tests.spread_mlps > 1:
        avg = tests.spread_sum / tests.spread_dof
        limit = chernoff_limit(P_OVERALL / (tests.n_mlps + 1), tests.spread_dof)
        tests.note("spread", avg / limit, f"over the {tests.spread_mlps} MLPs: the segments' means scatter {avg:.2f}× "
                   f"what their variances say (limit {limit:.2f})", 1)
