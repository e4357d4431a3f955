"""Units of work and the plan: what a bake computes, named by identity, never by rank or order.

pcg64: one unit per MLP (its samples come from one sequential stream). philox: one unit per MLP x
canonical-block range, so several workers can share one MLP. A unit's result is a LayerSums (a few
KB); the plan's identity (everything that changes the numbers) guards resume against mixing bakes.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Callable

from whestbench.compute.seeds import seed_list_digest, spawn_streams
from whestbench.compute.stats import LayerSums


@dataclass(frozen=True)
class Unit:
    """MLP ``mlp_index`` (absolute), samples of canonical blocks ``[block_start, block_end)``.

    For pcg64 the block range is always the whole MLP (``0, None``).
    """

    mlp_index: int
    block_start: int = 0
    block_end: int | None = None
    mlp_count: int = 1
    """philox on torch: MLPs ``mlp_index .. mlp_index+mlp_count-1`` run as one batch (same blocks)."""

    @property
    def key(self) -> str:
        if self.block_end is None:
            return f"mlp{self.mlp_index:08d}"
        return f"mlp{self.mlp_index:08d}x{self.mlp_count}-b{self.block_start:010d}-{self.block_end:010d}"

    @property
    def mlps(self) -> range:
        return range(self.mlp_index, self.mlp_index + self.mlp_count)


@dataclass(frozen=True)
class WorkSpec:
    """Everything that determines the numeric columns of a bake (and nothing that does not).

    ``seeds`` is the whole dataset's seed list; ``mlp_range`` the half-open slice being baked.
    ``sampler`` is "pcg64" or "philox"; ``kernel`` names the arithmetic (precision class) for philox.
    """

    seeds: tuple[int, ...]
    n_samples: int
    width: int
    depth: int
    mlp_range: tuple[int, int]
    sampler: str = "pcg64"
    kernel: str = "numpy-fp32"
    extra: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def identity(self) -> dict[str, Any]:
        return {
            "seed_list_digest": seed_list_digest(self.seeds),
            "n_mlps": len(self.seeds),
            "n_samples": self.n_samples,
            "width": self.width,
            "depth": self.depth,
            "mlp_range": list(self.mlp_range),
            "sampler": self.sampler,
            "kernel": self.kernel,
        }

    def identity_digest(self) -> str:
        blob = json.dumps(self.identity(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def plan_units(spec: WorkSpec) -> list[Unit]:
    """The units of a bake, in a canonical order.

    pcg64: one unit per MLP. philox: MLPs in groups of ``extra["mlps_per_batch"]``, each group cut
    into aligned runs of ``extra["unit_blocks"]`` canonical blocks (group-major). Any such cut gives
    the same per-MLP sums (the pairwise tree), so the grouping is a scheduling choice only.
    """
    start, end = spec.mlp_range
    if spec.sampler == "pcg64":
        return [Unit(i) for i in range(start, end)]
    if spec.sampler != "philox":
        raise ValueError(f"unknown sampler {spec.sampler!r}.")
    from whestbench.compute.philox import unit_block_ranges

    batch = max(1, int(spec.extra.get("mlps_per_batch", 1)))
    ranges = unit_block_ranges(spec.n_samples, int(spec.extra["unit_blocks"]), int(spec.extra["block_size"]))
    units = []
    for g in range(start, end, batch):
        count = min(batch, end - g)
        units += [Unit(g, b0, b1, count) for b0, b1 in ranges]
    return units


def unit_samples(spec: WorkSpec, unit: Unit) -> int:
    """Samples a unit covers, over all its MLPs (for progress)."""
    if unit.block_end is None:
        return spec.n_samples * unit.mlp_count
    block = int(spec.extra["block_size"])
    return unit.mlp_count * (min(unit.block_end * block, spec.n_samples) - unit.block_start * block)


def run_unit_pcg64(spec: WorkSpec, unit: Unit, on_samples: Callable[[int], None] | None = None) -> LayerSums:
    """Compute one pcg64 unit: the MLP's weights from its seed, then its whole sample stream."""
    from whestbench.compute.mlp import sample_weights
    from whestbench.compute.pcg64 import sample_layer_sums

    weight_ss, sample_ss, _ = spawn_streams(spec.seeds[unit.mlp_index])
    weights = sample_weights(weight_ss, spec.width, spec.depth)
    return sample_layer_sums(weights, sample_ss, spec.n_samples, on_chunk=on_samples)


