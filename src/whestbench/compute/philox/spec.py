"""The ``philox`` sampler in plain numpy: the executable specification every faster backend matches.

A normal for (MLP, sample ``n``, neuron ``j``) is a pure function of the MLP's key and ``(n, j)``,
so any worker on any device can draw any sample. ``docs/sampler-philox.md`` states the algorithm in
prose (§1 key, §2 the bit-exact Philox4x32-10 integer stage, §3 the float32 Box-Muller stage, §4 the
pairwise fp64 sums); this module is the same thing in code, written for clarity first and speed
second. Canonical blocks of ``BLOCK_SIZE`` samples, chunks inside a block and aligned power-of-two
runs of blocks are all subtrees of one summation tree, so how the work was cut never changes a bit
of the result (see ``combine_in_order``).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from whestbench.compute.estimators import CV_BATCH, batch_rows
from whestbench.compute.stats import LayerSums

SAMPLER_NAME = "philox"
SAMPLER_VERSION = "1"
BLOCK_SIZE = 65536  # samples per canonical block; recorded as ``sampler.block_size``

# Philox4x32-10 constants (Random123): round multipliers and Weyl key increments.
PHILOX_M0 = 0xD2511F53
PHILOX_M1 = 0xCD9E8D57
PHILOX_W0 = 0x9E3779B9
PHILOX_W1 = 0xBB67AE85
PHILOX_ROUNDS = 10
MASK32 = 0xFFFFFFFF

# Float stage constants, all exact float32 values.
U_SCALE = np.float32(2.0**-32)
U_OFFSET = np.float32(2.0**-33)
TWO_PI = np.float32(2.0 * np.pi)  # 6.2831855 (the float32 nearest 2*pi)

# Samples per batch: the unit of the control-variate estimator's batch means, and the numpy
# reference's internal chunk (a block smaller than this is one batch). Batches are aligned runs,
# subtrees of the pairwise tree.
BATCH = CV_BATCH
# Philox calls per numpy tile: keeps the six uint64 temporaries in L1/L2 (measured fastest).
_WORD_TILE_CALLS = 4096


def philox_key(sample_ss: np.random.SeedSequence) -> tuple[int, int]:
    """The MLP's Philox key ``(k0, k1)``: two uint32 words of its sample SeedSequence."""
    k = sample_ss.generate_state(2, dtype=np.uint32)
    return int(k[0]), int(k[1])


def round_keys(key: tuple[int, int]) -> list[tuple[int, int]]:
    """The key used by each of the 10 rounds: round r uses ``(k0 + r*W0, k1 + r*W1) mod 2**32``."""
    k0, k1 = int(key[0]) & MASK32, int(key[1]) & MASK32
    return [((k0 + r * PHILOX_W0) & MASK32, (k1 + r * PHILOX_W1) & MASK32) for r in range(PHILOX_ROUNDS)]


def philox4x32(counter: Sequence[np.ndarray], key: tuple[int, int]) -> tuple[np.ndarray, ...]:
    """Philox4x32-10 on broadcastable uint32 counter words ``(c0, c1, c2, c3)``; four uint32 arrays.

    One round: ``(hi1^c1^k0, lo1, hi0^c3^k1, lo0)`` with ``hi0:lo0 = M0*c0`` and ``hi1:lo1 = M1*c2``
    (32x32 -> 64-bit products, done here in uint64).
    """
    c0, c1, c2, c3 = (np.array(c, dtype=np.uint64) for c in np.broadcast_arrays(*counter))
    p0 = np.empty_like(c0)
    p1 = np.empty_like(c0)
    m0, m1, shift, mask = np.uint64(PHILOX_M0), np.uint64(PHILOX_M1), np.uint64(32), np.uint64(MASK32)
    for k0, k1 in round_keys(key):
        np.multiply(c0, m0, out=p0)
        np.multiply(c2, m1, out=p1)
        # The new (c0, c1, c2, c3) overwrite the old in an order that reads each old word first.
        np.right_shift(p1, shift, out=c0)
        c0 ^= c1
        c0 ^= np.uint64(k0)
        np.right_shift(p0, shift, out=c2)
        c2 ^= c3
        c2 ^= np.uint64(k1)
        np.bitwise_and(p1, mask, out=c1)
        np.bitwise_and(p0, mask, out=c3)
    return tuple(c.astype(np.uint32) for c in (c0, c1, c2, c3))


def n_groups(width: int) -> int:
    """Philox calls per sample: one per group of four neurons (the last group may be partly unused)."""
    return (width + 3) // 4


