"""reader: metadata.json, a split's shards, checksums and Parquet tables of a dataset directory."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from whestbench.errors import InvalidDatasetError, MergeCorruptError
from whestbench.format.checksums import (StaleChecksumsWarning, checksum_state, checksums_block, dataset_checksums,
                                         verify_checksums)
from whestbench.format.reader import data_files, read_metadata, read_table

SHARD = "data/public-00000-of-00001.parquet"


@pytest.fixture
def full(golden_copy) -> Path:
    """A private copy of golden/full-w64-d4 (6 MLPs, one public shard) that a test may damage."""
    return golden_copy("full-w64-d4")


def _write_metadata(d: Path, md: dict) -> None:
    (d / "metadata.json").write_text(json.dumps(md, indent=2))


def _with_checksums(d: Path) -> dict:
    md = read_metadata(d)
    md["checksums"] = dataset_checksums(d)
    _write_metadata(d, md)
    return md


def _split_into_shards(d: Path, split: str, sizes: list[int]) -> None:
    """Rewrite ``split``'s single shard as ``len(sizes)`` shards of those row counts."""
    src = d / "data" / f"{split}-00000-of-00001.parquet"
    table = pq.read_table(src)
    src.unlink()
    start = 0
    for i, n in enumerate(sizes):
        pq.write_table(table.slice(start, n), d / "data" / f"{split}-{i:05d}-of-{len(sizes):05d}.parquet")
        start += n


# ----------------------------------------------------------------------------------- read_metadata


def test_read_metadata_returns_the_json_object(golden_dir: Path):
    md = read_metadata(golden_dir / "full-w64-d4")
    assert md == json.loads((golden_dir / "full-w64-d4" / "metadata.json").read_text())


def test_read_metadata_names_a_missing_directory(tmp_path: Path):
    with pytest.raises(InvalidDatasetError, match="no such dataset directory"):
        read_metadata(tmp_path / "absent")


def test_read_metadata_refuses_a_file(tmp_path: Path):
    f = tmp_path / "legacy.npz"
    f.write_bytes(b"x")
    with pytest.raises(InvalidDatasetError, match="is a file, not a directory"):
        read_metadata(f)


def test_read_metadata_refuses_a_directory_without_metadata(tmp_path: Path):
    with pytest.raises(InvalidDatasetError, match="missing metadata.json at"):
        read_metadata(tmp_path)


def test_read_metadata_refuses_invalid_json(tmp_path: Path):
    (tmp_path / "metadata.json").write_text("{not json")
    with pytest.raises(InvalidDatasetError, match="is not valid JSON"):
        read_metadata(tmp_path)


def test_read_metadata_refuses_json_that_is_not_an_object(tmp_path: Path):
    (tmp_path / "metadata.json").write_text("[1, 2]")
    with pytest.raises(InvalidDatasetError, match="must hold a JSON object"):
        read_metadata(tmp_path)


# -------------------------------------------------------------------------------------- data_files


def test_data_files_lists_a_single_shard(golden_dir: Path):
    assert data_files(golden_dir / "full-w64-d4", "public") == [golden_dir / "full-w64-d4" / SHARD]


def test_data_files_lists_shards_in_shard_order(full: Path):
    _split_into_shards(full, "public", [2, 2, 2])
    names = [p.name for p in data_files(full, "public")]
    assert names == [f"public-{i:05d}-of-00003.parquet" for i in range(3)]


def test_data_files_never_claims_another_splits_hyphenated_files(full: Path):
    shutil.copy(full / SHARD, full / "data" / "public-one-00000-of-00001.parquet")
    assert [p.name for p in data_files(full, "public")] == ["public-00000-of-00001.parquet"]


def test_data_files_refuses_a_split_without_shards(full: Path):
    with pytest.raises(InvalidDatasetError, match="no Parquet shards for split 'holdout'"):
        data_files(full, "holdout")


def test_data_files_refuses_a_shard_set_with_a_hole(full: Path):
    _split_into_shards(full, "public", [2, 2, 2])
    (full / "data" / "public-00001-of-00003.parquet").unlink()
    with pytest.raises(InvalidDatasetError, match="incomplete or mixed shard set"):
        data_files(full, "public")


def test_data_files_refuses_shards_from_two_writes(full: Path):
    shutil.copy(full / SHARD, full / "data" / "public-00001-of-00002.parquet")
    with pytest.raises(InvalidDatasetError, match="incomplete or mixed shard set"):
        data_files(full, "public")


# ---------------------------------------------------------------------------------------- checksums


