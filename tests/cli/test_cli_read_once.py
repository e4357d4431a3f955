"""A dataset is read once: no command reads an input's metadata.json, hashes one of its files, or
lists its shards, twice.

Every read of a local metadata.json goes through ``format.reader.read_metadata_file`` and every
checksum through ``format.checksums.file_sha256``; both are wrapped here (in every module that bound
them) and counted per file while one command runs in-process (issue 26: verify, inspect, load, merge,
combine-splits, push --dry-run).
Listings of a ``data/`` directory are counted at ``Path.iterdir``, whoever asks.
"""

import sys
from collections import Counter
from pathlib import Path

import pytest

import whestbench.format.checksums as checksums
import whestbench.format.reader as reader
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
def reads():
    """``(metadata reads, file hashes)``: two Counters keyed by resolved path, filled while a test runs."""
    md, sha = Counter(), Counter()
    read, hash_ = reader.read_metadata_file, checksums.file_sha256

    def counted_read(path):
        md[Path(path).resolve()] += 1
        return read(path)

    def counted_hash(path):
        sha[Path(path).resolve()] += 1
        return hash_(path)

    _rebind(read, counted_read)
    _rebind(hash_, counted_hash)
    yield md, sha
    _rebind(counted_read, read)
    _rebind(counted_hash, hash_)


def _rebind(old, new) -> None:
    """``new`` in place of ``old`` in the module that defines it and in every whestbench module that bound
    it at its import (``from whestbench.format.checksums import file_sha256``: hub/push does), so no read
    escapes the count whichever module makes it; a module imported while the test runs binds the counted
    one, so the way back is the same sweep."""
    for module in [m for name, m in list(sys.modules.items()) if name.split(".")[0] == "whestbench"]:
        for name, value in list(vars(module).items()):
            if value is old:
                setattr(module, name, new)


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


def _once(counts: Counter, *roots: Path, some: bool = True) -> None:
    """Each file under ``roots`` counted at most once (and, with ``some``, something under each counted)."""
    for root in roots:
        mine = {p: n for p, n in counts.items() if p.is_relative_to(root.resolve())}
        assert mine or not some, f"nothing under {root} was read"
        assert max(mine.values(), default=1) == 1, f"read more than once: {mine}"


def test_verify_and_inspect_read_the_dataset_once(tiny, reads, capsys, tmp_path):
    md, sha = reads
    assert run(["dataset", "verify", str(tiny["public"])], capsys)[0] == 0
    _once(md, tiny["public"])
    _once(sha, tiny["public"])
    md.clear(), sha.clear()
    assert run(["dataset", "inspect", str(tiny["public"])], capsys)[0] == 0
    _once(md, tiny["public"])
    pytest.importorskip("matplotlib")
    md.clear(), sha.clear()
    assert run(["dataset", "inspect", str(tiny["public"]), "--plot", str(tmp_path / "means.png")], capsys)[0] == 0
    _once(md, tiny["public"])


def test_verify_against_and_recompute_read_each_dataset_once(tiny, reads, capsys, tmp_path):
    """The other bake (``--against``), and a cached recompute reused after its completion test and
    its check, are read once too."""
    md, sha = reads
    argv = ["dataset", "verify", str(tiny["public"]), "--recompute", "1", "--recompute-dir", str(tmp_path)]
    for _ in range(2):  # the recompute, then its reuse
        md.clear(), sha.clear()
        assert run(argv, capsys)[0] == 0
        _once(md, tiny["public"], tmp_path)
        _once(sha, tiny["public"], tmp_path, some=False)
    md.clear(), sha.clear()
    assert run(["dataset", "verify", str(tiny["p0"]), "--against", str(tiny["public"])], capsys)[0] == 0
    _once(md, tiny["p0"], tiny["public"])


def test_merge_reads_each_partial_once_first_run_and_rerun(tiny, reads, capsys, tmp_path):
    md, sha = reads
    out = tmp_path / "m"
    for _ in range(2):  # the merge, then a re-run that finds it complete
        md.clear(), sha.clear()
        assert run(["dataset", "merge", str(tiny["p0"]), str(tiny["p1"]), "--output", str(out)], capsys)[0] == 0
        _once(md, tiny["p0"], tiny["p1"], out)
        _once(sha, tiny["p0"], tiny["p1"], out, some=False)


def test_combine_load_and_push_read_each_dataset_once(tiny, reads, capsys, tmp_path):
    md, sha = reads
    out = tmp_path / "c"
    for _ in range(2):  # the combine, then a re-run that finds it complete
        md.clear(), sha.clear()
        assert run(["dataset", "combine-splits", str(tiny["public"]), str(tiny["holdout"]), "--output", str(out)], capsys)[0] == 0
        _once(md, tiny["public"], tiny["holdout"], out)
        _once(sha, tiny["public"], tiny["holdout"], out, some=False)
    from whestbench import load_dataset

    md.clear(), sha.clear()
    load_dataset(str(out), split="holdout")
    _once(md, out)
    md.clear(), sha.clear()
    assert run(["dataset", "push", str(out), "--repo", "org/name", "--dry-run"], capsys)[0] == 0
    _once(md, out)
    _once(sha, out)


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
    md, sha = reads
    md.clear(), sha.clear()
    rc, o, _ = run(argv, capsys)
    assert rc == 0 and "already complete and verified" in o
    _once(md, tmp_path / "a")
    _once(sha, tmp_path / "a")


def test_one_handle_verified_then_loaded_reads_and_hashes_once(combined, reads):
    """The API: what ``load_dataset`` returns comes from the files ``verify_dataset`` checked, read once."""
    from whestbench import load_dataset
    from whestbench.format.reader import open_dataset
    from whestbench.hub.push import plan_push
    from whestbench.verify.run import verify_dataset

    md, sha = reads
    md.clear(), sha.clear()
    handle = open_dataset(combined)
    assert verify_dataset(handle).ok
    assert load_dataset(handle, split="holdout").num_rows == 2
    assert load_dataset(handle).keys() == {"public", "holdout"}
    plan_push(handle, "org/name")
    _once(md, combined)
    _once(sha, combined)
