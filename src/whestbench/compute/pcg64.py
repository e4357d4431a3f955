"""The ``pcg64`` sampler: whestbench 0.16's CPU ground truth, bit for bit, in fewer passes.

Per MLP: ``rng = default_rng(sample_ss)`` (numpy PCG64); the samples are drawn in chunks of
``chunk_rows(width)`` rows of float32 standard normals (ziggurat). Each chunk runs through every
layer as a float32 matmul then ReLU; per layer the chunk's fp64 column sums (starting from zero) are
added to the running sums, and the last layer's fp64 squares likewise. The chunk boundaries,
matmul shapes and summation order are the reference's, so with the same BLAS kernel the sums are
identical. Thread count never enters: one MLP is one sequential stream on one thread.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from whestbench.compute.stats import LayerSums

SAMPLER_NAME = "pcg64"
SAMPLER_VERSION = "1"


def chunk_rows(width: int) -> int:
    """Rows per chunk: ``max(1024, min(16384, 2**20 // width))`` (the reference's CPU rule)."""
    return max(1024, min(16384, (1 << 20) // width))


def sample_layer_sums(
    weights: np.ndarray,
    sample_ss: np.random.SeedSequence,
    n_samples: int,
    *,
    on_chunk: Callable[[int], None] | None = None,
    fused: bool = True,
) -> LayerSums:
    """fp64 sums of every layer's post-ReLU activations over ``n_samples`` Gaussian inputs.

    ``weights``: (depth, width, width) float32. ``on_chunk(rows)`` is called after each chunk.
    ``fused=False`` runs the plain numpy formulation (the executable specification the fused
    kernels are tested against).
    """
    depth, width, _ = weights.shape
    if n_samples <= 0:
        raise ValueError(f"n_samples must be positive; got {n_samples}.")
    rng = np.random.default_rng(sample_ss)
    chunk = chunk_rows(width)
    sums = np.zeros((depth, width), dtype=np.float64)
    sumsq = np.zeros(width, dtype=np.float64)
    # At width 1 the (n, 1) array is one contiguous column, which numpy sums pairwise rather than
    # row by row; the plain formulation is the reference's arithmetic there (and is cheap anyway).
    fused = fused and width > 1
    if fused:
        from whestbench.compute.fused import relu_colsum, relu_colsum_sq

        buf = [np.empty((chunk, width), dtype=np.float32) for _ in range(2)]
        part = np.empty(width, dtype=np.float64)
        part_sq = np.empty(width, dtype=np.float64)
    for start in range(0, n_samples, chunk):
        n = min(chunk, n_samples - start)
        x = rng.standard_normal((n, width), dtype=np.float32)  # (n, width)
        if fused:
            for layer in range(depth):
                h = buf[layer % 2][:n]
                np.matmul(x, weights[layer], out=h)  # (n, width) float32 sgemm
                if layer == depth - 1:
                    relu_colsum_sq(h, part, part_sq)
                    sumsq += part_sq
                else:
                    relu_colsum(h, part)
                sums[layer] += part
                x = h
        else:
            for layer in range(depth):
                x = np.maximum(np.matmul(x, weights[layer]), 0.0)
                sums[layer] = sums[layer] + np.sum(x.astype(np.float64), axis=0)
            sumsq = sumsq + np.sum(x.astype(np.float64) ** 2, axis=0)
        if on_chunk is not None:
            on_chunk(n)
    return LayerSums(sums=sums, sumsq=sumsq, count=n_samples)
