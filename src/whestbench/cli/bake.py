"""``whest dataset bake``: flags -> BakeConfig -> plan -> ``bake()``, with progress and signal handling.

A stop signal (``cli/signals.STOPS``) during set-up ends the process at once (exit 75, the resume advice); while
units run it makes every running unit checkpoint and stop (exit 75; Ctrl-C: 130). Either way the same command resumes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import click

from whestbench.bake import pipeline
from whestbench.bake.plan import BakeConfig, BakePlan, Done, plan_bake
from whestbench.bake.status import bake_status, status_lines
from whestbench.cli.common import (CHECKPOINT_SECONDS, COUNT, DIR_ARG, PEER_TIMEOUT, err, failed_check, out, parse_mlp_range,
                                   parse_slice, print_complete, read_seeds_file, torch_knobs)
from whestbench.cli.signals import StopSignals, is_cli_verb
from whestbench.cli.hub import card_options
from whestbench.cli.progress import Reporter, _rate, log_every_option
from whestbench.compute.estimation import ESTIMATORS, PLAIN, STDERR_LAYERS, Estimation
from whestbench.errors import RESUME, BakeInterrupted, UsageError
from whestbench.events import Event
from whestbench.format import command
from whestbench.format.schema import DEFAULT_CONFIG, DEFAULT_SPLIT
from whestbench.compute.seeds import slice_bounds
from whestbench.text import format_bytes, format_duration, format_rate, plural, sanitize
from whestbench.work import CHECKPOINT_EVERY_S, DEVICES, GPU_KERNELS, WITHDRAWN_GPU_KERNELS
from whestbench.work import machine
from whestbench.work.launch_env import dist_env_from_environ
from whestbench.work.workdir import PHASES, hold_early, record_phase, work_dir_for


@click.command("bake")
@click.option("--n-mlps", type=COUNT, required=True, help="MLPs in the whole dataset (also when baking a slice).")
@click.option("--n-samples", type=COUNT, required=True, help="Samples per MLP: 1000000, 1_000_000 or 1e6.")
@click.option("--width", type=int, required=True, help="Neurons per layer.")
@click.option("--depth", type=int, required=True, help="Number of layers.")
@click.option("--output", type=click.Path(path_type=Path), required=True, help="Directory to create (must not exist).")
@click.option("--mlp-seeds", "mlp_seeds", type=str, default=None, help="JSON file with one int63 seed per MLP (generate-seeds).")
@click.option("--seed", type=int, default=None, help="Derive the per-MLP seeds deterministically from this root seed.")
@click.option("--split", default=DEFAULT_SPLIT, show_default=True, help="Split name (lowercase letters and digits).")
@click.option("--config", "config_name", default=DEFAULT_CONFIG, show_default=True, help="HF config name for this split.")
@click.option("--slice", "slice_", default=None, help="Bake slice K/N of the MLPs (0-indexed); merge the partials later.")
@click.option("--mlp-range", default=None, help="Bake MLPs START-END (inclusive).")
@click.option("--max-threads", type=int, default=None, help="CPU worker threads (one MLP each; default: all cores).")
@click.option("--torch", "use_torch", is_flag=True, help="Use the torch backend (philox sampler; CPU, CUDA or MPS).")
@click.option("--device", type=click.Choice(DEVICES), default=None, help="Torch device (implies --torch).")
@click.option("--mlps-per-batch", type=int, default=None, help="Torch: MLPs per batched matmul (never changes results).")
@click.option("--chunk-size", type=COUNT, default=None, help="Torch: samples per step (never changes results).")
@click.option("--gpu-kernel", type=click.Choice(GPU_KERNELS), default="torch", show_default=True,
              help="CUDA: torch (cuBLAS fp32 GEMMs of one shape); ozaki (int8 digit GEMMs with exact integer sums, "
                   "one Triton kernel; opt-in until a GPU run confirms it); fused: withdrawn (its splits fail the "
                   "precision gate under the tensor cores' accumulator).")
@click.option("--estimator", type=click.Choice(ESTIMATORS), default=PLAIN, show_default=True,
              help="plain: whestbench 0.16's sample means; control-variate: the same samples with exact-mean "
                   "controls, several times more accurate per sample (docs/error-bars.md).")
@click.option("--target-stderr", type=float, default=None, metavar="E",
              help="Sample each MLP as many times as its own pilot plans for the chosen neurons' standard errors "
                   "to reach E (at fixed check points; --n-samples becomes the cap): plain, about E; control "
                   "variates, at most E on all but at most 5% of MLPs (docs/error-bars.md).")
@click.option("--stderr-layer", type=click.Choice(STDERR_LAYERS), default="last", show_default=True,
              help="The neurons --target-stderr applies to.")
@click.option("--checkpoint-every", type=CHECKPOINT_SECONDS, default=CHECKPOINT_EVERY_S, show_default=True,
              help="Seconds between checkpoints inside a unit: a kill loses at most this much work per worker.")
@click.option("--audit-segments", type=click.IntRange(0, 1024), default=32, show_default=True, metavar="S",
              help="Segments per MLP of the audit trail (audit/<split>.parquet) that verify checks the stored numbers "
                   "against; 0: no trail. Never changes the numbers (docs/format.md, Audit trail).")
@log_every_option
@click.option("--peer-timeout", type=PEER_TIMEOUT, default=300.0, show_default=True,
              help="Distributed bakes: seconds of silence after which a rank is declared dead.")
@click.option("--quiet", is_flag=True, help="No progress display.")
@click.option("--skip-device-check", is_flag=True,
              help="Torch: do not check the device before baking (recorded in metadata.json; docs/gpu.md).")
@click.option("--accept-non-invariant", is_flag=True,
              help="Torch: bake even if the device check finds results that depend on --chunk-size or "
                   "--mlps-per-batch (recorded).")
@card_options
def bake(output, log_every, peer_timeout, quiet, **flags) -> None:
    """Bake a dataset (or one slice of it) of random ReLU MLPs and their ground-truth means.

    \b
    whest dataset bake --n-mlps 10 --n-samples 1e6 --width 64 --depth 4 --seed 1 --output ./ds
    whest dataset bake ... --mlp-seeds seeds.json --slice 0/4 --output ./part-0
    """
    peer = _peer_rank()
    quiet = quiet or peer  # one progress display: rank 0's, covering every rank
    with StopSignals(err) as signals, _held_early(output, peer) as work:
        try:
            with Reporter("bake", mode="quiet" if quiet else "auto", log_every=log_every) as reporter:
                sink = _phase_sink(reporter, work)
                sink(Event("stage", message=PHASES["starting"], data={"phase": "starting"}))
                cfg, dist_env = _config(output=output, **flags)
                _bake(signals, cfg, dist_env, reporter, sink, peer_timeout=peer_timeout)
        except KeyboardInterrupt:
            if signals.writing:
                raise BakeInterrupted(f"interrupted while writing the dataset: every unit is kept in "
                                      f"{work_dir_for(output)}; re-run the same command to write it.", 130) from None
            if signals.running:
                raise
            raise BakeInterrupted(f"interrupted during set-up: nothing was computed yet; {RESUME}.", 130) from None


def _peer_rank() -> bool:
    """Whether this process is a distributed rank other than 0 (read from the launcher's variables;
    variables that do not add up are refused by ``_config`` with the fix)."""
    try:
        env = dist_env_from_environ()
    except UsageError:
        return False
    return env is not None and env.rank != 0


def _held_early(output: Path, peer: bool):
    """The work directory held from the command's first moment (``workdir.hold_early``), so
    ``whest dataset status`` answers "starting" during the start-up; rank 0 alone holds it."""
    if peer:
        return contextlib.nullcontext(None)
    return hold_early(output, command.join(["whest", "dataset", "bake", *sys.argv[3:]]) if is_cli_verb("bake") else "")


def _phase_sink(reporter: Reporter, work: Path | None):
    """``reporter``, with each phase of the bake recorded in the work directory's status.json
    (``workdir.record_phase``) as it begins: the stages of the start-up, then sampling and writing."""
    def sink(event: Event) -> None:
        phase = (event.data or {}).get("phase") if event.kind == "stage" else \
            {"start": "sampling", "writing": "writing"}.get(event.kind)
        if phase is not None and work is not None:
            record_phase(work, phase)
        reporter(event)

    return sink


def _config(*, n_mlps, n_samples, width, depth, output, mlp_seeds, seed, split, config_name, slice_,
            mlp_range, max_threads, use_torch, device, mlps_per_batch, chunk_size, gpu_kernel, estimator, target_stderr,
            stderr_layer, checkpoint_every, skip_device_check, accept_non_invariant, card, audit_segments=32):
    """The flags as the frozen ``BakeConfig`` (every value checked before any work), and the
    distributed launch this process is part of (None: a single process)."""
    if slice_ is not None and mlp_range is not None:
        raise UsageError("--mlp-range and --slice are both given:", fix="use either --mlp-range or --slice, not both.")
    rng = None
    if slice_ is not None:
        k, n = parse_slice(slice_)
        if n > n_mlps:
            raise UsageError(f"--slice {slice_} asks for {n} slices of only {n_mlps} MLPs;", fix=f"use at most {n_mlps} slices.")
        rng = slice_bounds(k, n, n_mlps)
    elif mlp_range is not None:
        rng = parse_mlp_range(mlp_range)
    dist_env = dist_env_from_environ()
    peer = dist_env is not None and dist_env.rank != 0
    # a rank other than 0 reads its own --mlp-seeds file when it has one, so a list that differs from
    # rank 0's stops the bake (docs/distributed.md); without the file there (no shared filesystem) it
    # takes rank 0's list
    own_file = mlp_seeds is not None and (not peer or os.path.lexists(mlp_seeds))
    seeds = tuple(read_seeds_file(mlp_seeds)) if own_file else None
    if gpu_kernel != "torch" and gpu_kernel not in WITHDRAWN_GPU_KERNELS and not (use_torch or device is not None):
        raise UsageError(f"--gpu-kernel {gpu_kernel} runs on the torch backend:", fix="add --torch --device cuda.")
    torch_backend, mlps_per_batch, chunk_size = torch_knobs(use_torch, device, mlps_per_batch, chunk_size)
    if device is not None and not use_torch:
        err.print(f"note: --device {device} selects the torch backend (philox sampler), as if --torch were given.", markup=False)
    return BakeConfig(
        n_mlps=n_mlps, n_samples=n_samples, width=width, depth=depth, output=output,
        mlp_seeds=seeds, seed=seed, split=split, config=config_name, mlp_range=rng,
        max_threads=max_threads, seeds_file=mlp_seeds, seeds_from_peer=peer,
        backend="torch" if torch_backend else "cpu", device=device if torch_backend else None,
        mlps_per_batch=mlps_per_batch, chunk_size=chunk_size, gpu_kernel=gpu_kernel, checkpoint_every=checkpoint_every,
        estimation=Estimation(estimator, target_stderr, stderr_layer), skip_device_check=skip_device_check,
        accept_non_invariant=accept_non_invariant, card=card or None, audit_segments=audit_segments,
        bake_command=command.join(["whest", "dataset", "bake", *sys.argv[3:]]) if is_cli_verb("bake") else None,
    ), dist_env


def _bake(signals, cfg, dist_env, reporter: Reporter, emit, *, peer_timeout) -> None:
    """Plan ``cfg``, print the plan, bake with progress (``emit``: ``reporter`` and the phases'
    record); print what was written, or that the output already held it (``pipeline.bake`` decides)."""
    plan = plan_bake(cfg, dist_env=dist_env, on_event=emit)  # every check, before the "Baking ..." line
    start, end = cfg.range
    if isinstance(plan, BakePlan):
        what = f"{end - start} of {cfg.n_mlps} MLPs" if cfg.is_partial else plural(cfg.n_mlps, "MLP")
        where = plan.device_label + (f", rank {dist_env.rank} of {dist_env.world_size}" if dist_env is not None else "")
        out.print(f"Baking {what} (width={cfg.width}, depth={cfg.depth}, n_samples={cfg.n_samples:,}) on {where} → "
                  f"{sanitize(str(cfg.output))}", markup=False)
    t0 = time.perf_counter()
    finished: dict = {}
    single = dist_env is None or dist_env.world_size == 1  # the probe times this machine's workers, not every rank's

    def sink(event) -> None:
        signals.on_event(event)
        data = event.data or {}
        if "complete" in data:  # a requeued or retried job whose bake had finished: success, once verified
            done = data["complete"]
            print_complete(f"✓ {done.output} is already complete: {done.summary()}; this command baked it, nothing to "
                           "do.", done.dataset, data["card"])
            return
        if "card" in data:  # printed with the line above
            return
        if event.kind == "plan":  # the settled plan (a target bake's counts planned by the pilots)
            out.print(f"Plan: {_plan_summary(data['plan'])}", markup=False)
            if single:  # the samples per second the timing probe measured for the whole bake (None: no probe)
                needs, per_sample = data["plan"].needs, data["plan"].spec.flops_per_sample
                reporter.expect("samples", needs.rate_flops / per_sample if needs.rate_flops else None,
                                then_s=needs.write_seconds)
        if event.kind == "done":
            finished.update(data)
        emit(event)

    path = pipeline.bake(plan, on_event=sink, stop=signals.stop, dist_env=dist_env, peer_timeout_s=peer_timeout,
                           confirm=failed_check)
    if isinstance(plan, Done):
        return
    reporter.__exit__(None, None, None)  # the last progress line before the result's
    dt = time.perf_counter() - t0
    if path is None:  # a non-zero rank: rank 0 writes the dataset
        out.print(f"rank {dist_env.rank}: done in {dt:.1f}s; rank 0 writes the dataset", markup=False)  # where: its note
        return
    n = (end - start) * cfg.n_samples
    last = reporter.latest.get("samples")
    mlps = plural(end - start, "MLP")
    shape = f"{mlps} × {cfg.n_samples:,} samples"
    if last is not None and last.total < n:
        n = last.total  # MLPs that reached the target standard error stopped early
        shape = f"{mlps}, {n:,} samples ({_stops(finished, end - start)})"
    ran = min(reporter.computed(), n) if last is not None else n  # this run's own samples
    flops = 2 * cfg.width * cfg.width * cfg.depth * ran
    size = sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())
    resumed = f", {n - ran:,} of them recovered from the work directory" if ran < n else ""
    out.print(
        f"✓ Wrote {sanitize(str(path))} in {dt:.1f}s ({format_bytes(size)}): {shape}{resumed}, "
        f"{_rate(ran / dt, 'samples')}, {format_rate(flops / dt / 1e9)} GFLOP/s effective{_whole_took(dt)}",
        markup=False,
    )


def _whole_took(dt: float) -> str:
    """The whole command's wall time beside the ``✓ Wrote`` line's ``dt`` (which starts after the
    start-up: the imports, the checks, the timing probe), so the line compares with the Plan line's
    "the whole command ≈ T"; empty where this process's age cannot be read."""
    whole = machine.process_seconds()
    if whole is None or whole < dt:
        return ""
    return f"; the whole command took {whole:.1f}s (start-up {whole - dt:.1f}s)"


