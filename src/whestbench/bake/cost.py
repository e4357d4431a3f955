"""What a bake costs, estimated before any work: bytes, FLOPs and (for a big bake) the seconds a
timing probe of the bake's own loop projects, and the refusals that follow from them (more memory
or disk than this machine has, a bake projected beyond ten years). ``bake.plan`` calls these."""

from __future__ import annotations

import dataclasses
import heapq
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from whestbench.compute.pcg64 import chunk_rows
from whestbench.compute.philox.spec import block_count
from whestbench.compute.segments import segment_bounds
from whestbench.errors import UsageError
from whestbench.format.trail import trail_bytes
from whestbench.format.writer import MAX_ROW_GROUP_BYTES, row_bytes
from whestbench.text import format_bytes, format_count, format_duration
from whestbench.work.executor import bake_workers
from whestbench.work.machine import machine_memory
from whestbench.work import steps
from whestbench.work.steps import Compute
from whestbench.work.threads import one_blas_thread, one_torch_thread
from whestbench.work.units import WorkSpec

MAX_BAKE_SECONDS = 10 * 365.25 * 86400  # a single-machine bake projected beyond this is refused as a typo
PROBE_FLOPS = 5e12  # bakes bigger than this get a quick timing probe for the plan's time estimate
PROBE_WINDOW_S = 0.5  # each probe worker is timed over at least this long after its first step (its warm-up)
PROBE_MIN_STEPS = 2  # ... and over at least this many steps
WRITE_FIXED_S = 0.5  # writing a small dataset: card, checksums, rename (0.2-0.6 s measured on a loaded 2-core VM)
WRITE_BYTES_PER_S = 50e6  # parquet encoding and the checksums' read-back of the rows


@dataclass(frozen=True)
class Needs:
    """What a bake needs from this machine, estimated before any work (bytes, FLOPs, seconds)."""

    flops: float
    output_bytes: int
    """The dataset directory (weights dominate: 4·depth·width² bytes per MLP)."""
    work_bytes: int
    """The work directory's unit and checkpoint files while the bake runs (the trail's values included)."""
    trail_bytes: int
    """The audit trail's part of ``output_bytes`` (``audit/<split>.parquet``; 0: no trail)."""
    seeds_bytes: int
    """Seeds and names of the whole dataset held in memory (also for a slice: names are unique
    over the whole seed list)."""
    peak_ram_bytes: int
    seconds: float | None = None
    """From a quick timing probe, for bakes big enough that the estimate matters (else None)."""
    rate_flops: float | None = None
    """The bake's rate: the timing probe's rate per worker × the workers (``probe_workers``)."""
    probe_workers: int | None = None
    """The workers the timing probe ran at once (the bake's)."""

    @property
    def write_seconds(self) -> float:
        """The writing's wall time, roughly: a fixed ``WRITE_FIXED_S`` (the card, checksums, the final
        rename) and the dataset's bytes at ``WRITE_BYTES_PER_S`` (parquet encoding of the rows)."""
        return WRITE_FIXED_S + self.output_bytes / WRITE_BYTES_PER_S

    def summary(self) -> str:
        trail = f" (audit trail {format_bytes(self.trail_bytes)})" if self.trail_bytes else ""
        parts = [f"{self.flops:.3g} FLOP", f"output ≈ {format_bytes(self.output_bytes)}{trail}",
                 f"work files ≈ {format_bytes(self.work_bytes)}", f"peak RAM ≈ {format_bytes(self.peak_ram_bytes)}"]
        if self.seconds is not None and self.rate_flops:
            by = f", {self.probe_workers} workers" if self.probe_workers and self.probe_workers > 1 else ""
            parts.append(f"≈ {format_duration(self.seconds)} at {self.rate_flops / 1e9:.0f} GFLOP/s (timing probe{by})")
        return "; ".join(parts)


# --- what a bake needs ------------------------------------------------------------------------


_PROCESS_BYTES = 300 * 1024**2  # interpreter, numpy, pyarrow, datasets (measured ~290 MiB RSS)
_TORCH_BYTES = 200 * 1024**2  # torch on top (measured ~470 MiB RSS in all)
PER_MLP_LIST_BYTES = 200  # a seed (int + list slot), its name and the uniqueness counts


