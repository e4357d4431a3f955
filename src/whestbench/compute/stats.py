"""What sampling produces (``LayerSums``) and how fp64 sums become the dataset's numeric columns.

The rounding steps of ``finalize`` are the reference's, so the columns compare bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from whestbench.compute.segments import SegmentTrail


@dataclass
class LayerSums:
    """What sampling one MLP (or one block range of it) produces: a few KB, enough to resume or merge.

    ``sums``: (depth, width) fp64 column sums of post-ReLU activations per layer.
    ``sumsq``: (depth, width) fp64 column sums of their squares (the last layer's make
    ``avg_variance``; all of them the plain standard errors). ``count``: samples covered.
    ``cv``, ``cvsq``: (depth, width) control-variate sums ``Σ_b n_b r̄_b`` and ``Σ_b n_b r̄_b²``
    over batches (``compute/estimators.py``); None for the plain estimator.
    A batched unit holds several MLPs: every array then has a leading MLP axis.
    """

    sums: np.ndarray
    sumsq: np.ndarray
    count: int
    cv: np.ndarray | None = None
    cvsq: np.ndarray | None = None
    trail: SegmentTrail | None = None
    """The audit trail's segments this result holds (``compute.segments``); outside ``FIELDS``, so the
    sums and the columns never depend on it."""

    FIELDS = ("sums", "sumsq", "cv", "cvsq")

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays present, by name, in ``FIELDS`` order (what a work file stores)."""
        return {name: getattr(self, name) for name in self.FIELDS if getattr(self, name) is not None}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], count: int) -> "LayerSums":
        return cls(count=int(count), **{name: arrays.get(name) for name in cls.FIELDS})

    def mlp(self, j: int) -> "LayerSums":
        """MLP ``j`` of a batched result (arrays with a leading MLP axis)."""
        out = LayerSums.from_arrays({k: v[j] for k, v in self.arrays().items()}, self.count)
        out.trail = None if self.trail is None else self.trail.mlp(j)
        return out

    @staticmethod
    def stack(parts: list["LayerSums"]) -> "LayerSums":
        """One batched result from per-MLP results covering the same samples."""
        return LayerSums.from_arrays(
            {name: np.stack([p.arrays()[name] for p in parts]) for name in parts[0].arrays()}, parts[0].count
        )


def avg_variance(sumsq_last: np.ndarray, count: int, final_means: np.ndarray) -> float:
    """whestbench 0.16's ``avg_variance``: it subtracts the square of the float32-rounded final
    mean, converted back to float64, so the column is comparable bit for bit."""
    return float(np.mean(sumsq_last / count - np.asarray(final_means, dtype=np.float32).astype(np.float64) ** 2))


def finalize(s: LayerSums) -> tuple[np.ndarray, np.ndarray, float]:
    """``(all_layer_means (depth,width) f32, final_means (width,) f32, avg_variance float)`` of the
    plain estimator, exactly as whestbench 0.16 rounds them."""
    means = (s.sums / s.count).astype(np.float32)  # (depth, width)
    final = means[-1].copy()
    return means, final, avg_variance(s.sumsq[-1], s.count, final)
