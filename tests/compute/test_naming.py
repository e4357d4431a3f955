"""MLP names: faker 37 en_US first-last slugs, identical to whestbench 0.16's, unique within a dataset."""

from __future__ import annotations

import random
import re
import sys
import threading

import numpy as np
import pytest

from whestbench.compute import naming
from whestbench.compute.naming import base_names, mlp_name, slug, unique_names
from whestbench.compute.seeds import estimator_seed


@pytest.mark.parametrize(
    "seed, name",
    [(0, "megan-chang"), (1, "dennis-boone"), (42, "danielle-johnson"), (100, "dustin-gibson"), (9999, "mary-moore")],
)
def test_raw_seed_names_are_locked_to_faker_37(seed, name):
    # Names are a published column: a faker upgrade that changes them is a format break.
    assert mlp_name(seed) == name


@pytest.mark.parametrize(
    "input_seed, est_seed, name",
    [
        (1, 2749604155, "luke-martin"),
        (2, 1311118443, "danielle-barker"),
        (42, 233227757, "kathleen-munoz"),
        (123456789, 3367517259, "tammy-miller"),
        (2**63 - 1, 38094081, "steven-sullivan"),
    ],
)
def test_input_seed_to_estimator_seed_to_name_matches_the_reference(input_seed, est_seed, name):
    assert estimator_seed(input_seed) == est_seed
    assert mlp_name(est_seed) == name


def test_repeated_names_get_numbered_suffixes_in_order():
    assert unique_names([42, 42, 42, 1]) == [
        "danielle-johnson",
        "danielle-johnson-2",
        "danielle-johnson-3",
        "dennis-boone",
    ]


def test_unique_names_keeps_distinct_names_bare():
    assert unique_names([0, 1, 100]) == ["megan-chang", "dennis-boone", "dustin-gibson"]


def test_naming_leaves_the_global_random_state_untouched():
    random.seed(2024)
    state = random.getstate()
    mlp_name(7)
    unique_names([1, 2, 3])
    assert random.getstate() == state


def test_names_do_not_depend_on_what_was_named_before():
    first = mlp_name(31337)
    mlp_name(5)
    assert mlp_name(31337) == first


def test_names_are_lowercase_hyphenated_slugs():
    pattern = re.compile(r"^[a-z]+(-[a-z]+)+$")
    for s in range(200):
        assert pattern.match(mlp_name(s)), mlp_name(s)


def test_slug_drops_punctuation_and_collapses_separators():
    assert slug("  O'Connor--Smith  Jr. ") == "oconnor-smith-jr"


def test_names_made_on_several_threads_at_once_are_the_seeds_names():
    # A bake names MLPs on its main thread while its import-prefetch thread warms faker up by naming
    # seed 0: one shared, seeded Faker instance, so unguarded steps interleave and names come out wrong
    # (seen: a resumed bake wrote 2 wrong names of 12). A tiny switch interval forces the interleaving.
    seeds = list(range(1000, 1200))
    want = unique_names(seeds)
    got: list[list[str]] = []
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=lambda: got.extend(unique_names(seeds) for _ in range(3))) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(previous)
    assert len(got) == 12 and all(names == want for names in got)


# --- faker's draws without faker: the same names, for many seeds at once ------------------------

EDGE_SEEDS = [0, 1, 2, 2**31 - 1, 2**31, 2**32 - 2, 2**32 - 1]


def faker_name(fake, seed: int) -> str:
    """The reference's way (facts §2.3): seed a Faker("en_US") instance, draw first_name, last_name."""
    fake.seed_instance(int(seed))
    return f"{slug(fake.first_name())}-{slug(fake.last_name())}"


def faker_unique_names(seeds) -> list[str]:
    """The reference's uniqueness walk over faker's names."""
    from faker import Faker

    fake, counts, out = Faker("en_US"), {}, []
    for s in seeds:
        base = faker_name(fake, s)
        counts[base] = counts.get(base, 0) + 1
        out.append(base if counts[base] == 1 else f"{base}-{counts[base]}")
    return out


@pytest.fixture(scope="module")
def sample_seeds() -> list[int]:
    # 10,007: a ragged last group of the kernel's lock-step lanes
    return EDGE_SEEDS + np.random.default_rng(2024).integers(0, 2**32, 10_000, dtype=np.int64).tolist()


@pytest.fixture(scope="module")
def fakers_names(sample_seeds) -> list[str]:
    from faker import Faker

    fake = Faker("en_US")
    return [faker_name(fake, s) for s in sample_seeds]


@pytest.fixture(params=["random.Random", "compiled"])
def path(request, monkeypatch):
    """Name through ``random.Random`` or through the compiled kernel, whatever the count."""
    monkeypatch.setattr(naming, "KERNEL_MIN", 10**12 if request.param == "random.Random" else 0)
    return request.param


def test_base_names_are_fakers_names(path, sample_seeds, fakers_names):
    assert base_names(sample_seeds) == fakers_names


def test_base_names_of_a_uint32_array_are_fakers_names(path, sample_seeds, fakers_names):
    assert base_names(np.array(sample_seeds, dtype=np.uint32)) == fakers_names


