"""Planning a bake: the request (``BakeConfig``), what it will need, and the one typed ``BakePlan``.

``plan_bake(cfg)`` is the only place a bake is planned; the bake itself, ``calibrate`` and every
rank of a distributed bake use it. It checks everything that can be wrong before any work: the
request's values, the output path (once), the device (resolved once), the seeds (validated once),
and whether the bake fits this machine (memory, disk, the format's limits), refusing with exit 2
and one line otherwise. Nothing is written while planning."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from whestbench import optional
from whestbench.bake import cost
from whestbench.compute import pcg64
from whestbench.compute.estimation import MIN_RELIABLE_BATCHES, Estimation
from whestbench.compute.estimators import n_batches
from whestbench.compute.philox import spec as philox
from whestbench.compute.segments import DEFAULT_SEGMENTS, MAX_SEGMENTS, MIN_SEGMENTS, segment_samples
from whestbench.compute.seeds import check_range, derived_seeds, random_seeds, seed_list_digest, validate_mlp_seeds
from whestbench.errors import InvalidDatasetError, OutputExistsError, UsageError
from whestbench.events import Event, EventSink, Progress, ignore
from whestbench.format.card_rules import given_card
from whestbench.format.finished import completed, marker
from whestbench.format.reader import holds_dataset, open_dataset
from whestbench.format.schema import (BACKEND_CPU, BACKEND_TORCH, DEFAULT_CONFIG, DEFAULT_SPLIT, MAX_MLPS, MAX_SAMPLES,
                                      check_name, check_positive_int)
from whestbench.paths import check_new_output, check_output_file
from whestbench.text import format_count
from whestbench.values import is_int, is_positive_number
from whestbench.work import CHECKPOINT_EVERY_S, GPU_KERNEL_REPLACEMENT, GPU_KERNELS, WITHDRAWN_GPU_KERNELS
from whestbench.work.controls import CONTROLS_CACHE_BYTES
from whestbench.work.executor import Job, bake_workers
from whestbench.work.ledger import Ledger, identity_digest, load_pilots, load_seeds, save_pilots
from whestbench.work.steps import Compute, _pcg64_fused
from whestbench.work.threads import one_blas_thread
from whestbench.work.torch_env import kernel_identity, resolve_device
from whestbench.work.units import WorkSpec
from whestbench.work.workdir import PHASES, check_work_dir, work_dir_for

if TYPE_CHECKING:
    from whestbench.work.launch_env import DistEnv

PHILOX_UNIT_BLOCKS = 256  # canonical blocks per philox unit (2**24 samples): ~60 units per MLP at N=10**9
# Format limits (each refused before any work, with its reason):
MAX_ROW_FLOATS = 2**29  # one row's weights (depth·width² float32) must fit an Arrow list and a 2 GiB shard


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
                "mlp_id column can number", fix="(did you mean --n-samples?).")
        if self.n_samples > MAX_SAMPLES:
            raise UsageError(f"--n-samples must be below 2**63 (counts are int64); got {format_count(self.n_samples)}.",
                             fix="Pass a smaller --n-samples (1e9 is the benchmark's largest).")
        if self.depth * self.width * self.width > MAX_ROW_FLOATS:
            raise UsageError(
                f"width {self.width} x depth {self.depth} makes {format_count(self.depth * self.width**2)} weights per MLP; "
                f"one dataset row holds at most {format_count(MAX_ROW_FLOATS)} (a 2 GiB Parquet shard and an Arrow list).",
                fix="Pass a smaller --width or --depth.")
        try:
            check_name(self.split)
            check_name(self.config, "config")
        except InvalidDatasetError as exc:
            raise UsageError.from_error(exc, fix="(--split / --config)") from None
        if self.mlp_seeds is not None and self.seed is not None:
            raise UsageError("--mlp-seeds and --seed are both given:", fix="pass either --mlp-seeds or --seed, not both.")
        if self.mlp_seeds is not None:
            object.__setattr__(self, "mlp_seeds", tuple(validate_mlp_seeds(list(self.mlp_seeds), self.n_mlps)))
        if self.seed is not None and not is_int(self.seed, 0):
            raise UsageError(f"--seed must be a non-negative integer; got {self.seed!r}.", fix="Pass --seed 0 or more.")
        if self.mlp_range is not None:
            object.__setattr__(self, "mlp_range", check_range(self.mlp_range, self.n_mlps))
            if self.is_partial and self.mlp_seeds is None and self.seed is None and not self.seeds_from_peer:
                raise UsageError("a slice needs the whole dataset's seeds so that partials fit together:",
                                 fix="pass --mlp-seeds FILE (from `whest dataset generate-seeds`) or --seed S.")
        if self.max_threads is not None:
            check_positive_int("--max-threads", self.max_threads)
        if self.backend not in ("cpu", "torch"):
            raise UsageError(f"backend must be 'cpu' or 'torch'; got {self.backend!r}.", fix="Pass one of them.")
        if self.backend == "torch" and self.max_threads is not None:
            raise UsageError("--max-threads applies to the CPU path only; torch manages its own threads",
                             fix="(drop --max-threads).")
        if self.backend == "cpu" and (self.skip_device_check or self.accept_non_invariant):
            flag = "--skip-device-check" if self.skip_device_check else "--accept-non-invariant"
            raise UsageError(f"{flag} applies to the torch backend only (the CPU path has no device check);", fix="drop it.")
        if self.gpu_kernel not in GPU_KERNELS:
            raise UsageError(f"--gpu-kernel must be one of {', '.join(GPU_KERNELS)}; got {self.gpu_kernel!r}.",
                             fix="Pass --gpu-kernel torch (the default).")
        if self.gpu_kernel in WITHDRAWN_GPU_KERNELS:
            raise UsageError(f"--gpu-kernel {self.gpu_kernel} is withdrawn: {WITHDRAWN_GPU_KERNELS[self.gpu_kernel]};",
                             fix=f"use --gpu-kernel {GPU_KERNEL_REPLACEMENT}.")
        for flag, value in (("--mlps-per-batch", self.mlps_per_batch), ("--chunk-size", self.chunk_size)):
            if value is not None:
                check_positive_int(flag, value)
        if self.estimation.is_cv and self.gpu_kernel != "torch":
            raise UsageError(f"the {self.gpu_kernel} GPU kernel does not compute the control variates yet:",
                             fix="use --gpu-kernel torch, or --estimator plain.")
        s = self.audit_segments
        if not is_int(s, 0, MAX_SEGMENTS) or 0 < s < MIN_SEGMENTS:
            raise UsageError(f"--audit-segments must be 0 (no trail) or an integer from {MIN_SEGMENTS} to {MAX_SEGMENTS} "
                             f"(fewer segments leave a spot check nothing smaller than a whole MLP); got {s!r}.",
                             fix=f"Pass --audit-segments {DEFAULT_SEGMENTS} (the default) or 0.")
        if not is_positive_number(self.checkpoint_every):
            raise UsageError(f"--checkpoint-every must be a positive number of seconds; got {self.checkpoint_every!r}.",
                             fix=f"Pass --checkpoint-every {CHECKPOINT_EVERY_S:g} (the default).")
        if self.output is not None:
            object.__setattr__(self, "output", Path(self.output))
        object.__setattr__(self, "card", given_card(self.card) or None)

    @property
    def range(self) -> tuple[int, int]:
        return self.mlp_range if self.mlp_range is not None else (0, self.n_mlps)

    @property
    def is_partial(self) -> bool:
        return self.range != (0, self.n_mlps)


@dataclass(frozen=True)
class BakePlan:
    """Everything a bake will do, decided once: what (spec), how (compute, workers), where (output,
    work dir), what gets recorded (backend, sampler, kernel) and what it needs."""

    config: BakeConfig
    spec: WorkSpec
    """Empty only on a distributed rank other than 0 (it receives them from rank 0) and in a plan with no output
    (``calibrate``, ``doctor``) of random seeds; a bake's random ones are kept in its work dir (``pipeline.keep_seeds``)."""
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
    needs: cost.Needs
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
        # the planned bake's kernels, not those a bake of the timed size would pick (numpy below 2**29 activations)
        compute = dataclasses.replace(self.compute, pcg64_fused=_pcg64_fused(self.spec, self.compute))
        return dataclasses.replace(self.job(None), spec=spec, compute=compute)


