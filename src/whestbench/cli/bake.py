"""``whest dataset bake``: flags -> BakeConfig -> ``bake()``, with progress and signal handling."""

from __future__ import annotations

import shlex
import signal
import sys
import threading
import time
from pathlib import Path

import click

from whestbench.cli.common import COUNT, out, parse_mlp_range, parse_slice, read_seeds_file
from whestbench.errors import UsageError


@click.command("bake")
@click.option("--n-mlps", type=COUNT, required=True, help="MLPs in the whole dataset (also when baking a slice).")
@click.option("--n-samples", type=COUNT, required=True, help="Samples per MLP: 1000000, 1_000_000 or 1e6.")
@click.option("--width", type=int, required=True, help="Neurons per layer.")
@click.option("--depth", type=int, required=True, help="Number of layers.")
@click.option("--output", type=click.Path(path_type=Path), required=True, help="Directory to create (must not exist).")
@click.option("--mlp-seeds", "mlp_seeds", type=str, default=None, help="JSON file with one int63 seed per MLP (generate-seeds).")
@click.option("--seed", type=int, default=None, help="Derive the per-MLP seeds deterministically from this root seed.")
@click.option("--split", default="public", show_default=True, help="Split name (lowercase letters and digits).")
@click.option("--config", "config_name", default="default", show_default=True, help="HF config name for this split.")
@click.option("--slice", "slice_", default=None, help="Bake slice K/N of the MLPs (0-indexed); merge the partials later.")
@click.option("--mlp-range", default=None, help="Bake MLPs START-END (inclusive).")
@click.option("--max-threads", type=int, default=None, help="CPU worker threads (one MLP each; default: all cores).")
@click.option("--torch", "use_torch", is_flag=True, help="Use the torch backend (philox sampler; CPU, CUDA or MPS).")
@click.option("--device", type=click.Choice(["auto", "cuda", "mps", "cpu"]), default=None, help="Torch device (implies --torch).")
@click.option("--mlps-per-batch", type=int, default=None, help="Torch: MLPs per batched matmul (never changes results).")
@click.option("--chunk-size", type=COUNT, default=None, help="Torch: samples per step (never changes results).")
@click.option("--gpu-kernel", type=click.Choice(["torch", "fused"]), default="torch", show_default=True,
              help="CUDA: plain torch ops, or the fused Triton kernel (split-precision tensor cores; experimental).")
@click.option("--peer-timeout", type=float, default=300.0, show_default=True,
              help="Distributed bakes: seconds of silence after which a rank is declared dead.")
