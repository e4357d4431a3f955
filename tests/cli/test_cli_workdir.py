"""`whest dataset bake` and the places it writes besides --output: the work directory, and a re-run.

- A work directory that is a symlink (dangling or not), a file, a directory of someone else's files,
  or a damaged one (``lock`` a directory, ``units`` a file) is refused with exit 2 and one line naming
  the path and the fix, before the ``Baking``/``Plan`` lines, and nothing is written through it.
- A re-run of a finished bake (a requeued job, a retried array task) exits 0 and says "already
  complete"; anything else at --output is still refused.
- A deleted ``auto-seeds.json`` is named as missing, with how to start over.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from whestbench.dataset import create_dataset
from whestbench.work.workdir import work_dir_for

from helpers.cli import run


TINY = ["--n-mlps", "2", "--n-samples", "200", "--width", "4", "--depth", "2", "--quiet"]


def bake(out: Path, *extra: str) -> list[str]:
    return ["dataset", "bake", *TINY, "--seed", "1", *extra, "--output", str(out)]


def refused(rc, out, err, *must):
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Errno" not in err and "Traceback" not in out + err
    assert "Baking" not in out and "Plan:" not in out  # before the plan line
    for text in must:
        assert text in lines[0], lines[0]


# --- the work directory ---------------------------------------------------------------------------


def test_a_work_directory_that_is_a_symlink_to_a_users_folder_is_refused_and_nothing_written_there(tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    out = tmp_path / "ds"
    work_dir_for(out).symlink_to(mine)
    rc, o, e = run(bake(out), capsys)
    refused(rc, o, e, str(work_dir_for(out)), "symlink", "remove the link")
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    assert not out.exists()


def test_a_dangling_symlink_where_the_work_directory_goes_is_refused(tmp_path, capsys):
    out = tmp_path / "ds"
    work_dir_for(out).symlink_to(tmp_path / "nowhere")
    refused(*run(bake(out), capsys), str(work_dir_for(out)), "symlink")
    assert not (tmp_path / "nowhere").exists()


def test_a_file_where_the_work_directory_goes_is_refused(tmp_path, capsys):
    out = tmp_path / "ds"
    work_dir_for(out).write_text("x")
    refused(*run(bake(out), capsys), str(work_dir_for(out)), "is a file", "remove it")
    assert work_dir_for(out).read_text() == "x"


def test_an_existing_directory_that_is_not_a_work_directory_is_refused(tmp_path, capsys):
    out = tmp_path / "ds"
    work = work_dir_for(out)
    work.mkdir()
    (work / "thesis.tex").write_text("keep")
    refused(*run(bake(out), capsys), str(work), "not a whestbench work directory", "thesis.tex")
    assert sorted(p.name for p in work.iterdir()) == ["thesis.tex"]


@pytest.mark.parametrize("name, make", [
    ("lock", lambda p: p.mkdir()),  # was [Errno 21] Is a directory
    ("units", lambda p: p.write_text("")),  # was [Errno 17] File exists
    ("plan.json", lambda p: p.mkdir()),
])
def test_a_damaged_work_directory_is_named_with_its_fix(tmp_path, capsys, name, make):
    out = tmp_path / "ds"
    work = work_dir_for(out)
    work.mkdir()
    make(work / name)
    refused(*run(bake(out), capsys), str(work / name), "damaged", f"remove {work / name}")


def test_an_interrupted_work_directory_still_resumes(tmp_path, capsys):
    out = tmp_path / "ds"
    work = work_dir_for(out)
    work.mkdir()
    (work / ".plan.json.abc123.tmp").write_text("half")  # an atomic write that was cut short
    rc, o, e = run(bake(out), capsys)
    assert rc == 0, e
    assert (out / "metadata.json").is_file() and not work.exists()


# --- re-running a finished bake -------------------------------------------------------------------


def test_a_rerun_of_a_finished_bake_exits_0_and_says_already_complete(tmp_path, capsys):
    out = tmp_path / "ds"
    assert run(bake(out), capsys)[0] == 0
    before = (out / "metadata.json").read_bytes()
    rc, o, e = run(bake(out), capsys)
    assert rc == 0, e
    assert "already complete" in o and "2 MLPs × 200 samples" in o and "Baking" not in o
    assert (out / "metadata.json").read_bytes() == before
    assert not work_dir_for(out).exists()


def test_a_rerun_of_a_finished_random_seed_bake_and_slice_exit_0(tmp_path, capsys):
    out = tmp_path / "r"
    argv = ["dataset", "bake", *TINY, "--output", str(out)]
    assert run(argv, capsys)[0] == 0
    rc, o, _ = run(argv, capsys)
    assert rc == 0 and "already complete" in o
    part = tmp_path / "p"
    argv = bake(part, "--slice", "1/2")
    assert run(argv, capsys)[0] == 0
    rc, o, _ = run(argv, capsys)
    assert rc == 0 and "already complete" in o and "MLPs 1-1 of 2" in o


@pytest.mark.parametrize("change", [
    ["--seed", "2"], ["--n-samples", "300"], ["--split", "holdout"], ["--estimator", "control-variate"],
    ["--target-stderr", "0.5"], ["--slice", "0/2"],
])
def test_anything_else_at_the_output_is_still_refused(tmp_path, capsys, change):
    out = tmp_path / "ds"
    assert run(bake(out), capsys)[0] == 0
    argv = bake(out)
    for flag, value in zip(change[::2], change[1::2]):
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv[-2:-2] = [flag, value]
    refused(*run(argv, capsys), "already exists")


def test_a_finished_bake_whose_files_were_damaged_is_not_complete(tmp_path, capsys):
    out = tmp_path / "ds"
    assert run(bake(out), capsys)[0] == 0
    shard = next((out / "data").glob("*.parquet"))
    shard.write_bytes(shard.read_bytes()[:-10])
    refused(*run(bake(out), capsys), "already exists")


def test_the_0_16_python_api_still_refuses_an_existing_output_but_bake_returns_the_path(tmp_path):
    """create_dataset keeps whestbench 0.16's FileExistsError (tests/reference runs the same script with
    both); the bake() entry point the launchers use treats a finished bake as done."""
    from whestbench.bake.pipeline import api_config, bake

    kw = dict(n_mlps=2, n_samples=200, width=4, depth=2, mlp_seeds=[1, 2], output_path=tmp_path / "ds")
    first = create_dataset(**kw)
    stamp = (first / "metadata.json").stat().st_mtime_ns
    with pytest.raises(FileExistsError):
        create_dataset(**kw)
    cfg = api_config(2, 200, 4, 2, output_path=tmp_path / "ds", mlp_seeds=[1, 2], seed=None, split="public",
                     config="default", mlp_range=None)
    assert bake(cfg) == first
    assert (first / "metadata.json").stat().st_mtime_ns == stamp


# --- a deleted seed file --------------------------------------------------------------------------


def test_a_deleted_auto_seeds_file_is_named_as_missing(tmp_path, capsys):
    out = tmp_path / "ds"
    work = work_dir_for(out)
    argv = ["dataset", "bake", *TINY, "--output", str(out)]
    # a random-seed bake interrupted after its plan was saved: its seeds and plan are in the work dir
    from whestbench.compute.seeds import random_seeds, seed_list_digest
    from whestbench.work.ledger import Ledger, save_seeds

    seeds = random_seeds(2)
    save_seeds(work, seeds, seed_list_digest(seeds))
    Ledger(work, {"seed_list_digest": seed_list_digest(seeds)})  # writes plan.json
    os.unlink(work / "auto-seeds.json")
    rc, o, e = run(argv, capsys)
    assert rc == 2, e
    assert "auto-seeds.json is missing" in e and f"remove {work}" in e and "differs in" not in e
