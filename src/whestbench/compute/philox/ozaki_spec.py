"""The integer (Ozaki) arithmetic of ``ozaki.py``'s kernel in numpy: the specification it equals byte for byte.

A float32 matmul ``a @ w`` is done on integers. Each activation row, per scale block of ``scale_k``
columns, and each weight column get a power-of-two scale ``2**e`` with ``max |x| < 2**e`` (``exponents``),
and each value ``x`` becomes ``DIGITS`` signed int8 digits (``digits``: ``y = x * 2**(6-e)``, then
``d_i = rne(y)``, ``y = (y - d_i) * 128``; every step exact) so that
``x = 2**(e-6) * (sum_i d_i * 128**-i + r)`` with ``|d_i| <= 64`` and ``|r| <= 0.5 * 128**-(DIGITS-1)``.
Rounding to nearest (not truncating) centres every digit after the first and the residual on zero: a
truncated digit would carry the value's sign, and with ReLU activations (all >= 0) that sign is the
weight's, a bias per neuron that does not average out (2.5e-7 per layer at 256x8 when measured).
Per scale block the digit pairs with ``i + j <= DIGITS - 1`` are multiplied as int8 GEMMs with exact
integer sums (``S_s = sum_{i+j=s} A_i @ W_j``), combined exactly into one integer
``T = S_0 * 2**21 + S_1 * 2**14 + S_2 * 2**7 + S_3`` (|T| < 2**53) and scaled by ``2**(e_a + e_w - 33)``;
the scale blocks are added in fp64 in ascending order and the sum is rounded once to float32.
Integer sums are exact and order-free, so the result depends on nothing but the inputs and
``scale_k``: not on tiling, split-K, batch, grid or GPU generation. Every float step above is exact
(a power-of-two scaling, a rounding of a value below 2**22 to an integer, a difference of a value and
that integer) except the fp64 additions of the scale blocks (in a fixed order) and the final rounding,
so numpy and the GPU agree.

``DIGITS = 4`` keeps ~28 bits of every value relative to its block's largest; the dropped pairs
(``i + j >= 4``) are below ``2**-40`` of ``max|a| * max|w|`` per product and centred on zero.
``digits=3`` (pairs ``i + j <= 2``) is the variant that fails the precision gate (``tests/compute/test_ozaki.py``).
"""

from __future__ import annotations

import numpy as np

from whestbench.compute.philox import spec as ref

DIGITS = 4
DIGIT_BITS = 7  # digits after the first step by 128; |d| <= 64
FIRST_BITS = 6  # the first digit: |x| * 2**(6-e) < 64
_RNE_MAGIC = np.float32(1.5 * 2**23)
DEFAULT_SCALE_K = 64  # columns per activation scale in ozaki.default_config (= its block_n)
EXP_FLOOR = -100  # scales below 2**-100 are clamped (values that small have only zero digits)
_MAX_SCALE_K = 1 << 20  # |T| < 2**53 needs 64**2 * 4 * scale_k * 2**21 < 2**53


def exponents(x: np.ndarray, axis: int) -> np.ndarray:
    """int32 ``e`` with ``max |x| < 2**e`` along ``axis`` (kept), from the float32 bits of the maximum:
    ``biased exponent - 126``, at least ``EXP_FLOOR`` (so also for 0 and subnormal maxima)."""
    m = np.max(np.abs(np.asarray(x, dtype=np.float32)), axis=axis, keepdims=True)
    biased = ((m.view(np.uint32) >> np.uint32(23)) & np.uint32(0xFF)).astype(np.int32)
    return np.maximum(biased - 126, EXP_FLOOR).astype(np.int32)


def pow2_f32(e: np.ndarray) -> np.ndarray:
    """``2**e`` as float32 from its bits (``-126 <= e <= 127``)."""
    return ((np.asarray(e, dtype=np.int32) + 127).astype(np.uint32) << np.uint32(23)).view(np.float32)


def pow2_f64(e: np.ndarray) -> np.ndarray:
    """``2**e`` as float64 from its bits (``-1022 <= e <= 1023``)."""
    return ((np.asarray(e, dtype=np.int64) + 1023) << np.int64(52)).view(np.float64)


def rne(y: np.ndarray) -> np.ndarray:
    """float32 ``y`` (|y| < 2**22) rounded to the nearest integer, ties to even, as float32: ``(y + M) - M``
    with ``M = 1.5 * 2**23`` (two float32 additions; the kernel does the same two)."""
    return (y + _RNE_MAGIC) - _RNE_MAGIC


def digits(x: np.ndarray, e: np.ndarray, n_digits: int = DIGITS) -> np.ndarray:
    """``(n_digits,) + x.shape`` int8: the digits of float32 ``x`` under the broadcastable scales ``e``."""
    y = np.asarray(x, dtype=np.float32) * pow2_f32(FIRST_BITS - e)  # exact: |y| < 64
    out = np.empty((n_digits,) + y.shape, dtype=np.int8)
    for i in range(n_digits):
        d = rne(y)
        out[i] = d.astype(np.int8)
        y = (y - d) * np.float32(1 << DIGIT_BITS)  # exact: |y - d| <= 0.5
    return out


def split_weights(w: np.ndarray, n_digits: int = DIGITS) -> tuple[np.ndarray, np.ndarray]:
    """A layer's float32 weights ``(K, N)`` -> ``(digits (n_digits, K, N) int8, column exponents (N,) int32)``:
    done once per MLP on the host."""
    e = exponents(w, axis=0)  # (1, N)
    return digits(w, e, n_digits), e[0]


