"""Human-readable MLP names: a faker en_US first-last slug per estimator seed, unique per dataset."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Iterable

_DROP = re.compile(r"[^a-z\s-]")
_RUNS = re.compile(r"[\s-]+")


def slug(text: str) -> str:
    return _RUNS.sub("-", _DROP.sub("", text.lower())).strip("-")


@lru_cache(maxsize=1)
def _faker():
    from faker import Faker  # slow import (word lists); only needed when names are made

    return Faker("en_US")


def mlp_name(seed: int) -> str:
    """``first-last`` for one seed. Seeding the instance leaves the global ``random`` untouched."""
    fake = _faker()
    fake.seed_instance(int(seed))
    first = slug(fake.first_name())
    last = slug(fake.last_name())
    return f"{first}-{last}"


def unique_names(seeds: Iterable[int]) -> list[str]:
    """Names in order; the k-th repeat of a base name becomes ``base-k`` (k = 2, 3, ...)."""
    counts: dict[str, int] = {}
    out = []
    for s in seeds:
        base = mlp_name(s)
        counts[base] = counts.get(base, 0) + 1
        out.append(base if counts[base] == 1 else f"{base}-{counts[base]}")
    return out
