"""``whest dataset status`` on work files a tired operator or an attacker left (issue 34): every file is
read through a size cap, every count bounded before anything is built from it, every printed field
scrubbed, and a corrupt plan said to be corrupt."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from whestbench.bake.pipeline import BakeConfig
from whestbench.bake.status import bake_status
from whestbench.work.ledger import identity_digest

from helpers.cli import run
from helpers.datasets import made_once, resign, stopped_after_first_unit


SHAPE = dict(n_mlps=4, n_samples=400_000, width=16, depth=3, seed=5, max_threads=1, checkpoint_every=0.05)


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """A bake stopped after its first unit: ``out`` and ``out.whest-work`` (never written to: copy it)."""
    def make(root):
        stopped_after_first_unit(BakeConfig(**SHAPE, output=root / "out"))
    return made_once(tmp_path_factory, "status-hostile", make)


@pytest.fixture
def work(stopped, tmp_path):
    shutil.copytree(stopped / "out.whest-work", tmp_path / "out.whest-work")
    return tmp_path / "out.whest-work"


def _resign_plan(work, edit):
    plan = json.loads((work / "plan.json").read_text())
    edit(plan["identity"])
    plan["digest"] = identity_digest(plan["identity"])
    (work / "plan.json").write_text(json.dumps(plan))


def test_escape_codes_in_the_lock_never_reach_the_terminal(work, capsys):
    """The lock file's host, pid and start time were printed raw."""
    (work / "lock").write_text(json.dumps({"pid": "1\x1b]0;pwned\x07", "host": "vm\x1b[2J\x1b[31m",
                                           "started": "now\x1b[1A\r\x9b", "command": "x"}))
    rc, out, err = run(["dataset", "status", str(work)], capsys)
    assert rc == 0, err
    assert not any(c in out for c in "\x1b\x07\r\x9b"), repr(out)
    assert "  last run: pid 1 on host vm, started now" in out


def test_a_corrupt_plan_is_said_to_be_corrupt_not_not_started(work, capsys):
    """A corrupt plan.json read as "no plan.json yet: the bake had not started its units"."""
    (work / "plan.json").write_bytes(b'{"format": "whestbench-plan/2", "identity": {"n_ml')
    doc = bake_status(work)
    assert "had not started" not in json.dumps(doc)
    assert doc["damaged_plan"].startswith(f"work file {work / 'plan.json'} is unreadable, damaged")
    assert f"remove {work} to start over" in doc["damaged_plan"]
    rc, out, err = run(["dataset", "status", str(work)], capsys)
    assert rc == 0 and "is unreadable, damaged" in out and "had not started" not in out


@pytest.mark.parametrize("key, value", [("n_samples", "400000"), ("n_mlps", "4"), ("width", 1.5), ("depth", None),
                                        ("mlp_range", [0, "4"]), ("mlp_range", [3, 1])])
def test_a_resigned_plan_with_numbers_no_bake_writes_is_damaged_not_a_raw_error(work, capsys, key, value):
    """String numbers in plan.json printed "Cannot specify ',' with 's'." (exit 1)."""
    _resign_plan(work, lambda identity: identity.__setitem__(key, value))
    rc, out, err = run(["dataset", "status", str(work)], capsys)
    assert rc == 0, err
    assert f"holds {key} " in out and "which no bake writes" in out


def test_a_status_record_claiming_a_billion_ranks_builds_no_billion_item_list(work):
    """world_size 1e9 in status.json built a 10**9-item list (3 GB)."""
    from whestbench.work.workdir import update_status

    update_status(work, {"world_size": 10**9, "ranks_recorded_utc": "2026-11-27T10:00:05Z", "ranks": {}})
    doc = bake_status(work)
    assert doc.get("world_size") is None and not doc.get("ranks_never_seen")
    update_status(work, {"world_size": 4})
    assert bake_status(work)["ranks_never_seen"] == [0, 1, 2, 3]


