"""Reference sums only the tests read (``tests/`` is on ``sys.path`` beside conftest.py).

- ``block_sums`` / ``sample_layer_sums_philox``: the numpy reference's sums of one canonical block and
  of a whole block range (``compute/philox/spec.py``'s ``block_batches`` summed by its pairwise tree);
- ``normals_torch`` / ``block_sums_torch``: the same on torch (``compute/philox/torch_engine.py``),
  imported lazily so that a numpy-only test does not import torch;
- ``push_batches``: consecutive batches pushed into a ``PairwiseStack``, each at its level.

The bake's own paths sum through ``work/steps.py``; these are the oracles its tests compare with.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from whestbench.compute.philox import spec as ref


def push_batches(tree: ref.PairwiseStack, packed: np.ndarray, counts: np.ndarray) -> None:
    """Push consecutive batches' values (n_batches, rows, width) into ``tree``, each at its level."""
    for value, c in zip(packed, counts):
        tree.push(value, ref.level_of(int(c)))


def block_sums(
    weights: np.ndarray,
    key: tuple[int, int],
    block_index: int,
    n_samples: int,
    *,
    block_size: int = ref.BLOCK_SIZE,
    controls=None,
) -> ref.LayerSums:
    """One canonical block's fp64 sums: every layer's post-ReLU column sums and sums of squares,
    each the pairwise tree over the block's samples (with ``controls``, the control-variate sums
    too, the tree over its batches).

    ``weights``: (depth, width, width) float32. A pure function of its arguments.
    """
    depth = weights.shape[0]
    raw, counts = ref.block_batches(weights, key, block_index, n_samples, block_size=block_size)
    tree = ref.PairwiseStack()
    push_batches(tree, ref.batch_packed(raw, counts, depth, controls), counts)
    return ref.unpack(tree.value(), int(counts.sum()), depth)


def sample_layer_sums_philox(
    weights: np.ndarray,
    sample_ss: np.random.SeedSequence,
    n_samples: int,
    *,
    block_range: tuple[int, int] | None = None,
    on_block: Callable[[int], None] | None = None,
    block_size: int = ref.BLOCK_SIZE,
    controls=None,
) -> ref.LayerSums:
    """fp64 sums over all of an MLP's samples (or over the aligned ``block_range``), numpy reference.

    ``on_block(samples)`` is called after each block. The result of a range is the subtree over its
    samples, so ``combine_in_order`` of the ranges of ``unit_block_ranges`` equals the whole.
    """
    nb = ref.block_count(n_samples, block_size)
    b0, b1 = ref.check_block_range(block_range, n_samples, block_size) if block_range is not None else (0, nb)
    key = ref.philox_key(sample_ss)
    parts = []
    for b in range(b0, b1):
        parts.append(block_sums(weights, key, b, n_samples, block_size=block_size, controls=controls))
        if on_block is not None:
            on_block(parts[-1].count)
    return ref.combine_in_order(parts)


def normals_torch(key: tuple[int, int], n0: int, n1: int, width: int, device, *, engine: str = "auto"):
    """``(n1-n0, width)`` float32 normals for samples ``[n0, n1)`` on ``device``.

    Integer stage bit-identical to ``philox.normals``; floats within a few ulp of it.
    """
    import torch

    from whestbench.compute.philox import numba_kernels
    from whestbench.compute.philox.numba_engine import resolve_engine
    from whestbench.compute.philox.torch_engine import box_muller_torch, words_torch

    device = torch.device(device)
    if not 0 <= n0 <= n1:
        raise ValueError(f"need 0 <= n0 <= n1; got n0={n0}, n1={n1}.")
    if resolve_engine(engine, device) == "numba":
        out = np.empty((n1 - n0, width), dtype=np.float32)
        numba_kernels.normals_into(key, n0, out)
        return torch.from_numpy(out)
    keys = np.array([key], dtype=np.uint32)
    return box_muller_torch(words_torch(keys, n0, n1, width, device))[0, :, :width]


def block_sums_torch(
    weights_batch,
    keys,
    block_index: int,
    n_samples: int,
    device,
    *,
    chunk_size: int | None = None,
    block_size: int = ref.BLOCK_SIZE,
    engine: str = "auto",
) -> list:
    """One canonical block's sums for each of ``B`` MLPs: the reference's ``block_sums``, batched
    (every layer's sums and sums of squares, the tree over the block's batches)."""
    from whestbench.compute.philox.torch_engine import block_batches_torch

    raw, counts = block_batches_torch(weights_batch, keys, block_index, n_samples, device, chunk_size=chunk_size,
                                      block_size=block_size, engine=engine, z2sq=False)
    depth = (raw.shape[2] - 1) // 2
    out = []
    for b in range(raw.shape[0]):
        tree = ref.PairwiseStack()
        push_batches(tree, ref.batch_packed(raw[b], counts, depth), counts)
        out.append(ref.unpack(tree.value(), int(counts.sum()), depth))
    return out
