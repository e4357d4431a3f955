"""Human-readable MLP names: a faker en_US first-last slug per estimator seed, unique per dataset."""

from __future__ import annotations

import re
import threading
from functools import lru_cache
from typing import Iterable

_DROP = re.compile(r"[^a-z\s-]")
_RUNS = re.compile(r"[\s-]+")
# The one Faker instance is seeded, then drawn from: two threads naming at once (the bake's
# import-prefetch thread and the writer, say) would interleave those steps and get wrong names.
_LOCK = threading.Lock()


def slug(text: str) -> str:
    return _RUNS.sub("-", _DROP.sub("", text.lower())).strip("-")


@lru_cache(maxsize=1)
def _faker():
    from faker import Faker  # slow import (word lists); only needed when names are made

    return Faker("en_US")


def mlp_name(seed: int) -> str:
    """``first-last`` for one seed. Seeding the instance leaves the global ``random`` untouched."""
    with _LOCK:
        fake = _faker()
        fake.seed_instance(int(seed))
        first, last = fake.first_name(), fake.last_name()
    return f"{slug(first)}-{slug(last)}"


def unique_names(seeds: Iterable[int]) -> list[str]:
    """Names in order; the k-th repeat of a base name becomes ``base-k`` (k = 2, 3, ...)."""
    counts: dict[str, int] = {}
    out = []
    for s in seeds:
        base = mlp_name(s)
        counts[base] = counts.get(base, 0) + 1
        out.append(base if counts[base] == 1 else f"{base}-{counts[base]}")
    return out
