"""``whestbench.dataset_torch.create_dataset_torch``: the torch backend's Python API (0.16's name).

Callable exactly as the GPU page's calibration snippet calls it::

    create_dataset_torch(n_mlps=10, n_samples=1_000_000, width=256, depth=8,
                         seed=42, output_path=Path('/tmp/cal'), device='cuda')
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from whestbench.compute.estimation import Estimation
from whestbench.format.schema import DEFAULT_CONFIG, DEFAULT_SPLIT
from whestbench.bake.pipeline import api_config, bake, legacy_progress


def create_dataset_torch(
    n_mlps: int,
    n_samples: int,
    width: int,
    depth: int,
    seed: int | None = None,
    mlp_seeds: Sequence[int] | None = None,
    *,
    output_path: str | Path,
    device: str = "auto",
    mlps_per_batch: int | None = None,
    chunk_size: int | None = None,
    split: str = DEFAULT_SPLIT,
    config: str = DEFAULT_CONFIG,
    mlp_range: tuple[int, int] | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
    compile: bool = False,
    estimator: str = "plain",
    target_stderr: float | None = None,
    stderr_layer: str = "last",
    skip_device_check: bool = False,
    accept_non_invariant: bool = False,
) -> Path:
    """Bake with the torch backend (philox sampler) on ``device`` and return the output path.

    ``mlps_per_batch`` and ``chunk_size`` only trade memory for speed: the numbers are the same
    for every value. ``compile`` is accepted for compatibility with whestbench 0.16 and ignored
    (our kernels need no ``torch.compile``). The device is checked before any work (docs/gpu.md):
    ``skip_device_check`` and ``accept_non_invariant`` are the CLI's ``--skip-device-check`` and
    ``--accept-non-invariant``.
    """
    cfg = api_config(
        n_mlps, n_samples, width, depth, output_path=output_path, mlp_seeds=mlp_seeds, seed=seed,
        split=split, config=config, mlp_range=mlp_range,
        backend="torch", device=device, mlps_per_batch=mlps_per_batch, chunk_size=chunk_size,
        estimation=Estimation(estimator, target_stderr, stderr_layer),
        skip_device_check=skip_device_check, accept_non_invariant=accept_non_invariant,
    )
    return bake(cfg, on_event=legacy_progress(progress), complete_ok=False)  # 0.16: an existing output is an error
