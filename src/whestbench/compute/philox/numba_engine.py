"""The ``philox`` sampler's numba engine on the CPU: the numba kernels around torch's ``bmm``, one chunk at a time.

``compute/philox/torch_engine.py`` drives it for ``engine="numba"`` (the CPU default); ``resolve_engine``
is that switch. The kernels themselves (no torch) are in ``compute/philox/numba_kernels.py``.
"""

from __future__ import annotations

import numpy as np
import torch

from whestbench.compute.philox import spec as ref
from whestbench.compute.philox import numba_kernels as philox_numba


def resolve_engine(engine: str, device: torch.device) -> str:
    """``"numba"``, ``"torch"`` or ``"cuda"``: the engine ``engine`` names on ``device`` (``"auto"``: numba
    on the CPU, the plain CUDA path (``compute/philox/cuda_engine.py``) on CUDA where triton is installed,
    torch ops elsewhere)."""
    device = torch.device(device)
    if engine == "auto":
        if device.type == "cuda":
            import importlib.util

            return "cuda" if importlib.util.find_spec("triton") is not None else "torch"
        return "numba" if device.type == "cpu" else "torch"
    if engine not in ("numba", "torch", "cuda"):
        raise ValueError(f"engine must be 'auto', 'numba', 'torch' or 'cuda'; got {engine!r}.")
    if engine == "numba" and device.type != "cpu":
        raise ValueError(f"engine 'numba' runs on the CPU only; got device {device}. Use engine='torch'.")
    return engine


def chunk_sums(layers, keys, c0, valid, size, width, bufs, z2sq: bool) -> np.ndarray:
    """(B, 2·depth+1, w) tree sums of one chunk (inside one batch): numba normals and ReLU+tree
    around torch's bmm.

    ``bufs`` maps a row count to reusable (x, h, scratch) float32 buffers of shape (B, rows, w).
    """
    n_mlps, depth = len(keys), len(layers)
    if size not in bufs:
        shape = (n_mlps, size, width)
        bufs[size] = (np.zeros(shape, dtype=np.float32), np.empty(shape, dtype=np.float32),
                      np.empty((size, width), dtype=np.float32))
    x, h, scratch = bufs[size]
    for b in range(n_mlps):
        philox_numba.normals_into((int(keys[b, 0]), int(keys[b, 1])), c0, x[b, :valid])
        x[b, valid:] = 0.0  # padding rows: zero inputs give zero activations in every layer
    xt, ht = torch.from_numpy(x), torch.from_numpy(h)
    levels = ref.level_of(size) + 1
    stack = np.empty((levels, width))
    stack_sq = np.empty((levels, width))
    used = np.empty(levels, dtype=np.bool_)
    packed = np.zeros((n_mlps, 2 * depth + 1, width))
    unused = np.empty(width)
    for layer, w_l in enumerate(layers):
        torch.bmm(xt, w_l, out=ht)  # (B, size, w) float32
        for b in range(n_mlps):
            if layer == 1 and z2sq:
                philox_numba.square_tree(h[b], valid, packed[b, 2 * depth], scratch, unused, stack, stack_sq, used)
            philox_numba.relu_tree(h[b], valid, True, packed[b, layer], packed[b, depth + layer], stack, stack_sq, used)
        x, h, xt, ht = h, x, ht, xt
    return packed