PLAN_UPFRONT_MLPS = 4096  # a target bake of at most this many MLPs plans them all before sampling


def plan_targets(plan: BakePlan, emit: EventSink = ignore, stop: threading.Event | None = None,
                 work: Path | None = None) -> BakePlan:
    """A target bake's plan with every MLP's count planned up front (``WorkSpec.planned``) by its pilots (one
    forward pass of 16,384 inputs each), so the units, the progress total, the Plan line and a stop's message count
    what will be sampled rather than the cap; ``Progress("pilots")`` reports them. Unchanged: a bake without a
    target, one too big to plan up front (over ``PLAN_UPFRONT_MLPS`` MLPs, or control variates that would not stay
    in the fit cache, ``CONTROLS_CACHE_BYTES``), whose units plan their own counts, or a ``stop`` during the pilots.
    ``work``: the work directory, where the counts are kept (``ledger.save_pilots``) for a resume to read."""
    spec = plan.spec
    if not spec.estimation.has_target or spec.planned is not None or not spec.seeds:
        return plan
    start, end = spec.mlp_range
    n = end - start
    fit_bytes = 16 * spec.depth * spec.width * spec.width if spec.estimation.is_cv and spec.depth > 1 else 0
    if n > PLAN_UPFRONT_MLPS or n * fit_bytes > CONTROLS_CACHE_BYTES:
        return plan
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
        seconds = cost.schedule_seconds(planned.spec, needs.probe_workers, needs.rate_flops / needs.probe_workers)
    planned = dataclasses.replace(planned, needs=dataclasses.replace(needs, flops=needs.flops * share, seconds=seconds))
    cost.check_duration(planned, f"{format_count(n)} MLPs, {format_count(planned.planned_total)} planned samples")
    return planned


