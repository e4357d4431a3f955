"""Calibration: a timed run of the planned shape, projected linearly; its standard errors project the
samples a target standard error needs (they shrink as 1/sqrt(N))."""

from __future__ import annotations

import numpy as np
import pytest

from whestbench.work.calibrate import Calibration, calibrate
from whestbench.work.executor import Job
from whestbench.work.steps import Compute
from whestbench.work.units import WorkSpec

from helpers.cli import run


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


def test_a_bake_stops_at_the_first_check_point_past_what_the_target_needs():
    from whestbench.compute.estimators import stop_point

    step, cap = 1000, 10**9
    assert stop_point(0, step, cap) == step  # reached at once: the first check point
    assert stop_point(2500, step, cap) == 4 * step  # 1, 2, 4, ... steps
    assert stop_point(256 * step + 1, step, cap) == 512 * step  # then every 256 steps
    assert stop_point(1000, step, cap, min_samples=32 * step) == 32 * step  # control variates: 32 batches first
    assert stop_point(5e12, step, cap) == cap and stop_point(float("nan"), step, cap) == cap
    assert stop_point(2500, step, 3000) == 3000  # the cap comes first


def test_exact_standard_errors_need_no_samples_and_nan_ones_give_no_projection():
    exact = Calibration(width=2, depth=1, calib_mlps=1, calib_samples=100, seconds=1.0, planned_mlps=1,
                        planned_samples=10**6, stderr=[np.zeros((1, 2))])
    assert exact.samples_for(1e-3) == 0
    short = Calibration(width=2, depth=1, calib_mlps=1, calib_samples=100, seconds=1.0, planned_mlps=1,
                        planned_samples=10**6, stderr=[np.full((1, 2), np.nan)])
    assert np.isnan(short.samples_for(1e-3))


def test_the_timed_run_uses_the_planned_bakes_kernels():
    """Issue 28 (R5): 2 MLPs x 131,072 samples at 64x6 is below the fused kernels' 2**29 activations,
    so calibration timed the numpy passes while the 16 x 1e8 bake ran the fused kernels (0.28 vs
    ~0.67 M samples/s)."""
    from whestbench.bake.plan import BakeConfig, plan_bake
    from whestbench.compute.estimation import Estimation
    from whestbench.work.steps import _pcg64_fused

    plan = plan_bake(BakeConfig(n_mlps=16, n_samples=10**8, width=64, depth=6, seed=1,
                                estimation=Estimation("control-variate", 6e-4), output=None), probe=False)
    job = plan.scaled_job(2, 131072)
    assert _pcg64_fused(plan.spec, plan.compute) is True
    assert job.compute.pcg64_fused is True and _pcg64_fused(job.spec, job.compute) is True
    assert _pcg64_fused(job.spec) is False  # what the timed size alone would pick
    small = plan_bake(BakeConfig(n_mlps=2, n_samples=1000, width=8, depth=2, seed=1, output=None), probe=False)
    assert small.scaled_job(2, 1000).compute.pcg64_fused is False


def test_a_target_projection_uses_the_pilot_planned_counts():
    """The bake plans each MLP's count from its pilot; calibrate projects with the same rule on its
    calibration seeds (not a 1/√N extrapolation of the timed run's standard errors)."""
    import dataclasses

    from whestbench.compute.estimation import Estimation
    from whestbench.compute.seeds import derived_seeds
    from whestbench.work.calibrate import project_planned

    spec = WorkSpec(seeds=tuple(derived_seeds(9, 5)), n_samples=10**7, width=16, depth=3, mlp_range=(0, 5),
                    estimation=Estimation("plain", 4e-3))
    cal = Calibration(width=16, depth=3, calib_mlps=3, calib_samples=100_000, seconds=0.5, planned_mlps=40,
                      planned_samples=10**7)
    proj = project_planned(cal, spec, workers=2)
    calib = dataclasses.replace(spec, seeds=tuple(derived_seeds(0, 3)), mlp_range=(0, 3))
    assert proj.counts == [calib.planned_samples(i) for i in range(3)]
    assert proj.median == int(np.median(proj.counts)) and max(proj.counts) < 10**7
    rate = 3 * 100_000 / 0.5
    assert proj.seconds == pytest.approx(40 * np.mean(proj.counts) / rate + 40 * proj.pilot_s / 2)


