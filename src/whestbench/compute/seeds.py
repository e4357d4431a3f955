"""Per-MLP seeds: validation, generation, derivation of the weight/sample/estimator streams.

Seed protocol 3.0: every MLP has an explicit input seed (int63). From it,
``weight_ss, sample_ss, est_ss = SeedSequence(seed).spawn(3)``; ``MLP.seed`` (the estimator seed,
also the name seed) is ``est_ss.generate_state(1)[0]`` (a uint32).
"""

from __future__ import annotations

import hashlib
import reprlib
import secrets
from typing import Iterable, Sequence

import numpy as np

from whestbench.errors import UsageError

SEED_LIMIT = 2**63
PROTOCOL_V3 = {"name": "whestbench_explicit_per_mlp_seeds", "version": "3.0"}
PROTOCOL_V2 = {"name": "whestbench_seedsequence_hierarchy", "version": "2.0"}
PROTOCOL_V4_NAME = "whestbench_kdf_per_mlp_seeds"


class SeedError(UsageError):
    """A seed list that cannot be used: wrong type, range, length or duplicates."""


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
        raise SeedError(f"mlp_seeds must be a JSON array of ints; got {type(seeds).__name__}.")
    out: list[int] = []
    first_seen: dict[int, int] = {}
    for i, v in enumerate(seeds):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise SeedError(f"mlp_seeds[{i}] must be an int; got {type(v).__name__}: {_show(v)}.")
        v = int(v)
        if not 0 <= v < SEED_LIMIT:
            raise SeedError(
                f"mlp_seeds[{i}] = {_show(v)} is out of range [0, 2**63); seeds must fit an int64 column."
            )
        if v in first_seen:
            raise SeedError(
                f"mlp_seeds contains duplicate at indices [{first_seen[v]}, {i}]: both = {v}; "
                "every MLP needs its own seed (regenerate with `whest dataset generate-seeds`)."
            )
        first_seen[v] = i
        out.append(v)
    if n_mlps is not None and len(out) != n_mlps:
        raise SeedError(
            f"mlp_seeds has {len(out)} entries but --n-mlps is {n_mlps}; "
            f"pass a file with exactly {n_mlps} seeds or change --n-mlps."
        )
    return out


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

    A PCG64 stream on ``SeedSequence(root)`` drawn one int63 at a time, skipping repeats, so the
    list for ``n`` is a prefix of the list for any larger ``n``.
    """
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or int(root) < 0:
        raise SeedError(f"--seed must be a non-negative int; got {root!r}.")
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(int(root))))
    out: list[int] = []
    seen: set[int] = set()
    while len(out) < n:
        v = int(rng.integers(0, SEED_LIMIT, dtype=np.int64))
        if v not in seen:
            seen.add(v)
            out.append(v)
    return out


def spawn_streams(mlp_seed: int) -> tuple[np.random.SeedSequence, ...]:
    """``(weight_ss, sample_ss, est_ss)`` for one MLP."""
    return tuple(np.random.SeedSequence(int(mlp_seed)).spawn(3))


def estimator_seed(mlp_seed: int) -> int:
    """``MLP.seed`` under protocol 3.0: a uint32 from the third spawned stream."""
    return int(spawn_streams(mlp_seed)[2].generate_state(1)[0])


def seed_list_digest(seeds: Iterable[int]) -> str:
    """sha256 over the whole seed list (int64 little-endian), so partials can prove they belong together."""
    arr = np.asarray(list(seeds), dtype="<i8")
    return "sha256:" + hashlib.sha256(arr.tobytes()).hexdigest()


def slice_bounds(k: int, n: int, n_mlps: int) -> tuple[int, int]:
    """Half-open MLP range of slice ``k`` of ``n``: equal slices, the last one takes the remainder.

    The user manual promises "the last slice gets the remainder" (SPEC §8), so slice k covers
    ``[k*q, (k+1)*q)`` with ``q = n_mlps // n``, and the last covers ``[(n-1)*q, n_mlps)``.
    """
    q = n_mlps // n
    start = k * q
    end = n_mlps if k == n - 1 else (k + 1) * q
    return start, end


def check_range(mlp_range: Sequence[int], n_mlps: int) -> tuple[int, int]:
    start, end = int(mlp_range[0]), int(mlp_range[1])
    if not 0 <= start < end <= n_mlps:
        raise SeedError(
            f"mlp_range ({start}, {end}) is invalid for n_mlps={n_mlps}; "
            "need 0 <= start < end <= n_mlps (on the CLI --mlp-range START-END is inclusive)."
        )
    return start, end
