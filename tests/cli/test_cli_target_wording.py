"""A bake to a target standard error words how its MLPs stopped from the real counts.

With control variates and ``--n-samples 1e6 --width 8 --depth 3 --target-stderr 0.05`` every MLP
stops at 524,288 samples, its 32-batch floor (docs/cli.md): the floor, not the target, decided.
"""

from __future__ import annotations

from helpers.cli import run


SHAPE = ["--n-mlps", "2", "--n-samples", "1e6", "--width", "8", "--depth", "3", "--seed", "1", "--quiet"]


def test_every_stop_at_the_control_variate_floor_is_said_to_be_the_floors(tmp_path, capsys):
    rc, out, err = run(["dataset", "bake", *SHAPE, "--estimator", "control-variate", "--target-stderr", "0.05",
                        "--output", str(tmp_path / "cv")], capsys)
    assert rc == 0, err
    wrote = next(line for line in out.splitlines() if line.startswith("✓ Wrote"))
    assert "all stopped at 524,288 samples, the control-variate floor" in wrote
    assert "stopped some early" not in wrote
    assert "note: every MLP stopped at 524,288 samples, the control-variate floor" in err
    assert "largest stored standard error" in wrote and "× the target" in wrote
    assert "note: stored standard errors vs the target E=0.05: median" in err


def test_a_plain_target_bake_counts_the_mlps_it_stopped_early(tmp_path, capsys):
    rc, out, err = run(["dataset", "bake", *SHAPE, "--target-stderr", "0.05", "--output", str(tmp_path / "p")], capsys)
    assert rc == 0, err
    wrote = next(line for line in out.splitlines() if line.startswith("✓ Wrote"))
    assert "the target standard error stopped all early" in wrote and "some" not in wrote
    assert "control-variate floor" not in err


def test_the_control_variate_floor_is_the_first_check_point_with_32_batches():
    from whestbench.compute.estimators import cv_floor_samples

    assert cv_floor_samples(10**6, 16384, 16384) == 524_288  # 32 steps of 16,384: check point 32
    assert cv_floor_samples(10**6, 8192, 16384) == 524_288  # 64 steps: check point 64
    assert cv_floor_samples(100_000, 16384, 16384) == 100_000  # the cap comes first


def test_the_plan_line_of_a_target_bake_is_its_planned_total(tmp_path, capsys):
    """Issue 28: the Plan line came from the --n-samples cap (2,000,000 here); the pilots plan every
    MLP's count first, so it states what will be sampled."""
    rc, out, err = run(["dataset", "bake", *SHAPE, "--estimator", "control-variate", "--target-stderr", "0.05",
                        "--output", str(tmp_path / "cv")], capsys)
    assert rc == 0, err
    plan = next(line for line in out.splitlines() if line.startswith("Plan:"))
    assert plan.startswith("Plan: 1,048,576 samples (524,288 per MLP, planned by their pilots") and "cap 1,000,000" in plan
    assert "2,000,000" not in plan


def test_a_re_run_of_a_finished_target_bake_states_the_samples_used(tmp_path, capsys):
    """Issue 28: the no-op line said "2 MLPs × 1,000,000 samples" (the cap)."""
    argv = ["dataset", "bake", *SHAPE, "--estimator", "control-variate", "--target-stderr", "0.05",
            "--output", str(tmp_path / "cv")]
    assert run(argv, capsys)[0] == 0
    rc, out, err = run(argv, capsys)
    assert rc == 0, err
    assert "2 MLPs, 524,288 samples each (target standard error 0.05, cap 1,000,000)" in out
    assert "× 1,000,000 samples" not in out
    import json

    md = json.loads((tmp_path / "cv" / "metadata.json").read_text())
    assert md["samples_used"] == {"min": 524288, "median": 524288, "max": 524288, "total": 1048576, "at_cap": 0}