def estimate_needs(cfg, spec: WorkSpec, compute: Compute, workers: int | None) -> Needs:
    w, d = cfg.width, cfg.depth
    start, end = cfg.range
    rows = end - start
    result_bytes = 2 * (d + 1) * w * 8  # one MLP's sums and sums of squares (fp64)
    units = unit_count(spec)
    if spec.sampler == "pcg64":
        per_unit, chunk = result_bytes + 1024, chunk_rows(w)
    else:
        batch = max(1, spec.mlps_per_unit)
        per_unit, chunk = batch * result_bytes + 1024, (compute.step_rows or 1024) * batch
    n_workers = bake_workers(workers, units)
    worker_bytes = 4 * d * w * w * max(1, spec.mlps_per_unit) + 3 * chunk * w * 4 + 4 * result_bytes
    ram = (_PROCESS_BYTES + (_TORCH_BYTES if cfg.backend == "torch" else 0) + n_workers * worker_bytes
           + min(MAX_ROW_GROUP_BYTES, rows * row_bytes(w, d)) + cfg.n_mlps * PER_MLP_LIST_BYTES)
    # the audit trail: its file in the dataset, and the same values in the unit files (at the cap: the most segments)
    segments = len(segment_bounds(cfg.n_samples, spec.cv_batch, spec.audit_segments, spec.sampler == "philox"))
    trail = rows * trail_bytes(d, w, segments, spec.estimation.is_cv, spec.sampler == "pcg64")
    return Needs(
        flops=float(spec.flops_per_sample) * cfg.n_samples * rows,
        output_bytes=rows * (row_bytes(w, d) + 8 * d * w) + trail,  # + the stderr column
        trail_bytes=trail,
        work_bytes=units * per_unit + n_workers * per_unit + trail,
        seeds_bytes=cfg.n_mlps * PER_MLP_LIST_BYTES,
        peak_ram_bytes=ram,
    )


def check_fits(plan) -> None:
    """Refuse (exit 2) a bake (``plan``, a ``bake.plan.BakePlan``) that needs more memory than the machine
    has or more disk than is free."""
    needs, cfg = plan.needs, plan.config
    total, _ = machine_memory()
    if total is not None and needs.peak_ram_bytes > total:
        raise UsageError(
            f"this bake needs about {format_bytes(needs.peak_ram_bytes)} of memory (seeds and names of "
            f"{format_count(cfg.n_mlps)} MLPs: {format_bytes(needs.seeds_bytes)}) but the machine has "
            f"{format_bytes(total)};", fix="bake fewer MLPs (--n-mlps), or slices of them on several machines.")
    anchor = Path(cfg.output).absolute()
    while not anchor.exists():
        anchor = anchor.parent
    free = shutil.disk_usage(anchor).free
    disk = needs.output_bytes + needs.work_bytes
    if disk > free:
        raise UsageError(
            f"this bake writes about {format_bytes(disk)} (dataset {format_bytes(needs.output_bytes)}, work files "
            f"{format_bytes(needs.work_bytes)}) but {anchor} has {format_bytes(free)} free;",
            fix="free space or choose another --output.")


