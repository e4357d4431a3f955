"""Calibration: time a short bake of the planned shape and project the planned bake's wall time.

The seed page's calibration recipe as a function: a warm-up run (JIT compilation, kernel caches,
device initialisation), then a timed run of a few MLPs at a reduced sample count with the device
synchronised, then a linear projection (the bake is linear in n_mlps and n_samples).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from whestbench.compute.seeds import derived_seeds
from whestbench.work.runner import run_units
from whestbench.work.units import Unit, WorkSpec, plan_units, run_unit_pcg64, run_unit_philox, unit_samples


@dataclass(frozen=True)
class Calibration:
    device: str
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
    *,
    width: int,
    depth: int,
    planned_mlps: int,
    planned_samples: int,
    calib_mlps: int,
    calib_samples: int,
    workers: int | None = None,
    run: Callable[[WorkSpec, list[Unit]], None] | None = None,
    device: str = "cpu",
    sync: Callable[[], None] = lambda: None,
    torch_extra: dict | None = None,
) -> Calibration:
    """Warm up, then time ``calib_mlps`` MLPs x ``calib_samples`` samples; project the planned bake.

    ``run(spec, units)`` executes units (default: the runner with the pcg64 unit function, or the
    philox unit function when ``torch_extra`` — the torch WorkSpec extras — is given).
    """
    if run is None:
        fn = run_unit_pcg64 if torch_extra is None else run_unit_philox

        def run(spec: WorkSpec, units: list[Unit]) -> None:
            run_units(spec, units, workers=workers, unit_fn=fn,
                      samples_of=lambda u: unit_samples(spec, u))

    def spec_for(n_mlps: int, n_samples: int) -> WorkSpec:
        common = dict(
            seeds=tuple(derived_seeds(0, n_mlps)),
            n_samples=n_samples,
            width=width,
            depth=depth,
            mlp_range=(0, n_mlps),
        )
        if torch_extra is None:
            return WorkSpec(**common)
        return WorkSpec(**common, sampler="philox", extra=dict(torch_extra))

    warm = spec_for(min(calib_mlps, 2), max(1, min(calib_samples, 10_000)))
    run(warm, plan_units(warm))
    sync()
    spec = spec_for(calib_mlps, calib_samples)
    t0 = time.perf_counter()
    run(spec, plan_units(spec))
    sync()
    seconds = time.perf_counter() - t0
    return Calibration(
        device=device,
        width=width,
        depth=depth,
        calib_mlps=calib_mlps,
        calib_samples=calib_samples,
        seconds=seconds,
        planned_mlps=planned_mlps,
        planned_samples=planned_samples,
    )


def human_duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"
