"""A dataset is read once: no command reads an input's metadata.json, hashes one of its files, or
lists its shards, twice.

Every read of a local metadata.json goes through ``format.reader.read_metadata_file`` and every
checksum through ``format.checksums.file_sha256``; both are wrapped here and counted per file while one
command runs in-process (issue 26: verify, inspect, load, merge, combine-splits, push --dry-run).
Listings of a ``data/`` directory are counted at ``Path.iterdir``, whoever asks.
"""

from collections import Counter
from pathlib import Path

import pytest

import whestbench.format.checksums as checksums
import whestbench.format.reader as reader
from tests.cli_run import run

_BAKE = ["dataset", "bake", "--width", "4", "--depth", "2", "--n-samples", "2000", "--seed", "1"]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A whole bake, two partials of another, and a holdout split (tiny: seconds in all)."""
    from whestbench.cli import main

    root = tmp_path_factory.mktemp("read_once")
    for args, name in ((["--n-mlps", "2"], "a"), (["--n-mlps", "4", "--slice", "0/2"], "p0"),
                       (["--n-mlps", "4", "--slice", "1/2"], "p1"),
                       (["--n-mlps", "2", "--seed", "2", "--split", "holdout"], "h")):
        assert main(_BAKE + args + ["--output", str(root / name)]) == 0
    return root


@pytest.fixture
def reads(monkeypatch):
    """``(metadata reads, file hashes)``: two Counters keyed by resolved path, filled while a test runs."""
    md, sha = Counter(), Counter()
    read, hash_ = reader.read_metadata_file, checksums.file_sha256

    def counted_read(path):
        md[Path(path).resolve()] += 1
        return read(path)

    def counted_hash(path):
        sha[Path(path).resolve()] += 1
        return hash_(path)

    monkeypatch.setattr(reader, "read_metadata_file", counted_read)
    monkeypatch.setattr(checksums, "file_sha256", counted_hash)
    return md, sha


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


def test_verify_and_inspect_read_the_dataset_once(made, reads, capsys):
    md, sha = reads
    assert run(["dataset", "verify", str(made / "a")], capsys)[0] == 0
    _once(md, made / "a")
    _once(sha, made / "a")
    md.clear(), sha.clear()
    assert run(["dataset", "inspect", str(made / "a")], capsys)[0] == 0
    _once(md, made / "a")
    pytest.importorskip("matplotlib")
    md.clear(), sha.clear()
    assert run(["dataset", "inspect", str(made / "a"), "--plot", str(made / "means.png")], capsys)[0] == 0
    _once(md, made / "a")


def test_verify_against_and_recompute_read_each_dataset_once(made, reads, capsys, tmp_path):
    """The other bake (``--against``), and a cached recompute reused after its completion test and
    its check, are read once too."""
    md, sha = reads
    argv = ["dataset", "verify", str(made / "a"), "--recompute", "1", "--recompute-dir", str(tmp_path)]
    for _ in range(2):  # the recompute, then its reuse
        md.clear(), sha.clear()
        assert run(argv, capsys)[0] == 0
        _once(md, made / "a", tmp_path)
        _once(sha, made / "a", tmp_path, some=False)
    md.clear(), sha.clear()
    assert run(["dataset", "verify", str(made / "p0"), "--against", str(made / "a")], capsys)[0] == 0
    _once(md, made / "p0", made / "a")


def test_merge_reads_each_partial_once_first_run_and_rerun(made, reads, capsys):
    md, sha = reads
    out = made / "m"
    for _ in range(2):  # the merge, then a re-run that finds it complete
        md.clear(), sha.clear()
        assert run(["dataset", "merge", str(made / "p0"), str(made / "p1"), "--output", str(out)], capsys)[0] == 0
        _once(md, made / "p0", made / "p1", out)
        _once(sha, made / "p0", made / "p1", out, some=False)


def test_combine_load_and_push_read_each_dataset_once(made, reads, capsys):
    md, sha = reads
    out = made / "c"
    for _ in range(2):  # the combine, then a re-run that finds it complete
        md.clear(), sha.clear()
        assert run(["dataset", "combine-splits", str(made / "a"), str(made / "h"), "--output", str(out)], capsys)[0] == 0
        _once(md, made / "a", made / "h", out)
        _once(sha, made / "a", made / "h", out, some=False)
    from whestbench import load_dataset

    md.clear(), sha.clear()
    load_dataset(str(out), split="holdout")
    _once(md, out)
    md.clear(), sha.clear()
    assert run(["dataset", "push", str(out), "--repo", "org/name", "--dry-run"], capsys)[0] == 0
    _once(md, out)
    _once(sha, out)


def test_verify_inspect_and_push_list_each_datasets_shards_once(made, listings, capsys):
    """The shard list comes from the one handle: verify's schema check, row scan, card check and prepared
    copies' check, --against's scan of the other bake, inspect's sizes and stderr lines, push's plan."""
    combined = made / "c"
    if not combined.exists():  # this test run alone
        assert run(["dataset", "combine-splits", str(made / "a"), str(made / "h"), "--output", str(combined)],
                   capsys)[0] == 0
    for argv, roots in (
        (["dataset", "verify", str(made / "a")], [made / "a"]),
        (["dataset", "verify", str(combined)], [combined]),  # two splits, each with a prepared copy
        (["dataset", "verify", str(made / "p0"), "--against", str(made / "a")], [made / "p0", made / "a"]),
        (["dataset", "inspect", str(combined)], [combined]),
        (["dataset", "push", str(combined), "--repo", "org/name", "--dry-run"], [combined]),
    ):
        listings.clear()
        assert run(argv, capsys)[0] == 0, argv
        for root in roots:  # one listing per split
            want = 2 if root == combined else 1
            assert listings[(root / "data").resolve()] == want, (argv, dict(listings))


def test_a_bake_rerun_reads_and_verifies_its_output_once(made, reads, capsys):
    """The completion test and the verify that follows it share one handle."""
    md, sha = reads
    rc, o, _ = run(_BAKE + ["--n-mlps", "2", "--output", str(made / "a")], capsys)
    assert rc == 0 and "already complete and verified" in o
    _once(md, made / "a")
    _once(sha, made / "a")


def test_one_handle_verified_then_loaded_reads_and_hashes_once(made, reads):
    """The API: what ``load_dataset`` returns comes from the files ``verify_dataset`` checked, read once."""
    from whestbench import load_dataset
    from whestbench.format.reader import open_dataset
    from whestbench.hub.push import plan_push
    from whestbench.verify.run import verify_dataset

    from whestbench.cli import main

    if not (made / "c").exists():  # this test run alone
        assert main(["dataset", "combine-splits", str(made / "a"), str(made / "h"), "--output", str(made / "c")]) == 0
    md, sha = reads
    md.clear(), sha.clear()
    handle = open_dataset(made / "c")
    assert verify_dataset(handle).ok
    assert load_dataset(handle, split="holdout").num_rows == 2
    assert load_dataset(handle).keys() == {"public", "holdout"}
    plan_push(handle, "org/name")
    _once(md, made / "c")
    _once(sha, made / "c")