def unit_count(spec: WorkSpec) -> int:
    """The units of ``spec`` (one per MLP for pcg64; philox cuts each MLP's blocks into units), without listing them."""
    rows = spec.mlp_range[1] - spec.mlp_range[0]
    if spec.sampler == "pcg64":
        return rows
    per_mlp_units = -(-block_count(spec.n_samples, spec.block_size) // spec.unit_blocks)
    return -(-rows // max(1, spec.mlps_per_unit)) * per_mlp_units


def probe(plan) -> Needs:
    """The ``bake.plan.BakePlan``'s time estimate from timing this bake's own loop, as the bake will run it: as many
    units at once as the bake has workers, each on a worker thread with BLAS at one thread (and torch
    at one intra-op thread where the bake pins it), on the planned bake's kernels (seeds from 0).

    Each worker is timed from the end of its first step (numba's kernel load, the control variates'
    fit, cold caches: costs a unit pays once, not per sample) over at least ``PROBE_WINDOW_S`` and
    ``PROBE_MIN_STEPS`` steps, all workers running until every one has its window, so each window
    sees the contention the bake will. The rate is the workers' rates summed (``probe_rate``)."""
    n_workers = bake_workers(plan.workers, unit_count(plan.spec))
    job = plan.scaled_job(n_workers, plan.spec.n_samples)
    units = job.spec.units()[:n_workers]
    stop = threading.Event()
    marks: list[list[tuple[float, int]]] = [[] for _ in units]
    ready: set[int] = set()
    lock = threading.Lock()

    def timed(k: int) -> None:
        def seen(n: int) -> None:
            now = time.perf_counter()
            mine = marks[k]
            mine.append((now, n))
            if len(mine) > PROBE_MIN_STEPS and now - mine[0][0] >= PROBE_WINDOW_S:
                done_waiting(k)

        try:
            steps.run_unit(job.spec, job.compute, units[k], steps.UnitContext(on_samples=seen, stop=stop))
        except steps.UnitStopped:
            pass
        done_waiting(k)  # a unit that ended (a small bake) waits for nobody

    def done_waiting(k: int) -> None:
        with lock:
            ready.add(k)
            if len(ready) == len(units):
                stop.set()

    with one_blas_thread(), one_torch_thread(job.compute.pins_torch_threads), \
            ThreadPoolExecutor(len(units), thread_name_prefix="whest-probe") as pool:
        futures = [pool.submit(timed, k) for k in range(len(units))]
        try:
            while wait(futures, timeout=0.2).not_done:  # the main thread wakes to take a stop signal
                pass
        except BaseException:  # a stop (Ctrl-C, a stop signal) during the probe: its units end at their next step
            stop.set()
            raise
        for f in futures:
            f.result()
    per_worker = probe_rate(marks, job.spec.flops_per_sample)
    if per_worker is None:
        return plan.needs
    return dataclasses.replace(plan.needs, seconds=schedule_seconds(plan.spec, n_workers, per_worker),
                               rate_flops=per_worker * n_workers, probe_workers=n_workers)


def probe_rate(marks: Sequence[Sequence[tuple[float, int]]], flops_per_sample: int) -> float | None:
    """FLOP/s of one bake worker from the probe's ``marks`` (per worker: (time, samples of the step
    that just ended), in order): each worker's samples after its first step over the time since that
    step ended, averaged over the workers with two marks or more. None when no worker has two."""
    rates = []
    for mine in marks:
        if len(mine) < 2:
            continue
        (t0, _), (t1, _) = mine[0], mine[-1]
        rates.append(flops_per_sample * sum(n for _, n in mine[1:]) / max(t1 - t0, 1e-9))
    return sum(rates) / len(rates) if rates else None


SCHEDULE_UNITS = 100_000  # bakes of more units are estimated without their tail (under one unit per 100,000 / workers)


def schedule_seconds(spec: WorkSpec, workers: int, per_worker_flops: float) -> float:
    """Wall seconds of ``spec``'s units on ``workers`` threads that take them in order (as
    ``LocalExecutor``'s pool does), each unit at ``per_worker_flops``: when the last worker ends. So 3
    equal units on 2 workers take two units' time, not one and a half, and a target bake's longest
    planned MLP, started last, is not shared among idle workers. Above ``SCHEDULE_UNITS`` units:
    the work divided among the workers."""
    fps, workers = spec.flops_per_sample, max(1, workers)
    if unit_count(spec) > SCHEDULE_UNITS:
        total = sum(spec.planned) if spec.planned is not None and spec.estimation.has_target else spec.n_samples * spec.n_mlps
        return fps * total / (workers * per_worker_flops)
    free = [0.0] * workers
    for unit in spec.units():
        start = heapq.heappop(free)
        heapq.heappush(free, start + fps * spec.expected_samples(unit) * unit.mlp_count / per_worker_flops)
    return max(free)


def check_duration(plan, work: str) -> None:
    """Refuse (exit 2) a single-machine bake projected beyond ``MAX_BAKE_SECONDS``: surely a typo."""
    seconds = plan.needs.seconds
    if seconds is not None and seconds > MAX_BAKE_SECONDS:
        raise UsageError(
            f"this bake would take about {format_duration(seconds)} here ({plan.needs.rate_flops / 1e9:.0f} GFLOP/s "
            f"measured; {work}): more than 10 years, so surely a typo;",
            fix="check --n-samples and --n-mlps (one sample count of 1e9 is the benchmark's largest).")

