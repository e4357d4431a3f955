"""Human-readable MLP names: a faker en_US first-last slug per estimator seed, unique per dataset.

whestbench 0.16 names an MLP by seeding a ``Faker("en_US")`` instance with the MLP's name seed and
calling ``first_name()`` then ``last_name()``. In faker 37.12.0 (pinned) each call is
``random.choices(words, weights, k=1)`` on the instance's own ``random.Random(seed)``: one
``random()`` per word, scaled by the total weight and bisected into the cumulative weights. This
module makes exactly those draws, on faker's own en_US word lists, without faker's per-call cost
(~100 µs a name: it re-accumulates 690 weights on every call):

* a few seeds: ``random.Random(seed)`` itself (~5 µs a name);
* many seeds (``KERNEL_MIN`` or more, each in [0, 2**32), as estimator seeds are): a numba kernel that
  reproduces CPython's Mersenne Twister seeding for a one-word key and its first four outputs
  (~0.2 µs a name). Tests hold it equal to ``random.Random`` and both to faker.

Names are unique within a dataset: the k-th repeat of a base name in the whole seed list becomes
``base-k``. A row's suffix depends on every row before it, so ``unique_names(seeds, start, end)``
(rows ``[start, end)``, a slice) draws the words of ``seeds[:end]`` as arrays, makes each distinct
name's text once, and counts the earlier rows that share a slice row's name. A 2-row slice at row
500,000 of a 10⁶-seed list takes under a second (naming the list through faker took ~2 minutes).
"""

from __future__ import annotations

import itertools
import random
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, Sequence

import numpy as np

from whestbench.optional import require

_DROP = re.compile(r"[^a-z\s-]")
_RUNS = re.compile(r"[\s-]+")

KERNEL_MIN = 50_000
"""From this many seeds on, the compiled kernel draws (below it, ``random.Random`` costs < 0.3 s
and a first run spends no time compiling)."""


def slug(text: str) -> str:
    return _RUNS.sub("-", _DROP.sub("", text.lower())).strip("-")


@dataclass(frozen=True)
class _Words:
    """One of faker's weighted word lists, as ``random.choices`` uses it."""

    slugs: tuple[str, ...]
    bounds: np.ndarray
    """The cumulative weights but the last (``itertools.accumulate``, as ``random.choices`` sums them)."""
    total: float
    """The last cumulative weight."""

    @classmethod
    def of(cls, weighted: dict[str, float]) -> "_Words":
        cum = list(itertools.accumulate(weighted.values()))
        return cls(tuple(slug(w) for w in weighted), np.array(cum[:-1], dtype=np.float64), cum[-1] + 0.0)

    def pick(self, u: np.ndarray) -> np.ndarray:
        """The index ``random.choices(words, weights)`` picks for each draw ``u`` of ``random()``:
        ``bisect_right(cum_weights, u * total, 0, n - 1)``, the same float product and bisection."""
        return np.searchsorted(self.bounds, u * self.total, side="right")


@lru_cache(maxsize=1)
def _word_lists() -> tuple[_Words, _Words]:
    """faker's en_US first and last names with their weights (what ``Faker("en_US").first_name()``
    and ``.last_name()`` draw from), read from faker at run time so faker stays their one source."""
    from faker.providers.person.en_US import Provider  # slow import (word lists); only when naming

    return _Words.of(Provider.first_names), _Words.of(Provider.last_names)


def mlp_name(seed: int) -> str:
    """``first-last`` for one seed: its base name."""
    return base_names([seed])[0]


def base_names(seeds: Sequence[int] | np.ndarray) -> list[str]:
    """The base name (``first-last``, no ``-k`` suffix) of each seed."""
    first, last = _word_lists()
    fi, li = _word_indices(seeds)
    return [f"{first.slugs[f]}-{last.slugs[la]}" for f, la in zip(fi.tolist(), li.tolist())]


def unique_names(seeds: Iterable[int], start: int = 0, end: int | None = None) -> list[str]:
    """Names of rows ``[start, end)`` of the dataset whose name seeds are ``seeds``, in order.

    The k-th repeat of a base name, counted from the start of the whole list, becomes ``base-k``
    (k = 2, 3, ...), so a slice's names are the whole dataset's names for its rows. Seeds after
    ``end`` are not looked at; rows before ``start`` are only counted.
    """
    if not isinstance(seeds, (Sequence, np.ndarray)):
        seeds = list(seeds)
    end = len(seeds) if end is None else end
    first, last = _word_lists()
    fi, li = _word_indices(seeds[:end])
    pairs, pair_of = np.unique(fi * len(last.slugs) + li, return_inverse=True)
    texts = [f"{first.slugs[p // len(last.slugs)]}-{last.slugs[p % len(last.slugs)]}" for p in pairs.tolist()]
    # One key per text: two word pairs could spell one name ("a-b"+"c", "a"+"b-c"), though not in faker 37.12.0.
    key_of_text: dict[str, int] = {}
    keys = np.array([key_of_text.setdefault(t, i) for i, t in enumerate(texts)], dtype=np.int64)[pair_of]
    rows, earlier = keys[start:end], keys[:start]
    seen = Counter(earlier[np.isin(earlier, rows)].tolist())  # the rows' base names before the slice
    out = []
    for key in rows.tolist():
        seen[key] += 1
        out.append(texts[key] if seen[key] == 1 else f"{texts[key]}-{seen[key]}")
    return out


