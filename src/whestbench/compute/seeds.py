"""Per-MLP seeds: validation, generation, derivation of the weight/sample/estimator streams.

Seed protocol 3.0: every MLP has an explicit input seed (int63). From it,
``weight_ss, sample_ss, est_ss = SeedSequence(seed).spawn(3)``; ``MLP.seed`` (the estimator seed,
also the name seed) is ``est_ss.generate_state(1)[0]`` (a uint32).
"""

from __future__ import annotations

import hashlib
import reprlib
import secrets
from typing import Callable, Iterable, Sequence

import numpy as np

from whestbench.errors import SeedError
from whestbench.values import as_int, is_int

SEED_LIMIT = 2**63
GENERATE = "`whest dataset generate-seeds` writes a valid list."
PROTOCOL_V3 = {"name": "whestbench_explicit_per_mlp_seeds", "version": "3.0"}


def _show(v: object) -> str:
    """A short, safe rendering of a bad value (huge ints and deeply nested lists included)."""
    if isinstance(v, int) and v.bit_length() > 128:
        return f"<an integer of {v.bit_length()} bits>"
    try:
        return reprlib.repr(v)
    except (ValueError, RecursionError):
        return f"<a {type(v).__name__}>"


def validate_mlp_seeds(seeds: object, n_mlps: int | None = None) -> list[int]:
    """Return ``seeds`` as a list of ints, or raise SeedError naming the first bad entry.

    Guards against: floats that look like ints (5.0), bools, values outside int64's non-negative
    range (they would not fit the ``mlp_seed`` column), duplicates (two MLPs with identical weights
    and samples) and a list whose length is not ``n_mlps``.
    """
    if not isinstance(seeds, (list, tuple)):
        raise SeedError(f"mlp_seeds must be a JSON array of ints; got {type(seeds).__name__}.", fix=GENERATE)
    if _plain_distinct_int63(seeds) and (n_mlps is None or len(seeds) == n_mlps):
        return list(seeds)
    out: list[int] = []  # one entry at a time, to name the first bad one
    first_seen: dict[int, int] = {}
    for i, v in enumerate(seeds):
        if not is_int(as_int(v)):
            raise SeedError(f"mlp_seeds[{i}] must be an int; got {type(v).__name__}: {_show(v)}.", fix=GENERATE)
        v = as_int(v)
        if not 0 <= v < SEED_LIMIT:
            raise SeedError(f"mlp_seeds[{i}] = {_show(v)} is out of range [0, 2**63);",
                            fix="seeds must fit an int64 column.")
        if v in first_seen:
            raise SeedError(f"mlp_seeds contains duplicate at indices [{first_seen[v]}, {i}]: both = {v};",
                            fix="every MLP needs its own seed (regenerate with `whest dataset generate-seeds`).")
        first_seen[v] = i
        out.append(v)
    if n_mlps is not None and len(out) != n_mlps:
        raise SeedError(f"mlp_seeds has {len(out)} entries but --n-mlps is {n_mlps};",
                        fix=f"pass a file with exactly {n_mlps} seeds or change --n-mlps.")
    return out


def _plain_distinct_int63(seeds: Sequence[object]) -> bool:
    """Whether every seed is a plain int in [0, 2**63) and none repeats, checked on arrays (a 10⁶-seed
    list in ~0.1 s, against ~1 s for the loop that names a bad entry)."""
    if not all(type(v) is int for v in seeds):  # not bool, not a float, not a numpy scalar
        return False
    try:
        arr = np.array(seeds, dtype=np.int64)
    except OverflowError:
        return False
    arr.sort()
    return bool(arr.size == 0 or (arr[0] >= 0 and not (arr[1:] == arr[:-1]).any()))


def random_seeds(n: int) -> list[int]:
    """``n`` distinct int63 seeds from the OS's entropy (``secrets``), as whestbench 0.16 does."""
    out: list[int] = []
    seen: set[int] = set()
    while len(out) < n:
        v = secrets.randbits(63)
        if v not in seen:
            seen.add(v)
            out.append(v)
    return out


def derived_seeds(root: int, n: int) -> list[int]:
    """``n`` distinct int63 seeds derived deterministically from ``root`` (``--seed S``).

    The first ``n`` distinct values of the int63 stream ``rng.integers(0, 2**63)`` of a PCG64 on
    ``SeedSequence(root)``, so the list for ``n`` is a prefix of the list for any larger ``n``.
    They are drawn in batches: numpy draws each value of ``[0, 2**63)`` from exactly one 64-bit
    output (Lemire's method with this range never rejects: the value is the output >> 1), one value
    at a time or many, so a batch is the same stream as single draws.
    """
    if not is_int(as_int(root), 0):
        raise SeedError(f"--seed must be a non-negative int; got {root!r}.", fix="Pass 0 or a larger whole number.")
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(as_int(root))))
    return _first_distinct(lambda k: rng.integers(0, SEED_LIMIT, size=k, dtype=np.int64), n)


def _first_distinct(draw: Callable[[int], np.ndarray], n: int) -> list[int]:
    """The first ``n`` distinct values of the stream that ``draw(k)`` (its next ``k`` values) reads.

    Each round draws as many values as are still missing, so no value past the ``n``-th distinct
    one is drawn.
    """
    out = np.zeros(0, dtype=np.int64)
    while out.size < n:
        stream = np.concatenate([out, draw(n - out.size)])
        _, first = np.unique(stream, return_index=True)
        out = stream[np.sort(first)]  # repeats dropped, stream order kept
    return out.tolist()


