"""A dataset is read once: no command reads an input's metadata.json, hashes one of its files, or
lists its shards, twice.

Reads are counted where they happen, not at functions a module may have bound at import (push's
metadata.json read went uncounted even with every binding swept): every ``open`` of a file for
reading (hashing, ``Path.read_bytes``) and every ``os.open`` whose descriptor is then read
(``atomic.read_regular``, the one reader of metadata.json; an ``os.open`` only to fsync reads
nothing), made by whestbench's own code. Not counted: a copy through ``shutil``, the libraries' own
reads (``datasets`` reads the card to say what it would load), and Parquet footers and rows, which
pyarrow's C++ code reads. Counts are per resolved path, while one command runs in-process (issue 26:
verify, inspect, load, merge, combine-splits, push --dry-run). Listings of a ``data/`` directory are
counted at ``Path.iterdir``, whoever asks.
"""

import builtins
import io
import os
import sys
from collections import Counter
from pathlib import Path

import pytest

from whestbench.cli import main

from helpers.cli import run

_BAKE = ["dataset", "bake", "--width", "4", "--depth", "2", "--n-samples", "2000", "--seed", "1"]


@pytest.fixture(scope="module")
def combined(tiny, tmp_path_factory) -> Path:
    """conftest's tiny public and holdout bakes combined (its reads are nobody's count)."""
    out = tmp_path_factory.mktemp("read_once") / "c"
    assert main(["dataset", "combine-splits", str(tiny["public"]), str(tiny["holdout"]), "--output", str(out)]) == 0
    return out


