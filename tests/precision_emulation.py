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