def run_unit_philox(spec: WorkSpec, unit: Unit, on_samples: Callable[[int], None] | None = None) -> LayerSums:
    """Compute one philox unit on the torch backend: a batch of MLPs over an aligned block range.

    Returns a LayerSums whose arrays have a leading MLP axis: sums (B, depth, width), sumsq (B, width).
    ``spec.extra`` carries the device, chunk size, block size and compute method; none of them
    changes a result (only ``spec.kernel``, the arithmetic, does).
    """
    import numpy as np

    from whestbench.compute.mlp import sample_weights
    from whestbench.compute.philox import combine_in_order, philox_key
    from whestbench.compute.philox_torch import block_sums_torch

    block_size = int(spec.extra["block_size"])
    weights, keys = [], []
    for i in unit.mlps:
        weight_ss, sample_ss, _ = spawn_streams(spec.seeds[i])
        weights.append(sample_weights(weight_ss, spec.width, spec.depth))
        keys.append(philox_key(sample_ss))
    w_batch = np.stack(weights)  # (B, depth, width, width)
    device = spec.extra.get("device", "cpu")
    if device == "cpu":
        _pin_torch_threads_here()
    if spec.extra.get("method") == "triton":  # the fused kernel: one call covers the block range
        from whestbench.compute.philox_triton import range_sums_triton

        def on_blocks(n_blocks: int) -> None:
            if on_samples is not None:
                on_samples(unit.mlp_count * min(n_blocks * block_size, spec.n_samples))

        combined = range_sums_triton(
            w_batch, np.array(keys, dtype=np.uint32), (unit.block_start, unit.block_end), spec.n_samples,
            block_size=block_size, device=device, on_blocks=on_blocks,
        )
        return _stack(combined)
    parts: list[list[LayerSums]] = [[] for _ in unit.mlps]
    for b in range(unit.block_start, unit.block_end):
        sums = block_sums_torch(
            w_batch, np.array(keys, dtype=np.uint32), b, spec.n_samples, device,
            chunk_size=spec.extra.get("chunk_size"), block_size=block_size,
            method=spec.extra.get("method", "auto"),
        )
        for j, s in enumerate(sums):
            parts[j].append(s)
        if on_samples is not None:
            on_samples(unit.mlp_count * sums[0].count)
    return _stack([combine_in_order(p) for p in parts])


def _pin_torch_threads_here() -> None:
    """Apply torch's thread count to the calling worker thread too.

    ``torch.set_num_threads`` sets OpenMP's and MKL's counts for the thread that calls it only. A
    worker thread starts from the defaults (all cores), so each of its CPU matmuls would start an
    OpenMP team of its own: two workers with two threads each on two cores ran 14% slower.
    """
    import torch

    torch.set_num_threads(torch.get_num_threads())


def _stack(per_mlp: list[LayerSums]) -> LayerSums:
    """One LayerSums with a leading MLP axis (what a batched unit stores)."""
    import numpy as np

    return LayerSums(
        sums=np.stack([c.sums for c in per_mlp]),
        sumsq=np.stack([c.sumsq for c in per_mlp]),
        count=per_mlp[0].count,
    )


def per_mlp_sums(spec: WorkSpec, units: list[Unit], results: dict) -> dict[int, LayerSums]:
    """Each MLP's total over its units: pcg64 units are whole MLPs; philox units are combined in
    block order with the pairwise tree (``combine_in_order``)."""
    out: dict[int, LayerSums] = {}
    if spec.sampler == "pcg64":
        for u in units:
            out[u.mlp_index] = results[u.key][0]
        return out
    from whestbench.compute.philox import combine_in_order

    parts: dict[int, list[tuple[int, LayerSums]]] = {}
    for u in units:
        batch = results[u.key][0]
        for j, i in enumerate(u.mlps):
            one = LayerSums(sums=batch.sums[j], sumsq=batch.sumsq[j], count=batch.count)
            parts.setdefault(i, []).append((u.block_start, one))
    for i, lst in parts.items():
        out[i] = combine_in_order([s for _, s in sorted(lst, key=lambda t: t[0])])
    return out
