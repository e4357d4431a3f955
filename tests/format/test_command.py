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


@pytest.mark.parametrize("recorded", [
    "whest dataset bake --n-mlps 6 --mlp-seeds 'my seeds.json' --slice 1/3 --output p1",
    "whest dataset bake --torch --n-mlps=6 --seed 1 --pretty-name 'a; rm -rf ~' --quiet",
    ["whest", "dataset", "bake", "--skip-device-check", "--accept-non-invariant", "--output", "o"],
])
def test_parse_bake_accepts_a_bake_with_its_own_flags(recorded):
    assert command.parse_bake(recorded) == command.parse(recorded)


@pytest.mark.parametrize("recorded", [
    "rm -rf ~; whest dataset bake --n-mlps 6",
    "whest dataset bake --n-mlps 6 ; rm -rf ~",
    "whest dataset bake --n-mlps 6 && curl x",
    "whest dataset merge p1 p2 --output o",
    "whestbench dataset bake --n-mlps 6",
    "whest dataset bake --n-mlps 6 --no-such-flag 1",
    "whest dataset bake --n-mlps 6 extra",
    "whest dataset bake --n-mlps",
    "whest dataset bake --torch=1",
    "whest 'unbalanced",
    None,
])
def test_parse_bake_refuses_anything_but_a_bake_command(recorded):
    assert command.parse_bake(recorded) is None


def test_the_bake_flags_table_matches_the_click_command():
    import click

    from whestbench.cli.bake import bake

    options = [p for p in bake.params if isinstance(p, click.Option)]
    assert {o for p in options if not p.is_flag for o in p.opts} == command.BAKE_VALUE_FLAGS
    assert {o for p in options if p.is_flag for o in p.opts} == command.BAKE_SWITCHES
