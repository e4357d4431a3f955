"""``whest dataset calibrate``: a short timed bake on the chosen device, then the projected wall time."""

from __future__ import annotations

import click

from whestbench.cli.common import COUNT, out
from whestbench.errors import UsageError


@click.command("calibrate")
@click.option("--n-mlps", type=COUNT, required=True, help="MLPs in the planned bake.")
@click.option("--n-samples", type=COUNT, required=True, help="Samples per MLP in the planned bake (1e9 works).")
@click.option("--width", type=int, required=True)
@click.option("--depth", type=int, required=True)
@click.option("--torch", "use_torch", is_flag=True, help="Calibrate the torch backend.")
@click.option("--device", type=click.Choice(["auto", "cuda", "mps", "cpu"]), default=None, help="Torch device (implies --torch).")
@click.option("--mlps-per-batch", type=int, default=None, help="Torch: MLPs per batched step.")
@click.option("--chunk-size", type=COUNT, default=None, help="Torch: samples per step.")
@click.option("--max-threads", type=int, default=None, help="CPU path: worker threads.")
@click.option("--calib-mlps", type=int, default=None, help="MLPs in the timed run (default: a full round of workers/batch).")
@click.option("--calib-samples", type=COUNT, default=None, help="Samples per MLP in the timed run (default: 1e5 on CPU, 1e6 on GPU).")
def calibrate(n_mlps, n_samples, width, depth, use_torch, device, mlps_per_batch, chunk_size, max_threads, calib_mlps, calib_samples) -> None:
    """Time a short bake of this shape and project the planned bake's wall time.

    \b
    whest dataset calibrate --n-mlps 100 --n-samples 1e9 --width 256 --depth 8 --device cuda
    """
    import os

    from rich.table import Table

    from whestbench.work.calibrate import calibrate as run_calibration
    from whestbench.work.calibrate import human_duration

    for flag, v in (("--n-mlps", n_mlps), ("--n-samples", n_samples), ("--width", width), ("--depth", depth)):
        if v <= 0:
            raise UsageError(f"{flag} must be a positive integer; got {v}.")
    torch_path = use_torch or device is not None or mlps_per_batch is not None or chunk_size is not None
    if torch_path:
        if max_threads is not None:
            raise UsageError("--max-threads applies to the CPU path only; torch manages its own threads (drop --max-threads).")
        from whestbench.dataset.bake import BakeConfig, torch_plan

        plan = torch_plan(BakeConfig(
            n_mlps=n_mlps, n_samples=n_samples, width=width, depth=depth, output="/nonexistent",
            backend="torch", device=device or "auto", mlps_per_batch=mlps_per_batch, chunk_size=chunk_size,
        ))
        from whestbench.compute import philox

        torch_extra = {
            "device": plan["device"], "mlps_per_batch": plan["mlps_per_batch"], "chunk_size": plan["chunk_size"],
            "block_size": philox.BLOCK_SIZE, "unit_blocks": 256, "method": plan["method"],
        }
        import torch

        sync = torch.cuda.synchronize if plan["device"].startswith("cuda") else (lambda: None)
        label = f"torch {plan['device']} ({plan['kernel']['name']})"
        default_mlps = plan["mlps_per_batch"] * plan["workers"]
        max_threads = plan["workers"]
        default_samples = 1_000_000 if plan["device"] != "cpu" else 131_072
    else:
        if max_threads is not None and max_threads <= 0:
            raise UsageError(f"--max-threads must be a positive integer; got {max_threads}.")
        torch_extra, sync, label = None, (lambda: None), "cpu (pcg64)"
        default_mlps, default_samples = max_threads or os.cpu_count() or 1, 100_000
    k = calib_mlps or min(n_mlps, default_mlps)
    n = min(calib_samples or default_samples, n_samples)
    out.print(f"Calibrating on {label}: {k} MLPs × {n:,} samples (after a warm-up)…", markup=False)
    from whestbench.dataset.bake import torch_threads

    with torch_threads(1 if torch_extra is not None and torch_extra["device"] == "cpu" else None):
        cal = run_calibration(
            width=width, depth=depth, planned_mlps=n_mlps, planned_samples=n_samples,
            calib_mlps=k, calib_samples=n, workers=max_threads, sync=sync, device=label, torch_extra=torch_extra,
        )
    table = Table(title=f"Calibration: width {width}, depth {depth}")
    table.add_column("")
    table.add_column("value", justify="right")
    table.add_row("device", label)
    table.add_row("timed run", f"{k} MLPs × {n:,} samples in {cal.seconds:.2f} s")
    table.add_row("throughput", f"{cal.samples_per_s / 1e6:.2f} M samples/s")
    table.add_row("effective", f"{cal.gflops:.1f} GFLOP/s ({cal.gflops / 1e3:.3f} TFLOP/s)")
    table.add_row("planned bake", f"{n_mlps:,} MLPs × {n_samples:,} samples")
    table.add_row("projected wall time", human_duration(cal.projected_s))
    out.print(table)


COMMANDS = [calibrate]
