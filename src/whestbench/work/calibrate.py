"""Calibration: time a short bake of the planned shape and project the planned bake's wall time.

The seed page's calibration recipe as a function: a warm-up run (JIT compilation, kernel caches,
device initialisation), then a timed run of a few MLPs at a reduced sample count with the device
synchronised, then a linear projection (a bake is linear in n_mlps and n_samples). The timed run's
standard errors also project the samples a target standard error needs: they shrink as 1/√N.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from whestbench.compute.estimation import Estimation
from whestbench.compute.estimators import chosen_stderr, stop_point
from whestbench.work.executor import Job, LocalExecutor
from whestbench.work.ledger import Ledger
from whestbench.work.torch_env import sync_device
from whestbench.work.units import mlp_totals
from whestbench.compute.seeds import derived_seeds
from whestbench.work.threads import one_blas_thread


STEADY_S = 1.0
"""A timed run shorter than this gives no steady rate: measured idle at 64x4, a 0.17 s run projected a
38 s bake as 50.5 s once and 42.4 s the next time (``calibrate`` says so and names a longer run)."""


@dataclass(frozen=True)
class Calibration:
    width: int
    depth: int
    calib_mlps: int
    calib_samples: int
    seconds: float
    planned_mlps: int
    planned_samples: int
    stderr: list[np.ndarray] = field(default_factory=list)
    """(depth, width) standard errors of each timed MLP at ``calib_samples`` (the bake's estimator)."""

    @property
    def samples_per_s(self) -> float:
        return self.calib_mlps * self.calib_samples / self.seconds

    @property
    def gflops(self) -> float:
        return 2 * self.width**2 * self.depth * self.samples_per_s / 1e9

    @property
    def projected_s(self) -> float:
        return self.planned_mlps * self.planned_samples / self.samples_per_s

    def steady_samples(self) -> int | None:
        """Samples per MLP for a timed run of about twice ``STEADY_S`` (a multiple of 65,536), or None
        when this run was long enough."""
        if self.seconds >= STEADY_S:
            return None
        want = self.calib_samples * 2 * STEADY_S / max(self.seconds, 1e-9)
        return int(-(-want // 65_536) * 65_536)

    def samples_for(self, target: float, layer: str = "last", quantile: float = 1.0) -> float:
        """Samples per MLP that bring the chosen neurons' standard error down to ``target``: the
        ``quantile`` over neurons (1.0: every neuron, the stopping rule's; 0.5: the median neuron) of
        each timed MLP, then the median over MLPs. The standard error shrinks as 1/√N."""
        needs = []
        for se in self.stderr:
            chosen = chosen_stderr(se, layer).ravel()
            chosen = chosen[np.isfinite(chosen)]  # NaN: the timed run was too short for a standard error
            if chosen.size:  # all 0 (exact means, dead neurons): reached at once
                worst = float(np.quantile(chosen, quantile))
                needs.append(self.calib_samples * (worst / target) ** 2)
        return float(np.median(needs)) if needs else math.nan

    def last_layer_stderr(self) -> np.ndarray:
        """The timed MLPs' finite last-layer standard errors, all in one array (empty when the run was too short)."""
        last = np.stack([se[-1] for se in self.stderr])
        return last[np.isfinite(last)]


@dataclass(frozen=True)
class TargetProjection:
    """Where a bake to a target standard error would stop each MLP, projected from a calibration:
    the samples per MLP that bring ``every`` chosen neuron (and the ``median`` one) to the target
    (``Calibration.samples_for``; NaN when the timed run gave no standard error), the check point
    the bake would ``stop`` at (never before ``floor``, the fewest a target is judged on; at most
    the cap), and the planned bake's wall time to there (``seconds``)."""

    every: float
    median: float
    stop: int
    floor: int
    seconds: float


def stderr_samples(estimation: Estimation, cv_batch: int) -> int:
    """The fewest timed samples that give a standard error: 2 (control variates: 2 batches)."""
    return 2 * cv_batch if estimation.is_cv else 2


def project_target(cal: Calibration, estimation: Estimation, step_samples: int, cv_batch: int) -> TargetProjection:
    """What the planned bake (``cal.planned_*``) would do with ``estimation``'s target standard error."""
    target, layer = estimation.target_stderr, estimation.stderr_layer
    every, median = cal.samples_for(target, layer), cal.samples_for(target, layer, 0.5)
    floor = estimation.min_samples(cv_batch)
    stop = cal.planned_samples if math.isnan(every) else stop_point(every, step_samples, cal.planned_samples, floor)
    seconds = cal.seconds / (cal.calib_mlps * cal.calib_samples) * cal.planned_mlps * stop
    return TargetProjection(every, median, stop, floor, seconds)


@dataclass(frozen=True)
class PlannedProjection:
    """A target bake projected by the rule the bake itself applies: each calibration MLP's count as
    its pilot plans it (``WorkSpec.planned_samples``: exact, not a 1/√N extrapolation), the pilots'
    mean wall time, and the planned bake's wall time: ``n_mlps × mean(counts) / rate`` plus its
    pilots shared among the workers."""

    counts: list[int]
    pilot_s: float
    seconds: float

    @property
    def median(self) -> int:
        return int(np.median(self.counts))


def project_planned(cal: Calibration, spec, workers: int) -> PlannedProjection:
    """``PlannedProjection`` of ``spec`` (with a target) from ``cal``'s rate, on the calibration's
    seeds (``derived_seeds(0, cal.calib_mlps)``)."""
    k = cal.calib_mlps
    timed = dataclasses.replace(spec, seeds=tuple(derived_seeds(0, k)), mlp_range=(0, k), planned=None)
    t0 = time.perf_counter()
    with one_blas_thread():
        counts = [timed.planned_samples(i) for i in range(k)]
    pilot_s = (time.perf_counter() - t0) / k
    seconds = cal.planned_mlps * float(np.mean(counts)) / cal.samples_per_s + cal.planned_mlps * pilot_s / max(1, workers)
    return PlannedProjection(counts, pilot_s, seconds)


def calibrate(
    job_for: Callable[[int, int], Job],
    *,
    planned_mlps: int,
    planned_samples: int,
    calib_mlps: int,
    calib_samples: int,
    workers: int | None = None,
    finalize: Callable | None = None,
) -> Calibration:
    """Warm up, then time ``calib_mlps`` MLPs x ``calib_samples`` samples; project the planned bake.

    ``job_for(n_mlps, n_samples)`` is the planned bake's job at another size (same shape, device,
    engine and chunking; no ledger); the timing waits for the job's device (``sync_device``).
    ``finalize(spec, sums, weights_index) -> stderr`` (optional) turns each timed MLP's sums into
    its standard errors, for ``Calibration.samples_for``.
    """
    executor = LocalExecutor(workers)
    warm = job_for(min(calib_mlps, 2), max(1, min(calib_samples, 10_000)))
    executor.run(warm)
    sync_device(warm.compute.device)
    job = job_for(calib_mlps, calib_samples)
    with tempfile.TemporaryDirectory(prefix="whest-calibrate-") as tmp:
        ledger = Ledger(Path(tmp) / "work", job.spec.identity()) if finalize is not None else None
        timed = dataclasses.replace(job, ledger=ledger)
        t0 = time.perf_counter()
        executor.run(timed)
        sync_device(job.compute.device)
        seconds = time.perf_counter() - t0
        stderr = []
        if ledger is not None:
            results = {u.key: ledger.load(u.key)[0] for u in job.spec.units()}
            stderr = [finalize(job.spec, mlp_totals(job.spec, i, results), i) for i in range(*job.spec.mlp_range)]
    return Calibration(
        width=job.spec.width, depth=job.spec.depth, calib_mlps=calib_mlps, calib_samples=calib_samples,
        seconds=seconds, planned_mlps=planned_mlps, planned_samples=planned_samples, stderr=stderr,
    )
