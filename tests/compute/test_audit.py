"""compute/audit.py's distributions: Student-t (not normal) quantiles wherever a z-score or a limit is
formed from k batch means (a control-variate standard error rests on k − 1 degrees of freedom: 31 at
the 32-batch floor; issue 29). Exact t, incomplete beta and F against table values and closed forms,
and verify's use of them.

The coverage itself (95 ± 1 % on every layer at the batch floor, against an independent float64 truth)
is measured by ``benchmarks/cv_coverage.py``; docs/error-bars.md records its figures.
"""

from __future__ import annotations

import numpy as np
import pytest

from whestbench.compute.audit import beta_inc, chi2_cdf, f_sf, t_as_z, t_cdf, t_quantile


# Student's t: table values (Abramowitz & Stegun 26.10; R's qt) -------------------------------------
@pytest.mark.parametrize("p, dof, want", [
    (0.975, 1, 12.706205), (0.975, 2, 4.302653), (0.975, 5, 2.570582), (0.975, 10, 2.228139),
    (0.975, 31, 2.039513), (0.975, 63, 1.998341), (0.975, 127, 1.978819), (0.995, 31, 2.744042),
    (0.95, 5, 2.015048), (0.9, 3, 1.637744), (0.975, 1e9, 1.959964),
])
def test_t_quantile_matches_the_tables(p, dof, want):
    assert t_quantile(p, dof) == pytest.approx(want, abs=2e-6)
    assert t_quantile(1 - p, dof) == pytest.approx(-want, abs=2e-6)
    assert t_cdf(want, dof) == pytest.approx(p, abs=1e-6)


def test_t_at_the_batch_floor_is_wider_than_the_normal():
    """32 batch means: ±1.96 covers 94.1 %, not 95 %; the interval is ±2.04."""
    assert 2 * t_cdf(1.959964, 31) - 1 == pytest.approx(0.9410, abs=5e-4)
    assert t_quantile(0.975, 31) / 1.959964 == pytest.approx(1.0406, abs=1e-4)


def test_t_as_z_gives_the_normal_score_of_the_same_tail():
    z = t_as_z(np.array([2.039513, -2.744042, 0.0, np.nan, 1.5]), 31.0)
    assert z[:3] == pytest.approx([1.959964, -2.575829, 0.0], abs=2e-5)
    assert np.isnan(z[3]) and 0 < z[4] < 1.5
    assert t_as_z(np.array([3.0]), 1e8)[0] == 3.0  # a plain estimator's N − 1: the normal itself
    # far tails stay finite and ordered
    far = t_as_z(np.array([10.0, 20.0, 40.0]), 31.0)
    assert np.all(np.isfinite(far)) and np.all(np.diff(far) > 0) and far[0] > 6


def test_incomplete_beta_and_f_against_closed_forms():
    assert float(beta_inc(2.0, 3.0, 0.4)) == pytest.approx(0.5248, abs=1e-12)  # 1 − Σ binomial terms
    assert float(beta_inc(1.0, 1.0, 0.3)) == pytest.approx(0.3, abs=1e-14)
    assert beta_inc([2.0, 2.0], [3.0, 3.0], [0.0, 1.0]).tolist() == [0.0, 1.0]
    # F(ν, ∞) is χ²_ν / ν
    for f in (0.7, 1.0, 1.44, 2.0):
        assert float(f_sf(f, 31.0, 1e7)) == pytest.approx(1 - chi2_cdf(f * 31, 31), abs=1e-5)
    # F(1, ν) is t²_ν
    assert float(f_sf(2.039513**2, 1.0, 31.0)) == pytest.approx(0.05, abs=1e-6)


# verify: z-scores formed from batch means are judged as Student-t's ----------------------------------
def test_verify_judges_batch_means_z_scores_as_student_t():
    from whestbench.verify.compare import _welch_dof
    from whestbench.verify.trail import _t_widening

    se = np.array([1e-3, 2e-3, 0.0])
    # two control-variate bakes at the floor, equal errors: 62 degrees of freedom; against a plain
    # bake of 10⁶ samples with the same error: ~124 (half the variance is known); exact on both sides: ∞
    assert _welch_dof(se, 31.0, se, 31.0)[:2] == pytest.approx([62.0, 62.0])
    assert _welch_dof(se, 31.0, se, 1e6 - 1)[0] == pytest.approx(4 / (1 / 31 + 1 / (1e6 - 1)), rel=1e-9)
    assert _welch_dof(se, 31.0, 10 * se, 1e6 - 1)[0] > 1e4  # the precise side dominates: nearly normal
    assert _welch_dof(se, 31.0, se, 31.0)[2] == np.inf
    # a t-score at the two-sided 1e-8 tail on 31 degrees of freedom is the normal's 5.73, not 8.3
    t = t_quantile(1 - 0.5e-8, 31)
    assert float(t_as_z(np.array([t]), 31.0)[0]) == pytest.approx(5.7307, abs=1e-3)
    # trail drift at the floor: its limits widen by t/z at the Bonferroni tail (none for a plain N)
    assert _t_widening(48, 31.0) == pytest.approx(t_quantile(1 - 1e-6 / 96, 31) / t_quantile(1 - 1e-6 / 96, 1e9), rel=1e-9)
    assert _t_widening(48, 31.0) > 1.3 and _t_widening(48, 1e8) == pytest.approx(1.0, abs=1e-6)
