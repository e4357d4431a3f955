"""command: a recorded bake command is parsed and rewritten the same way by merge and the card, in
both flag spellings (``--flag value`` and ``--flag=value``)."""

from __future__ import annotations

import pytest

from whestbench.format import command

BAKE = "whest dataset bake --n-mlps 6 --mlp-seeds 'my seeds.json' --slice 1/3 --output p1"


@pytest.mark.parametrize(
    "recorded, argv",
    [
        (BAKE, ["whest", "dataset", "bake", "--n-mlps", "6", "--mlp-seeds", "my seeds.json", "--slice", "1/3", "--output", "p1"]),
        (["whest", "--seed", "1"], ["whest", "--seed", "1"]),
        ("whest 'unbalanced", None),
        ("   ", None),
        ([], None),
        (["whest", 3], None),
        (42, None),
        (None, None),
    ],
)
def test_parse_reads_shell_text_or_an_argv_list_and_refuses_anything_else(recorded, argv):
    assert command.parse(recorded) == argv


def test_join_quotes_what_parse_splits():
    argv = command.parse(BAKE)
    assert command.parse(command.join(argv)) == argv


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["bake", "--slice", "1/3", "--n-mlps", "6"], ["bake", "--n-mlps", "6"]),
        (["bake", "--mlp-range=0-3", "--n-mlps", "6"], ["bake", "--n-mlps", "6"]),
        (["bake", "--slice=0/2", "--mlp-range", "2-3", "--seed", "1"], ["bake", "--seed", "1"]),
        (["bake", "--slice"], ["bake"]),  # a flag without its value: dropped, nothing else eaten
        (["bake", "--slices", "x"], ["bake", "--slices", "x"]),  # another flag that shares a prefix
    ],
)
def test_drop_flags_removes_each_flag_with_its_value(argv, expected):
    assert command.drop_flags(argv, command.RANGE_FLAGS) == expected


@pytest.mark.parametrize(
    "argv",
    [
        ["bake", "--output", "a", "--seed", "1"],
        ["bake", "--output=a", "--seed", "1"],
        ["bake", "--seed", "1"],
        ["bake", "--output", "a", "--seed", "1", "--output=b"],
    ],
)
def test_set_flag_gives_the_flag_once_at_the_end(argv):
    assert command.set_flag(argv, "--output", "OUT") == ["bake", "--seed", "1", "--output", "OUT"]


@pytest.mark.parametrize(
    "argv, value",
    [
        (["bake", "--mlp-seeds", "s.json"], "s.json"),
        (["bake", "--mlp-seeds=s.json"], "s.json"),
        (["bake", "--mlp-seeds"], None),
        (["bake", "--seed", "1"], None),
    ],
)
def test_flag_value_reads_either_spelling(argv, value):
    assert command.flag_value(argv, "--mlp-seeds") == value
