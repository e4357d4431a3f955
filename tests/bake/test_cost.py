"""bake/cost.py, the Plan line's figures. Its time estimate: the timing probe times the bake's own loop as
the bake runs it, and the estimate is the bake's schedule at that rate (issue 28). Its sizes count the
audit trail (issue 34: "output ≈" left ``audit/<split>.parquet`` out).

Each test checks an ingredient of the estimate with a fake clock or fake units, never a wall time:
a verdict must not depend on the machine's speed or load.
"""

from __future__ import annotations

import dataclasses
import threading
import types
from pathlib import Path

import pytest

from whestbench.bake import cost
from whestbench.bake import plan as plan_mod
from whestbench.bake.cost import Needs, WRITE_BYTES_PER_S, WRITE_FIXED_S, probe_rate, schedule_seconds
from whestbench.bake.pipeline import bake
from whestbench.bake.plan import BakeConfig, plan_bake
from whestbench.compute.estimation import Estimation


def _spec(n_mlps: int, n_samples: int = 1000, **kw):
    cfg = BakeConfig(n_mlps=n_mlps, n_samples=n_samples, width=4, depth=1, seed=1, output=None, **kw)
    return plan_bake(cfg, probe=False).spec


def test_the_schedule_counts_the_units_each_worker_takes_in_order():
    """3 equal units on 2 workers take two units' time (the old estimate divided the work evenly:
    one and a half), and a target bake's planned counts are scheduled in unit order."""
    spec = _spec(3)
    one_unit = spec.flops_per_sample * 1000  # FLOPs of one MLP; at this rate per worker: 1 s
    assert schedule_seconds(spec, 2, one_unit) == pytest.approx(2.0)
    assert schedule_seconds(spec, 1, one_unit) == pytest.approx(3.0)
    assert schedule_seconds(spec, 8, one_unit) == pytest.approx(1.0)  # idle workers do not share a unit
    target = Estimation(target_stderr=0.01)
    long_first = dataclasses.replace(_spec(5, 10_000), estimation=target, planned=(4000, 1000, 1000, 1000, 1000))
    long_last = dataclasses.replace(_spec(5, 10_000), estimation=target, planned=(1000, 1000, 1000, 1000, 4000))
    assert schedule_seconds(long_first, 2, one_unit) == pytest.approx(4.0)
    assert schedule_seconds(long_last, 2, one_unit) == pytest.approx(6.0)  # started last, run alone


def test_the_probe_rate_is_each_workers_samples_after_its_first_step_averaged():
    marks = [[(0.0, 10), (1.0, 10), (2.0, 10)],  # 20 samples in 2 s after the first step
             [(5.0, 99), (5.5, 20)],  # 20 samples in 0.5 s: its warm-up step (99) is left out
             [(9.0, 10)]]  # one mark: no interval, not counted
    assert probe_rate(marks, 3) == pytest.approx((3 * 20 / 2.0 + 3 * 20 / 0.5) / 2)
    assert probe_rate([[(1.0, 5)], []], 3) is None


def test_the_probe_runs_the_bakes_workers_at_once_with_one_blas_thread_on_the_planned_kernels(monkeypatch):
    """The probe used to time one unit alone, with BLAS at its default thread count (the bake holds
    every worker at one thread), over one step, then multiply by the workers × 0.85: about half the
    achieved rate on this project's 2-core VM. Now it runs as many units at once as the bake has
    workers (a barrier fails if fewer run together), each under the bake's thread limits and on the
    kernels the whole bake uses (not those a bake of the probe's size would pick), and the estimate
    is the bake's schedule at the rate measured (a fake clock: 0.25 s a step)."""
    from threadpoolctl import threadpool_info

    from whestbench.work import steps

    workers, step_samples, step_s = 3, 1000, 0.25
    cfg = BakeConfig(n_mlps=64, n_samples=2**20, width=16, depth=2, seed=1, output=None, max_threads=workers)
    plan = plan_bake(cfg, probe=False)
    planned_fused = steps._pcg64_fused(plan.spec, plan.compute)
    assert planned_fused and not steps._pcg64_fused(plan.scaled_job(workers, 2**20).spec)  # the case that matters
    together = threading.Barrier(workers, timeout=30)
    clock = threading.local()
    seen: list[tuple[list[int], bool, str]] = []

    def fake_run_unit(spec, compute, unit, ctx):
        together.wait()  # every worker of the bake runs at once, or this times out
        blas = [lib["num_threads"] for lib in threadpool_info() if lib.get("user_api") == "blas"]
        seen.append((blas, steps._pcg64_fused(spec, compute), threading.current_thread().name))
        clock.now = 0.0
        for _ in range(100_000):
            if ctx.stop.wait(0.001):  # the other workers get their steps in (a real step releases the GIL)
                return None
            clock.now += step_s
            ctx.on_samples(step_samples)
        raise AssertionError("the probe never stopped")

    monkeypatch.setattr(steps, "run_unit", fake_run_unit)
    monkeypatch.setattr(cost, "time", types.SimpleNamespace(perf_counter=lambda: clock.now))
    needs = cost.probe(plan)
    assert len(seen) == workers
    assert all(blas and set(blas) == {1} for blas, _, _ in seen), seen  # BLAS at one thread, as the workers run
    assert all(fused == planned_fused for _, fused, _ in seen)
    assert all(name.startswith("whest-probe") for _, _, name in seen)  # worker threads, not the main thread
    per_worker = plan.spec.flops_per_sample * step_samples / step_s
    assert needs.probe_workers == workers and needs.rate_flops == pytest.approx(workers * per_worker)
    assert needs.seconds == pytest.approx(schedule_seconds(plan.spec, workers, per_worker))
    # 64 units of 2**20 samples on 3 workers: 22 rounds, not 64 / 3 = 21.3
    assert needs.seconds == pytest.approx(22 * plan.spec.flops_per_sample * 2**20 / per_worker)
    assert f"(timing probe, {workers} workers)" in needs.summary()