@pytest.fixture
def reads(monkeypatch):
    """``(metadata.json reads, other files' reads)``: two Counters keyed by resolved path, filled while a
    test runs (module docstring: what counts as a read)."""
    md, other = Counter(), Counter()
    real_open, real_os_open, real_read, real_close = builtins.open, os.open, os.read, os.close
    fds: dict[int, Path] = {}  # descriptors opened for reading and not read yet

    def count(path: Path) -> None:
        caller = sys._getframe(2)  # who called open or os.read, past pathlib and io
        while caller is not None and caller.f_globals.get("__name__") in ("pathlib", "io", "_io"):
            caller = caller.f_back
        if caller is not None and caller.f_globals.get("__name__", "").startswith("whestbench."):
            (md if path.name == "metadata.json" else other)[path] += 1

    def counted_open(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        if not isinstance(file, int) and not set(mode) & set("wax+"):
            count(Path(os.fsdecode(file)).resolve())
        return f

    def counted_os_open(path, flags, *args, **kwargs):
        fd = real_os_open(path, flags, *args, **kwargs)
        if flags & os.O_ACCMODE == os.O_RDONLY and kwargs.get("dir_fd") is None:
            resolved = Path(os.fsdecode(path)).resolve()
            if resolved.is_file():
                fds[fd] = resolved
        return fd

    def counted_read(fd, n):
        path = fds.pop(fd, None)
        if path is not None:
            count(path)
        return real_read(fd, n)

    def counted_close(fd):
        fds.pop(fd, None)
        return real_close(fd)

    monkeypatch.setattr(builtins, "open", counted_open)
    monkeypatch.setattr(io, "open", counted_open)
    monkeypatch.setattr(os, "open", counted_os_open)
    monkeypatch.setattr(os, "read", counted_read)
    monkeypatch.setattr(os, "close", counted_close)
    return md, other


@pytest.fixture
def listings(monkeypatch):
    """How often each ``data/`` directory was listed (``Path.iterdir``), keyed by resolved path."""
    seen = Counter()
    iterdir = Path.iterdir

    def counted(self):
        if self.name == "data":
            seen[self.resolve()] += 1
        return iterdir(self)

    monkeypatch.setattr(Path, "iterdir", counted)
    return seen


def _once(counts: Counter, *roots: Path, some: bool = True, rerun: bool = False) -> None:
    """Each file under ``roots`` counted at most once (and, with ``some``, something under each counted).
    ``rerun``: a re-run that finds its output complete reads the output's README.md twice, a known cost
    left for now: the card refresh (``cli.common.already_complete`` -> ``writer.restore_card``) reads it
    and may rewrite it, then verify's card check reads it again."""
    for root in roots:
        mine = {p: n for p, n in counts.items() if p.is_relative_to(root.resolve())}
        assert mine or not some, f"nothing under {root} was read"
        allowed = {root.resolve() / "README.md": 2} if rerun else {}
        assert all(n <= allowed.get(p, 1) for p, n in mine.items()), f"read more than once: {mine}"


def test_verify_and_inspect_read_the_dataset_once(tiny, reads, capsys, tmp_path):
    md, files = reads
    assert run(["dataset", "verify", str(tiny["public"])], capsys)[0] == 0
    _once(md, tiny["public"])
    _once(files, tiny["public"])
    md.clear(), files.clear()
    assert run(["dataset", "inspect", str(tiny["public"])], capsys)[0] == 0
    _once(md, tiny["public"])
    pytest.importorskip("matplotlib")
    md.clear(), files.clear()
    assert run(["dataset", "inspect", str(tiny["public"]), "--plot", str(tmp_path / "means.png")], capsys)[0] == 0
    _once(md, tiny["public"])


def test_verify_against_and_recompute_read_each_dataset_once(tiny, reads, capsys, tmp_path):
    """The other bake (``--against``), and a cached recompute reused after its completion test and
    its check, are read once too."""
    md, files = reads
    argv = ["dataset", "verify", str(tiny["public"]), "--recompute", "1", "--recompute-dir", str(tmp_path)]
    for _ in range(2):  # the recompute, then its reuse
        md.clear(), files.clear()
        assert run(argv, capsys)[0] == 0
        _once(md, tiny["public"], tmp_path)
        _once(files, tiny["public"], tmp_path, some=False)
    md.clear(), files.clear()
    assert run(["dataset", "verify", str(tiny["p0"]), "--against", str(tiny["public"])], capsys)[0] == 0
    _once(md, tiny["p0"], tiny["public"])


def _assemble_twice(verb: str, inputs: tuple, out, reads, capsys) -> None:
    """``verb`` (merge or combine-splits) run, then re-run on its complete output: each input's and the
    output's files read once per run."""
    md, files = reads
    for rerun in (False, True):
        md.clear(), files.clear()
        assert run(["dataset", verb, *map(str, inputs), "--output", str(out)], capsys)[0] == 0
        _once(md, *inputs, out)
        _once(files, *inputs, some=False)
        _once(files, out, some=False, rerun=rerun)


def test_merge_reads_each_partial_once_first_run_and_rerun(tiny, reads, capsys, tmp_path):
    _assemble_twice("merge", (tiny["p0"], tiny["p1"]), tmp_path / "m", reads, capsys)


def test_combine_load_and_push_read_each_dataset_once(tiny, reads, capsys, tmp_path):
    md, files = reads
    out = tmp_path / "c"
    _assemble_twice("combine-splits", (tiny["public"], tiny["holdout"]), out, reads, capsys)
    from whestbench import load_dataset

    md.clear(), files.clear()
    load_dataset(str(out), split="holdout")
    _once(md, out)
    md.clear(), files.clear()
    assert run(["dataset", "push", str(out), "--repo", "org/name", "--dry-run"], capsys)[0] == 0
    _once(md, out)
    _once(files, out)


def test_verify_inspect_and_push_list_each_datasets_shards_once(tiny, combined, listings, capsys):
    """The shard list comes from the one handle: verify's schema check, row scan, card check and prepared
    copies' check, --against's scan of the other bake, inspect's sizes and stderr lines, push's plan."""
    for argv, roots in (
        (["dataset", "verify", str(tiny["public"])], [tiny["public"]]),
        (["dataset", "verify", str(combined)], [combined]),  # two splits, each with a prepared copy
        (["dataset", "verify", str(tiny["p0"]), "--against", str(tiny["public"])], [tiny["p0"], tiny["public"]]),
        (["dataset", "inspect", str(combined)], [combined]),
        (["dataset", "push", str(combined), "--repo", "org/name", "--dry-run"], [combined]),
    ):
        listings.clear()
        assert run(argv, capsys)[0] == 0, argv
        for root in roots:  # one listing per split
            want = 2 if root == combined else 1
            assert listings[(root / "data").resolve()] == want, (argv, dict(listings))


def test_a_bake_rerun_reads_and_verifies_its_output_once(reads, capsys, tmp_path):
    """The completion test and the verify that follows it share one handle."""
    argv = _BAKE + ["--n-mlps", "2", "--output", str(tmp_path / "a")]
    assert run(argv, capsys)[0] == 0
    md, files = reads
    md.clear(), files.clear()
    rc, o, _ = run(argv, capsys)
    assert rc == 0 and "already complete and verified" in o
    _once(md, tmp_path / "a")
    _once(files, tmp_path / "a", rerun=True)


def test_one_handle_verified_then_loaded_reads_and_hashes_once(combined, reads):
    """The API: what ``load_dataset`` returns comes from the files ``verify_dataset`` checked, read once."""
    from whestbench import load_dataset
    from whestbench.format.reader import open_dataset
    from whestbench.hub.push import plan_push
    from whestbench.verify.run import verify_dataset

    md, files = reads
    md.clear(), files.clear()
    handle = open_dataset(combined)
    assert verify_dataset(handle).ok
    assert load_dataset(handle, split="holdout").num_rows == 2
    assert load_dataset(handle).keys() == {"public", "holdout"}
    plan_push(handle, "org/name")
    _once(md, combined)
    _once(files, combined)


def test_a_second_read_by_push_is_counted(tiny, reads, monkeypatch):
    """The counts have teeth where the old ones had none: push's readers, bound at its import, made to read
    metadata.json and a data file twice, are caught (the old counts wrapped ``read_metadata_file``, which
    push's second read of metadata.json did not go through)."""
    import whestbench.hub.push as push

    d = tiny["public"]
    md, files = reads
    plan_push, real_open, real_hash = push.plan_push, push.open_dataset, push.file_sha256
    md.clear(), files.clear()
    plan_push(d, "org/name")
    _once(md, d)
    _once(files, d)

    def open_twice(path):
        real_open(path).metadata  # a handle read and dropped: metadata.json read a second time
        return real_open(path)

    monkeypatch.setattr(push, "open_dataset", open_twice)
    md.clear(), files.clear()
    plan_push(d, "org/name")
    with pytest.raises(AssertionError, match="read more than once"):
        _once(md, d)
    shard = next((d / "data").iterdir())
    monkeypatch.setattr(push, "file_sha256", lambda p: (real_hash(shard), real_hash(p))[1])
    monkeypatch.setattr(push, "checksums_block", lambda md: None)  # push hashes each file itself
    md.clear(), files.clear()
    plan_push(d, "org/name")
    with pytest.raises(AssertionError, match="read more than once"):
        _once(files, d)
