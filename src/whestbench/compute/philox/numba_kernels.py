"""The ``philox`` sampler's CPU kernels in numba: Philox words, normals, and ReLU plus pairwise sums.

numpy and numba only (no torch), so the kernels can be imported, tested and measured on their own.
``compute/philox/numba_engine.py`` runs them around torch's ``bmm`` (``philox_torch``'s ``"numba"`` engine).

- **Integer stage**: Philox4x32-10 vectorised across neuron groups, bit-identical to
  ``philox.philox_words``.
- **Float stage**: the reference's Box-Muller in float32 with its own branch-free ``log`` and
  ``sincos`` (so the loops vectorise): within 3 float32 ulp of the exact transform of the same
  float32 inputs, except next to a zero of cos or sin, where the argument reduction's ~3e-14
  absolute error is more ulps of the tiny result (``docs/sampler-philox.md`` §3 has the measurement).
- **Sums**: ReLU in place plus the reference's pairwise fp64 column tree in one pass over a chunk,
  bit-identical to ``philox.pairwise_colsum`` of the ReLU'd rows.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from whestbench.compute.philox import spec as ref
from whestbench.compute.jit import ensure_cache_dir

ensure_cache_dir()


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
    """``out`` (rows, 4G) uint32 <- the integer stage for samples ``n0 ..``."""
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
        if with_sq:  # (without it ``stack_sq`` may be ``stack`` itself: never write it then)
            for j in range(w):
                a = np.float64(h[i, j])
                b = np.float64(h[i + 1, j])
                stack_sq[1, j] = a * a + b * b
        used[1] = True
        i += 2
    if n - i == 1:
        for j in range(w):
            a = _relu(h[i, j])
            h[i, j] = a
            stack[0, j] = np.float64(a)
        if with_sq:
            for j in range(w):
                a = np.float64(h[i, j])
                stack_sq[0, j] = a * a
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


def relu_tree(h, n, with_sq, out, out_sq, stack, stack_sq, used) -> None:
    """``_relu_tree_impl``, compiled once per ``with_sq`` (a constant, so the unused loops vanish)."""
    if with_sq:
        _relu_tree_sq(h, n, out, out_sq, stack, stack_sq, used)
    else:
        _relu_tree_plain(h, n, out, stack, used)


def square_tree(z, n, out_sq, scratch, out_scratch, stack, stack_sq, used) -> None:
    """``out_sq`` <- the pairwise fp64 column sums of ``z[:n]**2`` (pre-activations: signed values),
    the same tree ``relu_tree`` builds: ``|z|`` is copied into ``scratch`` (same shape as ``z``),
    where the ReLU is the identity and ``relu(|z|)² = z²`` exactly; ``out_scratch`` receives the
    unused plain sums."""
    np.abs(z[:n], out=scratch[:n])
    _relu_tree_sq(scratch, n, out_scratch, out_sq, stack, stack_sq, used)


@njit(nogil=True, cache=True, boundscheck=False, error_model="numpy")
def _uniforms_rows(words, out):  # pragma: no cover - compiled
    """``out`` (rows, k) float32 <- the kernels' uniforms of ``words`` (rows, k) uint32."""
    for i in range(words.shape[0]):
        for j in range(words.shape[1]):
            out[i, j] = _uniform(words[i, j])


def uniforms_of(words: np.ndarray) -> np.ndarray:
    """The uniforms these kernels make of ``words`` (rows, k) uint32 (``philox.uniforms``, bit for
    bit): what the device check compares."""
    words = np.ascontiguousarray(words, dtype=np.uint32)
    out = np.empty(words.shape, dtype=np.float32)
    _uniforms_rows(words, out)
    return out


def _round_keys(key: tuple[int, int]) -> np.ndarray:
    return np.array(ref.round_keys(key), dtype=np.uint32)  # (10, 2)


def words_into(key: tuple[int, int], n0: int, out: np.ndarray) -> None:
    """``out`` (rows, 4G) uint32 <- the integer stage for samples ``n0 ..``: ``philox.philox_words``."""
    _words_rows(_round_keys(key), n0, out)


def normals_into(key: tuple[int, int], n0: int, out: np.ndarray) -> None:
    """``out`` (rows, width) float32 <- the normals of samples ``n0 ..`` (``philox.normals`` within a
    few ulp)."""
    words = np.empty(4 * ref.n_groups(out.shape[1]), dtype=np.uint32)
    _normals_rows(_round_keys(key), n0, out, words)


def load_kernels() -> None:
    """Compile (or load from numba's cache) the kernels ``philox_torch`` calls, for the arguments it
    passes: ``normals_into`` and both ``relu_tree`` variants on C-contiguous arrays."""
    h = np.zeros((4, 2), dtype=np.float32)
    normals_into((0, 0), 0, h)
    levels = ref.level_of(4) + 1
    for with_sq in (False, True):
        relu_tree(h, 4, with_sq, np.zeros(2), np.zeros(2), np.zeros((levels, 2)), np.zeros((levels, 2)),
                  np.zeros(levels, dtype=np.bool_))