def test_a_target_bakes_estimate_is_its_planned_counts_on_the_bakes_workers():
    """After the pilots, the estimate is the schedule of the planned counts at the probe's rate per
    worker (it was the cap's estimate scaled by the planned share, which forgets the tail)."""
    cfg = BakeConfig(n_mlps=5, n_samples=10**6, width=4, depth=1, seed=1, output=None, max_threads=2,
                     estimation=Estimation(target_stderr=0.01))
    plan = plan_bake(cfg, probe=False)
    per_worker = 1e6
    plan = dataclasses.replace(plan, needs=dataclasses.replace(plan.needs, rate_flops=2 * per_worker, probe_workers=2))
    planned = plan_mod.plan_targets(plan)
    assert planned.spec.planned is not None
    assert planned.needs.seconds == pytest.approx(schedule_seconds(planned.spec, 2, per_worker))
    work = planned.spec.flops_per_sample * sum(planned.spec.planned) / per_worker
    assert work / 2 <= planned.needs.seconds <= work


def test_a_plain_bake_below_the_probe_size_gets_no_estimate(tmp_path):
    plan = plan_bake(BakeConfig(n_mlps=2, n_samples=1000, width=4, depth=1, seed=1, output=Path(tmp_path / "o")))
    assert plan.needs.seconds is None and "timing probe" not in plan.needs.summary()


def test_the_plan_line_announces_the_whole_command_start_up_and_writing_included(monkeypatch):
    """The Plan line's time was the sampling's alone: the start-up (interpreter, imports, checks,
    the probe, a target bake's pilots: 23-56 s on a loaded machine) and the writing were left out."""
    from whestbench.cli import bake as cli_bake
    from whestbench.work import machine

    monkeypatch.setattr(machine, "process_seconds", lambda: 12.0)
    needs = Needs(flops=1e12, output_bytes=int(WRITE_BYTES_PER_S), work_bytes=0, trail_bytes=0, seeds_bytes=0,
                  peak_ram_bytes=0, seconds=30.0, rate_flops=1e10, probe_workers=2)
    assert needs.write_seconds == pytest.approx(WRITE_FIXED_S + 1.0)
    whole = 12.0 + 30.0 + needs.write_seconds
    assert cli_bake._whole_command(needs) == (
        f"; the whole command ≈ {whole:.1f} s (start-up so far 12.0 s, sampling ≈ 30.0 s, writing ≈ "
        f"{needs.write_seconds:.1f} s)")
    assert cli_bake._whole_command(dataclasses.replace(needs, seconds=None)) == ""  # no probe: no time at all


def test_the_eta_counts_the_writing_after_the_last_sample():
    import io

    from whestbench.cli.progress import Reporter
    from whestbench.events import Event, Progress

    now = [0.0]
    reporter = Reporter("bake", mode="log", log_every=3600, stream=io.StringIO(), clock=lambda: now[0])
    reporter.expect("samples", 100.0, then_s=30.0)
    reporter(Event("start", progress=Progress("samples", 0, 6000)))
    assert "ETA 0:01:30" in reporter.status(reporter.last)  # 60 s of samples at the expected rate, then 30 s


# --- the sizes -----------------------------------------------------------------------------------


@pytest.mark.parametrize("estimator", ["plain", "control-variate"])
def test_the_plan_counts_the_trail_it_writes(tmp_path, estimator):
    cfg = BakeConfig(n_mlps=2, n_samples=100_000, width=32, depth=3, seed=1, max_threads=1,
                     estimation=Estimation(estimator), output=tmp_path / "ds")
    needs = plan_bake(cfg, probe=False).needs
    written = bake(cfg)
    trail = (written / "audit" / "public.parquet").stat().st_size
    assert trail / 2 <= needs.trail_bytes and trail <= needs.trail_bytes * 1.05  # an upper estimate, not a wild one
    assert f"(audit trail {needs.summary().split('(audit trail ')[1].split(')')[0]})" in needs.summary()
    untracked = plan_bake(BakeConfig(**{**cfg.__dict__, "audit_segments": 0, "output": tmp_path / "other"}), probe=False).needs
    assert needs.output_bytes - untracked.output_bytes == needs.trail_bytes and untracked.trail_bytes == 0
    assert "audit trail" not in untracked.summary()
