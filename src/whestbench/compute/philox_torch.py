"""The ``philox`` sampler on torch: the numpy reference's samples and sums, batched over MLPs.

Same integer stage bit for bit, same float transform up to a few ulp, same pairwise summation tree,
so the only differences from ``compute/philox.py`` are the platform's ``log``/``cos``/``sin`` and the
matmul kernel. Import this module only where torch is wanted; nothing else imports torch.

Two ways to draw and sum, picked by ``method`` (``"auto"`` chooses by device):

- ``"torch"``: plain torch ops on any device. torch has no uint32 multiply-high, so the Philox
  words live in int64 tensors: a 32x32-bit product fits 64 bits, wraps identically (two's
  complement) on every backend, and masking with ``0xFFFFFFFF`` after the shift recovers the high
  word exactly. The tree sums are strided adds, so their order never depends on tensor sizes.
- ``"numba"`` (CPU only): compiled kernels that fill the inputs and do ReLU plus the pairwise sums
  in one pass per layer, around torch's ``bmm``. Philox is vectorised across neuron groups and the
  float stage uses its own vectorisable ``log``/``sincos`` (within 3 float32 ulp of exact).

Invariance: a chunk is an aligned power-of-two run of rows inside a block, padded with zero rows
when ragged, so every chunk sum is a subtree of the reference's tree; and the matmul row count is a
power of two >= ``MIN_CHUNK``, where a row of MKL's product does not depend on how many rows or
matrices are multiplied together (tested; cuBLAS is expected to behave alike and the ``gpu`` test
checks it). So ``chunk_size`` and the batch size never change a byte.

Run one caller thread per core with ``torch.set_num_threads(1)`` on CPU: the numba passes are
single-threaded, and one caller with several torch threads leaves cores idle during them.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from whestbench.compute import philox as ref
from whestbench.compute.stats import LayerSums

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


def box_muller_torch(words: torch.Tensor) -> torch.Tensor:
    """The float stage on torch: ``(..., 2m)`` int64 words -> ``(..., 2m)`` float32 normals.

    Each step is the reference's float32 operation; ``uniforms`` are bit-exact, ``log``/``cos``/
    ``sin`` are torch's (a few ulp from numpy's).
    """
    u = words.to(torch.float32).mul_(float(ref.U_SCALE)).add_(float(ref.U_OFFSET))  # (..., 2m)
    r = u[..., 0::2].log().mul_(-2.0).sqrt_()  # (..., m)
    theta = u[..., 1::2].mul(float(ref.TWO_PI))
    z = torch.empty_like(u)
    torch.mul(r, theta.cos(), out=z[..., 0::2])
    torch.mul(r, theta.sin(), out=z[..., 1::2])
    return z


# --- CPU kernels (numba) -------------------------------------------------------------------------


@intrinsic
def _f32_bits(typingctx, x):  # pragma: no cover - compiled
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.int32(types.float32), codegen


@intrinsic
def _bits_f32(typingctx, x):  # pragma: no cover - compiled
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


_F = np.float32
# log(1+f) = f - f^2/2 + s*(f^2/2 + R(s^2)), s = f/(2+f): the classic fdlibm/Cephes float32 scheme.
_LG1, _LG2, _LG3, _LG4 = _F(0.66666662693), _F(0.40000972152), _F(0.28498786688), _F(0.24279078841)
_LN2_HI, _LN2_LO = _F(6.9313812256e-01), _F(9.0580006145e-06)
# pi/2 in three parts (Cody-Waite), the first two short enough that q*part is exact for q <= 4.
_PIO2_1, _PIO2_2, _PIO2_3 = _F(1.5703125), _F(4.837512969970703125e-4), _F(7.54978995489188216e-8)
_TWO_OVER_PI = _F(2.0 / math.pi)
_TWO_PI = ref.TWO_PI
_S1, _S2, _S3 = _F(-1.6666654611e-1), _F(8.3321608736e-3), _F(-1.9515295891e-4)
_C1, _C2, _C3 = _F(4.166664568298827e-2), _F(-1.388731625493765e-3), _F(2.443315711809948e-5)


@njit(inline="always", error_model="numpy")
def _logf(u):  # pragma: no cover - compiled
    """float32 natural log of a positive normal float32 (within 1 ulp), branch-free so loops vectorise."""
    ix = _f32_bits(u) - np.int32(0x3F3504F3)  # split around sqrt(1/2): u = 2**k * m, m in [0.707, 1.414)
    k = ix >> np.int32(23)
    f = _bits_f32((ix & np.int32(0x007FFFFF)) + np.int32(0x3F3504F3)) - _F(1.0)
    s = f / (_F(2.0) + f)
    z = s * s
    w = z * z
    r = z * (_LG1 + w * _LG3) + w * (_LG2 + w * _LG4)
    hfsq = _F(0.5) * f * f
    dk = _F(k)
    return s * (hfsq + r) + dk * _LN2_LO - hfsq + f + dk * _LN2_HI


@njit(inline="always", error_model="numpy")
def _uniform(word):  # pragma: no cover - compiled
    return _F(word) * ref.U_SCALE + ref.U_OFFSET


@njit(inline="always", error_model="numpy")
def _radius(word):  # pragma: no cover - compiled
    """``sqrt(-2 log u)`` of a word's uniform."""
    return np.sqrt(_F(-2.0) * _logf(_uniform(word)))