def pair_sum(da: np.ndarray, dw: np.ndarray, n_digits: int = DIGITS) -> np.ndarray:
    """``T`` (int64, (R, N)) of one scale block: ``sum_{i+j<=n_digits-1} (A_i @ W_j) * 128**(n_digits-1-i-j)``.

    The definition, with one exact int64 matmul per pair; ``block_integer`` computes the same integer faster.
    """
    t = np.zeros((da.shape[1], dw.shape[2]), dtype=np.int64)
    for i in range(n_digits):
        for j in range(n_digits - i):
            t += (da[i].astype(np.int64) @ dw[j].astype(np.int64)) << np.int64(DIGIT_BITS * (n_digits - 1 - i - j))
    return t


def block_integer(da: np.ndarray, dw: np.ndarray, n_digits: int = DIGITS) -> np.ndarray:
    """``pair_sum`` in float64 BLAS: every partial sum is an integer below 2**53, hence exact in any order.

    For 4 digits, with 14-bit digit pairs ``H = 128*D_0 + D_1``, ``L = 128*D_2 + D_3``:
    ``T = 128*(H_a @ H_w) + A_0 @ L_w + L_a @ W_0 + [A_1 A_2] @ [W_2; W_1]`` (half the products of ten
    int8 GEMMs, the same integer); for 3 digits ``T = H_a @ H_w + [A_0 A_2] @ [W_2; W_0]``. Other digit
    counts use the definition.
    """
    if n_digits not in (3, 4):
        return pair_sum(da, dw, n_digits).astype(np.float64)
    a = da.astype(np.float64)
    w = dw.astype(np.float64)
    if n_digits == 3:
        return (128.0 * a[0] + a[1]) @ (128.0 * w[0] + w[1]) + np.concatenate([a[0], a[2]], axis=1) @ np.concatenate([w[2], w[0]])
    ha, la = 128.0 * a[0] + a[1], 128.0 * a[2] + a[3]
    hw, lw = 128.0 * w[0] + w[1], 128.0 * w[2] + w[3]
    return 128.0 * (ha @ hw) + a[0] @ lw + la @ w[0] + np.concatenate([a[1], a[2]], axis=1) @ np.concatenate([w[2], w[1]])


def matmul(a: np.ndarray, w_digits: np.ndarray, w_exp: np.ndarray, scale_k: int, *, n_digits: int = DIGITS,
           block_integer=block_integer) -> np.ndarray:
    """float32 ``a`` (R, K) times the weights ``split_weights`` made, in the integer arithmetic: (R, N) float32.

    ``block_integer(da, dw, n_digits)`` returns one scale block's ``T`` as float64 (exact integers): the
    default runs BLAS; the tests pass another (the tensor cores' float accumulator model) to show that
    integer sums leave it nothing to round.
    """
    if not 0 < scale_k <= _MAX_SCALE_K:
        raise ValueError(f"scale_k must be in 1..{_MAX_SCALE_K}; got {scale_k}.")
    a = np.asarray(a, dtype=np.float32)
    k = a.shape[1]
    acc = np.zeros((a.shape[0], w_digits.shape[2]), dtype=np.float64)
    shift = 2 * FIRST_BITS + DIGIT_BITS * (n_digits - 1)  # 33 for 4 digits
    for k0 in range(0, k, scale_k):
        blk = a[:, k0 : k0 + scale_k]
        e_a = exponents(blk, axis=1)  # (R, 1)
        t = block_integer(digits(blk, e_a, n_digits), w_digits[:, k0 : k0 + scale_k], n_digits)
        acc = acc + t * pow2_f64(e_a + w_exp[None, :] - shift)  # exact product; one fp64 rounding per block
    return acc.astype(np.float32)


def forward_sums(x: np.ndarray, layers: list[tuple[np.ndarray, np.ndarray]], scale_k: int, rows: int, *,
                 n_digits: int = DIGITS, block_integer=block_integer) -> np.ndarray:
    """The kernel's per-tile output for inputs ``x`` (T*rows, width) float32: ``(T, 2*depth, width)`` fp64,
    the pairwise tree over each tile's rows of every layer's ReLU activations, then of their squares."""
    depth = len(layers)
    n_tiles = x.shape[0] // rows
    h = np.asarray(x, dtype=np.float32)
    out = np.empty((n_tiles, 2 * depth, h.shape[1]))
    for layer, (wd, we) in enumerate(layers):
        h = np.maximum(matmul(h, wd, we, scale_k, n_digits=n_digits, block_integer=block_integer), np.float32(0.0))
        h64 = h.astype(np.float64)
        for t in range(n_tiles):
            out[t, layer] = ref.pairwise_colsum(h64[t * rows : (t + 1) * rows])
            out[t, depth + layer] = ref.pairwise_colsum(h64[t * rows : (t + 1) * rows] ** 2)
    return out


def layer_means(weights: np.ndarray, x: np.ndarray, scale_k: int, *, n_digits: int = DIGITS,
                block_integer=block_integer, chunk: int = 4096) -> np.ndarray:
    """``(depth, width)`` fp64 means of every layer's ReLU activations over the rows of ``x`` (the gate's figures)."""
    layers = [split_weights(w, n_digits) for w in weights]
    sums = np.zeros((weights.shape[0], weights.shape[2]))
    for r0 in range(0, x.shape[0], chunk):
        h = np.asarray(x[r0 : r0 + chunk], dtype=np.float32)
        for layer, (wd, we) in enumerate(layers):
            h = np.maximum(matmul(h, wd, we, scale_k, n_digits=n_digits, block_integer=block_integer), np.float32(0.0))
            sums[layer] += h.sum(axis=0, dtype=np.float64)
    return sums / x.shape[0]
