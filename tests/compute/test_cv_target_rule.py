"""The control-variate target rule, the "≤ E" promise (issue 29): a control-variate target bake plans each
MLP's count so that the chance any chosen neuron's stored (batch-means) standard error exceeds E is at
most 5 % (rule ``pilot-planned-exceed``); the plain rule and its bakes are unchanged."""

from __future__ import annotations

import math

import numpy as np
import pytest

from whestbench.compute.estimation import CV_TARGET_RULE, EXCEED_PROBABILITY, TARGET_RULE, Estimation
from whestbench.compute.estimators import exceed_chance, is_check_point, next_check_point, stop_point


# The control-variate target rule -----------------------------------------------------------------
STEP = BATCH = 16_384  # pcg64 at widths <= 64: a check step is one chunk is one batch
FLOOR = 32 * BATCH
CAP = 1 << 40


def _stored_above(sd: float, n: int, target: float, reps: int, rng) -> float:
    """Fraction of bakes of ``n`` samples in ``BATCH``-sample batches (normal batch means, the true sd
    ``sd``) whose batch-means standard error exceeds ``target``."""
    k = n // BATCH
    means = rng.standard_normal((reps, k)) * (sd / math.sqrt(BATCH))
    se = means.std(axis=1, ddof=1) / math.sqrt(k)
    return float(np.mean(se > target))


def _rule(sd: float, target: float, kurt: float = 3.0, n_pilot: int = 1 << 14) -> int:
    sds, k = np.array([sd]), np.array([kurt])
    n = stop_point((sd / target) ** 2, STEP, CAP, FLOOR)
    while exceed_chance(n, sds, k, target, BATCH, n_pilot) > EXCEED_PROBABILITY:
        n = next_check_point(n, STEP, CAP)
    return n


@pytest.mark.parametrize("need_batches", [32, 40, 64, 100, 256, 300])
def test_the_cv_rule_leaves_at_most_5_percent_above_e(need_batches):
    """The old rule (first check point at or past σ̂²/E²) stores a standard error above E half the time
    when the need lands on a check point (chi-square noise on k − 1 = 31 degrees of freedom); the rule
    of issue 29 plans for that noise: at most 5 % (a simulation of 4,000 bakes; σ̂ = σ)."""
    rng = np.random.default_rng(need_batches)
    target = 1e-3
    sd = target * math.sqrt(need_batches * BATCH)
    old = stop_point((sd / target) ** 2, STEP, CAP, FLOOR)
    new = _rule(sd, target)
    assert is_check_point(new // STEP) and new >= old
    above_new = _stored_above(sd, new, target, 4000, rng)
    assert above_new <= EXCEED_PROBABILITY + 0.012  # 3.3 sd of a binomial fraction at 5 %
    if old // BATCH == need_batches:  # the need on a check point: the old rule sits at the median
        assert _stored_above(sd, old, target, 4000, rng) > 0.35
    if new > FLOOR:  # the rule stops at the first check point that keeps its promise
        before = max(FLOOR, (new // STEP - 1) * STEP)
        while before > FLOOR and not is_check_point(before // STEP):
            before -= STEP
        if before < new:
            assert exceed_chance(before, np.array([sd]), np.array([3.0]), target, BATCH, 1 << 14) > EXCEED_PROBABILITY


def test_the_rule_counts_the_pilots_own_uncertainty():
    """A heavy-tailed neuron's pilot variance is uncertain (Satterthwaite's 2n/(κ − 1) degrees of
    freedom): the same σ̂ asks for more samples at kurtosis 400 than at 3."""
    target, sd = 1e-3, 1e-3 * math.sqrt(2000 * BATCH)  # deep past the floor: the pilot's error matters
    normal = _rule(sd, target)
    heavy = _rule(sd, target, kurt=400.0)
    assert heavy > normal
    assert exceed_chance(normal, np.array([sd]), np.array([400.0]), target, BATCH, 1 << 14) > EXCEED_PROBABILITY


def test_the_rule_is_recorded_and_the_plain_rule_is_unchanged():
    cv, plain = Estimation("control-variate", 1e-3), Estimation("plain", 1e-3)
    assert cv.target_rule == CV_TARGET_RULE and plain.target_rule == TARGET_RULE
    block = cv.metadata(BATCH, STEP)["target_stderr"]
    assert block["rule"] == CV_TARGET_RULE and block["exceed_probability"] == EXCEED_PROBABILITY
    assert plain.metadata(0, STEP)["target_stderr"]["rule"] == TARGET_RULE
    assert "exceed_probability" not in plain.metadata(0, STEP)["target_stderr"]
    assert plain.identity() == {"estimator": "plain", "target_stderr": 1e-3, "stderr_layer": "last"}  # plan digests kept
    # a dataset's recorded rule comes back as the same value a fresh bake builds
    assert Estimation.from_metadata({"estimator": {"name": "control-variate"}, "target_stderr": block}) == cv
    old = Estimation.from_metadata({"estimator": {"name": "control-variate"},
                                    "target_stderr": {"value": 1e-3, "layer": "last", "rule": TARGET_RULE}})
    assert old.target_rule == TARGET_RULE and old != cv and old.identity() != cv.identity()