def _word_indices(seeds: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(first, last)`` word indices (int64 arrays) of each seed's name."""
    first, last = _word_lists()
    u = _first_two_draws(seeds)  # (n, 2)
    return first.pick(u[:, 0]), last.pick(u[:, 1])


def _first_two_draws(seeds: Sequence[int] | np.ndarray) -> np.ndarray:
    """``(n, 2)`` float64: the first two ``random.Random(seed).random()`` of each seed."""
    n = len(seeds)
    out = np.empty((n, 2), dtype=np.float64)
    keys = _one_word_keys(seeds) if n >= KERNEL_MIN else None
    if keys is not None:  # out[k] = (r.random(), r.random()) with r = random.Random(int(keys[k]))
        _kernel()(keys, out)
        return out
    for i, s in enumerate(seeds.tolist() if isinstance(seeds, np.ndarray) else seeds):
        draw = random.Random(int(s)).random
        out[i, 0] = draw()
        out[i, 1] = draw()
    return out


def _one_word_keys(seeds: Sequence[int] | np.ndarray) -> np.ndarray | None:
    """``seeds`` as uint32 when every one is in [0, 2**32) (CPython seeds those from one key word), else None."""
    try:
        arr = np.asarray(seeds)
    except OverflowError:
        return None
    if arr.dtype.kind not in "iu" or arr.ndim != 1:
        return None
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) > 0xFFFFFFFF):
        return None
    return arr.astype(np.uint32)


# --- CPython's random.Random(seed), compiled --------------------------------------------------------
#
# ``random.Random(k)`` for 0 <= k < 2**32 runs MT19937's ``init_by_array`` with the one-word key [k];
# its first ``random()`` twists the state and returns ``((y0 >> 5) * 2**26 + (y1 >> 6)) / 2**53`` of the
# first two tempered outputs, the second ``random()`` the same of outputs 2 and 3. Output j needs only
# state words j, j+1 and j+397, so the kernel twists just those. Seeds go through in lock-step groups
# (``_LANES``) so the inner loops vectorise across seeds.

_N, _M = 624, 397
_LANES = 128
_M32 = 0xFFFFFFFF


@lru_cache(maxsize=1)
def _kernel():
    njit = require("numba", needed_for="naming many seeds").njit  # only when many seeds are named at once
    @njit(cache=True, nogil=True)
    def first_draws(keys, out):  # pragma: no cover - compiled
        n = keys.shape[0]
        base = np.empty(_N, np.int64)  # init_genrand(19650218)
        base[0] = 19650218
        for i in range(1, _N):
            p = base[i - 1]
            base[i] = (1812433253 * (p ^ (p >> 30)) + i) & _M32
        mt = np.empty((_N, _LANES), np.int64)  # uint32 values; int64 keeps products exact
        key = np.zeros(_LANES, np.int64)
        y = np.empty(4, np.int64)
        for g in range(0, n, _LANES):
            m = min(_LANES, n - g)
            for b in range(m):
                key[b] = keys[g + b]
            for i in range(_N):
                for b in range(_LANES):
                    mt[i, b] = base[i]
            i = 1
            for _ in range(_N):  # max(N, key length) steps, the key word added each time
                for b in range(_LANES):
                    p = mt[i - 1, b]
                    mt[i, b] = ((mt[i, b] ^ ((p ^ (p >> 30)) * 1664525)) + key[b]) & _M32
                i += 1
                if i >= _N:
                    for b in range(_LANES):
                        mt[0, b] = mt[_N - 1, b]
                    i = 1
            for _ in range(_N - 1):
                for b in range(_LANES):
                    p = mt[i - 1, b]
                    mt[i, b] = ((mt[i, b] ^ ((p ^ (p >> 30)) * 1566083941)) - i) & _M32
                i += 1
                if i >= _N:
                    for b in range(_LANES):
                        mt[0, b] = mt[_N - 1, b]
                    i = 1
            for b in range(m):
                mt[0, b] = 0x80000000
                for j in range(4):  # the twist of words 0..3, then tempering
                    v = (mt[j, b] & 0x80000000) | (mt[j + 1, b] & 0x7FFFFFFF)
                    t = mt[j + _M, b] ^ (v >> 1)
                    if v & 1:
                        t ^= 0x9908B0DF
                    t ^= t >> 11
                    t ^= (t << 7) & 0x9D2C5680
                    t ^= (t << 15) & 0xEFC60000
                    t ^= t >> 18
                    y[j] = t
                out[g + b, 0] = ((y[0] >> 5) * 67108864.0 + (y[1] >> 6)) * (1.0 / 9007199254740992.0)
                out[g + b, 1] = ((y[2] >> 5) * 67108864.0 + (y[3] >> 6)) * (1.0 / 9007199254740992.0)

    return first_draws
