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

    @property
    def key(self) -> str:
        if self.block_end is None:
            return f"mlp{self.mlp_index:08d}"
        return f"mlp{self.mlp_index:08d}-b{self.block_start:010d}-{self.block_end:010d}"


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
    """pcg64: one unit per MLP in the range, in index order."""
    if spec.sampler != "pcg64":
        raise ValueError(f"plan_units handles the pcg64 sampler; got {spec.sampler!r}.")
    start, end = spec.mlp_range
    return [Unit(i) for i in range(start, end)]


def run_unit_pcg64(spec: WorkSpec, unit: Unit, on_samples: Callable[[int], None] | None = None) -> LayerSums:
    """Compute one pcg64 unit: the MLP's weights from its seed, then its whole sample stream."""
    from whestbench.compute.mlp import sample_weights
    from whestbench.compute.pcg64 import sample_layer_sums

    weight_ss, sample_ss, _ = spawn_streams(spec.seeds[unit.mlp_index])
    weights = sample_weights(weight_ss, spec.width, spec.depth)
    return sample_layer_sums(weights, sample_ss, spec.n_samples, on_chunk=on_samples)