def test_calibrate_projects_the_whole_bake_command_start_up_probe_pilots_and_writing(capsys, monkeypatch):
    """calibrate projected the sampling alone (95.7 s for a ~143 s bake): the whole command adds the
    start-up (as calibrate's own: the same imports and checks), the timing probe a bake that size
    runs, a target bake's pilots and the writing."""
    import re

    from whestbench.work import machine

    monkeypatch.setattr(machine, "process_seconds", lambda: 500.0)  # a start-up no sampling can hide
    rc, out, err = run(["dataset", "calibrate", "--n-mlps", "4", "--n-samples", "1e6", "--width", "8", "--depth", "2",
                        "--calib-samples", "4096"], capsys)
    assert rc == 0, err
    text = re.sub(r"[│┃\s]+", " ", out)

    def seconds(label):
        value, unit = re.search(label + r" ([\d.]+) (s|min|h)\b", text).groups()
        return float(value) * {"s": 1, "min": 60, "h": 3600}[unit]

    assert seconds(r"start-up ≈") == pytest.approx(500.0, abs=3)  # as format_duration rounds it
    assert seconds("whole bake command, projected") >= 0.99 * (500.0 + seconds("projected wall time"))


def test_the_whole_command_schedules_the_units_on_the_workers(capsys, monkeypatch):
    """3 equal MLPs on 2 workers take two MLPs' time: the linear projection said one and a half."""
    import re

    from whestbench.work import machine

    monkeypatch.setattr(machine, "process_seconds", lambda: 0.0)
    rc, out, err = run(["dataset", "calibrate", "--n-mlps", "3", "--n-samples", "1e7", "--width", "8", "--depth", "2",
                        "--max-threads", "2", "--calib-mlps", "2", "--calib-samples", "4096"], capsys)
    assert rc == 0, err
    text = re.sub(r"[│┃\s]+", " ", out)

    def seconds(label):
        value, unit = re.search(label + r" ([\d.]+) (s|min|h)\b", text).groups()
        return float(value) * {"s": 1, "min": 60, "h": 3600}[unit]

    linear = seconds("projected wall time")
    assert seconds("whole bake command, projected") >= 0.98 * linear * 4 / 3  # 2 MLP-times, not 1.5


@pytest.mark.parametrize("seconds, noted", [(0.17, True), (2.5, False)])
def test_a_timed_run_too_short_for_a_steady_rate_is_said_with_a_longer_one(capsys, monkeypatch, seconds, noted):
    """Idle, at 64x4, calibrate's 0.17 s timed run projected a 38 s bake as 50.5 s once and 42.4 s the
    next: a run under STEADY_S says so and names --calib-samples for about two seconds (the run's
    duration is set here, so the verdict does not depend on the machine)."""
    import dataclasses

    from whestbench.work import calibrate as calibration

    real = calibration.calibrate
    monkeypatch.setattr(calibration, "calibrate", lambda *a, **k: dataclasses.replace(real(*a, **k), seconds=seconds))
    rc, out, err = run(["dataset", "calibrate", "--n-mlps", "4", "--n-samples", "1e8", "--width", "8", "--depth", "2",
                        "--calib-samples", "65536"], capsys)
    assert rc == 0, err
    if noted:
        want = -(-65536 * 2 * calibration.STEADY_S / seconds // 65536) * 65536  # 786,432
        assert f"took {seconds:.2f} s, too short for a steady rate" in err
        assert f"--calib-samples {int(want):_} times a run of about 2 s" in err  # as COUNT reads it
    else:
        assert "too short for a steady rate" not in err
    assert Calibration(width=2, depth=2, calib_mlps=1, calib_samples=65536, seconds=5.0, planned_mlps=1,
                       planned_samples=1).steady_samples() is None
