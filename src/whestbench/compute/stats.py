"""Turn fp64 sums into the dataset's numeric columns (the reference's exact rounding steps)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class LayerSums:
    """What sampling one MLP (or one block range of it) produces: a few KB, enough to resume or merge.

    ``sums``: (depth, width) fp64 column sums of post-ReLU activations per layer.
    ``sumsq``: (width,) fp64 column sums of the last layer's squares. ``count``: samples covered.
    """

    sums: np.ndarray
    sumsq: np.ndarray
    count: int


def finalize(s: LayerSums) -> tuple[np.ndarray, np.ndarray, float]:
    """``(all_layer_means (depth,width) f32, final_means (width,) f32, avg_variance float)``.

    The variance subtracts the square of the float32-rounded final mean, converted back to
    float64, exactly as whestbench 0.16 does, so the column is comparable bit for bit.
    """
    means = (s.sums / s.count).astype(np.float32)  # (depth, width)
    final = means[-1].copy()
    avg_var = float(np.mean(s.sumsq / s.count - final.astype(np.float64) ** 2))
    return means, final, avg_var
