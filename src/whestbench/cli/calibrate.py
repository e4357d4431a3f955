"""``whest dataset calibrate``: a short timed bake on the chosen device, then the projected wall time."""

from __future__ import annotations

import dataclasses
import math

import click
import numpy as np

from whestbench.bake import cost
from whestbench.bake.pipeline import estimates
from whestbench.bake.plan import BakeConfig, plan_bake
from whestbench.cli.common import COUNT, err, out, torch_knobs
from whestbench.compute.estimation import ESTIMATORS, MIN_RELIABLE_BATCHES, PLAIN, STDERR_LAYERS, Estimation
from whestbench.compute.mlp import weights_for_seed
from whestbench.compute.seeds import derived_seeds
from whestbench.format.schema import check_positive_int
from whestbench.text import format_duration, format_rate, plural
from whestbench.work import DEVICES, GPU_KERNELS
from whestbench.work import calibrate as calibration
from whestbench.work.executor import bake_workers
from whestbench.work import machine
from whestbench.work.threads import one_torch_thread


@click.command("calibrate")
@click.option("--n-mlps", type=COUNT, required=True, help="MLPs in the planned bake.")
@click.option("--n-samples", type=COUNT, required=True, help="Samples per MLP in the planned bake (1e9 works).")
@click.option("--width", type=int, required=True)
@click.option("--depth", type=int, required=True)
@click.option("--torch", "use_torch", is_flag=True, help="Calibrate the torch backend.")
@click.option("--device", type=click.Choice(DEVICES), default=None, help="Torch device (implies --torch).")
@click.option("--mlps-per-batch", type=int, default=None, help="Torch: MLPs per batched step.")
@click.option("--chunk-size", type=COUNT, default=None, help="Torch: samples per step.")
@click.option("--gpu-kernel", type=click.Choice(GPU_KERNELS), default="torch", show_default=True,
              help="CUDA: plain torch ops, or the integer Triton kernel (ozaki); fused: withdrawn (docs/gpu-kernel.md).")
@click.option("--max-threads", type=int, default=None, help="CPU path: worker threads.")
@click.option("--estimator", type=click.Choice(ESTIMATORS), default=PLAIN, show_default=True,
              help="The estimator of the planned bake (its standard errors set the samples a target needs).")
@click.option("--target-stderr", type=float, default=None, metavar="E",
              help="Also project the samples and time needed to bring the standard errors down to E.")
@click.option("--stderr-layer", type=click.Choice(STDERR_LAYERS), default="last", show_default=True,
              help="The neurons --target-stderr applies to.")
