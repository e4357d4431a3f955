"""Units of work and the spec they come from: what a bake computes, named by identity, never by rank or order.

pcg64: one unit per MLP (its samples come from one sequential stream). philox: one unit per group of
MLPs x aligned run of canonical blocks, so several workers can share one MLP. A unit's result is a
``LayerSums`` (a few KB). ``WorkSpec.identity()`` is everything that changes the numbers: a resume,
a distributed rank and a merge are checked against it.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from whestbench.compute.estimation import Estimation
from whestbench.compute.estimators import is_check_point, planned_samples, trail_step
from whestbench.compute.seeds import PILOT, seed_list_digest, stream
from whestbench.compute.segments import SegmentTrail, finish, segment_bounds, trail_names
from whestbench.compute.stats import LayerSums
from whestbench.compute.mlp import weights_for_seed
from whestbench.compute.pcg64 import chunk_rows
from whestbench.compute.philox.spec import combine_in_order, pack, unit_block_ranges
from whestbench.work.controls import controls_for  # the bake's own controls (fitted once per process)
from whestbench.work.threads import one_blas_thread


_KEY_RE = re.compile(r"^mlp(\d{8})(?:x(\d+)-b(\d{10})-(\d{10}))?$")


@dataclass(frozen=True)
class Unit:
    """MLPs ``mlp_index .. mlp_index+mlp_count-1`` (absolute), samples of canonical blocks
    ``[block_start, block_end)``; for pcg64 the block range is always the whole MLP (``0, None``)."""

    mlp_index: int
    block_start: int = 0
    block_end: int | None = None
    mlp_count: int = 1

    @property
    def key(self) -> str:
        if self.block_end is None:
            return f"mlp{self.mlp_index:08d}"
        return f"mlp{self.mlp_index:08d}x{self.mlp_count}-b{self.block_start:010d}-{self.block_end:010d}"

    @classmethod
    def from_key(cls, key: str) -> "Unit | None":
        """The unit whose ``key`` this is (the file name of its record without the extension); None for
        any other name."""
        m = _KEY_RE.match(key)
        if m is None:
            return None
        if m.group(2) is None:
            return cls(int(m.group(1)))
        return cls(int(m.group(1)), int(m.group(3)), int(m.group(4)), int(m.group(2)))

    @property
    def mlps(self) -> range:
        return range(self.mlp_index, self.mlp_index + self.mlp_count)


@dataclass(frozen=True)
class WorkSpec:
    """What a bake computes. Every field but ``mlps_per_unit`` and ``unit_blocks`` is part of the
    identity (changing it changes the numbers); those two only change how the work is cut."""

    seeds: tuple[int, ...]
    """The whole dataset's per-MLP input seeds (also when baking a slice). Empty on a distributed
    rank that has not yet received them from rank 0."""
    n_samples: int
    """Gaussian inputs per MLP."""
    width: int
    depth: int
    mlp_range: tuple[int, int]
    """Half-open range of MLP indices being baked."""
    sampler: str = "pcg64"
    """"pcg64" (whestbench 0.16's CPU stream, one unit per MLP) or "philox" (counter-based, blocks)."""
    arithmetic: str = "numpy-sgemm-fp32"
    """Names the float arithmetic (matmul library, precision, accumulation): equal names give equal bytes."""
    block_size: int = 0
    """philox: samples per canonical block (a power of two). pcg64: 0 (chunks follow the reference's rule)."""
    estimation: Estimation = Estimation()
    """The estimator, and the target standard error (``planned_samples``: a check point,
    ``estimators.is_check_point``, or ``n_samples``, the cap) decided before sampling."""
    audit_segments: int = 0
    """The audit trail's segments per MLP (``compute.segments``); 0: no trail."""
    unit_blocks: int = field(default=0, compare=False)
    """philox: canonical blocks per unit (a power of two). Scheduling only."""
    mlps_per_unit: int = field(default=1, compare=False)
    """philox: MLPs batched in one unit (one batched matmul on a GPU). Scheduling only."""
    planned: tuple[int, ...] | None = field(default=None, compare=False)
    """With a target: each MLP's planned samples over ``mlp_range``, computed up front
    (``bake.plan.plan_targets``: progress, the Plan line and stop messages count what will be
    sampled, not the cap); None: each is planned when its unit runs. Not identity: the counts are a
    function of the seeds and the recipe."""

    def __post_init__(self) -> None:
        if self.sampler not in ("pcg64", "philox"):
            raise ValueError(f"unknown sampler {self.sampler!r}; use 'pcg64' or 'philox'.")
        if self.sampler == "philox":
            for name in ("block_size", "unit_blocks"):
                v = getattr(self, name)
                if v <= 0 or v & (v - 1):
                    raise ValueError(f"WorkSpec.{name} must be a positive power of two for philox; got {v}.")

    @functools.cached_property
    def _seed_digest(self) -> str:  # once per spec: a distributed rank 0 checks every result against it
        return seed_list_digest(self.seeds)

    def identity(self) -> dict[str, Any]:
        return {
            "seed_list_digest": self._seed_digest,
            "n_mlps": len(self.seeds),
            "n_samples": self.n_samples,
            "width": self.width,
            "depth": self.depth,
            "mlp_range": list(self.mlp_range),
            "sampler": self.sampler,
            "arithmetic": self.arithmetic,
            "block_size": self.block_size,
            **self.estimation.identity(),
            **({"audit_segments": self.audit_segments} if self.audit_segments > 0 else {}),
        }

    def with_seeds(self, seeds) -> "WorkSpec":
        return dataclasses.replace(self, seeds=tuple(map(int, seeds)), planned=None)  # counts of other seeds

    @property
    def step_samples(self) -> int:
        """Samples per step of a unit: a pcg64 chunk, a philox block (the target's check points
        fall after whole steps)."""
        if self.sampler == "pcg64":
            return chunk_rows(self.width)
        return self.block_size

    @property
    def cv_batch(self) -> int:
        """Samples per batch of the control-variate estimator's batch means."""
        return trail_step(self.sampler, self.step_samples)

    def planned_samples(self, index: int) -> int:
        """Samples MLP ``index`` uses: ``n_samples``, or with a target the count its own pilot plans
        (``estimators.planned_samples``: fixed before sampling, so the estimate is unbiased)."""
        if not self.estimation.has_target:
            return self.n_samples
        if self.planned is not None:
            return self.planned[index - self.mlp_range[0]]
        return _planned(self.seeds[index], self.width, self.depth, self.estimation, self.step_samples, self.n_samples,
                        self.estimation.min_samples(self.cv_batch), self.cv_batch)

    def segments(self, index: int) -> list[tuple[int, int]]:
        """MLP ``index``'s audit segments ``[(start, end)]`` in samples (``[]``: no trail)."""
        if self.audit_segments <= 0:
            return []
        return segment_bounds(self.planned_samples(index), self.cv_batch, self.audit_segments, self.sampler == "philox")

    def unit_segments(self, unit: Unit) -> range:
        """The segments whose values ``unit``'s result holds: all of a pcg64 MLP's; for philox the
        segments inside the unit's block run (none when the unit lies inside one segment: the segment's
        sums are then combined from its units' totals, ``mlp_trail``)."""
        bounds = self.segments(unit.mlp_index)
        if unit.block_end is None or not bounds:
            return range(len(bounds))
        length = bounds[0][1] - bounds[0][0]
        if length >= self.unit_blocks * self.block_size:
            return range(0)
        start = unit.block_start * self.block_size
        end = min(unit.block_end * self.block_size, bounds[-1][1])
        return range(start // length, -(-end // length))

    def count_allowed(self, unit: Unit, count: int) -> bool:
        """Whether a unit's result may cover ``count`` samples per MLP: all of them, or (with a target)
        a check point where it stopped early."""
        planned = self.unit_samples(unit)
        if count == planned:
            return True
        if not self.estimation.has_target or not 0 < count < planned or count % self.step_samples:
            return False
        return is_check_point(count // self.step_samples)

    @property
    def flops_per_sample(self) -> int:
        """``2·width²·depth``: the effective-throughput convention (SPEC §6)."""
        return 2 * self.width * self.width * self.depth

    @property
    def n_mlps(self) -> int:
        return self.mlp_range[1] - self.mlp_range[0]

    def units(self) -> list[Unit]:
        """The units in a canonical order (group-major for philox). Any cut of an MLP into aligned block
        runs gives the same per-MLP sums (the pairwise tree), so the cut is a scheduling choice only."""
        start, end = self.mlp_range
        if self.sampler == "pcg64":
            return [Unit(i) for i in range(start, end)]
        return [u for g in range(start, end, max(1, self.mlps_per_unit)) for u in units_of_mlp(self, g)]

    def unit_samples(self, unit: Unit) -> int:
        """Samples one MLP of ``unit`` covers."""
        if unit.block_end is None:
            return self.n_samples
        return min(unit.block_end * self.block_size, self.n_samples) - unit.block_start * self.block_size

    def expected_samples(self, unit: Unit) -> int:
        """Samples one MLP of ``unit`` is expected to cover: ``unit_samples``, or with a target whose
        counts are planned up front, at most its MLP's planned count (a target unit holds one MLP,
        from block 0)."""
        n = self.unit_samples(unit)
        if self.planned is None or not self.estimation.has_target:
            return n
        return min(n, max(0, self.planned_samples(unit.mlp_index) - unit.block_start * self.block_size))

    def check_result(self, unit: Unit, sums: LayerSums) -> str | None:
        """Why ``sums`` cannot be ``unit``'s result (shape, count, a non-finite or negative sum), or None.

        Guards against a work file that passed its checksum but holds what no sampling produces.
        """
        lead = () if unit.block_end is None else (unit.mlp_count,)
        shape = lead + (self.depth, self.width)
        want = ("sums", "sumsq", "cv", "cvsq") if self.estimation.is_cv else ("sums", "sumsq")
        arrays = sums.arrays()
        if tuple(arrays) != want:
            return f"holds {', '.join(arrays)}, expected {', '.join(want)}"
        for name, arr in arrays.items():
            if arr.shape != shape:
                return f"{name} has shape {arr.shape}, expected {shape}"
            if arr.dtype != np.float64:
                return f"{name} is {arr.dtype}, expected float64"
            if not np.all(np.isfinite(arr)):
                return f"{name} holds non-finite values"
            if name != "cv" and np.any(arr < 0):  # residual sums may be negative; nothing else can
                return f"{name} holds negative values (sums of post-ReLU values and squares cannot be)"
        if not self.count_allowed(unit, sums.count):
            return f"covers {sums.count} samples, expected {self.unit_samples(unit)}"
        held = self.unit_segments(unit)
        if not held:
            return "holds an audit trail this bake does not keep" if sums.trail is not None else None
        if sums.trail is None:
            return "holds no audit trail"
        if sums.trail.first != held.start:
            return f"trail starts at segment {sums.trail.first}, expected {held.start}"
        why = sums.trail.problem(lead, len(held), self.depth, self.width, trail_names(self.estimation.is_cv))
        if why is None and self.sampler == "pcg64" and (not isinstance(sums.trail.states, list)
                                                       or len(sums.trail.states) != len(held)):
            why = "trail lacks the generator state of each segment"
        return why


def mlp_totals(spec: WorkSpec, i: int, results: dict[str, LayerSums]) -> LayerSums:
    """MLP ``i``'s total over its units' results (``results`` maps unit key to that unit's sums):
    pcg64 units are whole MLPs; philox units are combined in block order with the pairwise tree."""
    units = units_of_mlp(spec, i)
    if spec.sampler == "pcg64":
        return results[units[0].key]
    parts = [results[u.key].mlp(i - u.mlp_index) for u in sorted(units, key=lambda u: u.block_start)]
    return combine_in_order(parts)


def mlp_trail(spec: WorkSpec, i: int, results: dict[str, LayerSums]) -> SegmentTrail | None:
    """MLP ``i``'s audit trail from its units' results (None: the bake keeps none). philox units that
    lie inside a segment give it their totals, combined in block order (an exact subtree of the sum)."""
    bounds = spec.segments(i)
    if not bounds:
        return None
    units = sorted(units_of_mlp(spec, i), key=lambda u: u.block_start)
    parts = [results[u.key].mlp(i - u.mlp_index) if u.block_end is not None else results[u.key] for u in units]
    if spec.unit_segments(units[0]):
        return SegmentTrail.concat([p.trail for p in parts if p.trail is not None])
    length = bounds[0][1] - bounds[0][0]
    values: dict[str, list] = {}
    for s0, s1 in bounds:
        inside = [p for u, p in zip(units, parts) if s0 <= u.block_start * spec.block_size < s1]
        for k, v in finish(pack(combine_in_order(inside)), s1 - s0, spec.depth).items():
            values.setdefault(k, []).append(v)
    assert all(len(v) == len(bounds) for v in values.values()) and length > 0
    return SegmentTrail(0, {k: np.stack(v) for k, v in values.items()})


def units_of_mlp(spec: WorkSpec, i: int) -> list[Unit]:
    """The units that hold MLP ``i``'s samples, in block order."""
    start, _ = spec.mlp_range
    if spec.sampler == "pcg64":
        return [Unit(i)]
    batch = max(1, spec.mlps_per_unit)
    g = start + (i - start) // batch * batch
    count = min(batch, spec.mlp_range[1] - g)
    return [Unit(g, b0, b1, count) for b0, b1 in unit_block_ranges(spec.n_samples, spec.unit_blocks, spec.block_size)]


@functools.lru_cache(maxsize=256)
def _planned(seed: int, width: int, depth: int, estimation: Estimation, step: int, cap: int, min_samples: int,
             cv_batch: int = 0) -> int:
    """``WorkSpec.planned_samples`` for one MLP, once per process (its pilot costs one forward pass)."""
    weights = weights_for_seed(seed, width, depth)
    with one_blas_thread():  # the count must not depend on the thread count
        controls = controls_for(seed, weights) if estimation.is_cv and depth > 1 else None
        return planned_samples(weights, stream(seed, PILOT), controls, estimation.target_stderr, estimation.stderr_layer,
                               step, cap, min_samples, rule=estimation.target_rule, cv_batch=cv_batch)