def test_dataset_checksums_hash_every_data_file_with_sorted_keys(golden_dir: Path):
    d = golden_dir / "combined-w64-d4"
    sums = dataset_checksums(d)
    assert list(sums) == sorted(sums) and list(sums)[:2] == ["data/holdout-00000-of-00001.parquet",
                                                             "data/public-00000-of-00001.parquet"]
    assert {rel for rel in sums if rel.startswith("prepared/")} == {
        p.relative_to(d).as_posix() for p in (d / "prepared").rglob("*") if p.is_file()}
    for rel, digest in sums.items():
        assert digest == "sha256:" + hashlib.sha256((d / rel).read_bytes()).hexdigest()


def test_verify_checksums_passes_a_dataset_without_checksums(golden_dir: Path):
    verify_checksums(golden_dir / "full-w64-d4", read_metadata(golden_dir / "full-w64-d4"))


def test_verify_checksums_passes_untouched_files(full: Path):
    verify_checksums(full, _with_checksums(full))


def test_verify_checksums_refuses_a_flipped_byte(full: Path):
    md = _with_checksums(full)
    raw = bytearray((full / SHARD).read_bytes())
    raw[len(raw) // 2] ^= 0x01
    (full / SHARD).write_bytes(bytes(raw))
    with pytest.raises(MergeCorruptError, match="does not match its checksum.*modified or truncated"):
        verify_checksums(full, md)


def test_verify_checksums_refuses_a_truncated_file(full: Path):
    md = _with_checksums(full)
    with open(full / SHARD, "r+b") as f:
        f.truncate(1000)
    with pytest.raises(MergeCorruptError, match="public-00000-of-00001.parquet does not match"):
        verify_checksums(full, md)


def test_verify_checksums_refuses_a_missing_listed_file(full: Path):
    md = _with_checksums(full)
    (full / SHARD).unlink()
    with pytest.raises(MergeCorruptError, match="listed in metadata.json checksums but is missing"):
        verify_checksums(full, md)


def test_verify_checksums_refuses_an_unlisted_parquet_file(full: Path):
    md = _with_checksums(full)
    shutil.copy(full / SHARD, full / "data" / "public-00001-of-00002.parquet")
    with pytest.raises(MergeCorruptError, match="public-00001-of-00002.parquet is not listed"):
        verify_checksums(full, md)


def test_an_unlisted_audit_file_is_a_mismatch_and_a_split_scoped_check_skips_the_trail(full: Path):
    """audit/ is the dataset's too (the audit trail, docs/format.md): an unlisted trail is refused like an
    unlisted shard, a damaged listed one fails the whole check, and a one-split check hashes shards only."""
    md = _with_checksums(full)
    (full / "audit").mkdir()
    shutil.copy(full / SHARD, full / "audit" / "public.parquet")
    with pytest.raises(MergeCorruptError, match="audit/public.parquet is not listed"):
        verify_checksums(full, md)
    md = _with_checksums(full)
    assert "audit/public.parquet" in md["checksums"] and checksum_state(full, md).state == "ok"
    with open(full / "audit" / "public.parquet", "r+b") as f:
        f.write(b"X")
    assert checksum_state(full, md).state == "mismatch"
    assert checksum_state(full, md, split="public").state == "ok"


def test_verify_checksums_with_split_checks_only_that_splits_files(tmp_path: Path, golden_dir: Path):
    d = Path(shutil.copytree(golden_dir / "combined-w64-d4", tmp_path / "combined"))
    md = _with_checksums(d)
    with open(d / "data" / "holdout-00000-of-00001.parquet", "r+b") as f:
        f.truncate(10)
    verify_checksums(d, md, split="public")
    with pytest.raises(MergeCorruptError, match="holdout-00000-of-00001.parquet"):
        verify_checksums(d, md, split="holdout")


@pytest.mark.parametrize(
    "block",
    [
        {"../outside.parquet": "sha256:" + "0" * 64},
        {"/abs/public.parquet": "sha256:" + "0" * 64},
        {SHARD: "md5:abc"},
        ["not", "a", "mapping"],
    ],
    ids=["parent-escape", "absolute", "wrong-digest-format", "not-an-object"],
)
def test_verify_checksums_refuses_a_malformed_block(full: Path, block):
    md = read_metadata(full) | {"checksums": block}
    with pytest.raises(InvalidDatasetError, match="checksums"):
        verify_checksums(full, md)


# --------------------------------------------------------------------------------------- read_table


def test_read_table_reads_every_row_of_a_split(golden_dir: Path):
    table = read_table(golden_dir / "full-w64-d4", "public")
    assert table.num_rows == 6
    assert table.column("mlp_id").to_pylist() == list(range(6))


def test_read_table_concatenates_shards_in_order(full: Path):
    whole = read_table(full, "public")
    _split_into_shards(full, "public", [1, 3, 2])
    assert read_table(full, "public").equals(whole)


def test_read_table_reads_only_the_asked_columns(golden_dir: Path):
    table = read_table(golden_dir / "full-w64-d4", "public", columns=["mlp_id", "mlp_seed"])
    assert table.column_names == ["mlp_id", "mlp_seed"]


def test_read_table_names_a_missing_column(golden_dir: Path):
    with pytest.raises(InvalidDatasetError, match=r"has no column\(s\) \['nope'\]"):
        read_table(golden_dir / "full-w64-d4", "public", columns=["nope"])


def test_read_table_refuses_a_truncated_shard(full: Path):
    with open(full / SHARD, "r+b") as f:
        f.truncate(5000)
    with pytest.raises(InvalidDatasetError, match=r"is not a readable Parquet file \(truncated or corrupt\?\)"):
        read_table(full, "public")


def test_read_table_refuses_a_garbage_shard(full: Path):
    (full / SHARD).write_bytes(b"PAR1" + bytes(range(256)) * 16)
    with pytest.raises(InvalidDatasetError, match="is not a readable Parquet file"):
        read_table(full, "public")


def test_dataset_checksums_never_list_hidden_paths(tmp_path: Path, golden_dir: Path):
    d = Path(shutil.copytree(golden_dir / "combined-w64-d4", tmp_path / "combined"))
    stale = d / "prepared" / ".public.staging-x1" / "cache"
    stale.mkdir(parents=True)
    (stale / "leftover.arrow").write_bytes(b"half-written")
    (d / "data" / ".public-00000-of-00001.parquet.swp").write_bytes(b"editor")
    listed = dataset_checksums(d)
    assert listed and not any(part.startswith(".") for rel in listed for part in rel.split("/"))
    assert {rel.split("/")[0] for rel in listed} == {"data", "prepared"}


# ------------------------------------------------------------------ checksums bound to their metadata


@pytest.fixture(scope="module")
def ours(tmp_path_factory) -> dict[str, Path]:
    """Datasets we wrote (bound checksums): the first half of a bake of 4, and the whole bake."""
    from whestbench.bake.pipeline import create_dataset

    root = tmp_path_factory.mktemp("bound")
    shape = dict(n_mlps=4, n_samples=200, width=8, depth=2, mlp_seeds=[5, 6, 7, 8])
    return {
        "partial": create_dataset(**shape, output_path=root / "partial", mlp_range=(0, 2)),
        "full": create_dataset(**shape, output_path=root / "full"),
    }


@pytest.fixture
def copy_of(ours, tmp_path):
    def copy(name: str) -> Path:
        return Path(shutil.copytree(ours[name], tmp_path / name))

    return copy


def _flip_a_byte(d: Path) -> None:
    raw = bytearray((d / SHARD).read_bytes())
    raw[len(raw) // 2] ^= 0x01
    (d / SHARD).write_bytes(bytes(raw))


def test_our_checksums_are_bound_to_the_facts_they_were_written_for(ours):
    for d in ours.values():
        md = read_metadata(d)
        assert "checksums_written_for" in md
        assert checksum_state(d, md).state == "ok"  # bound: facts other than the recorded ones would not be ok"
    assert read_metadata(ours["partial"])["checksums_written_for"]["mlp_range"] == [0, 2]


def test_checksums_a_0162_merge_carried_over_are_stale_not_a_mismatch(ours, copy_of, as_0162_merge):
    d = copy_of("partial")
    md = as_0162_merge(d, ours["full"])
    state = checksum_state(d, md)
    assert state.state == "stale" and state.error is None
    assert "written by another program" in state.detail and "MLPs [0, 2) of 4" in state.detail
    with pytest.warns(StaleChecksumsWarning, match="stale, written by another program"):
        assert verify_checksums(d, md).state == "stale"
    assert checksums_block(md) is None  # nothing vouches for these files


def test_a_stale_merge_that_also_changed_another_fact_is_refused(ours, copy_of, as_0162_merge):
    d = copy_of("partial")
    md = as_0162_merge(d, ours["full"]) | {"n_samples": 201}
    with pytest.raises(MergeCorruptError, match="says n_samples=201 but its checksums were written for n_samples=200"):
        verify_checksums(d, md)


@pytest.mark.parametrize("missing", ["partials_count", "merged_at_utc"])
def test_a_merge_shape_without_the_merge_keys_is_refused(ours, copy_of, missing, as_0162_merge):
    d = copy_of("partial")
    md = as_0162_merge(d, ours["full"])
    del md[missing]
    with pytest.raises(MergeCorruptError, match="metadata.json was edited after the dataset was written"):
        verify_checksums(d, md)


def test_a_tampered_file_of_ours_is_refused_even_under_metadata_that_claims_a_merge(copy_of):
    d = copy_of("full")
    md = read_metadata(d) | {"merged_at_utc": "2026-01-01T00:00:00+00:00", "partials_count": 2}
    _flip_a_byte(d)
    with pytest.raises(MergeCorruptError, match="does not match its checksum"):
        verify_checksums(d, md)


@pytest.mark.parametrize(
    "key, value",
    [("n_mlps", 3), ("mlp_range", [0, 3]), ("total_n_mlps", 5), ("is_partial", None), ("width", 16),
     ("n_samples", 100), ("split", "holdout"), ("seed_list_digest", "sha256:" + "0" * 64),
     ("seed_protocol", {"name": "whestbench_seedsequence_hierarchy", "version": "2.0"})],
)
def test_editing_a_fact_the_checksums_were_written_for_is_refused_naming_it(copy_of, key, value):
    d = copy_of("partial")
    md = read_metadata(d)
    md = {k: v for k, v in md.items() if k != key} if value is None else md | {key: value}
    with pytest.raises(MergeCorruptError, match=rf"metadata.json says {key}="):
        verify_checksums(d, md)
    assert checksum_state(d, md).state == "mismatch"


def test_editing_provenance_by_hand_keeps_the_checksums_in_force(copy_of):
    d = copy_of("full")
    md = read_metadata(d) | {"pretty_name": "mine", "bake_command": "whest ...", "hardware": {}, "created_at_utc": "x"}
    assert checksum_state(d, md).state == "ok"
    _flip_a_byte(d)
    with pytest.raises(MergeCorruptError, match="does not match its checksum"):
        verify_checksums(d, md)


def test_a_malformed_binding_is_refused(copy_of):
    d = copy_of("full")
    md = read_metadata(d) | {"checksums_written_for": ["not", "an", "object"]}
    with pytest.raises(InvalidDatasetError, match="checksums_written_for"):
        verify_checksums(d, md)


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete", "extra shard", "edit a fact", "malformed"])
def test_the_report_and_the_refusal_are_one_judgement(copy_of, damage):
    d = copy_of("full")
    md = read_metadata(d)
    if damage == "flip":
        _flip_a_byte(d)
    elif damage == "truncate":
        os.truncate(d / SHARD, 100)
    elif damage == "delete":
        (d / SHARD).unlink()
    elif damage == "extra shard":
        shutil.copy(d / SHARD, d / "data" / "public-00001-of-00002.parquet")
    elif damage == "edit a fact":
        md["n_mlps"] = 5
    else:
        md["checksums"] = {"../x": "sha256:" + "0" * 64}
    state = checksum_state(d, md)
    assert state.state == "mismatch" and state.error is not None
    with pytest.raises(type(state.error)) as raised:
        verify_checksums(d, md)
    assert str(raised.value) == str(state.error)


def test_a_dataset_dir_reads_once_and_keeps_what_it_was_given(tmp_path, monkeypatch):
    """``open_dataset``: metadata.json read on first use only (an error too, raised again with the same
    words), and the path as given (an empty argument stays empty: ``Path("")`` would be ".")."""
    import os

    import whestbench.format.reader as reader
    from whestbench.errors import InvalidDatasetError, UsageError
    from whestbench.paths import input_dir

    assert os.fspath(reader.open_dataset("")) == "" and str(reader.open_dataset("")) == ""
    with pytest.raises(UsageError, match="empty path"):
        input_dir(reader.open_dataset(""))
    reads = []
    real = reader.read_metadata_bytes
    monkeypatch.setattr(reader, "read_metadata_bytes", lambda p: (reads.append(p), real(p))[1])
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "metadata.json").write_text("{not json")
    handle = reader.open_dataset(tmp_path / "d")
    assert reader.open_dataset(handle) is handle
    errors = []
    for _ in range(3):
        with pytest.raises(InvalidDatasetError) as e:
            handle.meta(allow_partial=True)
        errors.append(str(e.value))
    assert len(reads) == 1 and len(set(errors)) == 1 and "not valid JSON" in errors[0]


def test_a_metadata_json_that_is_a_directory_has_its_own_message(tmp_path):
    """It said "missing metadata.json"."""
    from whestbench.errors import InvalidDatasetError
    from whestbench.format.reader import read_metadata

    (tmp_path / "metadata.json").mkdir()
    with pytest.raises(InvalidDatasetError, match="exists but is not a regular file") as e:
        read_metadata(tmp_path)
    assert "missing" not in str(e.value)
