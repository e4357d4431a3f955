"""MLP names: faker 37 en_US first-last slugs, identical to whestbench 0.16's, unique within a dataset."""

from __future__ import annotations

import random
import re
import sys
import threading

import pytest

from whestbench.compute.naming import mlp_name, slug, unique_names
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
