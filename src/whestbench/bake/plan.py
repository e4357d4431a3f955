"""Planning a bake: the request (``BakeConfig``), what it will need, and the one typed ``BakePlan``.

``plan_bake(cfg)`` is the only place a bake is planned; the bake itself, ``calibrate`` and every
rank of a distributed bake use it. It checks everything that can be wrong before any work: the
request's values, the output path (once), the device (resolved once), the seeds (validated once),
and whether the bake fits this machine (memory, disk, the format's limits), refusing with exit 2
and one line otherwise. Nothing is written while planning.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from whestbench.compute.estimation import Estimation
from whestbench.compute.estimators import n_batches
from whestbench.compute.estimation import MIN_RELIABLE_BATCHES
from whestbench.compute.segments import DEFAULT_SEGMENTS, MAX_SEGMENTS, MIN_SEGMENTS, segment_samples
from whestbench.compute.seeds import check_range, derived_seeds, validate_mlp_seeds
from whestbench.format.schema import (BACKEND_CPU, check_positive_int, BACKEND_TORCH, DEFAULT_CONFIG, DEFAULT_SPLIT, MAX_MLPS, MAX_SAMPLES,
                                      check_name)
from whestbench.errors import InvalidDatasetError, OutputExistsError, UsageError
from whestbench.format.reader import holds_dataset, open_dataset
from whestbench.events import Event, EventSink, Progress, ignore
from whestbench.paths import check_new_output, check_output_file
from whestbench.text import format_bytes, format_count, format_duration
from whestbench.values import is_int, is_positive_number
from whestbench.work import CHECKPOINT_EVERY_S, GPU_KERNEL_REPLACEMENT, GPU_KERNELS, WITHDRAWN_GPU_KERNELS
from whestbench.work.executor import Job, bake_workers
from whestbench.work.ledger import Ledger
from whestbench.work.machine import machine_memory
from whestbench.work.workdir import PHASES, check_work_dir, work_dir_for
from whestbench.work.steps import Compute
from whestbench.work.units import WorkSpec

if TYPE_CHECKING:
    from whestbench.work.launch_env import DistEnv

PHILOX_UNIT_BLOCKS = 256  # canonical blocks per philox unit (2**24 samples): ~60 units per MLP at N=10**9
# Format limits (each refused before any work, with its reason):
MAX_ROW_FLOATS = 2**29  # one row's weights (depth·width² float32) must fit an Arrow list and a 2 GiB shard
MAX_BAKE_SECONDS = 10 * 365.25 * 86400  # a single-machine bake projected beyond this is refused as a typo
PROBE_FLOPS = 5e12  # bakes bigger than this get a quick timing probe for the plan's time estimate
PROBE_WINDOW_S = 0.5  # each probe worker is timed over at least this long after its first step (its warm-up)
PROBE_MIN_STEPS = 2  # ... and over at least this many steps


@dataclass(frozen=True)
class BakeConfig:
    """One bake request. ``__post_init__`` rejects anything that would fail later, before any work."""

    n_mlps: int
    """Size of the whole logical dataset (also when baking a slice of it)."""
    n_samples: int
    """Gaussian inputs per MLP (N of the Monte-Carlo mean)."""
    width: int
    depth: int
    output: Path | None
    """Directory to create; must not exist (checked before any work). None only to plan (calibrate)."""
    mlp_seeds: tuple[int, ...] | None = None
    """Explicit per-MLP seeds (all n_mlps of them, also for a slice)."""
    seed: int | None = None
    """Root seed: the per-MLP seeds are derived from it deterministically (``--seed``)."""
    split: str = DEFAULT_SPLIT
    config: str = DEFAULT_CONFIG
    mlp_range: tuple[int, int] | None = None
    """Half-open MLP range to bake; None is the whole dataset."""
    max_threads: int | None = None
    """CPU path: worker threads (one MLP each). Results never depend on it."""
    bake_command: str | None = None
    """The command line to record for re-baking; built from the config when None."""
    seeds_file: str | None = None
    """Path the seeds came from, for the recorded command."""
    seeds_from_peer: bool = False
    """A non-zero rank of a distributed bake: the seeds arrive from rank 0."""
    backend: str = "cpu"
    """"cpu" (pcg64 sampler, whestbench 0.16's numbers) or "torch" (philox sampler, any device)."""
    device: str | None = None
    """Torch device: auto, cuda, mps or cpu."""
    mlps_per_batch: int | None = None
    """Torch: MLPs per batched step. Never changes the numbers."""
    chunk_size: int | None = None
    """Torch: samples per step (rounded to a power of two). Never changes the numbers."""
    gpu_kernel: str = "torch"
    """CUDA: "torch" (plain torch ops, fp32 matmuls) or "ozaki" (the integer Triton kernel, opt-in until a
    GPU run confirms it); "fused" (the split-precision Triton kernel) is withdrawn (``WITHDRAWN_GPU_KERNELS``).
    Changes the arithmetic, so it is recorded."""
    checkpoint_every: float = CHECKPOINT_EVERY_S
    """Seconds between checkpoints inside a unit; a kill loses at most this much work per worker."""
    estimation: Estimation = Estimation()
    """The estimator and the target standard error (``n_samples`` is then the cap); validated when built."""
    card: dict[str, str] | None = None
    """The dataset card's ``pretty_name``/``license``/``homepage`` (recorded in metadata ``card``;
    ``format.card_rules.check_card_fields`` checks them). Never changes the numbers."""
    skip_device_check: bool = False
    """Torch: do not check the device before baking (``work/device_check.py``); the skip is recorded."""
    accept_non_invariant: bool = False
    """Torch: bake even when the device check finds results that depend on the chunk or batch size
    (row-invariance); the acceptance is recorded."""
    audit_segments: int = DEFAULT_SEGMENTS
    """Segments per MLP of the audit trail (``compute.segments``; docs/format.md, "Audit trail"); 0: none.
    Never changes the numeric columns."""

    def __post_init__(self) -> None:
        for flag, value in (("--n-mlps", self.n_mlps), ("--n-samples", self.n_samples),
                            ("--width", self.width), ("--depth", self.depth)):
            check_positive_int(flag, value)
        if self.n_mlps > MAX_MLPS:
            raise UsageError(
                f"--n-mlps {format_count(self.n_mlps)} is more than {format_count(MAX_MLPS)}, the most the int32 "
                "mlp_id column can number (did you mean --n-samples?)."
            )
        if self.n_samples > MAX_SAMPLES:
            raise UsageError(f"--n-samples must be below 2**63 (counts are int64); got {format_count(self.n_samples)}.")
        if self.depth * self.width * self.width > MAX_ROW_FLOATS:
            raise UsageError(
                f"width {self.width} x depth {self.depth} makes {format_count(self.depth * self.width**2)} weights per MLP; "
                f"one dataset row holds at most {format_count(MAX_ROW_FLOATS)} (a 2 GiB Parquet shard and an Arrow list)."
            )
        try:
            check_name(self.split)
            check_name(self.config, "config")
        except InvalidDatasetError as exc:
            raise UsageError.from_error(exc, fix="(--split / --config)") from None
        if self.mlp_seeds is not None and self.seed is not None:
            raise UsageError("pass either --mlp-seeds or --seed, not both.")
        if self.mlp_seeds is not None:
            object.__setattr__(self, "mlp_seeds", tuple(validate_mlp_seeds(list(self.mlp_seeds), self.n_mlps)))
        if self.seed is not None and not is_int(self.seed, 0):
            raise UsageError(f"--seed must be a non-negative integer; got {self.seed!r}.")
        if self.mlp_range is not None:
            object.__setattr__(self, "mlp_range", check_range(self.mlp_range, self.n_mlps))
            if self.is_partial and self.mlp_seeds is None and self.seed is None and not self.seeds_from_peer:
                raise UsageError(
                    "a slice needs the whole dataset's seeds so that partials fit together: "
                    "pass --mlp-seeds FILE (from `whest dataset generate-seeds`) or --seed S."
                )
        if self.max_threads is not None:
            check_positive_int("--max-threads", self.max_threads)
        if self.backend not in ("cpu", "torch"):
            raise UsageError(f"backend must be 'cpu' or 'torch'; got {self.backend!r}.")
        if self.backend == "torch" and self.max_threads is not None:
            raise UsageError("--max-threads applies to the CPU path only; torch manages its own threads (drop --max-threads).")
        if self.backend == "cpu" and (self.skip_device_check or self.accept_non_invariant):
            flag = "--skip-device-check" if self.skip_device_check else "--accept-non-invariant"
            raise UsageError(f"{flag} applies to the torch backend only (the CPU path has no device check); drop it.")
        if self.gpu_kernel not in GPU_KERNELS:
            raise UsageError(f"--gpu-kernel must be one of {', '.join(GPU_KERNELS)}; got {self.gpu_kernel!r}.")
        if self.gpu_kernel in WITHDRAWN_GPU_KERNELS:
            raise UsageError(f"--gpu-kernel {self.gpu_kernel} is withdrawn: {WITHDRAWN_GPU_KERNELS[self.gpu_kernel]}; "
                             f"use --gpu-kernel {GPU_KERNEL_REPLACEMENT}.")
        for flag, value in (("--mlps-per-batch", self.mlps_per_batch), ("--chunk-size", self.chunk_size)):
            if value is not None:
                check_positive_int(flag, value)
        if self.estimation.is_cv and self.gpu_kernel != "torch":
            raise UsageError(f"the {self.gpu_kernel} GPU kernel does not compute the control variates yet: use "
                             "--gpu-kernel torch, or --estimator plain.")
        s = self.audit_segments
        if not is_int(s, 0, MAX_SEGMENTS) or 0 < s < MIN_SEGMENTS:
            raise UsageError(f"--audit-segments must be 0 (no trail) or an integer from {MIN_SEGMENTS} to {MAX_SEGMENTS} "
                             f"(fewer segments leave a spot check nothing smaller than a whole MLP); got {s!r}.")
        if not is_positive_number(self.checkpoint_every):
            raise UsageError(f"--checkpoint-every must be a positive number of seconds; got {self.checkpoint_every!r}.")
        if self.output is not None:
            object.__setattr__(self, "output", Path(self.output))
        from whestbench.format.card_rules import given_card

        object.__setattr__(self, "card", given_card(self.card) or None)

    @property
    def range(self) -> tuple[int, int]:
        return self.mlp_range if self.mlp_range is not None else (0, self.n_mlps)

    @property
    def is_partial(self) -> bool:
        return self.range != (0, self.n_mlps)


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


@dataclass(frozen=True)
class BakePlan:
    """Everything a bake will do, decided once: what (spec), how (compute, workers), where (output,
    work dir), what gets recorded (backend, sampler, kernel) and what it needs."""

    config: BakeConfig
    spec: WorkSpec
    """Seeds are empty until resolved: random seeds are read or drawn under the work dir's lock, and
    a distributed rank other than 0 receives them from rank 0."""
    compute: Compute
    workers: int | None
    """Worker threads; None: one per core (and never more than units)."""
    seed_source: dict[str, Any]
    backend: str
    """The metadata ``backend``: "flopscope" (the default CPU path, as 0.16 names it) or "torch"."""
    device_label: str
    """What the "Baking ..." line names: "cpu", or "torch (cuda:0)"."""
    sampler_md: dict[str, Any]
    kernel_md: dict[str, Any] | None
    """torch: the kernel block of metadata (name, precision class, config)."""
    needs: Needs
    notes: tuple[str, ...] = field(default=())
    """Warnings to show before the bake (e.g. MPS has no float64)."""

    @property
    def work_dir(self) -> Path | None:
        return work_dir_for(self.config.output) if self.config.output is not None else None

    def with_seeds(self, seeds, seed_source: dict[str, Any] | None = None) -> "BakePlan":
        return dataclasses.replace(self, spec=self.spec.with_seeds(seeds), seed_source=seed_source or self.seed_source)

    def job(self, ledger: Ledger | None) -> Job:
        return Job(self.spec, self.compute, ledger, self.config.checkpoint_every)

    @property
    def planned_total(self) -> int:
        """The samples this bake will draw: the sum of the planned counts of a target bake planned up
        front (``plan_targets``), else MLPs × ``n_samples`` (the cap, for a target bake not planned)."""
        if self.spec.planned is not None and self.spec.estimation.has_target:
            return sum(self.spec.planned)
        start, end = self.config.range
        return (end - start) * self.config.n_samples

    def scaled_job(self, n_mlps: int, n_samples: int) -> Job:
        """The same bake's job at another size (seeds derived from 0, no ledger, no target standard
        error: every MLP takes all ``n_samples``), on the planned bake's kernels: for calibration."""
        spec = dataclasses.replace(self.spec, seeds=tuple(derived_seeds(0, n_mlps)), n_samples=n_samples, mlp_range=(0, n_mlps),
                                   planned=None, estimation=dataclasses.replace(self.spec.estimation, target_stderr=None))
        from whestbench.work.steps import _pcg64_fused

        # the planned bake's kernels, not those a bake of the timed size would pick (numpy below 2**29 activations)
        compute = dataclasses.replace(self.compute, pcg64_fused=_pcg64_fused(self.spec, self.compute))
        return dataclasses.replace(self.job(None), spec=spec, compute=compute)


PLAN_UPFRONT_MLPS = 4096  # a target bake of at most this many MLPs plans them all before sampling


def plan_targets(plan: BakePlan, emit: EventSink = ignore, stop: threading.Event | None = None,
                 work: Path | None = None) -> BakePlan:
    """A target bake's plan with every MLP's count planned up front (``WorkSpec.planned``): the
    pilots are cheap (one forward pass of 16,384 inputs each), and the units use these counts
    instead of planning again, so the progress total, the Plan line and a stop's message count what
    will be sampled rather than the cap. ``Progress("pilots")`` reports them. Unchanged: a bake
    without a target, or one too big to plan up front (over ``PLAN_UPFRONT_MLPS`` MLPs, or control
    variates that would not stay in the fit cache, ``CONTROLS_CACHE_BYTES``, until their units
    use them); its units plan their own counts, and its totals shrink as they land. A ``stop``
    during the pilots returns the plan unchanged at once (the bake then stops before any unit).
    ``work``: the work directory, where the counts are kept (``ledger.save_pilots``) and a resume
    reads them instead of running the pilots again."""
    spec = plan.spec
    if not spec.estimation.has_target or spec.planned is not None or not spec.seeds:
        return plan
    from concurrent.futures import ThreadPoolExecutor

    from whestbench.work.controls import CONTROLS_CACHE_BYTES
    from whestbench.work.threads import one_blas_thread

    start, end = spec.mlp_range
    n = end - start
    fit_bytes = 16 * spec.depth * spec.width * spec.width if spec.estimation.is_cv and spec.depth > 1 else 0
    if n > PLAN_UPFRONT_MLPS or n * fit_bytes > CONTROLS_CACHE_BYTES:
        return plan
    from whestbench.work.ledger import identity_digest, load_pilots, save_pilots

    digest = identity_digest(spec.identity())
    saved = load_pilots(work, digest, n, spec.n_samples) if work is not None else None
    if saved is not None:
        emit(Event("note", message=f"resuming: the pilots' planned samples of {format_count(n)} MLPs read from "
                                   f"{work}; the pilots are not run again"))
        return _planned(plan, saved)
    counts: list[int] = [0] * n
    emit(Event("stage", message=PHASES["pilots"], data={"phase": "pilots"}))  # for status; the counts follow at once
    emit(Event("progress", progress=Progress("pilots", 0, n)))
    def pilot(k: int) -> tuple[int, int]:
        if stop is not None and stop.is_set():
            return k, -1
        return k, spec.planned_samples(start + k)

    with one_blas_thread(), ThreadPoolExecutor(bake_workers(plan.workers, n)) as pool:
        # one process-wide BLAS limit around the pool: a pilot's own limit, restored while another
        # runs, would otherwise lift it under that one
        for done, (k, c) in enumerate(pool.map(pilot, range(n)), 1):
            counts[k] = c
            emit(Event("progress", progress=Progress("pilots", done, n)))
    if min(counts) < 0:  # stopped: the queued pilots returned at once
        return plan
    if work is not None:
        try:
            save_pilots(work, digest, counts)
        except OSError:  # a resume runs them again
            pass
    return _planned(plan, counts)


def _planned(plan: BakePlan, counts: Sequence[int]) -> BakePlan:
    """``plan`` with each MLP's planned ``counts``: the total, FLOPs and the timed estimate follow them."""
    spec = plan.spec
    n = spec.mlp_range[1] - spec.mlp_range[0]
    planned = dataclasses.replace(plan, spec=dataclasses.replace(spec, planned=tuple(counts)))
    share = planned.planned_total / max(1, n * plan.config.n_samples)
    needs = plan.needs
    seconds = None
    if needs.rate_flops and needs.probe_workers:  # the planned counts on the bake's workers, tail included
        seconds = schedule_seconds(planned.spec, needs.probe_workers, needs.rate_flops / needs.probe_workers)
    planned = dataclasses.replace(planned, needs=dataclasses.replace(needs, flops=needs.flops * share, seconds=seconds))
    _check_duration(planned, f"{format_count(n)} MLPs, {format_count(planned.planned_total)} planned samples")
    return planned


# ---------------------------------------------------------------------------------------------


def check_bake_output(output: Path) -> None:
    """Refuse an ``--output`` that cannot become the new dataset, before any work.

    An existing complete dataset beside a leftover work directory is what a kill between the final
    rename and the work directory's removal leaves: the dataset is complete (the rename is atomic),
    so the leftover is removed before refusing the existing output.
    """
    try:
        check_new_output(output)
    except OutputExistsError:
        work = work_dir_for(output)
        if holds_dataset(output) and work.is_dir():
            shutil.rmtree(work, ignore_errors=True)
        raise


class AlreadyBaked(Exception):
    """``--output`` already holds the complete, intact dataset of exactly this bake (the same plan
    identity): a re-run (a requeued job, a retried array task) has nothing to do. Not an error: the
    CLI exits 0, the Python API returns the path."""

    def __init__(self, output: Path, metadata: dict[str, Any], dataset: Any):
        self.output = Path(output)
        self.metadata = metadata
        self.dataset = dataset
        """The output as the completion test opened it (a ``format.reader.DatasetDir``: read once)."""
        super().__init__(f"{output} is already complete")

    def summary(self) -> str:
        md = self.metadata
        rows = md.get("n_mlps")
        part = (f" (MLPs {md['mlp_range'][0]}-{md['mlp_range'][1] - 1} of {md.get('total_n_mlps'):,})"
                if md.get("is_partial") and isinstance(md.get("mlp_range"), list) else "")
        when = str(md.get("created_at_utc", ""))[:19].replace("T", " ")
        return (f"{rows:,} MLP{'s' if rows != 1 else ''}{part}{_samples_each(md)}, width "
                f"{md.get('width')}, depth {md.get('depth')}, split {md.get('split')!r}"
                + (f", written {when} UTC" if when else ""))


def _samples_each(md: dict[str, Any]) -> str:
    """`` × 1,000,000 samples``; a target bake's: the samples its MLPs used, with the target and the cap."""
    cap = md.get("n_samples")
    target = md.get("target_stderr")
    if not isinstance(target, dict):
        return f" × {cap:,} samples"
    used = md.get("samples_used")
    if isinstance(used, dict) and isinstance(used.get("min"), int) and isinstance(used.get("max"), int):
        spread = f"{used['min']:,}" if used["min"] == used["max"] else f"{used['min']:,}–{used['max']:,}"
    else:  # written before samples_used was recorded: the counts are in the n_samples_used column
        spread = f"up to {cap:,}"
    return f", {spread} samples each (target standard error {target.get('value'):g}, cap {cap:,})"


def result_marker(plan: "BakePlan", seeds: Sequence[int] | None, source: Mapping[str, Any]) -> str:
    """The completion marker (``plan_digest``) of ``plan``'s output: the digest of what decides its
    rows and place: the seeds (their digest, and how they were chosen; random seeds are "random",
    whatever was drawn), shape, range, split and config, backend, sampler and arithmetic class,
    estimator and target. The same for the bake that writes it and for a re-run that asks for it."""
    from whestbench.compute.seeds import seed_list_digest
    from whestbench.format.finished import marker

    cfg = plan.config
    start, end = cfg.range
    method = source.get("method")
    return marker({
        "seed_list_digest": None if method == "random" or seeds is None else seed_list_digest(list(seeds)),
        "seed_method": method, "split": cfg.split, "config": cfg.config, "n_mlps": end - start,
        "n_samples": cfg.n_samples, "width": cfg.width, "depth": cfg.depth,
        "slice": [start, end, cfg.n_mlps] if cfg.is_partial else None, "backend": plan.backend,
        "sampler": [plan.sampler_md["name"], plan.sampler_md["block_size"]],
        "precision_class": plan.kernel_md.get("precision_class") if plan.kernel_md is not None else None,
        **plan.spec.estimation.identity(),
    })


def _finished(plan: "BakePlan", seeds: list[int] | None, source: dict[str, Any], output: Any) -> dict[str, Any] | None:
    """The metadata of ``output`` (``plan``'s, opened) when it holds the complete dataset of this very bake, else
    None: ``format.finished.completed`` with this plan's marker. A dataset without a marker is
    judged by the same facts: seeds, shape, range, split and config, backend, sampler and
    arithmetic, estimator and target."""
    from whestbench.compute.seeds import seed_list_digest
    from whestbench.format.finished import completed

    cfg, spec = plan.config, plan.spec
    start, end = cfg.range

    def legacy(md: dict[str, Any]) -> bool:
        recorded = md.get("seed_source") if isinstance(md.get("seed_source"), dict) else {}
        if seeds is not None:
            same_seeds = md.get("seed_list_digest") == seed_list_digest(seeds) and recorded.get("method") == source.get("method")
        else:
            same_seeds = source.get("method") == "random" and recorded.get("method") == "random"
        try:
            same_estimation = Estimation.from_metadata(md) == spec.estimation
        except (ValueError, TypeError, KeyError):  # a malformed block (UsageError is a ValueError)
            same_estimation = False
        sampler = md.get("sampler") if isinstance(md.get("sampler"), dict) else {}
        kernel = md.get("kernel") if isinstance(md.get("kernel"), dict) else {}
        return bool(
            same_seeds
            and "splits" not in md
            and (md.get("split"), md.get("config")) == (cfg.split, cfg.config)
            and (md.get("n_mlps"), md.get("n_samples"), md.get("width"), md.get("depth")) ==
                (end - start, cfg.n_samples, cfg.width, cfg.depth)
            and bool(md.get("is_partial")) == cfg.is_partial
            and (not cfg.is_partial or (md.get("mlp_range"), md.get("total_n_mlps")) == ([start, end], cfg.n_mlps))
            and md.get("backend") == plan.backend
            and (sampler.get("name"), sampler.get("block_size")) == (plan.sampler_md["name"], plan.sampler_md["block_size"])
            and (plan.kernel_md is None or kernel.get("precision_class") == plan.kernel_md.get("precision_class"))
            and same_estimation
        )

    return completed(output, result_marker(plan, seeds, source), legacy)


def plan_bake(cfg: BakeConfig, *, dist_env: "DistEnv | None" = None, probe: bool = True,
              on_event: EventSink = ignore) -> BakePlan:
    """The plan of ``cfg``: checks, device, compute options, explicit or derived seeds, needs.

    Raises UsageError (exit 2) for anything that would fail later or does not fit this machine.
    ``probe``: time a few chunks for the time estimate when the bake is big (``PROBE_FLOPS``).
    ``on_event`` hears a ``stage`` event as each stretch of seconds begins (loading torch, the probe).
    """
    rank0 = dist_env is None or dist_env.rank == 0
    # an output that holds a dataset may hold this very bake, finished: judged once the plan is known
    existing = rank0 and cfg.output is not None and holds_dataset(cfg.output)
    if rank0 and cfg.output is not None and not existing:
        check_bake_output(cfg.output)
        check_work_dir(work_dir_for(cfg.output))
        if cfg.backend == "torch" and not cfg.skip_device_check:
            _check_report_path(cfg.output)
    start, end = cfg.range
    notes: list[str] = []
    if cfg.backend == "cpu":
        from whestbench.compute.pcg64 import SAMPLER_NAME, SAMPLER_VERSION, chunk_rows

        spec = WorkSpec(seeds=(), n_samples=cfg.n_samples, width=cfg.width, depth=cfg.depth, mlp_range=(start, end),
                        sampler=SAMPLER_NAME, arithmetic="numpy-sgemm-fp32", estimation=cfg.estimation,
                        audit_segments=cfg.audit_segments)
        compute, workers, label, kernel_md = Compute("numpy"), cfg.max_threads, "cpu", None
        sampler_md = {"name": SAMPLER_NAME, "version": SAMPLER_VERSION, "block_size": chunk_rows(cfg.width)}
        backend = BACKEND_CPU
    else:
        if "torch" not in sys.modules:
            on_event(Event("stage", message="starting: importing torch", data={"phase": "starting"}))
        spec, compute, workers, label, sampler_md, kernel_md = _torch_plan(cfg, dist_env, notes)
        backend = BACKEND_TORCH
    if spec.estimation.is_cv:
        k = n_batches(cfg.n_samples, spec.cv_batch)
        if k < MIN_RELIABLE_BATCHES and cfg.depth > 1:  # depth 1: every mean is exact, no standard error to estimate
            batches = (f"1 batch of {cfg.n_samples:,} samples" if k == 1 else
                       f"{k} batches of up to {spec.cv_batch:,} samples")
            notes.append(f"control-variate standard errors come from {batches} ({k - 1} degrees of freedom"
                         f"{', so none is stored: NaN' if k == 1 else ''}): rough; bake >= "
                         f"{MIN_RELIABLE_BATCHES * spec.cv_batch:,} samples for reliable ones.")
    if cfg.estimation.stderr_layer != "last" and not cfg.estimation.has_target:
        notes.append("--stderr-layer applies to --target-stderr, which is not given: it changes nothing here.")
    plan = BakePlan(cfg, spec, compute, workers, {}, backend, label, sampler_md, kernel_md,
                    needs=_needs(cfg, spec, compute, workers), notes=tuple(notes))
    if existing:
        seeds, source = _known_seeds(cfg)
        dataset = open_dataset(cfg.output)
        done = _finished(plan, seeds, source, dataset)
        if done is not None:
            work = work_dir_for(cfg.output)
            if work.is_dir() and not work.is_symlink():  # a kill between the final rename and its removal
                shutil.rmtree(work, ignore_errors=True)
            raise AlreadyBaked(cfg.output, done, dataset)
        check_bake_output(cfg.output)  # refuses it (already exists)
    if rank0 and cfg.output is not None:
        _check_fits(plan)  # before the seeds: deriving 10**9 of them would take minutes
    seeds, source = _known_seeds(cfg)
    plan = plan.with_seeds(seeds, source) if seeds is not None else dataclasses.replace(plan, seed_source=source)
    if probe and plan.needs.flops > PROBE_FLOPS:
        on_event(Event("stage", message=PHASES["probe"], data={"phase": "probe"}))
        plan = dataclasses.replace(plan, needs=_probe(plan))
        # a target bake is judged by the counts its pilots plan (``plan_targets``), not by the cap:
        # --n-samples 1e15 --target-stderr 1e-2 plans 16,384 samples per MLP
        if (dist_env is None or dist_env.world_size == 1) and not plan.spec.estimation.has_target:
            _check_duration(plan, f"{format_count(cfg.range[1] - cfg.range[0])} MLPs × {format_count(cfg.n_samples)} samples")
    return plan


def device_check_report(output: Path, rank: int = 0) -> Path:
    """Where a failed device check's JSON report goes: beside ``--output`` (per rank when distributed)."""
    suffix = ".device-check.json" if rank == 0 else f".device-check.rank{rank}.json"
    return Path(str(output) + suffix)


def _check_report_path(output: Path) -> None:
    """The device check's report is written only if the check fails, but where it would go is checked
    before any work, like every other output file (a name too long for it, a directory or FIFO there)."""
    try:
        check_output_file(device_check_report(output), "the device check's report")
    except UsageError as exc:
        raise UsageError.from_error(exc, fix="A torch bake writes the device check's report beside --output when the "
                                    "check fails: move it aside or choose another --output.") from None


def _check_duration(plan: BakePlan, work: str) -> None:
    """Refuse (exit 2) a single-machine bake projected beyond ``MAX_BAKE_SECONDS``: surely a typo."""
    seconds = plan.needs.seconds
    if seconds is not None and seconds > MAX_BAKE_SECONDS:
        raise UsageError(
            f"this bake would take about {format_duration(seconds)} here ({plan.needs.rate_flops / 1e9:.0f} GFLOP/s "
            f"measured; {work}): more than 10 years, so surely a typo; check --n-samples and --n-mlps (one sample "
            "count of 1e9 is the benchmark's largest)."
        )


def _known_seeds(cfg: BakeConfig) -> tuple[list[int] | None, dict[str, Any]]:
    if cfg.mlp_seeds is not None:
        return list(cfg.mlp_seeds), {"method": "explicit"}
    if cfg.seed is not None:
        return derived_seeds(cfg.seed, cfg.n_mlps), {"method": "derived", "root_seed": cfg.seed}
    if cfg.seeds_from_peer:
        return None, {"method": "peer"}
    return None, {"method": "random"}


def _torch_plan(cfg: BakeConfig, dist_env, notes: list[str]):
    """The torch backend's choices: device (resolved once), engine, batch, chunk, kernel identity."""
    import json

    from whestbench.compute.philox import spec as philox
    from whestbench.work.torch_env import kernel_identity, resolve_device

    device = resolve_device(cfg.device)
    import torch

    from whestbench.compute.philox import torch_engine as philox_torch
    from whestbench.compute.philox.numba_engine import resolve_engine

    start, end = cfg.range
    # On the CPU one MLP per worker thread (one per core, torch single-threaded: the numba passes
    # are single-threaded, so this keeps every core busy); on a GPU, batches of up to 16.
    batch = cfg.mlps_per_batch or (1 if device == "cpu" else min(end - start, 16))
    if cfg.estimation.has_target:
        batch = 1  # each MLP stops at its own check point
    rows = philox_torch.step_rows(cfg.chunk_size, torch.device(device), batch, cfg.width, philox.BLOCK_SIZE)
    engine = resolve_engine("auto", torch.device(device))
    if engine == "cuda" and cfg.gpu_kernel == "torch":  # every GEMM one shape: --chunk-size cannot reach it
        from whestbench.compute.philox.cuda_engine import gemm_rows

        if cfg.chunk_size is not None:
            notes.append(f"--chunk-size is not used on CUDA: every GEMM of the plain path multiplies "
                         f"{gemm_rows(cfg.width):,} rows, so no setting changes a bit")
        rows = gemm_rows(cfg.width)
    elif device == "cuda" and cfg.gpu_kernel == "torch":
        notes.append("triton is not installed, so CUDA runs the slower torch-ops path, whose results can depend on "
                     "--chunk-size and --mlps-per-batch (the device check says): pip install triton")
    distributed = dist_env is not None and dist_env.world_size > 1
    where = f"cuda:{dist_env.local_rank}" if device == "cuda" and distributed else device  # one GPU per local rank
    kernel_md: dict[str, Any] = kernel_identity(where, engine, cfg.width, rows)
    config = None
    if cfg.gpu_kernel == "ozaki":
        from whestbench.compute.philox import ozaki

        ok, why = ozaki.ozaki_available(device, cfg.width)
        if not ok:
            raise UsageError(f"--gpu-kernel ozaki cannot run here: {why}; use --gpu-kernel torch.")
        engine = "triton"
        config = ozaki.default_config(cfg.width)
        # integer sums are exact: the identity holds no device (the same numbers on any GPU generation)
        kernel_md = {"name": "philox-triton-ozaki", "precision_class": json.dumps(config.identity(), sort_keys=True),
                     "config": config.identity()}
    if device == "mps":
        notes.append(
            "MPS has no float64: sums accumulate in float32, which loses ~1e-7 relative per addition "
            "(means at N=1e9 may be off by ~1e-4); use --device cuda or cpu for production ground truth."
        )
    workers = (os.cpu_count() or 1) if device == "cpu" and not distributed else 1
    unit_blocks = PHILOX_UNIT_BLOCKS
    if cfg.estimation.has_target:  # one unit per MLP: its blocks run in order, checked on the way
        unit_blocks = 1 << max(philox.block_count(cfg.n_samples) - 1, 0).bit_length()
    spec = WorkSpec(seeds=(), n_samples=cfg.n_samples, width=cfg.width, depth=cfg.depth, mlp_range=(start, end),
                    sampler=philox.SAMPLER_NAME, arithmetic=kernel_md["precision_class"], block_size=philox.BLOCK_SIZE,
                    unit_blocks=unit_blocks, mlps_per_unit=batch, estimation=cfg.estimation,
                    audit_segments=cfg.audit_segments)
    if engine == "triton" and cfg.audit_segments and (
            cfg.estimation.has_target
            or segment_samples(cfg.n_samples, spec.cv_batch, cfg.audit_segments) < philox.BLOCK_SIZE):
        raise UsageError(
            f"the {cfg.gpu_kernel} kernel sums whole blocks of {philox.BLOCK_SIZE:,} samples, and this bake's audit segments "
            f"are smaller (or depend on a target): use --audit-segments 0, or --gpu-kernel torch.")
    sampler_md = {"name": philox.SAMPLER_NAME, "version": philox.SAMPLER_VERSION, "block_size": philox.BLOCK_SIZE,
                  "unit_blocks": unit_blocks, "summation": "pairwise-tree"}
    kernel_md = {**kernel_md, "mlps_per_batch": batch, "chunk_size": rows}
    return spec, Compute(engine, where, rows, config), workers, f"torch ({where})", sampler_md, kernel_md


# --- what a bake needs ------------------------------------------------------------------------


_PROCESS_BYTES = 300 * 1024**2  # interpreter, numpy, pyarrow, datasets (measured ~290 MiB RSS)
_TORCH_BYTES = 200 * 1024**2  # torch on top (measured ~470 MiB RSS in all)
_PER_MLP_LIST_BYTES = 200  # a seed (int + list slot), its name and the uniqueness counts


def _needs(cfg: BakeConfig, spec: WorkSpec, compute: Compute, workers: int | None) -> Needs:
    from whestbench.compute.segments import segment_bounds
    from whestbench.format.trail import trail_bytes
    from whestbench.format.writer import MAX_ROW_GROUP_BYTES, row_bytes

    w, d = cfg.width, cfg.depth
    start, end = cfg.range
    rows = end - start
    result_bytes = 2 * (d + 1) * w * 8  # one MLP's sums and sums of squares (fp64)
    units = _unit_count(spec)
    if spec.sampler == "pcg64":
        from whestbench.compute.pcg64 import chunk_rows

        per_unit, chunk = result_bytes + 1024, chunk_rows(w)
    else:
        batch = max(1, spec.mlps_per_unit)
        per_unit, chunk = batch * result_bytes + 1024, (compute.step_rows or 1024) * batch
    n_workers = bake_workers(workers, units)
    worker_bytes = 4 * d * w * w * max(1, spec.mlps_per_unit) + 3 * chunk * w * 4 + 4 * result_bytes
    ram = (_PROCESS_BYTES + (_TORCH_BYTES if cfg.backend == "torch" else 0) + n_workers * worker_bytes
           + min(MAX_ROW_GROUP_BYTES, rows * row_bytes(w, d)) + cfg.n_mlps * _PER_MLP_LIST_BYTES)
    # the audit trail: its file in the dataset, and the same values in the unit files (at the cap: the most segments)
    segments = len(segment_bounds(cfg.n_samples, spec.cv_batch, spec.audit_segments, spec.sampler == "philox"))
    trail = rows * trail_bytes(d, w, segments, spec.estimation.is_cv, spec.sampler == "pcg64")
    return Needs(
        flops=float(spec.flops_per_sample) * cfg.n_samples * rows,
        output_bytes=rows * (row_bytes(w, d) + 8 * d * w) + trail,  # + the stderr column
        trail_bytes=trail,
        work_bytes=units * per_unit + n_workers * per_unit + trail,
        seeds_bytes=cfg.n_mlps * _PER_MLP_LIST_BYTES,
        peak_ram_bytes=ram,
    )


def _check_fits(plan: BakePlan) -> None:
    """Refuse (exit 2) a bake that needs more memory than the machine has or more disk than is free."""
    needs, cfg = plan.needs, plan.config
    total, _ = machine_memory()
    if total is not None and needs.peak_ram_bytes > total:
        raise UsageError(
            f"this bake needs about {format_bytes(needs.peak_ram_bytes)} of memory (seeds and names of "
            f"{format_count(cfg.n_mlps)} MLPs: {format_bytes(needs.seeds_bytes)}) but the machine has "
            f"{format_bytes(total)}; bake fewer MLPs (--n-mlps), or slices of them on several machines."
        )
    anchor = Path(cfg.output).absolute()
    while not anchor.exists():
        anchor = anchor.parent
    free = shutil.disk_usage(anchor).free
    disk = needs.output_bytes + needs.work_bytes
    if disk > free:
        raise UsageError(
            f"this bake writes about {format_bytes(disk)} (dataset {format_bytes(needs.output_bytes)}, work files "
            f"{format_bytes(needs.work_bytes)}) but {anchor} has {format_bytes(free)} free; free space or choose "
            "another --output."
        )


def _unit_count(spec: WorkSpec) -> int:
    """The units of ``spec`` (one per MLP for pcg64; philox cuts each MLP's blocks into units), without listing them."""
    rows = spec.mlp_range[1] - spec.mlp_range[0]
    if spec.sampler == "pcg64":
        return rows
    from whestbench.compute.philox.spec import block_count

    per_mlp_units = -(-block_count(spec.n_samples, spec.block_size) // spec.unit_blocks)
    return -(-rows // max(1, spec.mlps_per_unit)) * per_mlp_units


def _probe(plan: BakePlan) -> Needs:
    """The plan's time estimate from timing this bake's own loop, as the bake will run it: as many
    units at once as the bake has workers, each on a worker thread with BLAS at one thread (and torch
    at one intra-op thread where the bake pins it), on the planned bake's kernels (seeds from 0).

    Each worker is timed from the end of its first step (numba's kernel load, the control variates'
    fit, cold caches: costs a unit pays once, not per sample) over at least ``PROBE_WINDOW_S`` and
    ``PROBE_MIN_STEPS`` steps, all workers running until every one has its window, so each window
    sees the contention the bake will. The rate is the workers' rates summed (``probe_rate``).

    (It used to time one unit alone, outside the bake's one-BLAS-thread limit, over one step, and
    multiply by the workers × 0.85: on a loaded 2-core VM that gave about half the achieved rate.)"""
    from concurrent.futures import ThreadPoolExecutor, wait

    from whestbench.work.steps import UnitContext, UnitStopped, run_unit
    from whestbench.work.threads import one_blas_thread, one_torch_thread

    n_workers = bake_workers(plan.workers, _unit_count(plan.spec))
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
            run_unit(job.spec, job.compute, units[k], UnitContext(on_samples=seen, stop=stop))
        except UnitStopped:
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
    import heapq

    fps, workers = spec.flops_per_sample, max(1, workers)
    if _unit_count(spec) > SCHEDULE_UNITS:
        total = sum(spec.planned) if spec.planned is not None and spec.estimation.has_target else spec.n_samples * spec.n_mlps
        return fps * total / (workers * per_worker_flops)
    free = [0.0] * workers
    for unit in spec.units():
        start = heapq.heappop(free)
        heapq.heappush(free, start + fps * spec.expected_samples(unit) * unit.mlp_count / per_worker_flops)
    return max(free)