# ---------------------------------------------------------------------------------------------


def check_bake_output(output: Path) -> None:
    """Refuse an ``--output`` that cannot become the new dataset, before any work. A complete dataset beside a work
    directory is what a kill between the (atomic) final rename and the work directory's removal leaves: the
    leftover is removed before refusing the existing output."""
    try:
        check_new_output(output)
    except OutputExistsError:
        work = work_dir_for(output)
        if holds_dataset(output) and work.is_dir():
            shutil.rmtree(work, ignore_errors=True)
        raise


@dataclass(frozen=True)
class Done:
    """What ``plan_bake`` returns instead of a plan when ``--output`` already holds the complete, intact
    dataset of exactly this bake (the same completion marker): a re-run (a requeued job, a retried array
    task) has nothing to do but what ``pipeline.bake`` does with it (the card; the CLI exits 0)."""

    output: Path
    metadata: dict[str, Any]
    dataset: Any
    """The output as the completion test opened it (a ``format.reader.DatasetDir``: read once)."""
    card: dict[str, str] | None = None
    """The card fields given to the re-run (``BakeConfig.card``), recorded where they differ."""

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
    rows and place (``_marker_of``). The same for the bake that writes it and for a re-run that asks for it."""
    cfg = plan.config
    start, end = cfg.range
    return _marker_of({
        "seed_list_digest": None if seeds is None else seed_list_digest(list(seeds)), "seed_source": source,
        "split": cfg.split, "config": cfg.config, "n_mlps": end - start, "n_samples": cfg.n_samples, "width": cfg.width,
        "depth": cfg.depth, "is_partial": cfg.is_partial, "mlp_range": [start, end], "total_n_mlps": cfg.n_mlps,
        "backend": plan.backend, "sampler": plan.sampler_md, "kernel": plan.kernel_md,
    }, plan.spec.estimation.identity())


def _recorded_marker(md: dict[str, Any]) -> str | None:
    """The marker an output written before markers were recorded would carry: ``_marker_of`` its metadata;
    None for what no bake writes."""
    if "splits" in md:
        return None
    try:
        estimation = Estimation.from_metadata(md).identity()
    except (ValueError, TypeError, KeyError):  # a malformed block (UsageError is a ValueError)
        return None
    return _marker_of(md, estimation)


def _marker_of(md: Mapping[str, Any], estimation: dict[str, Any]) -> str:
    """The digest of what decides a bake's rows and place, from its metadata's facts: the seeds (their digest, and
    how they were chosen; random seeds are "random", whatever was drawn), shape, range, split and config, backend,
    sampler and arithmetic class, and ``estimation`` (the estimator and target's identity)."""
    source, sampler, kernel = ((md.get(k) if isinstance(md.get(k), dict) else {}) for k in ("seed_source", "sampler", "kernel"))
    rng, method = md.get("mlp_range"), source.get("method")
    return marker({
        "seed_list_digest": None if method == "random" else md.get("seed_list_digest"),
        "seed_method": method, "split": md.get("split"), "config": md.get("config"), "n_mlps": md.get("n_mlps"),
        "n_samples": md.get("n_samples"), "width": md.get("width"), "depth": md.get("depth"),
        "slice": [*rng, md.get("total_n_mlps")] if md.get("is_partial") and isinstance(rng, list) else None,
        "backend": md.get("backend"), "sampler": [sampler.get("name"), sampler.get("block_size")],
        "precision_class": kernel.get("precision_class"), **estimation,
    })


def _finished(plan: "BakePlan", seeds: list[int] | None, source: dict[str, Any], output: Any) -> dict[str, Any] | None:
    """The metadata of ``output`` (``plan``'s, opened) when it holds the complete dataset of this very bake, else
    None: ``format.finished.completed`` with this plan's marker (a dataset without one: the marker its facts give)."""
    digest = result_marker(plan, seeds, source)
    return completed(output, digest, lambda md: _recorded_marker(md) == digest)


def plan_bake(cfg: BakeConfig, *, dist_env: "DistEnv | None" = None, probe: bool = True,
              on_event: EventSink = ignore) -> BakePlan | Done:
    """The plan of ``cfg``: checks, device, compute options, seeds (explicit, derived, or random: kept by an earlier
    run of this bake or drawn now), needs; or
    ``Done`` when ``cfg.output`` already holds this very bake, complete (``pipeline.bake`` takes either).

    Raises UsageError (exit 2) for anything that would fail later or does not fit this machine.
    ``probe``: time a few chunks for the time estimate when the bake is big (``cost.PROBE_FLOPS``).
    ``on_event`` hears a ``stage`` event as each stretch of seconds begins (loading torch, the probe)."""
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
        spec = WorkSpec(seeds=(), n_samples=cfg.n_samples, width=cfg.width, depth=cfg.depth, mlp_range=(start, end),
                        sampler=pcg64.SAMPLER_NAME, arithmetic="numpy-sgemm-fp32", estimation=cfg.estimation,
                        audit_segments=cfg.audit_segments)
        compute, workers, label, kernel_md = Compute("numpy"), cfg.max_threads, "cpu", None
        sampler_md = {"name": pcg64.SAMPLER_NAME, "version": pcg64.SAMPLER_VERSION,
                      "block_size": pcg64.chunk_rows(cfg.width)}
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
                    needs=cost.estimate_needs(cfg, spec, compute, workers), notes=tuple(notes))
    if existing:
        seeds, source = _known_seeds(cfg)
        dataset = open_dataset(cfg.output)
        done = _finished(plan, seeds, source, dataset)
        if done is not None:
            work = work_dir_for(cfg.output)
            if work.is_dir() and not work.is_symlink():  # a kill between the final rename and its removal
                shutil.rmtree(work, ignore_errors=True)
            return Done(Path(cfg.output), done, dataset, cfg.card)
        check_bake_output(cfg.output)  # refuses it (already exists)
    if rank0 and cfg.output is not None:
        cost.check_fits(plan)  # before the seeds: deriving 10**9 of them would take minutes
    seeds, source = _known_seeds(cfg)
    if source["method"] == "random" and rank0 and cfg.output is not None:  # a plan with no output draws none
        seeds = _random_seeds(cfg.n_mlps, work_dir_for(cfg.output))
    plan = plan.with_seeds(seeds, source) if seeds is not None else dataclasses.replace(plan, seed_source=source)
    if probe and plan.needs.flops > cost.PROBE_FLOPS:
        on_event(Event("stage", message=PHASES["probe"], data={"phase": "probe"}))
        plan = dataclasses.replace(plan, needs=cost.probe(plan))
        # a target bake is judged by the counts its pilots plan (``plan_targets``), not by the cap:
        # --n-samples 1e15 --target-stderr 1e-2 plans 16,384 samples per MLP
        if (dist_env is None or dist_env.world_size == 1) and not plan.spec.estimation.has_target:
            cost.check_duration(plan, f"{format_count(cfg.range[1] - cfg.range[0])} MLPs × {format_count(cfg.n_samples)} samples")
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


