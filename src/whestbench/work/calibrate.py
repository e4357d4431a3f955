"""Calibration: time a short bake of the planned shape and project the planned bake's wall time.

The seed page's calibration recipe as a function: a warm-up run (JIT compilation, kernel caches,
device initialisation), then a timed run of a few MLPs at a reduced sample count with the device
synchronised, then a linear projection (a bake is linear in n_mlps and n_samples).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from whestbench.work.executor import Job, LocalExecutor


@dataclass(frozen=True)
class Calibration:
    width: int
    depth: int
    calib_mlps: int
    calib_samples: int
    seconds: float
    planned_mlps: int
    planned_samples: int

    @property
    def samples_per_s(self) -> float:
        return self.calib_mlps * self.calib_samples / self.seconds

    @property
    def gflops(self) -> float:
        return 2 * self.width**2 * self.depth * self.samples_per_s / 1e9

    @property
    def projected_s(self) -> float:
        return self.planned_mlps * self.planned_samples / self.samples_per_s


def calibrate(
    job_for: Callable[[int, int], Job],
    *,
    planned_mlps: int,
    planned_samples: int,
    calib_mlps: int,
    calib_samples: int,
    workers: int | None = None,
    sync: Callable[[], None] = lambda: None,
) -> Calibration:
    """Warm up, then time ``calib_mlps`` MLPs x ``calib_samples`` samples; project the planned bake.

    ``job_for(n_mlps, n_samples)`` is the planned bake's job at another size (same shape, device,
    engine and chunking; no ledger). ``sync`` waits for the device (``torch.cuda.synchronize``).
    """
    executor = LocalExecutor(workers)
    warm = job_for(min(calib_mlps, 2), max(1, min(calib_samples, 10_000)))
    executor.run(warm)
    sync()
    job = job_for(calib_mlps, calib_samples)
    t0 = time.perf_counter()
    executor.run(job)
    sync()
    seconds = time.perf_counter() - t0
    return Calibration(
        width=job.spec.width, depth=job.spec.depth, calib_mlps=calib_mlps, calib_samples=calib_samples,
        seconds=seconds, planned_mlps=planned_mlps, planned_samples=planned_samples,
    )