def _stops(finished: dict, mlps: int) -> str:
    """How a target bake's MLPs stopped, from the real counts (the writer's ``done`` event)."""
    early, at_floor, floor = finished.get("early"), finished.get("at_floor"), finished.get("floor")
    if not isinstance(early, int):
        return "the target standard error stopped some early"
    who = "all" if early == mlps else f"{early} of {mlps}"
    text = f"the target standard error stopped {who} early"
    if early < mlps:
        text += f"; {mlps - early} used all --n-samples"
    if floor and at_floor == mlps:
        text = f"all stopped at {floor:,} samples, the control-variate floor: the floor, not the target, decided"
    elif floor and at_floor:
        text += f"; {at_floor} at the control-variate floor of {floor:,}"
    ratio = finished.get("stderr_ratio")
    if isinstance(ratio, dict):
        text += f"; largest stored standard error {ratio['largest']:.2f}× the target"
    return text


def _plan_summary(plan) -> str:
    """The plan line: what this run will compute. A resumed bake projects the rest (FLOPs and the
    timed estimate), and says how much its work directory already holds."""
    saved = pipeline.saved_samples(plan)
    total = plan.planned_total
    counts = plan.spec.planned if plan.spec.estimation.has_target else None
    head = ""
    if counts:
        spread = f"{min(counts):,}" if min(counts) == max(counts) else f"{min(counts):,}–{max(counts):,}"
        head = (f"{total:,} samples ({spread} per MLP, planned by their pilots for the target standard error "
                f"{plan.spec.estimation.target_stderr:g}; cap {plan.config.n_samples:,}); ")
    if saved <= 0 or total <= 0:
        return head + plan.needs.summary() + _whole_command(plan.needs)
    left = max(total - saved, 0) / total
    needs = plan.needs
    rest = dataclasses.replace(needs, flops=needs.flops * left,
                               seconds=needs.seconds * left if needs.seconds is not None else None)
    return (f"{head}{rest.summary()} (the rest: {saved:,} of {total:,} samples are saved in {plan.work_dir} and are "
            f"not computed again){_whole_command(rest)}")


