"""loader: load_dataset, metadata, iter_mlps, mlp_at and mlp_from_row, on datasets made by whestbench 0.16.2.

Hub loads are exercised against tests/helpers/hub_fake.py (``HfApi.dataset_info``, ``hf_hub_download``,
``snapshot_download`` and ``datasets.load_dataset`` replaced by a fake that records its arguments):
nothing touches the network.
"""

from __future__ import annotations

import gc
import json
import shutil
from pathlib import Path

import datasets
import numpy as np
import pyarrow.parquet as pq
import pytest

from whestbench.compute.mlp import weights_for_seed
from whestbench.compute.seeds import estimator_seed
from whestbench.errors import InvalidDatasetError, MergeCorruptError
from whestbench.errors import HubError
from whestbench.hub.loader import iter_mlps, load_dataset, metadata, mlp_at, mlp_from_row
from whestbench.format.checksums import dataset_checksums, file_sha256
from whestbench.format.reader import read_metadata
from whestbench.format.schema import COLUMNS

from helpers.datasets import edit_metadata as _edit_metadata
from helpers.hub_fake import FakeHub, clock, no_network, offline_download_error  # noqa: F401  (autouse fixtures)


SHARD = "data/public-00000-of-00001.parquet"
REAL_LOAD_DATASET = datasets.load_dataset


