"""``whest dataset merge | combine-splits | prepare-arrow``: what they print, their exit codes (0 done,
1 the data cannot be merged, 2 the command is wrong), one-line errors, and no output on refusal."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest

from whestbench.cli import main
from whestbench.dataset.bake import create_dataset

SHAPE = dict(n_samples=300, width=8, depth=2)


@pytest.fixture(scope="module")
def baked(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cli-bakes")
    seeds = [1, 2, 3, 4, 5]
    specs = {
        "p0": dict(n_mlps=5, mlp_seeds=seeds, mlp_range=(0, 2)),
        "p1": dict(n_mlps=5, mlp_seeds=seeds, mlp_range=(2, 5)),
        "public": dict(n_mlps=5, mlp_seeds=seeds),
        "holdout": dict(n_mlps=2, mlp_seeds=[6, 7], split="holdout", config="holdout"),
        "leaky": dict(n_mlps=2, mlp_seeds=[8, 1], split="leaky"),
    }
    return {name: create_dataset(**SHAPE, **spec, output_path=root / name) for name, spec in specs.items()}


@pytest.fixture(autouse=True)
def hf_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["dataset", *map(str, argv)])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def _one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


# --- merge -----------------------------------------------------------------------------------------


def test_merge_prints_what_it_merges_and_the_result(baked, tmp_path, capsys):
    out = tmp_path / "merged"
    rc, stdout, _ = _run(capsys, "merge", baked["p0"], baked["p1"], "--output", out)
    assert rc == 0
    assert stdout.splitlines() == [f"Merging 2 partials → {out}", f"✓ Merged 5 MLPs from 2 partials → {out}"]
    assert json.loads((out / "metadata.json").read_text())["n_mlps"] == 5


def test_merge_refusal_is_one_line_exit_1_and_writes_nothing(baked, tmp_path, capsys):
    out = tmp_path / "merged"
    rc, _, err = _run(capsys, "merge", baked["p0"], "--output", out)
    assert rc == 1
    assert "gap: no partial covers MLPs [2, 5)" in _one_line_error(err)
    assert not out.exists()


def test_merge_of_a_complete_dataset_exits_1(baked, tmp_path, capsys):
    rc, _, err = _run(capsys, "merge", baked["public"], "--output", tmp_path / "merged")
    assert rc == 1 and "complete (non-partial)" in _one_line_error(err)


def test_merge_of_a_missing_directory_is_a_usage_error(baked, tmp_path, capsys):
    rc, _, err = _run(capsys, "merge", baked["p0"], tmp_path / "nope", "--output", tmp_path / "merged")
    assert rc == 2 and "does not exist" in _one_line_error(err)
    assert not (tmp_path / "merged").exists()


def test_merge_of_a_file_is_a_usage_error(baked, tmp_path, capsys):
    rc, _, err = _run(capsys, "merge", baked["p0"] / "metadata.json", "--output", tmp_path / "merged")
    assert rc == 2 and "is a file" in _one_line_error(err)


def test_merge_into_an_existing_output_is_a_usage_error_and_leaves_it_alone(baked, tmp_path, capsys):
    out = tmp_path / "merged"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    rc, _, err = _run(capsys, "merge", baked["p0"], baked["p1"], "--output", out)
    assert rc == 2 and "already exists" in _one_line_error(err)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_merge_without_partials_is_a_usage_error(tmp_path, capsys):
    rc, _, err = _run(capsys, "merge", "--output", tmp_path / "merged")
    assert rc == 2 and "Missing argument" in _one_line_error(err)


# --- combine-splits --------------------------------------------------------------------------------


def test_combine_splits_lists_the_splits_and_prepared_copies(baked, tmp_path, capsys):
    out = tmp_path / "combined"
    rc, stdout, _ = _run(capsys, "combine-splits", baked["public"], baked["holdout"], "--output", out)
    assert rc == 0
    assert stdout.splitlines() == [
        f"Combined 2 splits into {out}:",
        "  - holdout  (n_mlps=2)",
        "  - public  (n_mlps=5)",
        "  prepared Arrow artifacts: holdout, public",
    ]
    assert json.loads((out / "metadata.json").read_text())["default_split"] == "public"


def test_combine_splits_can_skip_prepared_arrow_and_set_the_default_split(baked, tmp_path, capsys):
    out = tmp_path / "combined"
    rc, stdout, _ = _run(
        capsys, "combine-splits", baked["public"], baked["holdout"], "--output", out,
        "--skip-prepared-arrow", "--default-split", "holdout",
    )
    assert rc == 0 and "prepared Arrow" not in stdout and not (out / "prepared").exists()
    assert json.loads((out / "metadata.json").read_text())["default_split"] == "holdout"


def test_combine_splits_sharing_seeds_exits_1_and_writes_nothing(baked, tmp_path, capsys):
    out = tmp_path / "combined"
    rc, _, err = _run(capsys, "combine-splits", baked["public"], baked["leaky"], "--output", out)
    assert rc == 1 and "splits must be independent" in _one_line_error(err)
    assert not out.exists()


def test_combine_splits_into_an_existing_output_is_a_usage_error(baked, tmp_path, capsys):
    out = tmp_path / "combined"
    out.mkdir()
    rc, _, err = _run(capsys, "combine-splits", baked["public"], "--output", out)
    assert rc == 2 and "already exists" in _one_line_error(err)
    assert list(out.iterdir()) == []


# --- prepare-arrow ---------------------------------------------------------------------------------


def test_prepare_arrow_patches_a_multi_split_dataset(baked, tmp_path, capsys):
    out = tmp_path / "combined"
    assert _run(capsys, "combine-splits", baked["public"], baked["holdout"], "--output", out, "--skip-prepared-arrow")[0] == 0
    rc, stdout, _ = _run(capsys, "prepare-arrow", out)
    assert rc == 0
    assert stdout.splitlines() == [f"Patched {out} with prepared Arrow artifacts for 2 split(s): holdout, public"]
    assert (out / "prepared" / "holdout" / "state.json").is_file()


def test_prepare_arrow_refuses_a_single_split_dataset(baked, capsys):
    rc, _, err = _run(capsys, "prepare-arrow", baked["public"])
    assert rc == 1 and "only meaningful for multi-split datasets" in _one_line_error(err)


def test_prepare_arrow_on_a_missing_directory_is_a_usage_error(tmp_path, capsys):
    rc, _, err = _run(capsys, "prepare-arrow", tmp_path / "nope")
    assert rc == 2 and "is not a directory" in _one_line_error(err)


@pytest.mark.parametrize("verb", ["merge", "combine-splits", "prepare-arrow"])
def test_help_exits_0(verb, capsys):
    rc, stdout, _ = _run(capsys, verb, "--help")
    assert rc == 0 and "Usage:" in stdout