WEIGHTS, SAMPLES, ESTIMATOR, PILOT, AUDIT = 0, 1, 2, 3, 5
"""The children of ``SeedSequence(mlp_seed)``, one use each and none shared: the weights, the bake's
samples (philox keys on this child too), the estimator seed (``MLP.seed``), the control-variate and
planning pilot, and verify's own audit inputs (child 4 is unused). Nothing a bake computed is re-used
to judge it."""


def stream(mlp_seed: int, child: int) -> np.random.SeedSequence:
    """Child ``child`` of ``SeedSequence(mlp_seed)`` (one of the table above)."""
    return np.random.SeedSequence(int(mlp_seed)).spawn(child + 1)[child]


def stream_name(child: int) -> str:
    """How the metadata spells a child: ``SeedSequence(mlp_seed).spawn(4)[3]`` for ``PILOT``."""
    return f"SeedSequence(mlp_seed).spawn({child + 1})[{child}]"


def spawn_streams(mlp_seed: int) -> tuple[np.random.SeedSequence, ...]:
    """``(weight_ss, sample_ss, est_ss)`` for one MLP: children ``WEIGHTS``, ``SAMPLES``, ``ESTIMATOR``."""
    return tuple(np.random.SeedSequence(int(mlp_seed)).spawn(ESTIMATOR + 1))


def estimator_seed(mlp_seed: int) -> int:
    """``MLP.seed`` under protocol 3.0: a uint32 from the third spawned stream."""
    return int(stream(mlp_seed, ESTIMATOR).generate_state(1)[0])


# numpy's SeedSequence constants (numpy/random/bit_generator.pyx); the algorithm is O'Neill's seed_seq.
_INIT_A, _MULT_A = 0x43B0D7E5, 0x931E8875  # the entropy hash
_INIT_B, _MULT_B = 0x8B51F9DD, 0x58F38DED  # the output hash (generate_state)
_MIX_L, _MIX_R = 0xCA01F9DD, 0x4973F715
_POOL = 4


def estimator_seeds(mlp_seeds: Sequence[int] | np.ndarray) -> np.ndarray:
    """``estimator_seed`` of each seed (uint32 array), computed for all of them at once.

    ``SeedSequence(s).spawn(3)[2]`` has the entropy words ``[lo32(s), hi32(s), 0, 0, 2]`` for every
    ``0 <= s < 2**64``: ``s`` as 32-bit words, zero-padded to the pool size because a spawn key
    follows, then the spawn key ``(2,)``. Mixing them into the 4-word pool and hashing pool word 0
    is a fixed sequence of uint32 operations, done here on arrays (~40 µs a seed through numpy's
    SeedSequence objects, ~0.1 µs here). The hash constants do not depend on the data: they are
    advanced as Python ints.
    """
    arr = np.asarray(mlp_seeds).reshape(-1)
    if arr.size and (arr.dtype.kind not in "iuO" or (arr.dtype.kind == "i" and arr.min() < 0)):
        raise ValueError(f"estimator seeds need non-negative int seeds; got {arr.dtype} values down to {arr.min()}.")
    s = arr.astype(np.uint64)  # Python ints out of [0, 2**64) raise OverflowError
    zero = np.zeros_like(s, dtype=np.uint32)
    entropy = [(s & np.uint64(0xFFFFFFFF)).astype(np.uint32), (s >> np.uint64(32)).astype(np.uint32),
               zero, zero, zero + np.uint32(2)]  # fmt: skip
    hash_const = _INIT_A

    def hashmix(value: np.ndarray) -> np.ndarray:
        nonlocal hash_const
        value = value ^ np.uint32(hash_const)
        hash_const = (hash_const * _MULT_A) & 0xFFFFFFFF
        value = value * np.uint32(hash_const)
        return value ^ (value >> np.uint32(16))

    def mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        r = np.uint32(_MIX_L) * x - np.uint32(_MIX_R) * y
        return r ^ (r >> np.uint32(16))

    pool = [hashmix(entropy[i]) for i in range(_POOL)]
    for src in range(_POOL):  # every word into every other, so late words reach early ones
        for dst in range(_POOL):
            if src != dst:
                pool[dst] = mix(pool[dst], hashmix(pool[src]))
    for word in entropy[_POOL:]:  # entropy beyond the pool (here the spawn key) into each word
        for dst in range(_POOL):
            pool[dst] = mix(pool[dst], hashmix(word))
    out = pool[0] ^ np.uint32(_INIT_B)  # generate_state(1)[0]
    out = out * np.uint32((_INIT_B * _MULT_B) & 0xFFFFFFFF)
    return out ^ (out >> np.uint32(16))


def seed_list_digest(seeds: Iterable[int]) -> str:
    """sha256 over the whole seed list (int64 little-endian), so partials can prove they belong together."""
    arr = np.asarray(seeds if isinstance(seeds, (list, tuple, np.ndarray)) else list(seeds), dtype="<i8")
    return "sha256:" + hashlib.sha256(arr.tobytes()).hexdigest()


def slice_bounds(k: int, n: int, n_mlps: int) -> tuple[int, int]:
    """Half-open MLP range of slice ``k`` of ``n``: equal slices of ``n_mlps // n``, the last one taking
    the remainder (as the user manual promises, SPEC §8)."""
    q = n_mlps // n
    start = k * q
    end = n_mlps if k == n - 1 else (k + 1) * q
    return start, end


def check_range(mlp_range: Sequence[int], n_mlps: int) -> tuple[int, int]:
    start, end = int(mlp_range[0]), int(mlp_range[1])
    if not 0 <= start < end <= n_mlps:
        raise SeedError(f"mlp_range ({start}, {end}) is invalid for n_mlps={n_mlps};",
                        fix="need 0 <= start < end <= n_mlps (on the CLI --mlp-range START-END is inclusive).")
    return start, end