def philox_words(key: tuple[int, int], n0: int, n1: int, width: int) -> np.ndarray:
    """The integer stage: ``(n1-n0, 4*n_groups(width))`` uint32 words for samples ``[n0, n1)``.

    Word ``4g + i`` of sample ``n`` is output word ``i`` of Philox4x32-10 on counter
    ``(lo32(n), hi32(n), g, 0)``.
    """
    if not 0 <= n0 <= n1:
        raise ValueError(f"need 0 <= n0 <= n1; got n0={n0}, n1={n1}.")
    g = n_groups(width)
    out = np.empty((n1 - n0, g, 4), dtype=np.uint32)
    groups = np.arange(g, dtype=np.uint64)[None, :]  # (1, G)
    tile = max(1, _WORD_TILE_CALLS // g)
    for t0 in range(n0, n1, tile):
        t1 = min(t0 + tile, n1)
        n = np.arange(t0, t1, dtype=np.uint64)[:, None]  # (rows, 1)
        words = philox4x32((n & np.uint64(MASK32), n >> np.uint64(32), groups, np.uint64(0)), key)
        out[t0 - n0 : t1 - n0] = np.stack(words, axis=-1)  # (rows, G, 4)
    return out.reshape(n1 - n0, 4 * g)


def uniforms(words: np.ndarray) -> np.ndarray:
    """``u = RN32(RN32(w) * 2**-32 + 2**-33)``: float32 in ``(0, 1]``, never 0 (so ``log`` is finite).

    Every step is one IEEE-rounded float32 operation (the product is exact), so this is bit-exact on
    every device too. The smallest value, ``2**-33``, caps ``|z|`` at ``sqrt(66 ln 2)`` ~ 6.76.
    """
    return words.astype(np.float32) * U_SCALE + U_OFFSET


def box_muller(words: np.ndarray) -> np.ndarray:
    """The float stage: ``(rows, 2m)`` uint32 words -> ``(rows, 2m)`` float32 standard normals.

    For each pair ``(a, b)`` of adjacent words: ``u1, u2 = uniforms(a, b)``,
    ``r = sqrt(-2 * log(u1))``, ``theta = TWO_PI * u2`` and the pair's normals are
    ``(r * cos(theta), r * sin(theta))``, every operation in float32. ``log``, ``cos`` and ``sin``
    are the platform's float32 functions, so other implementations differ by a few ulp here.
    """
    u = uniforms(words)  # (rows, 2m)
    r = np.sqrt(np.float32(-2.0) * np.log(u[:, 0::2]))  # (rows, m)
    theta = TWO_PI * u[:, 1::2]  # (rows, m)
    z = np.empty(u.shape, dtype=np.float32)
    np.multiply(r, np.cos(theta), out=z[:, 0::2])
    np.multiply(r, np.sin(theta), out=z[:, 1::2])
    return z


def normals(key: tuple[int, int], n0: int, n1: int, width: int) -> np.ndarray:
    """``(n1-n0, width)`` float32 standard normals: the inputs ``x_n`` for samples ``[n0, n1)``."""
    return box_muller(philox_words(key, n0, n1, width))[:, :width]


# --- pairwise sums ------------------------------------------------------------------------------


def pairwise_colsum(a: np.ndarray) -> np.ndarray:
    """Column sums of ``a`` (rows, ...) as a binary tree: rows padded with zeros to a power of two,
    then adjacent rows added, ``(a[0]+a[1]), (a[2]+a[3]), ...``, level by level.

    A zero row changes no sum but the sign of an exact zero, and every result is finally added to
    ``+0.0``, so skipping all-padding subtrees (what streaming implementations do) gives the same bits.
    """
    rows = a.shape[0]
    size = 1 << max(rows - 1, 0).bit_length()
    if size != rows:
        a = np.concatenate([a, np.zeros((size - rows,) + a.shape[1:], dtype=a.dtype)])
    while a.shape[0] > 1:
        a = a[0::2] + a[1::2]
    return a[0]


class PairwiseStack:
    """Combines aligned subtrees of the pairwise sum, pushed left to right, into the tree's value.

    ``push(values, level)`` adds the sum over ``2**level`` consecutive leaves starting at a multiple
    of ``2**level``; a subtree merges with its left sibling as soon as both are known (a binary
    counter). ``value()`` then folds what is left right to left, ``s0 + (s1 + (... + s_last))``,
    which is the tree padded with zero leaves. Only the last push may cover fewer than ``2**level``
    leaves (the ragged end of the data).
    """

    def __init__(self) -> None:
        self._levels: list[int] = []  # strictly decreasing
        self._values: list = []

    def push(self, values, level: int) -> None:
        if self._levels and self._levels[-1] < level:
            raise ValueError(
                f"subtree of level {level} pushed after one of level {self._levels[-1]}: "
                "pushes must be aligned (the start of a 2**level run is a multiple of 2**level)."
            )
        while self._levels and self._levels[-1] == level:
            self._levels.pop()
            values = self._values.pop() + values
            level += 1
        self._levels.append(level)
        self._values.append(values)

    def state(self) -> tuple[list[int], list]:
        """``(levels, values)``: the subtrees pushed and not yet merged (a checkpoint of the sum)."""
        return list(self._levels), list(self._values)

    @classmethod
    def from_state(cls, levels: list[int], values: list) -> "PairwiseStack":
        if len(levels) != len(values) or any(b >= a for a, b in zip(levels, levels[1:])):
            raise ValueError("a PairwiseStack state needs one value per level, levels strictly decreasing")
        stack = cls()
        stack._levels, stack._values = [int(v) for v in levels], list(values)
        return stack

    @property
    def empty(self) -> bool:
        return not self._values

    def value(self):
        if not self._values:
            raise ValueError("PairwiseStack.value() on an empty stack.")
        acc = self._values[-1]
        for v in reversed(self._values[:-1]):
            acc = v + acc
        return acc


def level_of(count: int) -> int:
    """Tree level of a run of ``count`` leaves: ``ceil(log2(count))``."""
    return max(count - 1, 0).bit_length()


# --- blocks -------------------------------------------------------------------------------------


def block_count(n_samples: int, block_size: int = BLOCK_SIZE) -> int:
    """Canonical blocks covering ``n_samples`` (the last one may be ragged)."""
    _check_block_size(block_size)
    if n_samples <= 0:
        raise ValueError(f"n_samples must be positive; got {n_samples}.")
    return -(-n_samples // block_size)


def block_bounds(block_index: int, n_samples: int, block_size: int = BLOCK_SIZE) -> tuple[int, int]:
    """Half-open sample range of canonical block ``block_index``."""
    nb = block_count(n_samples, block_size)
    if not 0 <= block_index < nb:
        raise ValueError(f"block_index {block_index} is out of range [0, {nb}) for n_samples={n_samples}.")
    start = block_index * block_size
    return start, min(start + block_size, n_samples)


def unit_block_ranges(
    n_samples: int, blocks_per_unit: int, block_size: int = BLOCK_SIZE
) -> list[tuple[int, int]]:
    """Aligned block ranges ``[k*b, min((k+1)*b, n_blocks))`` with ``b = blocks_per_unit`` (a power of
    two): the ways of cutting an MLP into units whose results combine exactly (``combine_in_order``)."""
    if blocks_per_unit <= 0 or blocks_per_unit & (blocks_per_unit - 1):
        raise ValueError(f"blocks_per_unit must be a power of two; got {blocks_per_unit}.")
    nb = block_count(n_samples, block_size)
    return [(b, min(b + blocks_per_unit, nb)) for b in range(0, nb, blocks_per_unit)]


def check_block_range(
    block_range: tuple[int, int], n_samples: int, block_size: int = BLOCK_SIZE
) -> tuple[int, int]:
    """Validate ``[b0, b1)``: it must be one subtree, i.e. ``b1 - b0`` blocks starting at a multiple of
    the next power of two ``p >= b1 - b0``, and cover all ``p`` blocks unless it ends the data.

    Guards against a range whose partial sum cannot be combined exactly with its neighbours.
    """
    nb = block_count(n_samples, block_size)
    b0, b1 = int(block_range[0]), int(block_range[1])
    if not 0 <= b0 < b1 <= nb:
        raise ValueError(
            f"block_range ({b0}, {b1}) is invalid for {nb} blocks; need 0 <= start < end <= {nb}."
        )
    p = 1 << level_of(b1 - b0)
    if b0 % p or (b1 - b0 != p and b1 != nb):
        raise ValueError(
            f"block_range ({b0}, {b1}) is not an aligned power-of-two run of blocks; "
            "cut MLPs into units with unit_block_ranges(n_samples, blocks_per_unit)."
        )
    return b0, b1


def _check_block_size(block_size: int) -> None:
    if block_size <= 0 or block_size & (block_size - 1):
        raise ValueError(f"block_size must be a positive power of two; got {block_size}.")


def pack(s: LayerSums) -> np.ndarray:
    """One MLP's sums as one (rows, width) array, the form the tree adds (``unpack`` reverses it):
    ``sums``, ``sumsq`` and, for the control-variate estimator, ``cv`` and ``cvsq``, depth rows each."""
    return np.concatenate(list(s.arrays().values()))  # (2 or 4 * depth, width)


def unpack(packed: np.ndarray, count: int, depth: int) -> LayerSums:
    packed = np.asarray(packed) + 0.0  # the final +0.0: an exact zero sum is +0.0 whatever the path
    n = packed.shape[0] // depth
    return LayerSums.from_arrays(
        {name: packed[k * depth : (k + 1) * depth].copy() for k, name in enumerate(LayerSums.FIELDS[:n])}, count
    )


def batch_raw(weights: np.ndarray, key: tuple[int, int], s0: int, s1: int) -> np.ndarray:
    """The raw sums of the samples ``[s0, s1)`` (one batch: at most ``BATCH`` samples, aligned):
    ``(2·depth + 1, width)`` fp64 rows — every layer's post-ReLU column sums, every layer's sums of
    squares, and the sums of layer 2's pre-activations squared (zeros at depth 1) — each the
    pairwise tree over the samples. Matmuls in float32; leaves converted to fp64 exactly."""
    depth, width, _ = weights.shape
    x = normals(key, s0, s1, width)  # (rows, width) float32
    raw = np.zeros((2 * depth + 1, width), dtype=np.float64)
    for layer in range(depth):
        z = np.matmul(x, weights[layer])  # (rows, width) float32
        if layer == 1:
            raw[2 * depth] = pairwise_colsum(z.astype(np.float64) ** 2)
        x = np.maximum(z, np.float32(0.0))
        raw[layer] = pairwise_colsum(x.astype(np.float64))
        raw[depth + layer] = pairwise_colsum(x.astype(np.float64) ** 2)
    return raw


def block_batches(weights: np.ndarray, key: tuple[int, int], block_index: int, n_samples: int, *,
                  block_size: int = BLOCK_SIZE) -> tuple[np.ndarray, np.ndarray]:
    """One canonical block cut into batches of ``BATCH`` samples: ``(raw (n_batches, 2·depth+1,
    width), counts (n_batches,))`` with ``batch_raw``'s rows."""
    start, end = block_bounds(block_index, n_samples, block_size)
    step = min(BATCH, block_size)
    bounds = [(c0, min(c0 + step, end)) for c0 in range(start, end, step)]
    raw = np.stack([batch_raw(weights, key, c0, c1) for c0, c1 in bounds])
    return raw, np.array([c1 - c0 for c0, c1 in bounds], dtype=np.int64)


def batch_packed(raw: np.ndarray, counts: np.ndarray, depth: int, controls=None) -> np.ndarray:
    """What the tree adds per batch: ``raw``'s sums and sums of squares, and with ``controls`` the
    control-variate rows ``n_b·r̄_b``, ``n_b·r̄_b²`` (``compute.estimators``).
    ``raw``: (..., n_batches, 2·depth+1, width) -> (..., n_batches, 2 or 4 * depth, width)."""
    plain = raw[..., : 2 * depth, :]
    if controls is None:
        return plain
    lead = raw.shape[:-2]
    flat = raw.reshape((-1,) + raw.shape[-2:])
    n = np.broadcast_to(counts, lead).reshape(-1)
    cv, cvsq = batch_rows(controls, flat[:, :depth], flat[:, 2 * depth], n)
    return np.concatenate([plain, cv.reshape(lead + cv.shape[1:]), cvsq.reshape(lead + cv.shape[1:])], axis=-2)


def combine_in_order(parts: Sequence[LayerSums]) -> LayerSums:
    """Combine consecutive subtree results, left to right, into the result of their union.

    ``parts[i]`` must cover a power-of-two number of samples starting at a multiple of it (relative
    to ``parts[0]``, whose start must be a multiple of the union's power-of-two size); only the last
    part may be ragged. Per-block results, per-unit results of ``unit_block_ranges`` and whole-range
    results all qualify, and any such cut of the same samples gives byte-identical sums.
    """
    if not parts:
        raise ValueError("combine_in_order needs at least one part.")
    tree = PairwiseStack()
    total = 0
    for i, part in enumerate(parts):
        c = int(part.count)
        last = i == len(parts) - 1
        if c <= 0:
            raise ValueError(f"parts[{i}] covers {c} samples; every part must cover at least one.")
        if not last and (c & (c - 1) or total % c):
            raise ValueError(
                f"parts[{i}] covers {c} samples starting at offset {total}: only the last part may be "
                "ragged, and each other part must be a power of two starting at a multiple of itself."
            )
        tree.push(pack(part), level_of(c))
        total += c
    return unpack(tree.value(), total, parts[0].sums.shape[-2])
