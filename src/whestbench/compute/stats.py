"""What sampling produces (``LayerSums``) and how fp64 sums become the dataset's numeric columns.

The rounding steps of ``finalize`` are the reference's, so the columns compare bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class LayerSums:
    """What sampling one MLP (or one block range of it) produces: a few KB, enough to resume or merge.

    ``sums``: (depth, width) fp64 column sums of post-ReLU activations per layer.
    ``sumsq``: (width,) fp64 column sums of the last layer's squares. ``count``: samples covered.
    A batched unit holds several MLPs: every array then has a leading MLP axis.
    """

    sums: np.ndarray
    sumsq: np.ndarray
    count: int

    FIELDS = ("sums", "sumsq")

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays by name, in ``FIELDS`` order (what a work file stores)."""
        return {name: getattr(self, name) for name in self.FIELDS}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], count: int) -> "LayerSums":
        return cls(count=int(count), **{name: arrays[name] for name in cls.FIELDS})

    def mlp(self, j: int) -> "LayerSums":
        """MLP ``j`` of a batched result (arrays with a leading MLP axis)."""
        return LayerSums.from_arrays({k: v[j] for k, v in self.arrays().items()}, self.count)

    @staticmethod
    def stack(parts: list["LayerSums"]) -> "LayerSums":
        """One batched result from per-MLP results covering the same samples."""
        return LayerSums.from_arrays(
            {name: np.stack([getattr(p, name) for p in parts]) for name in LayerSums.FIELDS}, parts[0].count
        )


def finalize(s: LayerSums) -> tuple[np.ndarray, np.ndarray, float]:
    """``(all_layer_means (depth,width) f32, final_means (width,) f32, avg_variance float)``.

    The variance subtracts the square of the float32-rounded final mean, converted back to
    float64, exactly as whestbench 0.16 does, so the column is comparable bit for bit.
    """
    means = (s.sums / s.count).astype(np.float32)  # (depth, width)
    final = means[-1].copy()
    avg_var = float(np.mean(s.sumsq / s.count - final.astype(np.float64) ** 2))
    return means, final, avg_var