def test_huge_work_files_are_refused_before_they_are_read(work, monkeypatch):
    """A 5 GB sparse unit file took 3.9 GB of RSS in status; a 6 GB plan.json ran a resume out of memory."""
    import whestbench.atomic as atomic

    read = []
    real = os.read
    monkeypatch.setattr(atomic.os, "read", lambda fd, n: read.append(n) or real(fd, n))
    unit = sorted((work / "units").glob("*.unit"))[0]
    with open(unit, "r+b") as f:
        f.truncate(5 * 1024**3)  # sparse: no disk used
    doc = bake_status(work)
    assert doc["damaged_files"] == 1 and doc["units_done"] == 0
    assert sum(read) < 64 * 1024**2  # the other files only, nothing of the 5 GB one
    with open(work / "status.json", "r+b") as f:
        f.truncate(65 * 1024**2)
    with open(work / "lock", "r+b") as f:
        f.truncate(5 * 1024**2)
    doc = bake_status(work)
    assert "last_run" not in doc and doc["samples_total"] == 1_600_000  # both unread, as if absent
    with open(work / "plan.json", "r+b") as f:
        f.truncate(6 * 1024**3)
    doc = bake_status(work)
    assert "more than any plan.json holds (1.0 MiB at most)" in doc["damaged_plan"]
    assert sum(read) < 64 * 1024**2


def test_a_huge_plan_is_refused_by_a_resume_in_one_line(stopped, tmp_path, capsys):
    shutil.copytree(stopped / "out.whest-work", tmp_path / "out.whest-work")
    with open(tmp_path / "out.whest-work" / "plan.json", "r+b") as f:
        f.truncate(6 * 1024**3)
    argv = ["dataset", "bake", "--n-mlps", "4", "--n-samples", "400000", "--width", "16", "--depth", "3", "--seed", "5",
            "--max-threads", "1", "--output", str(tmp_path / "out")]
    rc, out, err = run(argv, capsys)
    assert rc == 2 and err.count("\n") == 1
    assert "more than any plan.json holds (1.0 MiB at most)" in err and "to start over" in err


def test_status_of_a_complete_dataset_whose_metadata_holds_strings(tmp_path, capsys):
    """A complete dataset's metadata with string numbers printed "Cannot specify ',' with 's'."."""
    from whestbench import create_dataset

    ds = create_dataset(2, 1000, 4, 2, seed=1, output_path=tmp_path / "ds")
    md = json.loads((ds / "metadata.json").read_text())
    md.update(n_samples="1000", n_mlps="2\x1b[2J", samples_used={"min": "1", "max": [2]})
    (ds / "metadata.json").write_text(json.dumps(md))
    rc, out, err = run(["dataset", "status", str(ds)], capsys)
    assert rc == 0, err
    assert "\x1b" not in out and out.splitlines()[1].startswith("  2 MLPs, 1–[2] samples each")


@pytest.mark.parametrize("arg", ["", "/"])
def test_status_of_an_empty_or_nameless_path_is_one_line_exit_2(arg, capsys):
    """``status ''`` exited 1 with "PosixPath('.') has an empty name"."""
    rc, out, err = run(["dataset", "status", arg], capsys)
    assert rc == 2 and err.count("\n") == 1 and "PosixPath" not in err


def test_inspect_reports_metadata_no_verb_accepts(tmp_path, capsys):
    """A re-signed ``"n_samples": "20000"`` was described by inspect as if every verb accepted it."""
    from whestbench import create_dataset

    ds = create_dataset(2, 1000, 4, 2, seed=1, output_path=tmp_path / "ds")
    rc, out, _ = run(["dataset", "inspect", str(ds)], capsys)
    assert rc == 0 and "INVALID" not in out
    resign(ds, json.loads((ds / "metadata.json").read_text()) | {"n_samples": "1000"})
    rc, out, _ = run(["dataset", "inspect", str(ds)], capsys)
    assert rc == 0 and out.splitlines()[-1].startswith("  metadata: INVALID — metadata n_samples '1000' is not a positive")