def test_seeds_outside_32_bits_are_named_as_faker_names_them(path):
    # Protocol 2.0 names an MLP by its int63 input seed; random.Random seeds those from two key words.
    from faker import Faker

    fake = Faker("en_US")
    seeds = [2**32, 2**32 + 1, 2**40 + 3, 2**63 - 1, 6717184059027789272, 5]
    assert base_names(seeds) == [faker_name(fake, s) for s in seeds]


def test_compiled_draws_are_random_randoms_for_a_hundred_thousand_keys(monkeypatch):
    monkeypatch.setattr(naming, "KERNEL_MIN", 0)
    keys = EDGE_SEEDS + np.random.default_rng(7).integers(0, 2**32, 100_000, dtype=np.int64).tolist()
    got = naming._first_two_draws(np.array(keys, dtype=np.uint32))
    want = []
    for k in keys:
        draw = random.Random(k).random
        want.append((draw(), draw()))
    assert got.tolist() == [list(w) for w in want]


@pytest.mark.parametrize("u", [0.0, 0.125, 0.25, 0.5, 0.75, 0.9, 1 - 2**-53])
def test_a_draw_on_a_cumulative_weight_picks_as_random_choices_does(u):
    # u * total == a cumulative weight exactly (0.25 * 4 == 1.0): choices bisects to the right.
    class Fixed(random.Random):
        def random(self):
            return u

    weights = {"a": 1.0, "b": 1.0, "c": 2.0}
    want = Fixed().choices(list(weights), weights=list(weights.values()), k=1)[0]
    assert "abc"[int(naming._Words.of(weights).pick(np.array([u]))[0])] == want


@pytest.mark.slow
def test_names_are_fakers_names_for_a_hundred_thousand_seeds():
    # ~10 s, faker's own calls; benchmarks/bench_seed_list.py --check N compares more.
    from faker import Faker

    fake = Faker("en_US")
    seeds = EDGE_SEEDS + np.random.default_rng(99).integers(0, 2**32, 100_000, dtype=np.int64).tolist()
    assert len(seeds) >= naming.KERNEL_MIN  # the compiled path, as a bake takes it
    assert base_names(seeds) == [faker_name(fake, s) for s in seeds]


# --- unique names of a slice of a long list -------------------------------------------------------


@pytest.fixture(scope="module")
def colliding_seeds() -> list[int]:
    """3,000 name seeds in which base names repeat a lot: distinct seeds that share a name (all the
    seeds in 0..59,999 of 40 common names) and some seeds listed several times, shuffled."""
    pool = list(range(60_000))
    by_name: dict[str, list[int]] = {}
    for s, name in zip(pool, base_names(pool)):
        by_name.setdefault(name, []).append(s)
    common = sorted(by_name.values(), key=len, reverse=True)[:40]
    seeds = [s for group in common for s in group][:2_000] + [7, 7, 7, 42, 42]
    rng = np.random.default_rng(5)
    seeds += rng.choice(pool, 3_000 - len(seeds), replace=False).tolist()
    rng.shuffle(seeds)
    return seeds


def test_colliding_seeds_collide(colliding_seeds):
    names = unique_names(colliding_seeds)
    assert sum(n.rsplit("-", 1)[-1].isdigit() for n in names) > 500  # 755: repeats up to "-5" and beyond


def test_unique_names_are_the_reference_walks_names(path, colliding_seeds):
    assert unique_names(colliding_seeds) == faker_unique_names(colliding_seeds)


@pytest.mark.parametrize("start, end", [(0, 1), (0, 3000), (1, 2), (1499, 1501), (2000, 2990), (2998, 3000), (2999, 3000)])
def test_a_slice_names_its_rows_as_the_whole_list_does(path, colliding_seeds, start, end):
    assert unique_names(colliding_seeds, start, end) == unique_names(colliding_seeds)[start:end]


def test_a_slice_does_not_look_at_seeds_after_its_end(colliding_seeds):
    seeds = colliding_seeds + ["not a seed"]
    assert unique_names(seeds, 100, 3000) == unique_names(colliding_seeds)[100:]


def test_word_pairs_that_spell_one_name_count_as_that_name(monkeypatch):
    # Not so in faker 37.12.0's en_US lists (letters only), but names are counted by their text.
    first, last = naming._Words.of({"Ann-Lee": 1.0, "Ann": 1.0}), naming._Words.of({"Ray": 1.0, "Lee-Ray": 1.0})
    monkeypatch.setattr(naming, "_word_lists", lambda: (first, last))
    fi, li = naming._word_indices(range(100))
    a = next(s for s in range(100) if (fi[s], li[s]) == (0, 0))  # "ann-lee" + "ray"
    b = next(s for s in range(100) if (fi[s], li[s]) == (1, 1))  # "ann" + "lee-ray"
    assert unique_names([a, b]) == ["ann-lee-ray", "ann-lee-ray-2"]
    assert unique_names([a, b], 1, 2) == ["ann-lee-ray-2"]
