"""The ``philox`` sampler on torch: the numpy reference's samples and sums, batched over MLPs.

Same integer stage bit for bit, same float transform up to a few ulp, same pairwise summation tree,
so the only differences from ``compute/philox/spec.py`` are the platform's ``log``/``cos``/``sin`` and the
matmul kernel. It imports torch: load it with ``optional.engine_module("torch")``.

``engine`` picks who draws and sums (``numba_engine.resolve_engine``): ``"torch"`` (plain torch ops,
Philox words in int64 tensors, on any device; MPS's), ``"numba"`` (CPU only: ``numba_engine.py``
around torch's ``bmm``) or ``"cuda"`` (``cuda_engine.py``). Why neither ``chunk_size`` nor the batch
size changes a byte: docs/sampler-philox.md §2 and §5.

Run one caller thread per core with ``torch.set_num_threads(1)`` on CPU: the numba passes are
single-threaded, and one caller with several torch threads leaves cores idle during them.
"""

from __future__ import annotations

import numpy as np
import torch

from whestbench.compute.philox import spec as ref
from whestbench.compute.philox.numba_engine import chunk_sums, resolve_engine
from whestbench.optional import engine_module

MIN_CHUNK = 64  # smallest matmul row count (below it BLAS switches to row-count-dependent kernels)
# Default rows per chunk on CPU: a worker's two activation buffers (1 MB each at width 256) stay
# in L3 beside the other worker's; 2048 measured ~4% slower with two workers on 2 cores.
_CPU_CHUNK = 1024
_GPU_CHUNK_ELEMS = 1 << 26  # default B*rows*width on GPUs (a few hundred MB of temporaries)


# --- integer and float stages on torch tensors ---------------------------------------------------


def _round_keys_tensor(keys: np.ndarray, device: torch.device) -> torch.Tensor:
    """(10, 2, B, 1, 1) int64: round r's key words for every MLP, for broadcasting over (B, rows, G)."""
    table = np.array([ref.round_keys((int(k0), int(k1))) for k0, k1 in keys], dtype=np.int64)  # (B, 10, 2)
    return torch.as_tensor(table.transpose(1, 2, 0).copy(), device=device)[..., None, None]


def philox4x32_torch(counter, round_keys) -> tuple[torch.Tensor, ...]:
    """Philox4x32-10 on int64 tensors holding uint32 words; ``round_keys[r] = (k0, k1)`` for round r
    (ints, or int64 tensors that broadcast against the counter words)."""
    c0, c1, c2, c3 = counter
    for k0, k1 in round_keys:
        p0 = c0 * ref.PHILOX_M0  # wraps past 2**63; the low 64 bits are still the exact product
        p1 = c2 * ref.PHILOX_M1
        c0, c1, c2, c3 = (
            ((p1 >> 32) & ref.MASK32) ^ c1 ^ k0,
            p1 & ref.MASK32,
            ((p0 >> 32) & ref.MASK32) ^ c3 ^ k1,
            p0 & ref.MASK32,
        )
    return c0, c1, c2, c3


def words_torch(keys: np.ndarray, n0: int, n1: int, width: int, device) -> torch.Tensor:
    """The integer stage for ``B`` MLPs: ``(B, n1-n0, 4*G)`` int64 holding uint32 words.

    ``keys``: (B, 2) uint32. Bit-identical to ``philox.philox_words`` for each key.
    """
    device = torch.device(device)
    keys = np.asarray(keys, dtype=np.uint32).reshape(-1, 2)
    g = ref.n_groups(width)
    n = torch.arange(n0, n1, dtype=torch.int64, device=device)[None, :, None]  # (1, rows, 1)
    groups = torch.arange(g, dtype=torch.int64, device=device)[None, None, :]  # (1, 1, G)
    zero = torch.zeros((), dtype=torch.int64, device=device)
    rk = _round_keys_tensor(keys, device)  # (10, 2, B, 1, 1)
    words = philox4x32_torch((n & ref.MASK32, n >> 32, groups, zero), rk)
    shape = (len(keys), n1 - n0, g)
    out = torch.stack([c.expand(shape) for c in words], dim=-1)  # (B, rows, G, 4)
    return out.reshape(len(keys), n1 - n0, 4 * g)


def uniforms_torch(words: torch.Tensor) -> torch.Tensor:
    """``philox.uniforms`` on torch: int64 words -> float32 ``RN32(RN32(w) * 2**-32 + 2**-33)``, bit-exact."""
    return words.to(torch.float32).mul_(float(ref.U_SCALE)).add_(float(ref.U_OFFSET))


