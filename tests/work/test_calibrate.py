"""Calibration: a timed run of the planned shape, projected linearly; its standard errors project the
samples a target standard error needs (they shrink as 1/sqrt(N))."""

from __future__ import annotations

import numpy as np
import pytest

from whestbench.work.calibrate import Calibration, calibrate
from whestbench.work.executor import Job
from whestbench.work.steps import Compute
from whestbench.work.units import WorkSpec


def _cal(stderr) -> Calibration:
    return Calibration(width=2, depth=2, calib_mlps=len(stderr), calib_samples=10_000, seconds=2.0,
                       planned_mlps=100, planned_samples=10**9, stderr=[np.asarray(s, dtype=np.float64) for s in stderr])


def test_the_projection_is_linear_in_mlps_and_samples():
    cal = _cal([[[1, 1], [1, 1]]])
    assert cal.samples_per_s == 5_000 and cal.projected_s == 100 * 10**9 / 5_000


def test_samples_for_a_target_scale_as_the_inverse_square_of_the_target():
    cal = _cal([[[0.0, 0.0], [0.02, 0.01]]])
    assert cal.samples_for(0.01) == pytest.approx(10_000 * 4)  # the worst last-layer neuron: 0.02 -> 0.01
    assert cal.samples_for(0.005) == pytest.approx(4 * cal.samples_for(0.01))
    assert cal.samples_for(0.01, quantile=0.0) == pytest.approx(10_000)  # the best neuron is already there


def test_all_layers_choose_the_worst_neuron_of_any_layer():
    cal = _cal([[[0.04, 0.0], [0.02, 0.01]]])
    assert cal.samples_for(0.01, "all") == pytest.approx(10_000 * 16) and cal.samples_for(0.01) == pytest.approx(40_000)


def test_the_median_over_mlps_is_projected():
    cal = _cal([[[0, 0], [0.01, 0.01]], [[0, 0], [0.02, 0.02]], [[0, 0], [0.04, 0.04]]])
    assert cal.samples_for(0.01) == pytest.approx(10_000 * 4)


def test_calibrate_times_the_planned_job_and_reports_its_standard_errors():
    from whestbench.compute.estimators import finalize_estimates
    from whestbench.compute.seeds import derived_seeds

    def job_for(m, n):
        return Job(WorkSpec(seeds=tuple(derived_seeds(0, m)), n_samples=n, width=8, depth=2, mlp_range=(0, m)), Compute())

    cal = calibrate(job_for, planned_mlps=10, planned_samples=10**6, calib_mlps=2, calib_samples=20_000,
                    finalize=lambda spec, sums, i: finalize_estimates(sums, "plain")[1])
    assert cal.seconds > 0 and len(cal.stderr) == 2 and cal.stderr[0].shape == (2, 8)
    # a sample mean's standard error at N=20000 is ~ sd/141: small but not zero
    assert np.all(cal.stderr[0][cal.stderr[0] > 0] < 0.05)
