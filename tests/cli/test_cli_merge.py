"""``whest dataset merge | combine-splits | prepare-arrow``: what they print, their exit codes (0 done,
1 the data cannot be merged, 2 the command is wrong), one-line errors, and no output on refusal."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import datasets
import pytest

from whestbench.atomic import STAGING_MARK
from whestbench.bake.pipeline import create_dataset
from whestbench.format.checksums import checksum_state
from whestbench.format.reader import read_metadata

from helpers.cli import dataset as _run  # _run(capsys, VERB, ...): `whest dataset VERB ...`


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
    assert rc == 2 and "nope does not exist" in _one_line_error(err)


# --- hostile paths: exit 2, one line, before any work, inputs untouched -------------------------------


def _tree_digest(d: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(d.rglob("*")):
        h.update(p.relative_to(d).as_posix().encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture
def inputs_copy(baked, tmp_path):
    """Private copies of the inputs (a refused command must leave them as they were)."""
    import shutil

    return {name: Path(shutil.copytree(baked[name], tmp_path / name)) for name in ("p0", "p1", "public", "holdout")}


@pytest.mark.parametrize(
    "verb, args, output",
    [
        ("merge", ["p0", "p1"], "p0/data/x"),
        ("merge", ["p0", "p1"], "p1/inside"),
        ("combine-splits", ["public", "holdout"], "public/data/inside"),
        ("combine-splits", ["public", "holdout"], "holdout/x/y"),
    ],
)
def test_an_output_inside_an_input_is_refused_before_any_work(inputs_copy, tmp_path, monkeypatch, capsys, verb, args, output):
    monkeypatch.chdir(tmp_path)
    before = {name: _tree_digest(d) for name, d in inputs_copy.items()}
    rc, stdout, err = _run(capsys, verb, *args, "--output", output)
    assert rc == 2 and "is inside the input" in _one_line_error(err) and stdout == ""
    assert {name: _tree_digest(d) for name, d in inputs_copy.items()} == before
    assert not (tmp_path / output).exists()


@pytest.mark.parametrize("verb, args", [("merge", ["p0", "p1"]), ("combine-splits", ["public", "holdout"])])
@pytest.mark.parametrize(
    "output, message",
    [
        ("dangling", "is a symlink to"),
        ("bad\udcff", "is not valid UTF-8"),
        (".", "names no new directory"),
        ("./", "names no new directory"),
        ("/", "names no new directory"),
        ("", "names no new directory"),
    ],
    ids=["dangling-symlink", "non-utf8", "dot", "dot-slash", "root", "empty"],
)
def test_an_output_that_is_no_new_directory_is_refused_before_any_work(
    inputs_copy, tmp_path, monkeypatch, capsys, verb, args, output, message
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    before = sorted(os.listdir(tmp_path))
    rc, stdout, err = _run(capsys, verb, *args, "--output", output)
    assert rc == 2 and message in _one_line_error(err) and stdout == ""
    assert sorted(os.listdir(tmp_path)) == before  # nothing staged, nothing created


@pytest.mark.parametrize("name", ["nope", "../x", "public/../holdout"])
def test_combine_splits_with_a_default_split_that_is_no_input_exits_2_naming_the_splits(baked, tmp_path, capsys, name):
    out = tmp_path / "combined"
    rc, _, err = _run(capsys, "combine-splits", baked["public"], baked["holdout"], "--output", out, "--default-split", name)
    line = _one_line_error(err)
    assert rc == 2 and f"default split {name!r} is not one of the input splits (public, holdout)" in line
    assert not out.exists()


@pytest.mark.parametrize(
    "path, message",
    [("", "an empty path"), ("dangling", "is a symlink to"), ("bad\udcff", "is not a valid UTF-8 path")],
    ids=["empty", "dangling-symlink", "non-utf8"],
)
def test_prepare_arrow_on_a_path_that_is_no_dataset_directory_exits_2(tmp_path, monkeypatch, capsys, path, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    rc, _, err = _run(capsys, "prepare-arrow", path)
    assert rc == 2 and message in _one_line_error(err)


# --- a killed run leaves staging; the next run of the same output removes it (only if it is ours) ------

# Runs `whest dataset ...` with one step of the writer replaced by: do the step, say so, sleep. The test
# then SIGKILLs the process while its staging directory is on disk, half-way through the write.
_KILLABLE = r"""
import importlib, pathlib, sys, time
module, name = sys.argv[1].rsplit(".", 1)
mod = importlib.import_module(module)
real = getattr(mod, name)
def step_then_wait(*args, **kwargs):
    real(*args, **kwargs)
    pathlib.Path(sys.argv[2]).write_text("written")
    time.sleep(600)
