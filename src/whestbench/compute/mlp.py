"""The MLP: He-initialised float32 weights drawn from the MLP's weight stream, no biases."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from whestbench.compute.seeds import spawn_streams


def pilot_layers(weights: np.ndarray, pilot_ss: np.random.SeedSequence, n_pilot: int):
    """A pilot's float32 forward pass, one layer at a time: ``(z, h)`` (pre-activations and
    activations, each (n_pilot, width)) over ``n_pilot`` standard-normal inputs of ``pilot_ss``. Every
    pilot runs this pass: the control-variate fit and the planned sample counts over the bake's pilot
    stream, verify's audit pilot over its own."""
    h = np.random.default_rng(pilot_ss).standard_normal((n_pilot, weights.shape[2]), dtype=np.float32)
    for w in weights:
        z = h @ w
        h = np.maximum(z, np.float32(0.0))
        yield z, h


def sample_weights(weight_ss: np.random.SeedSequence, width: int, depth: int) -> np.ndarray:
    """``(depth, width, width)`` float32, layer by layer from one PCG64 stream.

    Each layer is a float64 standard-normal ``(width, width)`` draw (row-major) times
    ``sqrt(2/width)`` in float64, then cast to float32 — the reference's exact procedure, so the
    same seed gives byte-identical weights everywhere.
    """
    if width <= 0:
        raise ValueError(f"width must be positive; got {width}.")
    if depth <= 0:
        raise ValueError(f"depth must be positive; got {depth}.")
    rng = np.random.default_rng(weight_ss)
    scale = float(np.sqrt(2.0 / width))
    out = np.empty((depth, width, width), dtype=np.float32)
    for layer in range(depth):
        out[layer] = (rng.standard_normal((width, width)) * scale).astype(np.float32)
    return out


def weights_for_seed(mlp_seed: int, width: int, depth: int) -> np.ndarray:
    return sample_weights(spawn_streams(mlp_seed)[0], width, depth)


@dataclass
class MLP:
    """A ReLU MLP: ``h_l = max(0, h_{l-1} @ weights[l])`` with row vectors, ReLU after every layer.

    ``weights[l]`` is indexed (input, output). ``seed`` is the estimator seed (protocol 3.0: a
    uint32 derived from the input seed), ``name`` the dataset-unique human name.
    """

    weights: list[np.ndarray]
    width: int
    depth: int
    name: str = ""
    seed: int | None = None
    means: np.ndarray | None = None
    """(depth, width) float32 ground truth (``all_layer_means``), when the MLP comes from a dataset."""
    stderr: np.ndarray | None = None
    """(depth, width) float32 standard errors of ``means`` (``all_layer_stderr``), when the dataset has them."""
    n_samples_used: int | None = None
    """The Monte-Carlo samples ``means`` averaged: the row's ``n_samples_used`` (a target bake's own N), else
    the dataset's ``n_samples`` (every MLP used it), when the MLP comes from a dataset with metadata."""

    def validate(self) -> None:
        if self.width <= 0 or self.depth <= 0:
            raise ValueError(f"MLP width and depth must be positive; got {self.width}x{self.depth}.")
        if len(self.weights) != self.depth:
            raise ValueError(f"MLP has {len(self.weights)} weight matrices but depth={self.depth}.")
        for i, w in enumerate(self.weights):
            if w.shape != (self.width, self.width):
                raise ValueError(
                    f"MLP weights[{i}] has shape {w.shape}; expected ({self.width}, {self.width})."
                )
            if w.dtype != np.float32:
                raise ValueError(f"MLP weights[{i}] must be float32; got {w.dtype}.")
            if not np.all(np.isfinite(w)):
                raise ValueError(f"MLP weights[{i}] contains non-finite values.")