def _known_seeds(cfg: BakeConfig) -> tuple[list[int] | None, dict[str, Any]]:
    if cfg.mlp_seeds is not None:
        return list(cfg.mlp_seeds), {"method": "explicit"}
    if cfg.seed is not None:
        return derived_seeds(cfg.seed, cfg.n_mlps), {"method": "derived", "root_seed": cfg.seed}
    if cfg.seeds_from_peer:
        return None, {"method": "peer"}
    return None, {"method": "random"}


def _random_seeds(n_mlps: int, work: Path) -> list[int]:
    """A bake's random seeds: those an earlier run of the same command drew and kept in ``work`` (so a re-run resumes
    rather than starting a different dataset; a damaged seed file is refused, DamagedWorkFile), else drawn now.
    The bake keeps them there before any unit (``pipeline.keep_seeds``)."""
    kept = load_seeds(work, n_mlps, seed_list_digest, validate_mlp_seeds)  # None where there is no work dir
    return kept if kept is not None else random_seeds(n_mlps)


def _torch_plan(cfg: BakeConfig, dist_env, notes: list[str]):
    """The torch backend's choices: device (resolved once), engine, batch, chunk, kernel identity."""
    device = resolve_device(cfg.device)  # a missing torch is refused here, with the fix
    torch = optional.require("torch", needed_for="--torch")
    philox_torch, numba_engine = optional.engine_module("torch"), optional.engine_module("numba")
    start, end = cfg.range
    # On the CPU one MLP per worker thread (one per core, torch single-threaded: the numba passes
    # are single-threaded, so this keeps every core busy); on a GPU, batches of up to 16.
    batch = cfg.mlps_per_batch or (1 if device == "cpu" else min(end - start, 16))
    if cfg.estimation.has_target:
        batch = 1  # each MLP stops at its own check point
    rows = philox_torch.step_rows(cfg.chunk_size, torch.device(device), batch, cfg.width, philox.BLOCK_SIZE)
    engine = numba_engine.resolve_engine("auto", torch.device(device))
    if engine == "cuda" and cfg.gpu_kernel == "torch":  # every GEMM one shape: --chunk-size cannot reach it
        gemm_rows = optional.engine_module("cuda").gemm_rows
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
        ozaki = optional.engine_module("ozaki")
        ok, why = ozaki.ozaki_available(device, cfg.width)
        if not ok:
            raise UsageError(f"--gpu-kernel ozaki cannot run here: {why};", fix="use --gpu-kernel torch.")
        engine = "triton"
        config = ozaki.default_config(cfg.width)
        # integer sums are exact: the identity holds no device (the same numbers on any GPU generation)
        kernel_md = {"name": "philox-triton-ozaki", "precision_class": json.dumps(config.identity(), sort_keys=True),
                     "config": config.identity()}
    if device == "mps":
        notes.append("MPS has no float64: sums accumulate in float32, which loses ~1e-7 relative per addition "
                     "(means at N=1e9 may be off by ~1e-4); use --device cuda or cpu for production ground truth.")
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
            "are smaller (or depend on a target):", fix="use --audit-segments 0, or --gpu-kernel torch.")
    sampler_md = {"name": philox.SAMPLER_NAME, "version": philox.SAMPLER_VERSION, "block_size": philox.BLOCK_SIZE,
                  "unit_blocks": unit_blocks, "summation": "pairwise-tree"}
    kernel_md = {**kernel_md, "mlps_per_batch": batch, "chunk_size": rows}
    return spec, Compute(engine, where, rows, config), workers, f"torch ({where})", sampler_md, kernel_md