@pytest.fixture(scope="module", autouse=True)
def private_hf_cache(tmp_path_factory):
    """Keep the Arrow cache that parquet loads build out of the user's ~/.cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path_factory.mktemp("hf-cache")))
        yield


@pytest.fixture
def full(golden_copy) -> Path:
    """A private copy of golden/full-w64-d4 (6 MLPs, one public shard) that a test may damage."""
    return golden_copy("full-w64-d4")


@pytest.fixture
def combined(golden_copy) -> Path:
    """A private copy of golden/combined-w64-d4 (public 6 + holdout 3, with prepared Arrow)."""
    return golden_copy("combined-w64-d4")


def _add_checksums(d: Path) -> dict:
    return _edit_metadata(d, checksums=dataset_checksums(d))


# ------------------------------------------------------------------------- single-split directories


@pytest.mark.parametrize("name", ["full-w64-d4", "full-w256-d8", "merged-w64-d4", "holdout-w64-d4"])
def test_single_split_golden_loads_as_a_dataset_with_its_metadata(name: str, golden_dir: Path):
    ds = load_dataset(golden_dir / name)
    md = read_metadata(golden_dir / name)
    assert isinstance(ds, datasets.Dataset)
    assert len(ds) == md["n_mlps"]
    assert ds.column_names == list(COLUMNS)
    assert ds.split == md["split"]
    assert metadata(ds) == md


def test_a_path_may_be_given_as_a_string(golden_dir: Path):
    assert len(load_dataset(str(golden_dir / "full-w64-d4"))) == 6


def test_single_split_accepts_its_own_split_name(golden_dir: Path):
    assert len(load_dataset(golden_dir / "holdout-w64-d4", split="holdout")) == 3


def test_single_split_refuses_another_split_naming_the_one_it_has(golden_dir: Path):
    with pytest.raises(InvalidDatasetError, match="split 'holdout' is not in .* it has one split, 'public'"):
        load_dataset(golden_dir / "full-w64-d4", split="holdout")


def test_a_merged_dataset_holds_the_same_mlps_as_the_full_bake(golden_dir: Path):
    merged, full_ = load_dataset(golden_dir / "merged-w64-d4"), load_dataset(golden_dir / "full-w64-d4")
    for column in ("mlp_id", "mlp_name", "mlp_seed"):
        assert merged[column] == full_[column]


def test_legacy_single_split_without_split_key_loads_public(fixtures16: Path):
    ds = load_dataset(fixtures16 / "single_split_v3_protocol")
    assert "split" not in metadata(ds)
    assert len(ds) == 4


# -------------------------------------------------------------------------- multi-split directories


@pytest.mark.parametrize("name", ["golden/combined-w64-d4", "multi_split_v3.0", "multi_config_v3.0"])
def test_multi_split_without_split_gives_a_datasetdict_over_sorted_splits(name: str, dataset16):
    dd = load_dataset(dataset16(name))
    md = read_metadata(dataset16(name))
    assert isinstance(dd, datasets.DatasetDict)
    assert list(dd) == sorted(md["splits"])
    assert {s: len(dd[s]) for s in dd} == {s: e["n_mlps"] for s, e in md["splits"].items()}
    assert metadata(dd) == md


def test_each_member_of_a_datasetdict_carries_its_split_projection(golden_dir: Path):
    dd = load_dataset(golden_dir / "combined-w64-d4")
    md = read_metadata(golden_dir / "combined-w64-d4")
    top = {k: v for k, v in md.items() if k != "splits"}
    for s in dd:
        assert metadata(dd[s]) == top | md["splits"][s]
        assert metadata(dd, split=s) == metadata(dd[s])


@pytest.mark.parametrize("split", ["public", "holdout"])
def test_multi_split_with_split_gives_that_split_with_its_projection(split: str, golden_dir: Path):
    ds = load_dataset(golden_dir / "combined-w64-d4", split=split)
    md = read_metadata(golden_dir / "combined-w64-d4")
    assert isinstance(ds, datasets.Dataset)
    assert len(ds) == md["splits"][split]["n_mlps"]
    projection = metadata(ds)
    assert "splits" not in projection
    assert projection["config"] == md["splits"][split]["config"]
    assert projection["default_split"] == "public" and "prepared_splits" in projection


def test_multi_split_with_split_reads_the_parquet_rows_not_the_prepared_copy(golden_dir: Path):
    ds = load_dataset(golden_dir / "combined-w64-d4", split="holdout")
    assert ds.cache_files and not any("/prepared/" in f["filename"] for f in ds.cache_files)


@pytest.mark.parametrize("signed", [False, True], ids=["0.16-without-checksums", "re-signed"])
def test_load_returns_the_parquet_rows_even_when_the_prepared_copy_differs(combined: Path, signed: bool,
                                                                           damage_prepared):
    """The 0.16 golden combined dataset, its prepared holdout copy +0.5 on every mean: without checksums
    (as 0.16 wrote it) and re-signed (checksums over data/ and prepared/ recomputed). Loading the split
    gives the Parquet rows, bit for bit (it gave 1.115 where the row says 0.615)."""
    damage_prepared(combined, "holdout", resign=signed)
    assert ("checksums" in read_metadata(combined)) is signed
    rows = pq.read_table(combined / "data" / "holdout-00000-of-00001.parquet").column("all_layer_means")
    want = np.asarray(rows.to_pylist(), dtype=np.float32)
    got = np.asarray(load_dataset(combined, split="holdout").with_format("numpy")["all_layer_means"], dtype=np.float32)
    assert got.shape == want.shape and np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert np.array_equal(np.asarray(load_dataset(combined)["holdout"].with_format("numpy")["all_layer_means"],
                                     dtype=np.float32), want)


def test_a_broken_prepared_copy_does_not_stop_a_load(combined: Path):
    (combined / "prepared" / "holdout" / "data-00000-of-00001.arrow").write_bytes(b"garbage")
    ds = load_dataset(combined, split="holdout")
    assert len(ds) == 3
    assert not any("/prepared/" in f["filename"] for f in ds.cache_files)


def test_a_split_load_checks_that_splits_shards_against_the_checksums(combined: Path):
    _add_checksums(combined)
    assert len(load_dataset(combined, split="holdout")) == 3
    with open(combined / "data" / "holdout-00000-of-00001.parquet", "ab") as f:
        f.write(b" ")
    with pytest.raises(MergeCorruptError, match="does not match its checksum"):
        load_dataset(combined, split="holdout")


def test_multi_split_refuses_an_unknown_split_naming_the_splits(golden_dir: Path):
    with pytest.raises(InvalidDatasetError, match=r"split 'nope' not in \['holdout', 'public'\]"):
        load_dataset(golden_dir / "combined-w64-d4", split="nope")


# ------------------------------------------------------------------------------ seeds and anchors


def test_protocol_3_fixture_gives_the_anchor_names_and_derived_seeds(fixtures16: Path):
    ds = load_dataset(fixtures16 / "single_split_v3_protocol")
    mlps = list(iter_mlps(ds))
    assert [m.name for m in mlps] == ["emily-hart", "elizabeth-rice", "mary-rivera", "ann-andrews"]
    assert ds["mlp_seed"] == [1001, 2002, 3003, 4004]
    assert [m.seed for m in mlps] == [estimator_seed(s) for s in (1001, 2002, 3003, 4004)]


def test_protocol_3_seed_anchor_from_the_golden_bake(golden_dir: Path):
    # seeds-2.json holds 6717184059027789272, whose estimator seed the facts record as 2861657444
    assert mlp_at(load_dataset(golden_dir / "full-w256-d8"), 0).seed == 2861657444


def test_protocol_2_fixture_takes_mlp_seed_as_the_seed(fixtures16: Path):
    ds = load_dataset(fixtures16 / "multi_split_v3.0", split="public")
    mlps = list(iter_mlps(ds))
    assert [m.seed for m in mlps] == ds["mlp_seed"]
    assert (mlps[0].name, mlps[0].seed) == ("luke-martin", 2749604155)


def test_protocol_3_fixture_weights_are_the_seeds_weights_bit_for_bit(fixtures16: Path):
    mlp = mlp_at(load_dataset(fixtures16 / "single_split_v3_protocol"), 0)
    np.testing.assert_array_equal(np.stack(mlp.weights), weights_for_seed(1001, 4, 2))
    # the facts print W[0][0] for seed 1001 to 8 significant digits, hence the relative tolerance
    expected = [-0.57080257, 1.2914264, -0.4143602, 0.12275726]
    np.testing.assert_allclose(mlp.weights[0][0], expected, rtol=1e-7)


# ------------------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("k", [0, 1, 2])
def test_partials_are_refused_with_the_merge_hint(k: int, golden_dir: Path):
    with pytest.raises(InvalidDatasetError, match=r"partial dataset .*`whest dataset merge <partials> --output <dir>`"):
        load_dataset(golden_dir / f"part-{k}-of-3")


def test_streaming_a_local_directory_is_refused(golden_dir: Path):
    with pytest.raises(ValueError, match="streaming=True is only supported for Hugging Face Hub repos"):
        load_dataset(golden_dir / "full-w64-d4", streaming=True)


def test_a_file_path_is_refused(golden_dir: Path):
    with pytest.raises(InvalidDatasetError, match="is a file, not a directory"):
        load_dataset(golden_dir / "full-w64-d4" / "metadata.json")


def test_a_directory_without_metadata_is_refused(full: Path):
    (full / "metadata.json").unlink()
    with pytest.raises(InvalidDatasetError, match="missing metadata.json at"):
        load_dataset(full)


def test_a_non_string_split_is_refused(golden_dir: Path):
    with pytest.raises(TypeError, match="split must be a split name"):
        load_dataset(golden_dir / "full-w64-d4", split=["public"])


@pytest.mark.parametrize("path", ["./no-such-dir", "/no/such/dataset", "~/no-such-whest-dataset", "sub/no-such"])
def test_a_missing_path_is_reported_not_looked_up_on_the_hub(path: str, tmp_path: Path, monkeypatch, hub):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    with pytest.raises(InvalidDatasetError, match="no such dataset directory"):
        load_dataset(path)
    assert hub.calls == []


def test_a_missing_shard_is_refused(full: Path):
    (full / SHARD).unlink()
    with pytest.raises(InvalidDatasetError, match="no Parquet shards for split 'public'"):
        load_dataset(full)


def test_a_truncated_shard_without_checksums_is_refused_readably(full: Path):
    with open(full / SHARD, "r+b") as f:
        f.truncate(5000)
    with pytest.raises(InvalidDatasetError, match=r"not a readable Parquet file \(truncated or corrupt\?\)"):
        load_dataset(full)


def test_rows_that_disagree_with_n_mlps_are_refused(full: Path):
    _edit_metadata(full, n_mlps=7)
    with pytest.raises(MergeCorruptError, match="holds 6 rows but metadata.json says n_mlps=7"):
        load_dataset(full)


def test_a_shard_missing_a_column_is_refused(full: Path):
    table = pq.read_table(full / SHARD).drop_columns(["avg_variance"])
    pq.write_table(table, full / SHARD)
    with pytest.raises(InvalidDatasetError, match=r"lacks the column\(s\) \['avg_variance'\]"):
        load_dataset(full)


# ------------------------------------------------------------------------------------- checksums


def test_a_dataset_with_intact_checksums_loads(full: Path):
    _add_checksums(full)
    assert len(load_dataset(full)) == 6


def test_a_flipped_byte_is_refused_by_checksums(full: Path):
    _add_checksums(full)
    raw = bytearray((full / SHARD).read_bytes())
    raw[len(raw) // 3] ^= 0x40
    (full / SHARD).write_bytes(bytes(raw))
    with pytest.raises(MergeCorruptError, match="does not match its checksum.*re-bake"):
        load_dataset(full)


def test_a_truncated_shard_is_refused_by_checksums(full: Path):
    _add_checksums(full)
    with open(full / SHARD, "r+b") as f:
        f.truncate(100_000)
    with pytest.raises(MergeCorruptError, match="modified or truncated"):
        load_dataset(full)


def test_an_unlisted_extra_shard_is_refused_by_checksums(full: Path):
    _add_checksums(full)
    shutil.copy(full / SHARD, full / "data" / "public-00001-of-00002.parquet")
    with pytest.raises(MergeCorruptError, match="is not listed in metadata.json checksums"):
        load_dataset(full)


def test_a_one_split_load_checks_only_that_splits_files(combined: Path):
    _add_checksums(combined)
    with open(combined / "data" / "holdout-00000-of-00001.parquet", "r+b") as f:
        f.truncate(10)
    assert len(load_dataset(combined, split="public")) == 6
    with pytest.raises(MergeCorruptError, match="holdout-00000-of-00001.parquet"):
        load_dataset(combined)


# ----------------------------------------------------------------------------------- shard layout


def test_a_directory_whose_name_has_glob_characters_loads(tmp_path: Path, golden_dir: Path):
    d = shutil.copytree(golden_dir / "full-w64-d4", tmp_path / "run [1]*?")
    assert len(load_dataset(d)) == 6


def test_a_split_in_several_shards_loads_in_shard_order(full: Path):
    table = pq.read_table(full / SHARD)
    (full / SHARD).unlink()
    for i, (start, n) in enumerate([(0, 4), (4, 2)]):
        pq.write_table(table.slice(start, n), full / "data" / f"public-{i:05d}-of-00002.parquet")
    ds = load_dataset(full)
    assert ds["mlp_id"] == list(range(6))
    # plain `datasets` finds the same layout on its own (the seed docs load directories that way)
    assert REAL_LOAD_DATASET(str(full), split="public")["mlp_id"] == list(range(6))


# ------------------------------------------------------------------------------------- metadata()


def test_metadata_of_a_dataset_not_loaded_by_us_is_refused():
    ds = datasets.Dataset.from_dict({"x": [1]})
    with pytest.raises(InvalidDatasetError, match=r"no metadata is attached to this Dataset; did you load it via whestbench.load_dataset"):
        metadata(ds)


def test_metadata_of_a_datasetdict_not_loaded_by_us_is_refused():
    with pytest.raises(InvalidDatasetError, match="no metadata is attached to this DatasetDict"):
        metadata(datasets.DatasetDict())


def test_metadata_split_argument_on_a_single_dataset_is_a_type_error(golden_dir: Path):
    with pytest.raises(TypeError, match="for a DatasetDict"):
        metadata(load_dataset(golden_dir / "full-w64-d4"), split="public")


def test_metadata_of_a_datasetdict_refuses_an_unknown_split(golden_dir: Path):
    with pytest.raises(InvalidDatasetError, match=r"split 'nope' not in \['holdout', 'public'\]"):
        metadata(load_dataset(golden_dir / "combined-w64-d4"), split="nope")


def test_metadata_returns_a_copy(golden_dir: Path):
    ds = load_dataset(golden_dir / "full-w64-d4")
    metadata(ds)["n_mlps"] = 0
    assert metadata(ds)["n_mlps"] == 6


def test_metadata_is_dropped_when_its_dataset_dies(golden_dir: Path):
    from whestbench.hub import loader

    before = len(loader._ATTACHED)
    ds = load_dataset(golden_dir / "full-w64-d4")
    assert len(loader._ATTACHED) == before + 1
    del ds
    gc.collect()
    assert len(loader._ATTACHED) == before


# ---------------------------------------------------------------------------------- iter_mlps, mlp_at


def test_iter_mlps_yields_float32_mlps_matching_the_rows(golden_dir: Path):
    ds = load_dataset(golden_dir / "full-w64-d4")
    mlps = list(iter_mlps(ds))
    assert [m.name for m in mlps] == ds["mlp_name"]
    for m, row_weights in zip(mlps, ds.with_format("numpy")["weights"]):
        assert (m.width, m.depth) == (64, 4)
        assert isinstance(m.weights, list) and all(w.dtype == np.float32 for w in m.weights)
        np.testing.assert_array_equal(np.stack(m.weights), row_weights)


def test_mlp_at_matches_iter_mlps_and_counts_negative_indices_from_the_end(golden_dir: Path):
    ds = load_dataset(golden_dir / "full-w64-d4")
    mlps = list(iter_mlps(ds))
    for i in (0, 5, -1):
        m = mlp_at(ds, i)
        assert (m.name, m.seed) == (mlps[i].name, mlps[i].seed)
        np.testing.assert_array_equal(np.stack(m.weights), np.stack(mlps[i].weights))


def test_mlp_at_out_of_range_is_an_index_error(golden_dir: Path):
    with pytest.raises(IndexError, match="out of range for a split of 6 MLPs"):
        mlp_at(load_dataset(golden_dir / "full-w64-d4"), 6)


def test_mlp_weights_are_writable_copies(golden_dir: Path):
    ds = load_dataset(golden_dir / "full-w64-d4")
    m = mlp_at(ds, 0)
    m.weights[0][0, 0] = 123.0
    assert mlp_at(ds, 0).weights[0][0, 0] != 123.0


@pytest.mark.parametrize("fn", [iter_mlps, lambda dd: mlp_at(dd, 0)], ids=["iter_mlps", "mlp_at"])
def test_mlp_readers_refuse_a_datasetdict(fn, golden_dir: Path):
    with pytest.raises(TypeError, match=r"needs one split.*\['holdout', 'public'\]"):
        fn(load_dataset(golden_dir / "combined-w64-d4"))


def test_iter_mlps_refuses_an_iterable_datasetdict():
    with pytest.raises(TypeError, match="needs one split"):
        iter_mlps(datasets.IterableDatasetDict())


def test_mlp_readers_name_missing_columns():
    with pytest.raises(InvalidDatasetError, match=r"no \['mlp_name', 'mlp_seed', 'weights'\] column"):
        mlp_at(datasets.Dataset.from_dict({"x": [1]}), 0)


def test_mlp_at_refuses_an_iterable_dataset(golden_dir: Path):
    with pytest.raises(TypeError, match="random access"):
        mlp_at(load_dataset(golden_dir / "full-w64-d4").to_iterable_dataset(), 0)


def test_iter_mlps_reads_an_iterable_dataset(golden_dir: Path):
    ds = load_dataset(golden_dir / "full-w64-d4")
    with pytest.warns(UserWarning, match="no whestbench metadata") as caught:
        names = [m.name for m in iter_mlps(ds.to_iterable_dataset())]
    assert caught[0].filename == __file__  # the warning points at iter_mlps's caller
    assert names == ds["mlp_name"]


# ------------------------------------------------------- the error bars (issue 14): columns and MLPs


@pytest.fixture(scope="module")
def target_bake(tmp_path_factory) -> Path:
    """A control-variate bake to a target standard error: its MLPs stop at different sample counts."""
    from whestbench.bake.pipeline import create_dataset

    # judged first after 32 chunks of 16,384 (MIN_RELIABLE_BATCHES), then only at the cap: [524288, cap, 524288]
    return create_dataset(3, 48 * 16384 + 100, 8, 2, seed=5, output_path=tmp_path_factory.mktemp("cv") / "ds",
                          estimator="control-variate", target_stderr=2e-4)


def test_load_dataset_exposes_the_stderr_and_samples_used_columns(target_bake: Path):
    ds = load_dataset(target_bake)
    assert ds.column_names[-2:] == ["all_layer_stderr", "n_samples_used"]
    rows = pq.read_table(target_bake / SHARD).to_pydict()
    stderr = np.asarray(ds.with_format("numpy")[:]["all_layer_stderr"])
    assert stderr.dtype == np.float32 and stderr.shape == (3, 2, 8)
    assert stderr.tobytes() == np.asarray(rows["all_layer_stderr"], dtype=np.float32).tobytes()
    assert ds["n_samples_used"] == rows["n_samples_used"] and len(set(ds["n_samples_used"])) > 1


def test_iter_mlps_and_mlp_at_carry_the_means_and_their_standard_errors(target_bake: Path):
    ds = load_dataset(target_bake)
    rows = ds.with_format("numpy")[:]
    mlps = list(iter_mlps(ds))
    for i, m in enumerate(mlps):
        for got in (m, mlp_at(ds, i)):
            assert got.means.dtype == got.stderr.dtype == np.float32 and got.means.shape == got.stderr.shape == (2, 8)
            assert got.means.tobytes() == rows["all_layer_means"][i].tobytes()
            assert got.stderr.tobytes() == rows["all_layer_stderr"][i].tobytes()
        assert not m.stderr[0].any()  # control variates: layer 1 is exact


def test_a_016_dataset_gives_mlps_with_means_and_no_stderr(golden_dir: Path):
    ds = load_dataset(golden_dir / "full-w64-d4")
    assert "all_layer_stderr" not in ds.column_names
    m = mlp_at(ds, 0)
    assert m.stderr is None and m.means.tobytes() == ds.with_format("numpy")[0]["all_layer_means"].tobytes()


def test_without_metadata_mlp_seed_is_taken_raw_with_a_warning(fixtures16: Path):
    ds = REAL_LOAD_DATASET("parquet", data_files=str(fixtures16 / "single_split_v3_protocol" / SHARD), split="train")
    with pytest.warns(UserWarning, match="seed_protocol 2.0") as caught:
        assert mlp_at(ds, 0).seed == 1001
    assert caught[0].filename == __file__  # the warning points at mlp_at's caller


# ---------------------------------------------------------------------------------- mlp_from_row

ROW = {"mlp_name": "x", "mlp_seed": 6004799503160661, "weights": np.ones((2, 3, 3), dtype=np.float64)}
SALT = bytes(range(32))
V4 = {
    "name": "whestbench_kdf_per_mlp_seeds",
    "version": "4.0",
    "kdf": "blake2b-keyed",
    "salt_digest": "630dcd2966c4336691125448bbb25b4ff412a49c732db2c8abc1b8581bd710dd",
}


def test_mlp_from_row_casts_weights_to_float32_layers():
    m = mlp_from_row(ROW, "2.0")
    assert (m.depth, m.width, m.name) == (2, 3, "x")
    assert [w.dtype for w in m.weights] == [np.float32, np.float32]


@pytest.mark.parametrize(
    "protocol, expected",
    [(None, 6004799503160661), ("2.0", 6004799503160661), ("3.0", estimator_seed(6004799503160661))],
)
def test_mlp_from_row_derives_the_seed_per_protocol(protocol, expected):
    assert mlp_from_row(ROW, protocol).seed == expected


def test_mlp_from_row_protocol_4_uses_the_salt_in_metadata():
    md = {"seed_protocol": V4 | {"salt_source": "metadata", "salt": SALT.hex()}}
    assert mlp_from_row(ROW, md).seed == 1914761819  # facts §2.1 anchor


def test_mlp_from_row_protocol_4_reads_a_withheld_salt_from_the_environment(monkeypatch):
    md = {"seed_protocol": V4 | {"salt_source": "env", "salt_id": "s1"}}
    monkeypatch.delenv("WHEST_SEED_SALT", raising=False)
    with pytest.raises(ValueError, match="export the salt as hex in WHEST_SEED_SALT"):
        mlp_from_row(ROW, md)
    monkeypatch.setenv("WHEST_SEED_SALT", SALT.hex())
    assert mlp_from_row(ROW, md).seed == 1914761819


def test_mlp_from_row_protocol_4_refuses_a_salt_that_misses_the_digest(monkeypatch):
    monkeypatch.setenv("WHEST_SEED_SALT", "00" * 32)
    with pytest.raises(ValueError, match="does not match the dataset's salt_digest"):
        mlp_from_row(ROW, {"seed_protocol": V4 | {"salt_source": "env", "salt_id": "s1"}})


def test_mlp_from_row_protocol_4_needs_metadata_not_a_version_string():
    with pytest.raises(ValueError, match="pass the dataset's metadata"):
        mlp_from_row(ROW, "4.0")


def test_mlp_from_row_refuses_an_unknown_protocol():
    with pytest.raises(ValueError, match="unknown seed_protocol version '9.9'"):
        mlp_from_row(ROW, "9.9")


def test_mlp_from_row_checks_the_shape_against_metadata():
    md = {"seed_protocol": {"version": "2.0"}, "width": 4, "depth": 2}
    with pytest.raises(InvalidDatasetError, match=r"shape \(2, 3, 3\) but metadata says depth=2, width=4"):
        mlp_from_row(ROW, md)


def test_mlp_from_row_validates_the_weights():
    with pytest.raises(ValueError, match="non-finite"):
        mlp_from_row(ROW | {"weights": np.full((1, 2, 2), np.nan)}, "2.0")


# ------------------------------------------------------------------------- Hugging Face Hub (faked)


@pytest.fixture
def hub(monkeypatch, tmp_path) -> FakeHub:
    """tests/helpers/hub_fake.py's Hub, answering datasets.load_dataset from the repo's shards too."""
    return FakeHub().install(monkeypatch, tmp_path / "hf-cache", with_datasets=True)


def _publish(hub: FakeHub, repo: str, fixture: Path, *, tag: str | None = None) -> str:
    hub.add_dir(repo, fixture)
    sha = hub.head(repo)
    if tag:
        hub.repos[repo]["tags"][tag] = sha
    return sha


def test_hub_single_split_fetches_metadata_then_the_split_from_one_commit(hub, golden_dir: Path):
    sha = _publish(hub, "org/golden", golden_dir / "full-w64-d4", tag="v1")
    ds = load_dataset("org/golden", revision="v1", token="tok")
    assert hub.names() == ["dataset_info", "hf_hub_download", "load_dataset"]
    assert hub.calls[0][1] == {"repo_id": "org/golden", "revision": "v1", "token": "tok"}
    assert hub.calls[1][1] == {"repo_id": "org/golden", "filename": "metadata.json", "revision": sha, "token": "tok"}
    assert hub.loads() == [{"repo_id": "org/golden", "name": None, "split": "public", "revision": sha,
                            "token": "tok", "streaming": False}]
    assert len(ds) == 6 and metadata(ds) == read_metadata(golden_dir / "full-w64-d4")


def test_hub_rows_come_from_the_commit_the_metadata_came_from(hub, golden_dir: Path, full: Path, monkeypatch):
    sha = _publish(hub, "org/golden", golden_dir / "full-w64-d4")
    fetch = hub.hf_hub_download

    def then_the_branch_moves(*a, **k):
        path = fetch(*a, **k)
        _edit_metadata(full, n_mlps=5)
        hub._commit("org/golden", {**hub.files("org/golden"), "metadata.json": (full / "metadata.json").read_bytes()})
        return path

    monkeypatch.setattr(hub, "hf_hub_download", then_the_branch_moves)
    ds = load_dataset("org/golden")
    assert hub.head("org/golden") != sha
    assert hub.loads()[0]["revision"] == sha and len(ds) == 6 and metadata(ds)["n_mlps"] == 6


def test_hub_single_split_with_a_config_names_it(hub, golden_dir: Path):
    _publish(hub, "org/holdout", golden_dir / "holdout-w64-d4")
    load_dataset("org/holdout")
    assert [(kw["name"], kw["split"]) for kw in hub.loads()] == [("holdout", "holdout")]


@pytest.mark.parametrize("ref", ["hf://org/golden@v2", "org/golden@v2", "hf://datasets/org/golden@v2"])
def test_hub_accepts_every_form_of_a_reference_with_a_revision(hub, golden_dir: Path, ref: str):
    sha = _publish(hub, "org/golden", golden_dir / "full-w64-d4", tag="v2")
    load_dataset(ref)
    assert hub.calls[0][1]["repo_id"] == "org/golden" and hub.calls[0][1]["revision"] == "v2"
    assert hub.loads()[0]["revision"] == sha


def test_hub_refuses_two_different_revisions(hub, golden_dir: Path):
    _publish(hub, "org/golden", golden_dir / "full-w64-d4")
    with pytest.raises(ValueError, match="give the revision once"):
        load_dataset("hf://org/golden@v2", revision="v3")
    assert hub.calls == []


def test_hub_streaming_gives_an_iterable_dataset_that_iter_mlps_reads(hub, golden_dir: Path):
    _publish(hub, "org/golden", golden_dir / "full-w64-d4")
    ds = load_dataset("org/golden", streaming=True)
    assert isinstance(ds, datasets.IterableDataset)
    assert hub.loads()[0]["streaming"] is True
    assert [m.seed for m in iter_mlps(ds)] == [m.seed for m in iter_mlps(load_dataset(golden_dir / "full-w64-d4"))]


def test_hub_multi_split_with_split_loads_the_splits_config_not_the_prepared_copy(hub, golden_dir: Path):
    sha = _publish(hub, "org/combined", golden_dir / "combined-w64-d4", tag="v1")
    ds = load_dataset("org/combined", split="holdout", revision="v1")
    assert "snapshot_download" not in hub.names()
    assert [(kw["name"], kw["split"], kw["revision"]) for kw in hub.loads()] == [("holdout", "holdout", sha)]
    assert len(ds) == 3 and metadata(ds)["config"] == "holdout"


def test_hub_streaming_skips_the_prepared_copy(hub, golden_dir: Path):
    _publish(hub, "org/combined", golden_dir / "combined-w64-d4")
    ds = load_dataset("org/combined", split="public", streaming=True)
    assert "snapshot_download" not in hub.names()
    assert [(kw["name"], kw["split"], kw["streaming"]) for kw in hub.loads()] == [("default", "public", True)]
    assert isinstance(ds, datasets.IterableDataset)


def test_hub_multi_split_without_split_gives_a_sorted_datasetdict(hub, golden_dir: Path):
    _publish(hub, "org/combined", golden_dir / "combined-w64-d4")
    dd = load_dataset("org/combined")
    assert isinstance(dd, datasets.DatasetDict) and list(dd) == ["holdout", "public"]
    assert [(kw["name"], kw["split"]) for kw in hub.loads()] == [("holdout", "holdout"), ("default", "public")]
    assert metadata(dd) == read_metadata(golden_dir / "combined-w64-d4")
    assert metadata(dd["holdout"])["n_mlps"] == 3


def test_hub_streaming_multi_split_without_split_gives_an_iterable_datasetdict(hub, golden_dir: Path):
    _publish(hub, "org/combined", golden_dir / "combined-w64-d4")
    assert isinstance(load_dataset("org/combined", streaming=True), datasets.IterableDatasetDict)


def test_hub_legacy_multi_split_without_configs_loads_from_the_default_config(hub, fixtures16: Path):
    _publish(hub, "org/legacy", fixtures16 / "multi_split_v3.0")
    load_dataset("org/legacy", split="holdout")
    assert [(kw["name"], kw["split"]) for kw in hub.loads()] == [(None, "holdout")]


def test_hub_partial_is_refused(hub, golden_dir: Path):
    _publish(hub, "org/part", golden_dir / "part-1-of-3")
    with pytest.raises(InvalidDatasetError, match="partial dataset"):
        load_dataset("org/part")
    assert hub.loads() == []


def test_hub_rows_that_disagree_with_n_mlps_are_refused(hub, full: Path):
    _edit_metadata(full, n_mlps=5)
    _publish(hub, "org/golden", full)
    with pytest.raises(MergeCorruptError, match="holds 6 rows but metadata.json says n_mlps=5"):
        load_dataset("org/golden")


def test_hub_repo_without_metadata_is_not_a_whestbench_dataset(hub):
    hub.add_repo("org/plain", {"data/train-00000-of-00001.parquet": b"x"})
    with pytest.raises(InvalidDatasetError, match="has no metadata.json, so it is not a WhestBench dataset"):
        load_dataset("org/plain")


def test_hub_offline_is_a_network_error_not_a_missing_metadata_json(hub, clock):
    hub.offline = True
    with pytest.raises(HubError) as info:
        load_dataset("org/name")
    text = str(info.value)
    assert "could not reach the Hugging Face Hub" in text and "metadata.json" not in text
    assert sum(clock.sleeps) == pytest.approx(20)


def test_hub_offline_where_only_the_metadata_download_fails_is_a_network_error(hub, golden_dir, monkeypatch):
    # hf_hub_download says "unreachable" with LocalEntryNotFoundError, an EntryNotFoundError subclass
    _publish(hub, "org/golden", golden_dir / "full-w64-d4")
    monkeypatch.setenv("WHEST_HUB_RETRY_SECONDS", "0")

    def unreachable(*a, **k):
        raise offline_download_error()

    monkeypatch.setattr(hub, "hf_hub_download", unreachable)
    with pytest.raises(HubError, match="could not reach the Hugging Face Hub"):
        load_dataset("org/golden")


def test_hub_offline_retry_is_announced_as_a_logged_warning(hub, caplog):
    hub.offline = True
    with caplog.at_level("WARNING", logger="whestbench.hub"), pytest.raises(HubError):
        load_dataset("org/name")
    assert [r.getMessage() for r in caplog.records if "retrying for up to 20 s" in r.getMessage()]


def test_a_name_that_is_neither_a_directory_nor_a_repo_says_so(hub):
    with pytest.raises(InvalidDatasetError, match="'no such thing' is not a Hub dataset id"):
        load_dataset("no such thing")
    assert hub.calls == []


@pytest.mark.parametrize("column", ["all_layer_stderr", "n_samples_used"])
def test_a_dataset_whose_metadata_records_our_columns_but_lacks_one_is_refused(column, target_bake, tmp_path):
    """metadata.json records an estimator (and a target): a shard without the column it writes is
    damaged, not a whestbench 0.16 dataset whose MLPs have no standard errors."""
    broken = tmp_path / "broken"
    shutil.copytree(target_bake, broken)
    table = pq.read_table(broken / SHARD)
    pq.write_table(table.drop([column]).replace_schema_metadata(table.schema.metadata), broken / SHARD)
    md = json.loads((broken / "metadata.json").read_text())
    md["checksums"][SHARD] = file_sha256(broken / SHARD)
    (broken / "metadata.json").write_text(json.dumps(md, indent=2))
    with pytest.raises(InvalidDatasetError, match=f"lacks the column\\(s\\) \\['{column}'\\]; metadata.json records"):
        load_dataset(broken)