@click.option("--calib-mlps", type=COUNT, default=None, help="MLPs in the timed run (default: a full round of workers/batch).")
@click.option("--calib-samples", type=COUNT, default=None, help="Samples per MLP in the timed run (default: 131,072 on CPU, 1,000,000 on GPU).")
def calibrate(n_mlps, n_samples, width, depth, use_torch, device, mlps_per_batch, chunk_size, gpu_kernel, max_threads,
              estimator, target_stderr, stderr_layer, calib_mlps, calib_samples) -> None:
    """Time a short bake of this shape and project the planned bake's wall time.

    \b
    whest dataset calibrate --n-mlps 100 --n-samples 1e9 --width 256 --depth 8 --device cuda
    """
    from rich.table import Table

    torch_path, mlps_per_batch, chunk_size = torch_knobs(use_torch, device, mlps_per_batch, chunk_size)
    estimation = Estimation(estimator, target_stderr, stderr_layer)
    cfg = BakeConfig(  # every flag checked as bake checks it
        n_mlps=n_mlps, n_samples=n_samples, width=width, depth=depth, output=None,
        backend="torch" if torch_path else "cpu", device=(device or "auto") if torch_path else None,
        mlps_per_batch=mlps_per_batch, chunk_size=chunk_size, gpu_kernel=gpu_kernel, max_threads=max_threads,
        estimation=estimation,
    )
    for flag, value in (("--calib-mlps", calib_mlps), ("--calib-samples", calib_samples)):
        if value is not None:
            check_positive_int(flag, value)
    plan = plan_bake(cfg, probe=False)
    for note in plan.notes:  # what the planned bake would warn about
        err.print(f"warning: {note}", markup=False)
    workers = bake_workers(plan.workers)
    gpu = plan.compute.device.startswith("cuda")
    k = min(calib_mlps or plan.spec.mlps_per_unit * workers, n_mlps)
    n = min(calib_samples or (1_000_000 if gpu else 131_072), n_samples)
    out.print(f"Calibrating on {plan.device_label}: {plural(k, 'MLP')} × {n:,} samples (after a warm-up)…", markup=False)
    def stderr_of(spec, sums, i):
        return estimates(spec, sums, weights_for_seed(spec.seeds[i], spec.width, spec.depth))[3]

    startup_s = machine.process_seconds()  # a bake of this shape starts up as this command did: imports, checks, plan
    with one_torch_thread(plan.compute.pins_torch_threads):
        cal = calibration.calibrate(plan.scaled_job, planned_mlps=n_mlps, planned_samples=n_samples, calib_mlps=k, calib_samples=n,
                              workers=plan.workers, finalize=stderr_of)
    table = Table(title=f"Calibration: width {width}, depth {depth}")
    table.add_column("")
    table.add_column("value", justify="right")
    table.add_row("device", plan.device_label)
    table.add_row("timed run", f"{plural(k, 'MLP')} × {n:,} samples in {cal.seconds:.2f} s")
    table.add_row("throughput", f"{format_rate(cal.samples_per_s / 1e6)} M samples/s")
    table.add_row("effective", f"{format_rate(cal.gflops)} GFLOP/s ({format_rate(cal.gflops / 1e3)} TFLOP/s)")
    table.add_row("planned bake", f"{n_mlps:,} MLP{'' if n_mlps == 1 else 's'} × {n_samples:,} samples")
    at_cap = " at the cap (--n-samples)" if estimation.has_target else ""
    table.add_row(f"projected wall time{at_cap}", format_duration(cal.projected_s))
    sampling_s = _scheduled_s(plan, cal, workers)
    whole_s = None if startup_s is None else startup_s + _probe_s(plan, cal) + sampling_s + plan.needs.write_seconds
    spec = plan.spec
    too_short = (f"n/a: {n:,} timed samples give no {estimator} standard error; use --calib-samples >= "
                 f"{calibration.stderr_samples(estimation, spec.cv_batch):,}")
    if cal.stderr:
        finite = cal.last_layer_stderr()
        table.add_row(f"stderr at N={n:,} ({estimator}, last layer)",
                      f"median {np.median(finite):.3g}, max {finite.max():.3g}" if finite.size else too_short)
    if estimation.has_target and cal.stderr:
        proj = calibration.project_target(cal, estimation, spec.step_samples, spec.cv_batch)
        label = f"samples for stderr <= {target_stderr:g} ({stderr_layer} layer)"
        if math.isnan(proj.every):
            table.add_row(label, too_short)
        else:
            table.add_row(label, f"{proj.every:,.0f} per MLP at every neuron; {proj.median:,.0f} at the median neuron")
            if proj.every >= n_samples:
                why = "the cap, --n-samples"
            elif proj.every < proj.floor:
                why = f"the first check point after {MIN_RELIABLE_BATCHES} batches"
            else:
                why = "the first check point past that"
            table.add_row("1/√N: stop each MLP at", f"{proj.stop:,} samples ({why})")
            table.add_row("1/√N: wall time to there", format_duration(proj.seconds))
    if estimation.has_target:
        planned = calibration.project_planned(cal, spec, workers)
        lo, hi = min(planned.counts), max(planned.counts)
        spread = f"{lo:,}" if lo == hi else f"{lo:,}–{hi:,} (median {planned.median:,})"
        table.add_row("pilot-planned samples per MLP", spread)
        table.add_row("wall time, pilot-planned", f"{format_duration(planned.seconds)} (the bake's rule, on {k} "
                      f"calibration MLP{'' if k == 1 else 's'}; pilots {planned.pilot_s:.2f} s each)")
        if whole_s is not None:  # the pilots' counts, not the cap
            whole_s += planned.seconds - sampling_s
    if whole_s is not None:
        table.add_row("whole bake command, projected",
                      f"{format_duration(whole_s)} (start-up ≈ {format_duration(startup_s)}, as this command's; "
                      f"the timing probe, the {'pilot-planned ' if estimation.has_target else ''}sampling and the "
                      "writing; a cold kernel cache adds its compilation once)")
    out.print(table)
    longer = cal.steady_samples()
    if longer is not None:
        err.print(f"note: the timed run took {cal.seconds:.2f} s, too short for a steady rate: the projections can be "
                  f"off by a third; --calib-samples {min(longer, n_samples):_} times a run of about "
                  f"{2 * calibration.STEADY_S:g} s.", markup=False)


def _scheduled_s(plan, cal, workers: int) -> float:
    """The planned bake's sampling as its executor runs it (``bake.cost.schedule_seconds``): its units taken in
    order by ``workers`` threads, each at one worker's calibrated rate."""
    in_flight = max(1, min(workers, -(-cal.calib_mlps // max(1, plan.spec.mlps_per_unit))))
    per_worker = cal.samples_per_s * plan.spec.flops_per_sample / in_flight
    spec = plan.spec if plan.spec.seeds else dataclasses.replace(plan.spec, seeds=tuple(derived_seeds(0, plan.config.n_mlps)))
    return max(cal.projected_s, cost.schedule_seconds(spec, workers, per_worker))


def _probe_s(plan, cal) -> float:
    """The bake's timing probe (``bake.cost.probe``, for a bake over ``cost.PROBE_FLOPS``): every worker's
    first step and at least ``cost.PROBE_WINDOW_S`` after it, at the calibrated rate."""
    if plan.needs.flops <= cost.PROBE_FLOPS:
        return 0.0
    step_s = plan.spec.step_samples * plan.spec.mlps_per_unit / max(cal.samples_per_s / max(1, cal.calib_mlps), 1e-9)
    return max(cost.PROBE_WINDOW_S + step_s, (cost.PROBE_MIN_STEPS + 1) * step_s)


COMMANDS = [calibrate]