def box_muller_torch(words: torch.Tensor) -> torch.Tensor:
    """The float stage on torch: ``(..., 2m)`` int64 words -> ``(..., 2m)`` float32 normals.

    Each step is the reference's float32 operation; ``uniforms`` are bit-exact, ``log``/``cos``/
    ``sin`` are torch's (a few ulp from numpy's).
    """
    u = uniforms_torch(words)  # (..., 2m)
    r = u[..., 0::2].log().mul_(-2.0).sqrt_()  # (..., m)
    theta = u[..., 1::2].mul(float(ref.TWO_PI))
    z = torch.empty_like(u)
    torch.mul(r, theta.cos(), out=z[..., 0::2])
    torch.mul(r, theta.sin(), out=z[..., 1::2])
    return z


# --- public functions ----------------------------------------------------------------------------


def kernel_name(device, engine: str = "auto") -> str:
    """Names the arithmetic (the "kernel precision class"): bakes with the same name give the same bytes.

    Includes what changes the numbers: the float transform's implementation, the matmul library
    and the accumulation type. (The device model matters on GPUs too; provenance records it.)
    """
    device = torch.device(device)
    engine = resolve_engine(engine, device)
    if engine == "cuda":
        raise ValueError("the cuda engine's identity records the GPU and cuBLAS: work.torch_env.precision_class names it.")
    # "numba2": the numba tree of every layer but the last was wrong for a ragged tail before v2
    tag = "numba2" if engine == "numba" else engine
    acc = "fp32acc" if device.type == "mps" else "fp64acc"
    # "high"/"medium" let torch use TF32 or bf16 for float32 matmuls: a different kernel class.
    mm = "fp32" if torch.get_float32_matmul_precision() == "highest" else torch.get_float32_matmul_precision()
    return f"philox-torch{torch.__version__.split('+')[0]}-{device.type}-{tag}-{mm}-{acc}"


def step_rows(
    chunk_size: int | None, device: torch.device, n_mlps: int, width: int, block_size: int
) -> int:
    """``chunk_size`` rounded down to a power of two, within ``[MIN_CHUNK, block_size]``. None: bounded
    memory (``_CPU_CHUNK`` rows on the CPU, else ``_GPU_CHUNK_ELEMS`` elements), never a different result."""
    default = _CPU_CHUNK if torch.device(device).type == "cpu" else _GPU_CHUNK_ELEMS // max(1, n_mlps * width)
    c = default if chunk_size is None else int(chunk_size)
    if c <= 0:
        raise ValueError(f"chunk_size must be positive; got {chunk_size}.")
    c = 1 << (c.bit_length() - 1)
    return min(max(c, MIN_CHUNK), block_size)


def _tree_groups(x: torch.Tensor, dtype: torch.dtype, groups: int = 1) -> torch.Tensor:
    """(B, R, w) -> (B, groups, w): the pairwise tree over each run of ``R/groups`` rows (R and
    ``groups`` powers of two) in ``dtype``; ``groups=1`` is the tree over all rows."""
    if x.shape[1] == groups:
        return x.to(dtype)
    a = x[:, 0::2].to(dtype)
    a += x[:, 1::2]  # promoted to ``dtype`` before the add: fp64(x) + fp64(y)
    while a.shape[1] > groups:
        a = a[:, 0::2] + a[:, 1::2]
    return a