@njit(inline="always", error_model="numpy")
def _sincos_turn(word):  # pragma: no cover - compiled
    """``(cos theta, sin theta)`` with ``theta = TWO_PI * u`` rounded to float32 as the reference does."""
    theta = _TWO_PI * _uniform(word)
    # theta = q*pi/2 + y with |y| <= pi/4; cos and sin of y by polynomials, then a quadrant swap.
    q = np.rint(theta * _TWO_OVER_PI)
    y = ((theta - q * _PIO2_1) - q * _PIO2_2) - q * _PIO2_3
    y2 = y * y
    sn = y + y * y2 * (_S1 + y2 * (_S2 + y2 * _S3))
    cs = _F(1.0) - _F(0.5) * y2 + y2 * y2 * (_C1 + y2 * (_C2 + y2 * _C3))
    qi = np.int32(q) & np.int32(3)
    even = (qi & np.int32(1)) == 0
    one = np.int32(1)
    c = _bits_f32(_f32_bits(cs if even else sn) ^ ((((qi + one) >> one) & one) << np.int32(31)))  # -: q=1,2
    s = _bits_f32(_f32_bits(sn if even else cs) ^ ((qi >> one) << np.int32(31)))  # -: q=2,3
    return c, s


@njit(inline="always", error_model="numpy")
def _philox_row(rk, n, words):  # pragma: no cover - compiled
    """``words`` (4G,) uint32 <- Philox4x32-10 of counters ``(lo32(n), hi32(n), g, 0)``, g < G."""
    lo = np.uint32(n & np.uint64(0xFFFFFFFF))
    hi = np.uint32(n >> np.uint64(32))
    for g in range(words.shape[0] // 4):  # vectorised across groups: AVX2 does 4 products at a time
        c0 = lo
        c1 = hi
        c2 = np.uint32(g)
        c3 = np.uint32(0)
        for r in range(10):
            p0 = np.uint64(c0) * np.uint64(0xD2511F53)
            p1 = np.uint64(c2) * np.uint64(0xCD9E8D57)
            c0 = np.uint32(p1 >> np.uint64(32)) ^ c1 ^ rk[r, 0]
            c1 = np.uint32(p1)
            c2 = np.uint32(p0 >> np.uint64(32)) ^ c3 ^ rk[r, 1]
            c3 = np.uint32(p0)
        words[4 * g] = c0
        words[4 * g + 1] = c1
        words[4 * g + 2] = c2
        words[4 * g + 3] = c3


@njit(nogil=True, cache=True, boundscheck=False, error_model="numpy")
def _words_rows(rk, n0, out):  # pragma: no cover - compiled
    """``out`` (rows, 4G) uint32 <- the integer stage for samples ``n0 ..`` (for tests and tools)."""
    for i in range(out.shape[0]):
        _philox_row(rk, np.uint64(n0 + i), out[i])


@njit(nogil=True, cache=True, boundscheck=False, error_model="numpy")
def _normals_rows(rk, n0, out, words):  # pragma: no cover - compiled
    """``out`` (rows, width) float32 <- normals of samples ``n0 ..``; ``rk`` (10, 2) uint32 round keys;
    ``words`` (4G,) uint32 scratch."""
    rows, width = out.shape
    for i in range(rows):
        _philox_row(rk, np.uint64(n0 + i), words)
        row = out[i]
        for p in range(width // 2):
            c, s = _sincos_turn(words[2 * p + 1])
            rad = _radius(words[2 * p])
            row[2 * p] = rad * c
            row[2 * p + 1] = rad * s
        if width % 2:
            c, s = _sincos_turn(words[width])
            row[width - 1] = _radius(words[width - 1]) * c


@njit(inline="always", error_model="numpy")
def _relu(x):  # pragma: no cover - compiled
    """max(x, 0) exactly (x + |x| is 2x or +0; halving is exact); numba vectorises this, not a select."""
    return (x + abs(x)) * _F(0.5)


@njit(inline="always", boundscheck=False, error_model="numpy")
def _relu_tree_impl(h, n, with_sq, out, out_sq, stack, stack_sq, used):  # pragma: no cover - compiled
    """ReLU in place on rows ``[0, n)`` of ``h`` (R, w) float32, and their pairwise fp64 column sums.

    ``out`` (w,) <- the tree of the rows (zero rows beyond ``n`` are skipped: same bits up to the
    sign of zero); with ``with_sq`` also ``out_sq`` <- the tree of the squares. Scratch: ``stack``,
    ``stack_sq`` (L, w) fp64 and ``used`` (L,) bool with ``L > log2(R)``. Leaves are built four rows
    at a time, ``(x0 + x1) + (x2 + x3)`` (a level-2 subtree), then a binary counter merges equal
    levels, left + right; a ragged end adds a level-1 and a level-0 leaf; the rest fold right to left.
    """
    w = h.shape[1]
    used[:] = False
    for i in range(0, n - 3, 4):  # (a bound of ``n - n % 4`` here stops LLVM vectorising the body)
        top = 2
        while used[top]:
            top += 1
        for j in range(w):
            a = _relu(h[i, j])
            b = _relu(h[i + 1, j])
            c = _relu(h[i + 2, j])
            d = _relu(h[i + 3, j])
            h[i, j] = a
            h[i + 1, j] = b
            h[i + 2, j] = c
            h[i + 3, j] = d
            stack[top, j] = (np.float64(a) + np.float64(b)) + (np.float64(c) + np.float64(d))
        if with_sq:
            for j in range(w):
                a = np.float64(h[i, j])
                b = np.float64(h[i + 1, j])
                c = np.float64(h[i + 2, j])
                d = np.float64(h[i + 3, j])
                stack_sq[top, j] = (a * a + b * b) + (c * c + d * d)
        # Slots 2..top-1 hold left siblings of levels 2..top-1: merge them in, lowest first.
        for lvl in range(2, top):
            for j in range(w):
                stack[top, j] = stack[lvl, j] + stack[top, j]
            if with_sq:
                for j in range(w):
                    stack_sq[top, j] = stack_sq[lvl, j] + stack_sq[top, j]
            used[lvl] = False
        used[top] = True
    i = n - n % 4
    if n - i >= 2:
        for j in range(w):
            a = _relu(h[i, j])
            b = _relu(h[i + 1, j])
            h[i, j] = a
            h[i + 1, j] = b
            stack[1, j] = np.float64(a) + np.float64(b)
            stack_sq[1, j] = np.float64(a) * np.float64(a) + np.float64(b) * np.float64(b)
        used[1] = True
        i += 2
    if n - i == 1:
        for j in range(w):
            a = _relu(h[i, j])
            h[i, j] = a
            stack[0, j] = np.float64(a)
            stack_sq[0, j] = np.float64(a) * np.float64(a)
        used[0] = True
    first = True
    for lvl in range(used.shape[0]):
        if used[lvl]:
            if first:
                out[:] = stack[lvl]
                if with_sq:
                    out_sq[:] = stack_sq[lvl]
                first = False
            else:
                for j in range(w):
                    out[j] = stack[lvl, j] + out[j]
                if with_sq:
                    for j in range(w):
                        out_sq[j] = stack_sq[lvl, j] + out_sq[j]


@njit(nogil=True, cache=True, boundscheck=False, error_model="numpy")
def _relu_tree_plain(h, n, out, stack, used):  # pragma: no cover - compiled
    _relu_tree_impl(h, n, False, out, out, stack, stack, used)


@njit(nogil=True, cache=True, boundscheck=False, error_model="numpy")
def _relu_tree_sq(h, n, out, out_sq, stack, stack_sq, used):  # pragma: no cover - compiled
    _relu_tree_impl(h, n, True, out, out_sq, stack, stack_sq, used)


def _relu_tree(h, n, with_sq, out, out_sq, stack, stack_sq, used) -> None:
    """``_relu_tree_impl`` compiled once per ``with_sq`` (a constant, so the unused loops vanish)."""
    if with_sq:
        _relu_tree_sq(h, n, out, out_sq, stack, stack_sq, used)
    else:
        _relu_tree_plain(h, n, out, stack, used)


# --- public functions ----------------------------------------------------------------------------


def _resolve_method(method: str, device: torch.device) -> str:
    if method == "auto":
        return "numba" if device.type == "cpu" else "torch"
    if method not in ("numba", "torch"):
        raise ValueError(f"method must be 'auto', 'numba' or 'torch'; got {method!r}.")
    if method == "numba" and device.type != "cpu":
        raise ValueError(f"method 'numba' runs on the CPU only; got device {device}. Use method='torch'.")
    return method


def _normals_numba(key: tuple[int, int], n0: int, out: np.ndarray) -> None:
    rk = np.array(ref.round_keys(key), dtype=np.uint32)  # (10, 2)
    words = np.empty(4 * ref.n_groups(out.shape[1]), dtype=np.uint32)
    _normals_rows(rk, n0, out, words)


def normals_torch(
    key: tuple[int, int], n0: int, n1: int, width: int, device, *, method: str = "auto"
) -> torch.Tensor:
    """``(n1-n0, width)`` float32 normals for samples ``[n0, n1)`` on ``device``.

    Integer stage bit-identical to ``philox.normals``; floats within a few ulp of it.
    """
    device = torch.device(device)
    if not 0 <= n0 <= n1:
        raise ValueError(f"need 0 <= n0 <= n1; got n0={n0}, n1={n1}.")
    if _resolve_method(method, device) == "numba":
        out = np.empty((n1 - n0, width), dtype=np.float32)
        _normals_numba(key, n0, out)
        return torch.from_numpy(out)
    keys = np.array([key], dtype=np.uint32)
    return box_muller_torch(words_torch(keys, n0, n1, width, device))[0, :, :width]


def kernel_name(device, method: str = "auto") -> str:
    """Names the arithmetic (the "kernel precision class"): bakes with the same name give the same bytes.

    Includes what changes the numbers: the float transform's implementation, the matmul library
    and the accumulation type. (The device model matters on GPUs too; provenance records it.)
    """
    device = torch.device(device)
    method = _resolve_method(method, device)
    acc = "fp32acc" if device.type == "mps" else "fp64acc"
    # "high"/"medium" let torch use TF32 or bf16 for float32 matmuls: a different kernel class.
    mm = "fp32" if torch.get_float32_matmul_precision() == "highest" else torch.get_float32_matmul_precision()
    return f"philox-torch{torch.__version__.split('+')[0]}-{device.type}-{method}-{mm}-{acc}"


def default_chunk_size(device, n_mlps: int, width: int) -> int:
    """Rows per chunk when the caller gives none: bounded memory, never a different result."""
    device = torch.device(device)
    if device.type == "cpu":
        return _CPU_CHUNK
    return _GPU_CHUNK_ELEMS // max(1, n_mlps * width)


def chunk_rows(
    chunk_size: int | None, device: torch.device, n_mlps: int, width: int, block_size: int
) -> int:
    """``chunk_size`` rounded down to a power of two, within ``[MIN_CHUNK, block_size]``."""
    c = default_chunk_size(device, n_mlps, width) if chunk_size is None else int(chunk_size)
    if c <= 0:
        raise ValueError(f"chunk_size must be positive; got {chunk_size}.")
    c = 1 << (c.bit_length() - 1)
    return min(max(c, MIN_CHUNK), block_size)


def _tree_rows(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(B, R, w) -> (B, w): the pairwise tree over rows (R a power of two) in ``dtype``."""
    if x.shape[1] == 1:
        return x[:, 0].to(dtype)
    a = x[:, 0::2].to(dtype)
    a += x[:, 1::2]  # promoted to ``dtype`` before the add: fp64(x) + fp64(y)
    while a.shape[1] > 1:
        a = a[:, 0::2] + a[:, 1::2]
    return a[:, 0]


def block_sums_torch(
    weights_batch,
    keys,
    block_index: int,
    n_samples: int,
    device,
    *,
    chunk_size: int | None = None,
    block_size: int = ref.BLOCK_SIZE,
    method: str = "auto",
) -> list[LayerSums]:
    """One canonical block's sums for each of ``B`` MLPs: the reference's ``block_sums``, batched.

    ``weights_batch``: (B, depth, width, width) float32 (numpy or a tensor, moved to ``device``).
    ``keys``: (B, 2) uint32 Philox keys. Accumulation is fp64 on CPU and CUDA, fp32 on MPS (no
    fp64 there). Neither ``chunk_size`` nor ``B`` changes a bit of any MLP's result.
    """
    device = torch.device(device)
    method = _resolve_method(method, device)
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
    rows = chunk_rows(chunk_size, device, n_mlps, width, block_size)
    layers = [w_t[:, layer].contiguous() for layer in range(depth)]  # depth x (B, w, w)
    acc = torch.float32 if device.type == "mps" else torch.float64
    tree = ref.PairwiseStack()
    bufs: dict = {}
    for c0 in range(start, end, rows):
        valid = min(rows, end - c0)
        # A ragged chunk is padded to a power of two (>= MIN_CHUNK) with zero rows, which add nothing.
        size = min(rows, max(MIN_CHUNK, 1 << ref.level_of(valid)))
        if method == "numba":
            packed = _chunk_numba(layers, keys, c0, valid, size, width, bufs)
            tree.push(packed, ref.level_of(valid))
        else:
            packed = _chunk_torch(layers, keys, c0, valid, size, width, device, acc)
            tree.push(packed, ref.level_of(size))
    total = tree.value()
    total = total.cpu().numpy() if isinstance(total, torch.Tensor) else total
    total = total.astype(np.float64) + 0.0  # the reference's final +0.0
    return [
        LayerSums(sums=total[b, :depth].copy(), sumsq=total[b, depth].copy(), count=end - start)
        for b in range(n_mlps)
    ]


def sample_layer_sums_torch(
    weights_batch,
    keys,
    n_samples: int,
    device,
    *,
    block_range: tuple[int, int] | None = None,
    on_block=None,
    chunk_size: int | None = None,
    block_size: int = ref.BLOCK_SIZE,
    method: str = "auto",
) -> list[LayerSums]:
    """``block_sums_torch`` over every block (or the aligned ``block_range``), combined in order.

    The torch twin of ``philox.sample_layer_sums_philox``; ``on_block(samples)`` is called after
    each block with the samples it covered for each MLP.
    """
    nb = ref.block_count(n_samples, block_size)
    b0, b1 = ref.check_block_range(block_range, n_samples, block_size) if block_range is not None else (0, nb)
    w_t = torch.as_tensor(weights_batch, device=torch.device(device))  # moved once, reused per block
    per_block = []
    for b in range(b0, b1):
        per_block.append(
            block_sums_torch(
                w_t, keys, b, n_samples, device, chunk_size=chunk_size, block_size=block_size, method=method
            )
        )
        if on_block is not None:
            on_block(per_block[-1][0].count)
    return [ref.combine_in_order([blk[m] for blk in per_block]) for m in range(len(per_block[0]))]


def _chunk_torch(layers, keys, c0, valid, size, width, device, acc) -> torch.Tensor:
    """(B, depth+1, w) tree sums of one chunk with plain torch ops."""
    x = box_muller_torch(words_torch(keys, c0, c0 + valid, width, device))[:, :, :width]  # (B, valid, w)
    if size > valid:
        x = torch.cat([x, x.new_zeros((x.shape[0], size - valid, width))], dim=1)  # (B, size, w)
    parts = []
    for w_l in layers:
        x = torch.bmm(x, w_l).clamp_(min=0.0)  # (B, size, w) float32
        parts.append(_tree_rows(x, acc))
    sq = x.to(acc)
    parts.append(_tree_rows(sq.mul_(sq), acc))
    return torch.stack(parts, dim=1)  # (B, depth+1, w)


def _chunk_numba(layers, keys, c0, valid, size, width, bufs) -> np.ndarray:
    """(B, depth+1, w) tree sums of one chunk: numba normals and ReLU+tree around torch's bmm.

    ``bufs`` maps a row count to reusable (x, h) float32 buffers of shape (B, rows, w).
    """
    n_mlps, depth = len(keys), len(layers)
    if size not in bufs:
        shape = (n_mlps, size, width)
        bufs[size] = (np.zeros(shape, dtype=np.float32), np.empty(shape, dtype=np.float32))
    x, h = bufs[size]
    for b in range(n_mlps):
        _normals_numba((int(keys[b, 0]), int(keys[b, 1])), c0, x[b, :valid])
        x[b, valid:] = 0.0  # padding rows: zero inputs give zero activations in every layer
    xt, ht = torch.from_numpy(x), torch.from_numpy(h)
    levels = ref.level_of(size) + 1
    stack = np.empty((levels, width))
    stack_sq = np.empty((levels, width))
    used = np.empty(levels, dtype=np.bool_)
    packed = np.empty((n_mlps, depth + 1, width))
    for layer, w_l in enumerate(layers):
        torch.bmm(xt, w_l, out=ht)  # (B, size, w) float32
        last = layer == depth - 1
        for b in range(n_mlps):
            _relu_tree(h[b], valid, last, packed[b, layer], packed[b, depth], stack, stack_sq, used)
        x, h, xt, ht = h, x, ht, xt
    return packed
