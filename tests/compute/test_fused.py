"""The fused ReLU + column-sum kernel: loaded up front for exactly the arguments pcg64 passes."""

from __future__ import annotations

import numpy as np

from whestbench.compute import fused
from whestbench.compute.pcg64 import sample_layer_sums


def test_load_kernels_compiles_the_specialisations_a_bake_then_uses():
    fused.load_kernels()
    loaded = list(fused.relu_colsum_sq.signatures)  # with and without the pre-ReLU squares
    weights = np.random.default_rng(0).standard_normal((3, 8, 8)).astype(np.float32)
    sample_layer_sums(weights, np.random.SeedSequence(1), 2000, fused=True)
    assert list(fused.relu_colsum_sq.signatures) == loaded
    assert len(loaded) == 2

