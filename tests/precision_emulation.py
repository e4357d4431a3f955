"""The fused kernel's split-precision matmul arithmetic emulated in numpy (test-only).

The fused GPU kernel (``compute/philox/triton_kernel.py``) multiplies float32 operands split into parts
of 11 significant bits on tensor cores. ``emulate_matmul`` does the same splits here: the products of
the parts are exact in float32, the accumulation is float32, so the arithmetic can be checked against
an fp64 matmul on a machine without a GPU (and without triton: this module needs numpy only).
Importable from any test: ``tests/`` is on ``sys.path`` beside conftest.py.
"""

from __future__ import annotations

import numpy as np

from whestbench.compute.precision import FP16_LO_SCALE, PRECISIONS


def round_tf32(x: np.ndarray) -> np.ndarray:
    """float32 -> nearest tf32 (10 mantissa bits, ties to even), as float32: ``_round_tf32``."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    bits = (bits + np.uint32(0xFFF) + ((bits >> np.uint32(13)) & np.uint32(1))) & np.uint32(0xFFFFE000)
    return bits.view(np.float32)


def round_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> nearest bfloat16 (7 mantissa bits, ties to even), as float32."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    bits = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return bits.view(np.float32)


def round_fp16(x: np.ndarray) -> np.ndarray:
    """float32 -> nearest fp16 value (ties to even, subnormals included), as float32: ``.to(tl.float16)``.

    Same bits as ``x.astype(np.float16).astype(np.float32)`` but several times faster: in fp16's
    normal range fp16 and tf32 keep the same 10 mantissa bits; below ``2**-14`` the spacing is
    ``2**-24``. Guards against values fp16 cannot hold, which the kernel would turn into inf.
    """
    x = np.asarray(x, dtype=np.float32)
    if x.size and np.max(np.abs(x)) >= 65504.0:
        raise ValueError("a value >= 65504 does not fit fp16; the fp16 splits cannot represent this operand.")
    small = np.abs(x) < np.float32(2.0**-14)
    return np.where(small, np.rint(x * np.float32(2.0**24)) * np.float32(2.0**-24), round_tf32(x))


def _split(x: np.ndarray, parts: int, fmt: str) -> list[np.ndarray]:
    """``x`` as ``parts`` float32 arrays of fp16/tf32 values; fp16 parts after the first are scaled by
    ``FP16_LO_SCALE`` (the kernel's scaled low parts), tf32 parts are not."""
    scale = np.float32(FP16_LO_SCALE) if fmt == "fp16" else np.float32(1.0)
    rnd = round_fp16 if fmt == "fp16" else round_tf32
    out = [rnd(x)]
    res = x - out[0]  # exact
    for _ in range(parts - 1):
        out.append(rnd(res * scale))
        res = res - out[-1] / scale  # exact: the part is the residual rounded to 11 bits
    return out


def split_weights(b: np.ndarray, precision: str) -> tuple[np.ndarray, np.ndarray | None]:
    """The right-hand side(s) ``emulate_matmul`` multiplies for ``precision``: ``(main, scaled)``.

    tf32 splits: ``main`` stacks the weight parts in the kernel's order (one fp32 accumulator) and
    ``scaled`` is None. fp16 splits: ``main`` is the high part and ``scaled`` stacks the terms summed in
    the kernel's second accumulator. Weights are the same for every row: split them once per layer.
    """
    b = np.asarray(b, dtype=np.float32)
    if precision in ("fp32", "ieee"):
        return b, None
    if precision == "bf16":
        return round_bf16(b), None
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of fp32, bf16, {', '.join(PRECISIONS)}; got {precision!r}.")
    fmt = precision[2:]
    w = _split(b, 3 if precision.startswith("4") else 2, fmt)  # [hi, mid] or [hi, mid, lo]
    # The kernel's terms, smallest first: lo_a*hi_w, [hi_a*lo_w,] hi_a*mid_w, then hi_a*hi_w.
    right = [w[0]] + w[:0:-1]
    if fmt == "tf32":
        return np.concatenate(right + [w[0]], axis=0), None
    return w[0], np.concatenate(right, axis=0)


def emulate_matmul(a: np.ndarray, b, precision: str) -> np.ndarray:
    """``a @ b`` (float32 in, float32 out) as the kernel's ``precision`` computes it, in numpy.

    ``b`` is the weight matrix, or what ``split_weights`` made of it. The parts' products are exact
    in float32 (<= 22 significant bits), so a float32 matmul over the concatenated parts is the
    tensor cores' arithmetic up to the accumulation order. Also ``"fp32"`` (plain float32 matmul)
    and ``"bf16"`` (one bf16 pass) for the gate's comparison.
    """
    a = np.asarray(a, dtype=np.float32)
    main, scaled = b if isinstance(b, tuple) else split_weights(b, precision)
    if precision in ("fp32", "ieee"):
        return a @ main
    if precision == "bf16":
        return round_bf16(a) @ main
    fmt = precision[2:]
    a_hi, a_lo = _split(a, 2, fmt)
    n_parts = 3 if precision.startswith("4") else 2
    left = [a_lo] + [a_hi] * (n_parts - 1)
    if fmt == "tf32":  # one accumulator
        return np.concatenate(left + [a_hi], axis=1) @ main
    return a_hi @ main + (np.concatenate(left, axis=1) @ scaled) * np.float32(1.0 / FP16_LO_SCALE)




# --- the tensor cores' accumulator (the hardware model) ------------------------------------------
#
# Round-to-nearest (``emulate_matmul`` above, numpy's float32 BLAS) is not what a tensor core does. The
# published bit-level model of the H100 (Khattak & Mikaitis, "Accurate Models of NVIDIA Tensor Cores",
# 2025; MATLAB-tensor-core, models/H100TC.m) adds each block of ``TC_BLOCK`` products to the fp32
# accumulator at once: every product (exact) and the accumulator are aligned to the largest exponent
# among them with ``TC_EXTRA_BITS`` bits below a 24-bit significand, the bits shifted out are dropped
# (truncation), the aligned terms are summed exactly and the sum is rounded toward zero to fp32. Every
# step can only shrink |acc|, so a chain of split products drifts low. The alignment exponent is the
# products' unnormalised exponent (``exp(a) + exp(b)``), or the accumulator's if larger; a product with
# a significand in [2, 4) keeps one more bit, which that choice of exponent gives (the model's extra bit).

MODELS = ("nearest", "hardware")
TC_BLOCK = {"fp16": 16, "tf32": 8}  # products per accumulator step (one MMA's k-slice on sm_90)
TC_EXTRA_BITS = 2
_TC_ROWS = 128  # rows per numpy pass (bounds the (rows, block, cols) product array)


def _pow2_floor(x: np.ndarray) -> np.ndarray:
    """``2**floor(log2|x|)`` elementwise (0 where x is 0), float64."""
    m, e = np.frexp(np.asarray(x, dtype=np.float64))
    return np.where(m == 0, 0.0, np.ldexp(1.0, e - 1))


def round_toward_zero_f32(x: np.ndarray) -> np.ndarray:
    """float64 -> the float32 nearest x in the direction of zero (the tensor core's final rounding)."""
    f = np.asarray(x, dtype=np.float64).astype(np.float32)
    over = np.abs(f.astype(np.float64)) > np.abs(x)
    f[over] = np.nextafter(f[over], np.float32(0.0))
    return f


def tc_block_fma(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One tensor-core step under the hardware model: ``c + a @ b`` for ``a`` (R, f), ``b`` (f, N) with
    ``f <= TC_BLOCK`` (values whose products are exact in float32), ``c`` (R, N) float32."""
    c = np.asarray(c, dtype=np.float32)
    prod = a[:, :, None] * b[None, :, :]  # (R, f, N) float32, exact (<= 22 significant bits)
    pa = _pow2_floor(a).astype(np.float32)
    pb = _pow2_floor(b).astype(np.float32)
    top = np.maximum((pa[:, :, None] * pb[None, :, :]).max(axis=1).astype(np.float64), _pow2_floor(c))
    quantum = top * 2.0 ** -(23 + TC_EXTRA_BITS)  # the grid every term is truncated to
    live = quantum > 0
    inv = np.where(live, 1.0 / np.where(live, quantum, 1.0), 0.0)  # exact: powers of two
    if np.any(inv > 2.0**126):
        raise ValueError("tc_block_fma: products below 2**-100 are outside this model's float32 fast path.")
    terms = np.trunc(prod * inv.astype(np.float32)[:, None, :]).sum(axis=1, dtype=np.float64)
    total = (terms + np.trunc(c.astype(np.float64) * inv)) * quantum  # exact: integers < 2**31 times a power of two
    return round_toward_zero_f32(total)


def _tc_chain(acc: np.ndarray, a: np.ndarray, b: np.ndarray, k0: int, k1: int, fmt: str) -> np.ndarray:
    """``acc`` through the tensor-core steps of one ``tl.dot`` over columns ``k0:k1``, in k order."""
    step = TC_BLOCK[fmt]
    for s in range(k0, k1, step):
        acc = tc_block_fma(acc, a[:, s : s + step], b[s : s + step])
    return acc


def hardware_block_integer(da: np.ndarray, dw: np.ndarray, n_digits: int) -> np.ndarray:
    """The Ozaki kernel's digit-pair GEMMs through the tensor cores' float accumulator model (the int8
    digits as fp16 values, blocks of ``TC_BLOCK["fp16"]`` products, truncation, round toward zero):
    what an fp16 tensor core would make of ``ozaki_spec.block_integer``'s exact integer sums."""
    total = np.zeros((da.shape[1], dw.shape[2]), dtype=np.float64)
    for i in range(n_digits):
        for j in range(n_digits - i):
            acc = np.zeros((da.shape[1], dw.shape[2]), dtype=np.float32)
            a, b = da[i].astype(np.float32), dw[j].astype(np.float32)
            for k0 in range(0, a.shape[1], TC_BLOCK["fp16"]):
                acc = tc_block_fma(acc, a[:, k0 : k0 + 16], b[k0 : k0 + 16])
            total += acc.astype(np.float64) * 128.0 ** (n_digits - 1 - i - j)
    return total


def hardware_matmul(a: np.ndarray, b: np.ndarray, precision: str, *, block_k: int = 32) -> np.ndarray:
    """``a @ b`` as the fused kernel's split ``precision`` computes it on tensor cores under the hardware
    model: for every ``block_k`` step the kernel's dots in the kernel's order (tf32: one accumulator
    ``lo*hi [, hi*lo], hi*mid, hi*hi``; fp16: the scaled cross terms in a second accumulator, added at
    the end in fp32), each dot a chain of ``TC_BLOCK``-product steps. ``"ieee"`` is not a tensor-core
    precision (fp32 FMAs, rounded to nearest): it is ``emulate_matmul``'s."""
    if precision in ("fp32", "ieee"):
        return emulate_matmul(a, b, precision)
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}; got {precision!r}.")
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    fmt = precision[2:]
    four = precision.startswith("4")
    w = _split(b, 3 if four else 2, fmt)  # hi, mid[, lo]
    out = np.empty((a.shape[0], b.shape[1]), dtype=np.float32)
    k = a.shape[1]
    for r0 in range(0, a.shape[0], _TC_ROWS):
        a_hi, a_lo = _split(a[r0 : r0 + _TC_ROWS], 2, fmt)
        acc = np.zeros((a_hi.shape[0], b.shape[1]), dtype=np.float32)
        cor = np.zeros_like(acc)
        for kb in range(0, k, block_k):
            ke = min(kb + block_k, k)
            cross = [(a_lo, w[0])] + ([(a_hi, w[2])] if four else []) + [(a_hi, w[1])]
            if fmt == "tf32":
                for x, y in cross + [(a_hi, w[0])]:
                    acc = _tc_chain(acc, x, y, kb, ke, fmt)
            else:
                for x, y in cross:
                    cor = _tc_chain(cor, x, y, kb, ke, fmt)
                acc = _tc_chain(acc, a_hi, w[0], kb, ke, fmt)
        out[r0 : r0 + _TC_ROWS] = acc if fmt == "tf32" else acc + cor * np.float32(1.0 / FP16_LO_SCALE)
    return out


def layer_means(weights: np.ndarray, x: np.ndarray, precision: str, model: str = "nearest",
                *, chunk: int = 16384) -> np.ndarray:
    """``(depth, width)`` fp64 per-layer means of the ReLU activations over the rows of ``x``.

    ``precision`` ``"fp64"`` runs the forward pass in fp64 (the gate's reference); a kernel precision
    runs it in float32 with that arithmetic under ``model`` (``MODELS``), summing in fp64 as the kernel does.
    """
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}; got {model!r}.")
    depth = weights.shape[0]
    sums = np.zeros((depth, weights.shape[2]))
    parts = [] if precision == "fp64" or model == "hardware" else [split_weights(w, precision) for w in weights]
    for r0 in range(0, x.shape[0], chunk):
        if precision == "fp64":
            h = np.asarray(x[r0 : r0 + chunk], dtype=np.float64)
            for layer in range(depth):
                h = np.maximum(h @ weights[layer].astype(np.float64), 0.0)
                sums[layer] += h.sum(axis=0)
            continue
        h = np.asarray(x[r0 : r0 + chunk], dtype=np.float32)
        for layer in range(depth):
            if model == "hardware":
                h = hardware_matmul(h, weights[layer], precision)
            else:
                h = emulate_matmul(h, parts[layer], precision)
            h = np.maximum(h, np.float32(0.0))
            sums[layer] += h.sum(axis=0, dtype=np.float64)
    return sums / x.shape[0]


def float32_ulps(a, b) -> np.ndarray:
    """Elementwise distance between two float32 arrays in units in the last place (the sampler's
    float-stage bound; a monotone integer mapping of the bit patterns, so it counts across zero)."""

    def ordered(x):
        i = np.asarray(x, dtype=np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)

    return np.abs(ordered(a) - ordered(b))