def block_batches_torch(
    weights_batch,
    keys,
    block_index: int,
    n_samples: int,
    device,
    *,
    chunk_size: int | None = None,
    block_size: int = ref.BLOCK_SIZE,
    engine: str = "auto",
    z2sq: bool = True,
    span: tuple[int, int] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """One canonical block's batches for each of ``B`` MLPs: the reference's ``block_batches``, batched.
    ``span``: only the batches inside samples ``[s0, s1)`` (batch-aligned; a spot check regenerating one
    audit segment): each batch is computed exactly as in the whole block.

    Returns ``(raw (B, n_batches, 2·depth+1, width) fp64, counts (n_batches,))`` with the rows of
    ``philox.batch_raw``; ``z2sq=False`` leaves the last row (layer 2's squared pre-activations,
    needed by the control-variate estimator only) zero.
    ``weights_batch``: (B, depth, width, width) float32 (numpy or a tensor, moved to ``device``).
    ``keys``: (B, 2) uint32 Philox keys. Accumulation is fp64 on CPU and CUDA, fp32 on MPS (no
    fp64 there). Neither ``chunk_size`` nor ``B`` changes a bit of any MLP's result. ``engine="cuda"`` (the
    default on CUDA) is ``compute/philox/cuda_engine.py``, whose GEMMs have one shape: it ignores ``chunk_size``.
    """
    device = torch.device(device)
    engine = resolve_engine(engine, device)
    if engine == "cuda":
        cuda = engine_module("cuda").CudaEngine(weights_batch, keys, device, block_size=block_size, z2sq=z2sq)
        return cuda.batches_host(block_index, block_index + 1, n_samples)
    w_t = torch.as_tensor(weights_batch, device=device)
    if w_t.dim() != 4 or w_t.shape[2] != w_t.shape[3] or w_t.dtype != torch.float32:
        raise ValueError(
            f"weights_batch must be float32 (B, depth, width, width); got {tuple(w_t.shape)} {w_t.dtype}."
        )
    n_mlps, depth, width, _ = w_t.shape
    keys = np.asarray(keys, dtype=np.uint32).reshape(-1, 2)
    if len(keys) != n_mlps:
        raise ValueError(
            f"keys has {len(keys)} rows but weights_batch has {n_mlps} MLPs; pass one key per MLP."
        )
    start, end = ref.block_bounds(block_index, n_samples, block_size)
    batch = min(ref.BATCH, block_size)
    if span is not None:
        if (max(start, span[0]) - start) % batch:
            raise ValueError(f"span {span} does not start at a batch of block {block_index}")
        start, end = max(start, int(span[0])), min(end, int(span[1]))
    rows = step_rows(chunk_size, device, n_mlps, width, block_size)
    if engine == "numba":
        rows = min(rows, batch)  # the numba tree runs inside one batch
    layers = [w_t[:, layer].contiguous() for layer in range(depth)]  # depth x (B, w, w)
    acc = torch.float32 if device.type == "mps" else torch.float64
    out: list[np.ndarray] = []
    counts: list[int] = []
    pending, pending_count = ref.PairwiseStack(), 0
    bufs: dict = {}
    for c0 in range(start, end, rows):
        valid = min(rows, end - c0)
        # A ragged chunk is padded to a power of two (>= MIN_CHUNK) with zero rows, which add nothing.
        size = min(rows, max(MIN_CHUNK, 1 << ref.level_of(valid)))
        if engine == "numba":
            raw = chunk_sums(layers, keys, c0, valid, size, width, bufs, z2sq)  # (B, 2d+1, w)
            pending.push(raw, ref.level_of(valid))
        else:
            groups = max(1, size // batch)
            raw = _chunk_torch(layers, keys, c0, valid, size, width, device, acc, groups, z2sq)  # (B, g, 2d+1, w)
            if groups > 1 or size == batch:
                raw = raw.cpu().numpy().astype(np.float64)
                for g in range(groups):
                    n_g = min(batch, valid - g * batch)
                    if n_g > 0:  # groups past the data are zero padding
                        out.append(raw[:, g] + 0.0)
                        counts.append(n_g)
                continue
            pending.push(raw[:, 0], ref.level_of(size))
        pending_count += valid
        if pending_count == batch or c0 + valid == end:
            total = pending.value()
            total = total.cpu().numpy() if isinstance(total, torch.Tensor) else total
            out.append(np.asarray(total, dtype=np.float64) + 0.0)
            counts.append(pending_count)
            pending, pending_count = ref.PairwiseStack(), 0
    return np.stack(out, axis=1), np.array(counts, dtype=np.int64)


def _chunk_torch(layers, keys, c0, valid, size, width, device, acc, groups: int, z2sq: bool) -> torch.Tensor:
    """(B, groups, 2·depth+1, w) tree sums of one chunk with plain torch ops: per group of
    ``size/groups`` rows, every layer's sums, every layer's sums of squares, layer 2's z² sums."""
    x = box_muller_torch(words_torch(keys, c0, c0 + valid, width, device))[:, :, :width]  # (B, valid, w)
    if size > valid:
        x = torch.cat([x, x.new_zeros((x.shape[0], size - valid, width))], dim=1)  # (B, size, w)
    sums, squares = [], []
    z2 = None
    for layer, w_l in enumerate(layers):
        x = torch.bmm(x, w_l)  # (B, size, w) float32 pre-activations
        if layer == 1 and z2sq:
            z = x.to(acc)
            z2 = _tree_groups(z.mul_(z), acc, groups)
        x = x.clamp_(min=0.0)
        sums.append(_tree_groups(x, acc, groups))
        sq = x.to(acc)
        squares.append(_tree_groups(sq.mul_(sq), acc, groups))
    if z2 is None:
        z2 = torch.zeros_like(sums[0])
    return torch.stack(sums + squares + [z2], dim=2)  # (B, groups, 2d+1, w)