def _whole_command(needs) -> str:
    """The whole command's wall time, where the probe timed the sampling: the start-up so far (the
    interpreter, imports, checks, the timing probe, a target bake's pilots: this process's age),
    the sampling and the writing (``Needs.write_seconds``)."""
    so_far = machine.process_seconds()
    if needs.seconds is None or so_far is None:
        return ""
    whole = so_far + needs.seconds + needs.write_seconds
    return (f"; the whole command ≈ {format_duration(whole)} (start-up so far {format_duration(so_far)}, sampling "
            f"≈ {format_duration(needs.seconds)}, writing ≈ {format_duration(needs.write_seconds)})")


@click.command("status")
@click.argument("output", type=DIR_ARG)
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout, for scripts.")
def status(output: Path, as_json: bool) -> None:
    """Where a bake stands: complete, running or stopped; the plan, units finished, checkpoints and
    samples saved, who holds it, what a re-run redoes and the projected time left.

    \b
    whest dataset status ./eval            # the bake's --output (or its .whest-work directory)
    """
    doc = bake_status(output)
    if as_json:
        out.print(json.dumps(doc, indent=2), markup=False, highlight=False, soft_wrap=True)
        return
    for line in status_lines(doc):
        out.print(line, markup=False)


COMMANDS = [bake, status]