@click.option("--quiet", is_flag=True, help="No progress display.")
def bake(n_mlps, n_samples, width, depth, output, mlp_seeds, seed, split, config_name, slice_, mlp_range,
         max_threads, use_torch, device, mlps_per_batch, chunk_size, gpu_kernel, peer_timeout, quiet) -> None:
    """Bake a dataset (or one slice of it) of random ReLU MLPs and their ground-truth means.

    \b
    whest dataset bake --n-mlps 10 --n-samples 1e6 --width 64 --depth 4 --seed 1 --output ./ds
    whest dataset bake ... --mlp-seeds seeds.json --slice 0/4 --output ./part-0
    """
    if slice_ is not None and mlp_range is not None:
        raise UsageError("use either --mlp-range or --slice, not both.")
    rng = None
    if slice_ is not None:
        from whestbench.compute.seeds import slice_bounds

        k, n = parse_slice(slice_)
        if n > n_mlps:
            raise UsageError(f"--slice {slice_} asks for {n} slices of only {n_mlps} MLPs; use at most {n_mlps} slices.")
        rng = slice_bounds(k, n, n_mlps)
    elif mlp_range is not None:
        rng = parse_mlp_range(mlp_range)
    from whestbench.cli.launch import dist_env_from_environ

    dist_env = dist_env_from_environ()
    peer = dist_env is not None and dist_env.rank != 0
    seeds = None
    if mlp_seeds is not None and not peer:
        seeds = tuple(read_seeds_file(mlp_seeds))
        if seeds and not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
            from whestbench.compute.seeds import validate_mlp_seeds

            validate_mlp_seeds(list(seeds))  # raises with the index and value at fault
    torch_backend = use_torch or device is not None
    if not torch_backend and (mlps_per_batch is not None or chunk_size is not None):
        raise UsageError("--mlps-per-batch and --chunk-size tune the torch backend; add --torch (or --device).")
    if device is not None and not use_torch:
        from whestbench.cli.common import err

        err.print(f"note: --device {device} selects the torch backend (philox sampler), as if --torch were given.", markup=False)
    where = "cpu"
    if torch_backend:
        from whestbench.work.torch_env import resolve_device

        # Resolved before the "Baking ..." line: an absent device is refused before anything is
        # announced, and the line names the device that will run (auto -> cuda, mps or cpu).
        where = f"torch ({resolve_device(device)})"
    from whestbench.dataset.bake import BakeConfig, bake as run_bake

    cfg = BakeConfig(
        n_mlps=n_mlps, n_samples=n_samples, width=width, depth=depth, output=output,
        mlp_seeds=seeds, seed=seed, split=split, config=config_name, mlp_range=rng,
        max_threads=max_threads, seeds_file=mlp_seeds, seeds_from_peer=peer,
        backend="torch" if torch_backend else "cpu", device=device if torch_backend else None,
        mlps_per_batch=mlps_per_batch, chunk_size=chunk_size, gpu_kernel=gpu_kernel,
        bake_command=shlex.join(["whest", "dataset", "bake", *sys.argv[3:]]) if _is_cli_bake() else None,
    )
    _run(
        cfg,
        lambda c, on_event, stop: run_bake(c, on_event=on_event, stop=stop, dist_env=dist_env, peer_timeout_s=peer_timeout),
        quiet,
        device_label=where,
        dist_env=dist_env,
    )


def _is_cli_bake() -> bool:
    return len(sys.argv) > 2 and sys.argv[1:3] == ["dataset", "bake"]


def _run(cfg, fn, quiet: bool, *, device_label: str, dist_env=None) -> None:
    from whestbench.cli.progress import BakeProgress
    from whestbench.dataset.bake import check_output_free

    if dist_env is None or dist_env.rank == 0:
        check_output_free(cfg.output)  # before the "Baking ..." line: a refused bake announces nothing
    start, end = cfg.range
    what = f"{end - start} of {cfg.n_mlps} MLPs" if cfg.is_partial else f"{cfg.n_mlps} MLPs"
    where = device_label
    if dist_env is not None:
        where += f", rank {dist_env.rank} of {dist_env.world_size}"
        quiet = quiet or dist_env.rank != 0  # one progress display: rank 0's
    out.print(
        f"Baking {what} (width={cfg.width}, depth={cfg.depth}, n_samples={cfg.n_samples:,}) on {where} → {cfg.output}",
        markup=False,
    )
    stop = threading.Event()
    previous = {}

    def on_signal(signum, _frame):
        stop.set()
        from whestbench.cli.common import err

        err.print(f"received {signal.Signals(signum).name}: finishing the MLPs in flight, then stopping", markup=False)

    for sig in (signal.SIGTERM, getattr(signal, "SIGUSR1", None)):
        if sig is not None and threading.current_thread() is threading.main_thread():
            previous[sig] = signal.signal(sig, on_signal)
    t0 = time.perf_counter()
    try:
        with BakeProgress("Sampling", enabled=not quiet) as progress:
            path = fn(cfg, progress, stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    dt = time.perf_counter() - t0
    if path is None:  # a non-zero rank: rank 0 writes the dataset
        out.print(f"rank {dist_env.rank}: done in {dt:.1f}s; rank 0 writes {cfg.output}", markup=False)
        return
    n = (end - start) * cfg.n_samples
    flops = 2 * cfg.width * cfg.width * cfg.depth * n
    size = sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())
    out.print(
        f"✓ Wrote {path} in {dt:.1f}s ({size / 1e6:.1f} MB): {end - start} MLPs × {cfg.n_samples:,} samples, "
        f"{n / dt / 1e6:.2f} M samples/s, {flops / dt / 1e9:.1f} GFLOP/s effective",
        markup=False,
    )


COMMANDS = [bake]
