"""Bake a dataset: validate the request, plan units, run them (resumably), write the directory.

``bake(BakeConfig)`` is the one entry point shared by the CLI, the Python API (``create_dataset``)
and the launchers. Everything that can be wrong with the request is checked before any work
starts, the output directory included; the output appears only when it is complete.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from whestbench.compute.mlp import weights_for_seed
from whestbench.compute.naming import unique_names
from whestbench.compute.pcg64 import SAMPLER_NAME, SAMPLER_VERSION, chunk_rows
from whestbench.compute.seeds import (
    check_range,
    derived_seeds,
    estimator_seed,
    random_seeds,
    seed_list_digest,
    validate_mlp_seeds,
)
from whestbench.compute.stats import finalize
from whestbench.dataset.errors import InvalidDatasetError
from whestbench.dataset.bakemeta import bake_metadata
from whestbench.dataset.schema import BACKEND_CPU, BACKEND_TORCH, check_config_name, check_split_name
from whestbench.errors import UsageError
from whestbench.work.ledger import Ledger, work_dir_for
from whestbench.work.runner import run_units
from whestbench.work.units import WorkSpec, per_mlp_sums, plan_units, run_unit_pcg64, run_unit_philox, unit_samples

if TYPE_CHECKING:
    from whestbench.work.distributed import DistEnv

Event = dict[str, Any]


@dataclass(frozen=True)
class BakeConfig:
    """One bake request. ``__post_init__`` rejects anything that would fail later, before any work."""

    n_mlps: int
    """Size of the whole logical dataset (also when baking a slice of it)."""
    n_samples: int
    """Gaussian inputs per MLP (N of the Monte-Carlo mean)."""
    width: int
    depth: int
    output: Path
    """Directory to create; must not exist (checked before any work)."""
    mlp_seeds: tuple[int, ...] | None = None
    """Explicit per-MLP seeds (all n_mlps of them, also for a slice)."""
    seed: int | None = None
    """Root seed: the per-MLP seeds are derived from it deterministically (``--seed``)."""
    split: str = "public"
    config: str = "default"
    mlp_range: tuple[int, int] | None = None
    """Half-open MLP range to bake; None is the whole dataset."""
    max_threads: int | None = None
    """Worker threads (one MLP each). Results never depend on it."""
    bake_command: str | None = None
    """The command line to record for re-baking; built from the config when None."""
    seeds_file: str | None = None
    """Path the seeds came from, for the recorded command."""
    seeds_from_peer: bool = False
    """A non-zero rank of a distributed bake: the seeds arrive from rank 0."""
    backend: str = "cpu"
    """"cpu" (pcg64 sampler, whestbench 0.16's numbers) or "torch" (philox sampler, any device)."""
    device: str | None = None
    """Torch device: auto, cuda, mps or cpu. Giving it selects the torch backend."""
    mlps_per_batch: int | None = None
    """Torch: MLPs per batched step. Never changes the numbers."""
    chunk_size: int | None = None
    """Torch: samples per step (rounded to a power of two). Never changes the numbers."""
    gpu_kernel: str = "torch"
    """CUDA: "torch" (plain torch ops, fp32 matmuls) or "fused" (the Triton kernel, split-precision
    tensor cores; opt-in until measured on a GPU). Changes the arithmetic, so it is recorded."""

    def __post_init__(self) -> None:
        for flag, value in (
            ("--n-mlps", self.n_mlps),
            ("--n-samples", self.n_samples),
            ("--width", self.width),
            ("--depth", self.depth),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise UsageError(f"{flag} must be a positive integer; got {value!r}.")
        try:
            check_split_name(self.split, "split")
            check_config_name(self.config)
        except InvalidDatasetError as exc:
            raise UsageError(f"{exc} (--split / --config)") from None
        if self.mlp_seeds is not None and self.seed is not None:
            raise UsageError("pass either --mlp-seeds or --seed, not both.")
        if self.mlp_seeds is not None:
            object.__setattr__(self, "mlp_seeds", tuple(validate_mlp_seeds(list(self.mlp_seeds), self.n_mlps)))
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0):
            raise UsageError(f"--seed must be a non-negative integer; got {self.seed!r}.")
        if self.mlp_range is not None:
            object.__setattr__(self, "mlp_range", check_range(self.mlp_range, self.n_mlps))
            if self.is_partial and self.mlp_seeds is None and self.seed is None and not self.seeds_from_peer:
                raise UsageError(
                    "a slice needs the whole dataset's seeds so that partials fit together: "
                    "pass --mlp-seeds FILE (from `whest dataset generate-seeds`) or --seed S."
                )
        if self.max_threads is not None and (
            isinstance(self.max_threads, bool) or not isinstance(self.max_threads, int) or self.max_threads <= 0
        ):
            raise UsageError(f"--max-threads must be a positive integer; got {self.max_threads!r}.")
        if self.backend not in ("cpu", "torch"):
            raise UsageError(f"backend must be 'cpu' or 'torch'; got {self.backend!r}.")
        if self.backend == "torch" and self.max_threads is not None:
            raise UsageError("--max-threads applies to the CPU path only; torch manages its own threads (drop --max-threads).")
        if self.gpu_kernel not in ("torch", "fused"):
            raise UsageError(f"--gpu-kernel must be 'torch' or 'fused'; got {self.gpu_kernel!r}.")
        for flag, value in (("--mlps-per-batch", self.mlps_per_batch), ("--chunk-size", self.chunk_size)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise UsageError(f"{flag} must be a positive integer; got {value!r}.")
        object.__setattr__(self, "output", Path(self.output))

    @property
    def range(self) -> tuple[int, int]:
        return self.mlp_range if self.mlp_range is not None else (0, self.n_mlps)

    @property
    def is_partial(self) -> bool:
        return self.range != (0, self.n_mlps)


def check_output_free(output: Path) -> None:
    output = Path(output)
    if output.exists():
        work = work_dir_for(output)
        if (output / "metadata.json").is_file() and work.is_dir():
            # A kill between renaming the finished dataset into place and removing its work
            # directory: the dataset is complete (the rename is atomic), the work dir is leftover.
            import shutil

            shutil.rmtree(work, ignore_errors=True)
        raise UsageError(f"--output {output} already exists; choose a new directory or remove it first.")


def resolve_seeds(cfg: BakeConfig, work_dir: Path) -> tuple[list[int], dict[str, Any]]:
    """The whole dataset's seed list and how it was obtained (recorded as ``seed_source``).

    Auto-generated seeds are kept in the work directory, so re-running the same command after a
    crash resumes with the same seeds instead of starting a different dataset.
    """
    if cfg.mlp_seeds is not None:
        return list(cfg.mlp_seeds), {"method": "explicit"}
    if cfg.seed is not None:
        return derived_seeds(cfg.seed, cfg.n_mlps), {"method": "derived", "root_seed": cfg.seed}
    saved = work_dir / "auto-seeds.json"
    if saved.exists():
        seeds = json.loads(saved.read_text())
        if len(seeds) == cfg.n_mlps:
            return seeds, {"method": "random"}
    return random_seeds(cfg.n_mlps), {"method": "random"}


def canonical_command(cfg: BakeConfig, seed_source: dict[str, Any]) -> str:
    """The ``whest dataset bake`` command that reproduces this bake's numbers."""
    parts = [
        "whest", "dataset", "bake",
        "--n-mlps", str(cfg.n_mlps), "--n-samples", str(cfg.n_samples),
        "--width", str(cfg.width), "--depth", str(cfg.depth),
    ]
    if seed_source.get("method") == "derived":
        parts += ["--seed", str(seed_source["root_seed"])]
    else:
        parts += ["--mlp-seeds", cfg.seeds_file or "seeds.json"]
    parts += ["--split", cfg.split, "--config", cfg.config]
    if cfg.backend == "torch":
        parts += ["--torch", "--device", cfg.device or "auto"]
    if cfg.is_partial:
        start, end = cfg.range
        parts += ["--mlp-range", f"{start}-{end - 1}"]
    parts += ["--output", str(cfg.output)]
    return shlex.join(parts)


UNIT_BLOCKS = 256  # philox: canonical blocks per unit (2**24 samples): ~60 units per MLP at N=10**9


def _spec(cfg: BakeConfig, seeds: Sequence[int], torch_plan: dict[str, Any] | None = None) -> WorkSpec:
    common = dict(
        seeds=tuple(int(x) for x in seeds),
        n_samples=cfg.n_samples,
        width=cfg.width,
        depth=cfg.depth,
        mlp_range=cfg.range,
    )
    if torch_plan is None:
        return WorkSpec(**common, sampler=SAMPLER_NAME, kernel="numpy-sgemm-fp32")
    from whestbench.compute import philox

    return WorkSpec(
        **common,
        sampler=philox.SAMPLER_NAME,
        kernel=torch_plan["kernel"]["precision_class"],
        extra={
            "device": torch_plan["device"],
            "mlps_per_batch": torch_plan["mlps_per_batch"],
            "chunk_size": torch_plan["chunk_size"],
            "block_size": philox.BLOCK_SIZE,
            "unit_blocks": UNIT_BLOCKS,
            "method": torch_plan["method"],
        },
    )


def torch_plan(cfg: BakeConfig) -> dict[str, Any]:
    """Resolve the device and the tuning knobs of a torch bake (none of which changes the numbers
    except the arithmetic's precision class, which is recorded and part of the resume identity)."""
    from whestbench.work.torch_env import resolve_device

    device = resolve_device(cfg.device)
    import torch

    from whestbench.compute import philox_torch

    start, end = cfg.range
    # On the CPU one MLP per worker thread (one per core, torch single-threaded: the numba passes
    # are single-threaded, so this keeps every core busy); on a GPU, batches of up to 16.
    batch = cfg.mlps_per_batch or (1 if device == "cpu" else min(end - start, 16))
    chunk = philox_torch.chunk_rows(cfg.chunk_size, torch.device(device), batch, cfg.width, philox_torch.ref.BLOCK_SIZE)
    method = "numba" if device == "cpu" else "torch"
    kernel = {"name": f"philox-{method}-{device}", "precision_class": philox_torch.kernel_name(device, method)}
    if cfg.gpu_kernel == "fused":
        from whestbench.compute import philox_triton

        ok, why = philox_triton.fused_available(device, cfg.width)
        if not ok:
            raise UsageError(f"--gpu-kernel fused cannot run here: {why}; use --gpu-kernel torch.")
        method = "triton"
        identity = philox_triton.default_config(cfg.width).identity()
        capability = ".".join(map(str, torch.cuda.get_device_capability()))
        kernel = {
            "name": "philox-triton-fused",
            "precision_class": json.dumps({**identity, "sm": capability}, sort_keys=True),
            "config": identity,
        }
    return {
        "device": device,
        "mlps_per_batch": batch,
        "chunk_size": chunk,
        "method": method,
        "workers": (os.cpu_count() or 1) if device == "cpu" else 1,
        "kernel": kernel,
    }


def bake(
    cfg: BakeConfig,
    *,
    on_event: Callable[[Event], None] | None = None,
    stop: threading.Event | None = None,
    dist_env: "DistEnv | None" = None,
    peer_timeout_s: float = 300.0,
) -> Path | None:
    """Bake ``cfg`` on the CPU (pcg64 sampler) and return the output path.

    Finished MLPs are saved in ``<output>.whest-work``; if the bake is interrupted, the same call
    resumes from there and writes byte-identical numeric columns. With ``dist_env`` (several
    ranks), every rank computes units and rank 0 gathers, writes and returns the path; the other
    ranks return None.
    """
    emit = on_event or (lambda e: None)
    work_dir = work_dir_for(cfg.output)
    rank = dist_env.rank if dist_env is not None else 0
    seeds, seed_source = None, {"method": "peer"}
    if rank == 0:
        check_output_free(cfg.output)
        seeds, seed_source = resolve_seeds(cfg, work_dir)

    def ledger_for(spec: WorkSpec) -> Ledger:
        saved = work_dir / "auto-seeds.json"
        if seed_source["method"] == "random" and not saved.exists():
            # Before the ledger's plan.json: a crash between the two must not leave a plan whose
            # seeds a re-run cannot recover (it would draw new seeds and be refused as another bake).
            from whestbench.atomic import write_file_atomic

            work_dir.mkdir(parents=True, exist_ok=True)
            write_file_atomic(saved, json.dumps(list(spec.seeds)).encode())
        return Ledger(work_dir, spec.identity())

    # torch first, alone: importing it while the prefetch thread imports ``datasets`` makes both
    # fight for the GIL (2.6 s instead of 1.4 s); after it, the prefetch overlaps the compute.
    tplan = torch_plan(cfg) if cfg.backend == "torch" else None
    _prefetch_writer_imports()
    if tplan is not None and tplan["device"] == "cuda" and dist_env is not None:
        tplan["device"] = f"cuda:{dist_env.local_rank}"  # one GPU per local rank
    if tplan is not None and tplan["device"] == "mps":
        emit({"phase": "warning", "message": (
            "MPS has no float64: sums accumulate in float32, which loses ~1e-7 relative per addition "
            "(means at N=1e9 may be off by ~1e-4); use --device cuda or cpu for production ground truth."
        )})
    unit_fn = run_unit_pcg64 if tplan is None else run_unit_philox
    workers = cfg.max_threads if tplan is None else tplan["workers"]
    if tplan is not None and dist_env is not None and dist_env.world_size > 1:
        workers = 1  # one device (or one core's worth of CPU) per rank
    with torch_threads(1 if tplan is not None and tplan["device"] == "cpu" else None):
        results, spec = _execute(cfg, seeds, tplan, unit_fn, workers, ledger_for, emit, stop, dist_env, peer_timeout_s)
    if results is None:
        return None
    write_baked(cfg, spec, results, seed_source, emit, tplan)
    Ledger(work_dir, spec.identity()).remove()
    return cfg.output


def _prefetch_writer_imports() -> None:
    """Import what writing needs (``datasets`` ~1 s, pyarrow, faker) on a background thread while
    the first units compute: the workers release the GIL in BLAS, numba and the samplers, so this
    start-up cost disappears from the wall time of short bakes."""

    import sys

    def load() -> None:
        # While this (pure Python) import holds the GIL, a worker returning from BLAS waits up to
        # the switch interval for it, ~17 times per chunk: shorten the interval meanwhile.
        previous = sys.getswitchinterval()
        sys.setswitchinterval(1e-4)
        try:
            import datasets  # noqa: F401
            import pyarrow.parquet  # noqa: F401

            from whestbench.compute.naming import mlp_name

            mlp_name(0)  # builds faker's en_US provider
        finally:
            sys.setswitchinterval(previous)

    threading.Thread(target=load, name="whest-prefetch", daemon=True).start()


@contextlib.contextmanager
def torch_threads(n: int | None):
    """Pin torch's intra-op threads to ``n`` for the bake (our worker threads give the parallelism)."""
    if n is None:
        yield
        return
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _execute(cfg, seeds, tplan, unit_fn, workers, ledger_for, emit, stop, dist_env, peer_timeout_s):
    """Run every unit locally or as one rank; returns (results, spec), results None on ranks > 0."""
    if dist_env is None or dist_env.world_size == 1:
        spec = _spec(cfg, seeds, tplan)
        ledger = ledger_for(spec)
        results = run_units(
            spec, plan_units(spec), workers=workers, ledger=ledger, on_event=emit, stop=stop,
            unit_fn=unit_fn, samples_of=lambda u: unit_samples(spec, u),
        )
        return results, spec
    else:
        from whestbench.work.distributed import run_distributed

        probe = _spec(cfg, [0] * cfg.n_mlps, tplan)  # unit sizes depend on the shape only
        spec, results = run_distributed(
            lambda s: _spec(cfg, s, tplan),
            plan_units,
            dist_env,
            seeds=seeds,
            ledger_for_spec=ledger_for,
            unit_fn=unit_fn,
            workers=workers or 1,
            on_event=emit,
            stop=stop,
            peer_timeout_s=peer_timeout_s,
            samples_of=lambda u: unit_samples(probe, u),
        )
        return results, spec


def write_baked(
    cfg: BakeConfig,
    spec: WorkSpec,
    results: dict,
    seed_source: dict[str, Any],
    emit,
    tplan: dict[str, Any] | None = None,
) -> None:
    """Turn the units' sums into rows and write the dataset directory atomically."""
    emit({"phase": "writing"})
    units = plan_units(spec)
    totals = per_mlp_sums(spec, units, results)
    walls: dict[int, float] = {}
    for u in units:  # a unit's wall time is shared by the MLPs it batched
        for i in u.mlps:
            walls[i] = walls.get(i, 0.0) + results[u.key][1] / u.mlp_count
    start, end = cfg.range
    names = unique_names(estimator_seed(s) for s in spec.seeds)[start:end]
    if tplan is None:
        chunk = chunk_rows(cfg.width)
        sampler = {"name": SAMPLER_NAME, "version": SAMPLER_VERSION, "block_size": chunk}
        backend, backend_fields, method = BACKEND_CPU, None, "cpu"
    else:
        from whestbench.compute import philox
        from whestbench.work.torch_env import torch_metadata

        chunk = tplan["chunk_size"]
        sampler = {
            "name": philox.SAMPLER_NAME,
            "version": philox.SAMPLER_VERSION,
            "block_size": philox.BLOCK_SIZE,
            "unit_blocks": UNIT_BLOCKS,
            "summation": "pairwise-tree",
        }
        device = tplan["device"].split(":")[0]
        backend, method = BACKEND_TORCH, "closed-form"
        backend_fields = torch_metadata(device, mlps_per_batch=tplan["mlps_per_batch"], chunk_size=chunk, kernel=tplan["kernel"])
    md = bake_metadata(
        split=cfg.split,
        config=cfg.config,
        n_rows=end - start,
        n_samples=cfg.n_samples,
        width=cfg.width,
        depth=cfg.depth,
        mlp_range=(start, end),
        total_n_mlps=cfg.n_mlps,
        sampler=sampler,
        seed_list_digest=seed_list_digest(spec.seeds),
        seed_source=seed_source,
        bake_command=cfg.bake_command or canonical_command(cfg, seed_source),
        backend=backend,
        backend_fields=backend_fields,
    )
    from whestbench.dataset.writer import write_dataset

    rows = _rows(spec, range(start, end), totals, walls, names, chunk, method)
    write_dataset(cfg.output, cfg.split, rows, end - start, cfg.width, cfg.depth, md)
    emit({"phase": "written", "output": str(cfg.output)})


def _rows(spec: WorkSpec, indices, totals: dict, walls: dict, names: list[str], chunk: int, method: str) -> Iterator[dict[str, Any]]:
    from whestbench.dataset.breakdown import breakdown_json, sampling_budget_breakdown

    for i, name in zip(indices, names):
        means, final, avg_var = finalize(totals[i])
        seed = spec.seeds[i]
        yield {
            "mlp_id": i,
            "mlp_name": name,
            "mlp_seed": seed,
            "weights": weights_for_seed(seed, spec.width, spec.depth),
            "all_layer_means": means,
            "final_means": final,
            "avg_variance": avg_var,
            "sampling_budget_breakdown": breakdown_json(
                sampling_budget_breakdown(spec.n_samples, spec.width, spec.depth, chunk, wall_time_s=walls[i], method=method)
            ),
        }


def create_dataset(
    n_mlps: int,
    n_samples: int,
    width: int,
    depth: int,
    *,
    mlp_seeds: Sequence[int] | None = None,
    output_path: str | Path,
    split: str = "public",
    config: str = "default",
    mlp_range: tuple[int, int] | None = None,
    seed: int | None = None,
    max_threads: int | None = None,
    progress: Callable[[Event], None] | None = None,
) -> Path:
    """Bake a dataset on the CPU (whestbench 0.16's signature; ``mlp_range`` is half-open)."""
    cfg = api_config(
        n_mlps, n_samples, width, depth, output_path=output_path, mlp_seeds=mlp_seeds, seed=seed,
        split=split, config=config, mlp_range=mlp_range, max_threads=max_threads,
    )
    return bake(cfg, on_event=progress)


def api_config(
    n_mlps: int,
    n_samples: int,
    width: int,
    depth: int,
    *,
    output_path: str | Path,
    mlp_seeds: Sequence[int] | None,
    seed: int | None,
    split: str,
    config: str,
    mlp_range: Sequence[int] | None,
    **backend: Any,
) -> BakeConfig:
    """The ``BakeConfig`` of a Python API call (``create_dataset``, ``create_dataset_torch``):
    arguments as whestbench 0.16 names them; ``backend`` holds the remaining ``BakeConfig`` fields."""
    return BakeConfig(
        n_mlps=n_mlps,
        n_samples=n_samples,
        width=width,
        depth=depth,
        output=Path(output_path),
        mlp_seeds=tuple(mlp_seeds) if mlp_seeds is not None else None,
        seed=seed,
        split=split,
        config=config,
        mlp_range=tuple(mlp_range) if mlp_range is not None else None,
        **backend,
    )
