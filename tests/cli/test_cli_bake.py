"""`whest dataset bake` (and the CLI's common surface): flags, counts, slices and every refused input.

A refused input exits 2 with one `error:` line on stderr, no traceback, and nothing at --output.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata as importlib_metadata
from pathlib import Path

import pytest

from whestbench.cli.common import parse_count
from whestbench.errors import UsageError
from whestbench.work.workdir import work_dir_for

from helpers.cli import run


TINY = ["--n-mlps", "3", "--n-samples", "200", "--width", "4", "--depth", "2", "--quiet"]


def assert_usage_error(rc: int, out: str, err: str, *, match: str, output: Path | None = None) -> None:
    assert rc == 2, f"exit code {rc}; stderr: {err!r}"
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), f"stderr is not one error line: {err!r}"
    assert match in lines[0], f"{match!r} not in {lines[0]!r}"
    assert "Traceback" not in out + err
    if output is not None:
        assert not output.exists(), f"{output} was created by a refused bake"
        assert not work_dir_for(output).exists()


def bake_args(tmp_path: Path, *extra: str) -> list[str]:
    return ["dataset", "bake", *TINY, *extra, "--output", str(tmp_path / "out")]


# --- the entry point -----------------------------------------------------------------------------


def test_version_prints_the_package_version(capsys):
    rc, out, _ = run(["--version"], capsys)
    assert rc == 0
    assert importlib_metadata.version("whestbench") in out


def _verbs() -> list[list[str]]:
    from whestbench.cli.app import ALIASES, dataset

    names = dataset.list_commands(None)  # every verb, loaded or not
    names += sorted(alias for alias, target in ALIASES.items() if target in names)
    return [[], ["dataset"], *(["dataset", name] for name in names)]


@pytest.mark.parametrize("prefix", _verbs(), ids=lambda p: " ".join(p) or "whest")
def test_help_on_every_verb_exits_zero(prefix, capsys):
    rc, out, err = run([*prefix, "--help"], capsys)
    assert rc == 0, err
    assert "Usage:" in out


def test_the_dataset_group_lists_bake_and_generate_seeds(capsys):
    _, out, _ = run(["dataset", "--help"], capsys)
    assert "bake" in out and "generate-seeds" in out


def test_no_arguments_prints_help(capsys):
    rc, out, err = run([], capsys)
    assert rc == 0 and "Usage:" in out and "Traceback" not in err


def test_python_dash_m_whestbench_runs_the_cli():
    proc = subprocess.run([sys.executable, "-m", "whestbench", "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "dataset" in proc.stdout


def test_an_unknown_verb_is_a_usage_error(capsys):
    rc, out, err = run(["dataset", "bakee"], capsys)
    assert_usage_error(rc, out, err, match="bakee")


# --- counts --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, value",
    [
        ("1e9", 10**9), ("1E3", 1000), ("2.5e3", 2500), ("1_000", 1000), ("1_000_000_000", 10**9),
        ("1000", 1000), (" 42 ", 42), ("+7", 7), ("0", 0),
    ],
)
def test_counts_accept_plain_underscored_and_exponent_forms(text, value):
    assert parse_count(text, "--n-samples") == value


@pytest.mark.parametrize("text", ["1.5e0", "1e-3", "abc", "-5", "1__0", "", "1.0", "1e", "0x10", "1,000"])
def test_counts_refuse_non_integral_or_malformed_values(text):
    with pytest.raises(UsageError, match="--n-samples must be a whole number"):
        parse_count(text, "--n-samples")


def test_a_bake_accepts_n_samples_in_exponent_form(tmp_path, capsys, read_metadata):
    rc, out, err = run(["dataset", "bake", "--n-mlps", "2", "--n-samples", "2e3", "--width", "4", "--depth", "2",
                        "--seed", "1", "--quiet", "--output", str(tmp_path / "out")], capsys)
    assert rc == 0, err
    assert "Wrote" in out
    md = read_metadata(tmp_path / "out")
    assert md["n_samples"] == 2000 and md["n_mlps"] == 2
    assert md["seed_source"] == {"method": "derived", "root_seed": 1}


# --- slices and ranges ---------------------------------------------------------------------------


def test_slice_k_of_n_bakes_a_partial_where_the_last_slice_gets_the_remainder(tmp_path, capsys, read_metadata):
    argv = ["dataset", "bake", "--n-mlps", "7", "--n-samples", "100", "--width", "4", "--depth", "1", "--seed", "3",
            "--slice", "2/3", "--quiet", "--output", str(tmp_path / "out")]
    rc, _, err = run(argv, capsys)
    assert rc == 0, err
    md = read_metadata(tmp_path / "out")
    assert (md["is_partial"], md["mlp_range"], md["total_n_mlps"], md["n_mlps"]) == (True, [4, 7], 7, 3)


def test_mlp_range_is_inclusive(tmp_path, capsys, read_metadata):
    rc, _, err = run(bake_args(tmp_path, "--seed", "3", "--mlp-range", "1-1"), capsys)
    assert rc == 0, err
    assert read_metadata(tmp_path / "out")["mlp_range"] == [1, 2]


# --- refused inputs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content, match",
    [
        ("[1, 2", "is not valid JSON"),
        ('{"seeds": [1, 2, 3]}', "must contain a JSON array of ints; got dict"),
        ("[1, 2, 2]", "duplicate at indices [1, 2]: both = 2"),
        ("[1, -2, 3]", "mlp_seeds[1] = -2 is out of range"),
        ("[1, 2, 9223372036854775808]", "mlp_seeds[2] = 9223372036854775808 is out of range"),
        ("[1, 5.0, 3]", "mlp_seeds[1] must be an int; got float: 5.0"),
        ("[1, true, 3]", "mlp_seeds[1] must be an int; got bool"),
        ('[1, "2", 3]', "mlp_seeds[1] must be an int; got str"),
        ("[1, 2]", "has 2 entries but --n-mlps is 3"),
        ("[1, 2, 3, 4]", "has 4 entries but --n-mlps is 3"),
        ("", "is not valid JSON"),
    ],
    ids=["malformed", "not-a-list", "duplicate", "negative", "2**63", "float", "bool", "string", "short", "long",
         "empty-file"],
)
def test_bad_seed_files_are_refused(tmp_path, capsys, content, match):
    seeds = tmp_path / "seeds.json"
    seeds.write_text(content)
    rc, out, err = run(bake_args(tmp_path, "--mlp-seeds", str(seeds)), capsys)
    assert_usage_error(rc, out, err, match=match, output=tmp_path / "out")


def test_a_missing_seed_file_is_refused_with_how_to_make_one(tmp_path, capsys):
    rc, out, err = run(bake_args(tmp_path, "--mlp-seeds", str(tmp_path / "nope.json")), capsys)
    assert_usage_error(rc, out, err, match="generate-seeds", output=tmp_path / "out")
    assert "not found" in err


@pytest.mark.parametrize("kind, words", [("/dev/zero", "is a character device"), ("fifo", "is a FIFO"),
                                         ("directory", "is a directory")])
def test_a_seed_file_that_is_no_regular_file_is_named_for_what_it_is(tmp_path, capsys, kind, words):
    """--mlp-seeds /dev/zero, a FIFO or a directory said "not found; create it with ... > /dev/zero"; a
    FIFO is refused without being opened (it would block)."""
    import os

    path = {"/dev/zero": "/dev/zero", "fifo": str(tmp_path / "seeds.fifo"), "directory": str(tmp_path)}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    rc, out, err = run(bake_args(tmp_path, "--mlp-seeds", path), capsys)
    assert_usage_error(rc, out, err, match=words, output=tmp_path / "out")
    assert "not found" not in err and f"> {path}" not in err


@pytest.mark.parametrize("flag", ["--n-mlps", "--n-samples", "--width", "--depth"])
@pytest.mark.parametrize("value", ["0", "-3"])
def test_non_positive_sizes_are_refused(tmp_path, capsys, flag, value):
    argv = bake_args(tmp_path)
    argv[argv.index(flag) + 1] = value
    rc, out, err = run(argv, capsys)
    assert_usage_error(rc, out, err, match=flag, output=tmp_path / "out")


@pytest.mark.parametrize("value, match", [("0", "--max-threads must be a positive integer"),
                                          ("-1", "--max-threads must be a positive integer"),
                                          ("two", "--max-threads")])
def test_bad_max_threads_is_refused(tmp_path, capsys, value, match):
    rc, out, err = run(bake_args(tmp_path, "--max-threads", value), capsys)
    assert_usage_error(rc, out, err, match=match, output=tmp_path / "out")


@pytest.mark.parametrize(
    "extra, match",
    [
        (["--seed", "1", "--slice", "a/b"], "--slice must be K/N"),
        (["--seed", "1", "--slice", "3/3"], "0 <= K < N"),
        (["--seed", "1", "--slice", "-1/2"], "--slice must be K/N"),
        (["--seed", "1", "--slice", "1/0"], "0 <= K < N"),
        (["--seed", "1", "--slice", "0/4"], "at most 3 slices"),
        (["--slice", "0/2"], "a slice needs the whole dataset's seeds"),
        (["--seed", "1", "--mlp-range", "5"], "--mlp-range must be START-END"),
        (["--seed", "1", "--mlp-range", "3-1"], "END must be >= START"),
        (["--seed", "1", "--mlp-range", "0-99"], "mlp_range (0, 100) is invalid for n_mlps=3"),
        (["--seed", "1", "--mlp-range", "0-1", "--slice", "0/2"], "either --mlp-range or --slice, not both"),
    ],
    ids=["letters", "k-equals-n", "negative-k", "zero-n", "more-slices-than-mlps", "slice-without-seeds",
         "range-one-number", "range-reversed", "range-beyond-n-mlps", "slice-and-range"],
)
def test_bad_slices_and_ranges_are_refused(tmp_path, capsys, extra, match):
    rc, out, err = run(bake_args(tmp_path, *extra), capsys)
    assert_usage_error(rc, out, err, match=match, output=tmp_path / "out")


def test_seed_and_seed_file_together_are_refused(tmp_path, capsys):
    seeds = tmp_path / "seeds.json"
    seeds.write_text("[1, 2, 3]")
    rc, out, err = run(bake_args(tmp_path, "--seed", "1", "--mlp-seeds", str(seeds)), capsys)
    assert_usage_error(rc, out, err, match="either --mlp-seeds or --seed", output=tmp_path / "out")


@pytest.mark.parametrize("flag", ["--split", "--config"])
@pytest.mark.parametrize("name", ["Public", "my_split", "../x", "a/b", "", "1abc"])
def test_invalid_split_and_config_names_are_refused(tmp_path, capsys, flag, name):
    rc, out, err = run(bake_args(tmp_path, flag, name), capsys)
    assert_usage_error(rc, out, err, match=f"name {name!r} is invalid", output=tmp_path / "out")


def test_a_hyphenated_split_is_refused_because_datasets_cannot_load_it(tmp_path, capsys):
    rc, out, err = run(bake_args(tmp_path, "--split", "round-one"), capsys)
    assert_usage_error(rc, out, err, match="hyphen", output=tmp_path / "out")
    assert "datasets" in err


def test_a_hyphenated_config_is_allowed(tmp_path, capsys, read_metadata):
    # Config names are HF config names, which may hold hyphens (whestbench 0.16's rule).
    rc, _, err = run(bake_args(tmp_path, "--config", "round-one"), capsys)
    assert rc == 0, err
    assert read_metadata(tmp_path / "out")["config"] == "round-one"


def test_an_existing_output_is_refused_before_any_work(tmp_path, capsys, count_work):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "precious.txt").write_text("keep me")
    # A bake this size would run for days: the refusal must come before any sampling.
    argv = ["dataset", "bake", "--n-mlps", "1000", "--n-samples", "1e12", "--width", "2048", "--depth", "64",
            "--seed", "1", "--output", str(out_dir)]
    rc, out, err = run(argv, capsys)
    assert_usage_error(rc, out, err, match="already exists")
    assert count_work == {"units": 0, "seeds": 0}  # no timing probe, no seed derived
    assert "Baking" not in out  # nothing announced for a bake that will not happen
    assert [p.name for p in out_dir.iterdir()] == ["precious.txt"]
    assert (out_dir / "precious.txt").read_text() == "keep me"
    assert not work_dir_for(out_dir).exists()


def test_a_tiny_bake_succeeds_and_reports(tmp_path, capsys):
    seeds = tmp_path / "seeds.json"
    seeds.write_text(json.dumps([5, 6, 7]))
    rc, out, err = run(bake_args(tmp_path, "--mlp-seeds", str(seeds)), capsys)
    assert rc == 0, err
    assert "Baking 3 MLPs" in out and "Wrote" in out
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["README.md", "audit", "data", "metadata.json"]
    assert not work_dir_for(tmp_path / "out").exists()


@pytest.mark.parametrize("length, refused", [(233, False), (234, True), (240, True), (255, True), (300, True)])
def test_a_long_output_name_is_refused_before_baking(tmp_path, capsys, monkeypatch, length, refused):
    """240 characters failed with [Errno 36] on the staging name after the work, and left
    `aaa….whest-work` behind: the name is judged with its staging suffix (+22 bytes) first."""
    from whestbench.paths import check_new_output

    name = tmp_path / ("a" * length)
    if not refused:
        assert check_new_output(name) == name
        return
    rc, out, err = run(["dataset", "bake", *TINY, "--seed", "1", "--output", str(name)], capsys)
    assert_usage_error(rc, out, err, match="leave room for the staging directory", output=None)
    assert "Baking" not in out and list(tmp_path.iterdir()) == []


def test_an_output_name_holding_terminal_codes_is_printed_without_them(tmp_path, capsys):
    """`--output "$(printf 'x\\033[2Jy')"` printed the raw escape sequence in the Baking and Wrote
    lines (the terminal cleared its screen): names are printed through text.sanitize, as errors are."""
    out = tmp_path / "x\x1b[2Jy"
    rc, printed, err = run(["dataset", "bake", *TINY, "--seed", "1", "--output", str(out)], capsys)
    assert rc == 0, err
    assert out.is_dir()  # the name itself is the user's: kept as given
    assert "\x1b" not in printed, printed
    assert "\x1b" not in err, err
    assert "Wrote " in printed and "/xy in " in printed, printed  # the sequence dropped from the shown name
    rc, printed, err = run(["dataset", "inspect", str(out), "--plot", str(tmp_path / "p\x1b[31m.png")], capsys)
    assert rc == 0, err
    assert "\x1b" not in printed and "\x1b" not in err and "plot: " in printed, printed