setattr(mod, name, step_then_wait)
from whestbench.cli import main
sys.exit(main(sys.argv[3:]))
"""


def _sigkill_during(tmp_path: Path, step: str, *argv) -> None:
    ready = tmp_path / "step-written"
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf-home"), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLABLE, step, str(ready), "dataset", *map(str, argv)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
    )
    deadline = time.monotonic() + 120
    while not ready.exists():
        if proc.poll() is not None:
            pytest.fail(f"`whest dataset {' '.join(map(str, argv))}` ended (exit {proc.returncode}) before the step: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"{step} was not reached within 120 s")
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL


def _staging_beside(target: Path) -> list[Path]:
    return sorted(target.parent.glob(f".{target.name}.staging-*"))


@pytest.mark.parametrize(
    "verb, inputs, step",
    [
        ("merge", ("p0", "p1"), "whestbench.assemble.merge.finish_dataset_dir"),
        ("combine-splits", ("public", "holdout"), "whestbench.assemble.combine.finish_dataset_dir"),
    ],
)
def test_staging_left_by_a_killed_run_is_removed_by_the_next_run_of_that_output(baked, tmp_path, capsys, verb, inputs, step):
    out = tmp_path / "out"
    users = tmp_path / ".out.staging-mine"  # a user's directory with a staging-like name: never touched
    users.mkdir()
    (users / "notes.txt").write_text("mine")
    args = [*(baked[name] for name in inputs), "--output", out]
    _sigkill_during(tmp_path, step, verb, *args)
    left = [p for p in _staging_beside(out) if p != users]
    assert len(left) == 1 and (left[0] / STAGING_MARK).is_file() and (left[0] / "metadata.json").is_file()
    assert not out.exists()

    rc, _, err = _run(capsys, verb, *args)
    assert rc == 0, err
    assert f"note: removed 1 staging directory that an interrupted earlier run left beside {out}: {left[0].name}" in err
    assert _staging_beside(out) == [users] and (users / "notes.txt").read_text() == "mine"
    assert checksum_state(out, read_metadata(out)).state == "ok"


def test_prepare_arrow_killed_mid_copy_never_lists_its_staging_and_the_rerun_removes_it(baked, tmp_path, capsys):
    out = tmp_path / "combined"
    assert _run(capsys, "combine-splits", baked["public"], baked["holdout"], "--output", out, "--skip-prepared-arrow")[0] == 0
    _sigkill_during(tmp_path, "whestbench.assemble.combine.fsync_tree", "prepare-arrow", out)
    left = sorted((out / "prepared").glob(".*.staging-*"))
    assert len(left) == 1 and (left[0] / STAGING_MARK).is_file()

    rc, _, err = _run(capsys, "prepare-arrow", out)
    assert rc == 0, err
    assert "note: removed 1 staging directory" in err
    md = read_metadata(out)
    assert not [rel for rel in md["checksums"] if "/." in rel]  # no hidden (staging) path is ever listed
    assert not [p for p in (out / "prepared").iterdir() if p.name.startswith(".")]
    assert checksum_state(out, md).state == "ok"
    rc, _, err = _run(capsys, "verify", out)
    assert rc == 0, err


@pytest.mark.parametrize("verb", ["merge", "combine-splits", "prepare-arrow"])
def test_help_exits_0(verb, capsys):
    rc, stdout, _ = _run(capsys, verb, "--help")
    assert rc == 0 and "Usage:" in stdout
