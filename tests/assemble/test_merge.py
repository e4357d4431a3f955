"""merge_datasets: partials of one bake become the dataset a single host would have baked; anything
that does not belong together, is missing, overlaps or was damaged is refused by name, and nothing
is written at the output on a refusal."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from whestbench.assemble import merge as merge_mod
from whestbench.bake.pipeline import create_dataset
from whestbench.errors import (
    InvalidDatasetError,
    MergeCorruptError,
    MergeIncompatibleError,
    MergeIncompleteError,
    MergeOverlapError,
)
from whestbench.errors import InputPathError
from whestbench.assemble.merge import merge_datasets, merged_metadata
from whestbench.format.checksums import dataset_checksums, verify_checksums
from whestbench.format.reader import data_files
from whestbench.format.schema import validate_metadata
from whestbench.errors import UsageError
from whestbench.errors import OutputExistsError

from helpers.datasets import edit_metadata as _edit_metadata, no_output as _no_output


SEEDS = [11, 22, 33, 44, 55]
OTHER_SEEDS = [11, 22, 33, 44, 66]  # a different seed list: its digest differs
SHAPE = dict(n_mlps=5, n_samples=300, width=8, depth=2)
DATA_COLUMNS = ("mlp_id", "mlp_name", "mlp_seed", "weights", "all_layer_means", "final_means", "avg_variance")
OUR_COLUMNS = DATA_COLUMNS + ("all_layer_stderr",)  # what our bakes add to 0.16's columns
SHARD = "data/public-00000-of-00001.parquet"


@pytest.fixture(scope="module")
def baked(tmp_path_factory) -> dict[str, Path]:
    """One single-host bake of SEEDS and partials of it (half-open ranges), baked once per module."""
    root = tmp_path_factory.mktemp("bakes")
    out = {"full": create_dataset(**SHAPE, mlp_seeds=SEEDS, output_path=root / "full")}
    for name, rng, seeds in (
        ("p0", (0, 2), SEEDS),
        ("p1", (2, 5), SEEDS),
        ("mid", (1, 3), SEEDS),
        ("tail", (3, 5), SEEDS),
        ("other", (2, 5), OTHER_SEEDS),
        ("dup", (2, 5), [33, 44, 11, 22, 55]),  # its slice repeats p0's seed 11
    ):
        out[name] = create_dataset(**SHAPE, mlp_seeds=seeds, output_path=root / name, mlp_range=rng)
    return out


@pytest.fixture
def part(baked, tmp_path):
    """A private copy of a baked partial that a test may edit or damage."""

    def copy(name: str) -> Path:
        return Path(shutil.copytree(baked[name], tmp_path / f"in-{name}"))

    return copy


def _rewrite_column(d: Path, column: str, values: list) -> None:
    """Replace one column of the partial's shard (a tampering the checksums would catch; dropped)."""
    path = d / SHARD
    table = pq.read_table(path)
    i = table.schema.get_field_index(column)
    table = table.set_column(i, table.schema.field(i), pa.array(values, type=table.schema.field(i).type))
    pq.write_table(table, path)
    _edit_metadata(d, checksums=None)


def read_names(d: Path) -> list[str]:
    return pq.read_table(d / SHARD, columns=["mlp_name"]).column(0).to_pylist()


# --- the merged dataset ------------------------------------------------------------------------


def test_merge_equals_single_host_bake_on_every_data_column(baked, tmp_path, read_columns, assert_bytes_equal):
    out = merge_datasets([baked["p0"], baked["p1"]], output_dir=tmp_path / "merged")
    got, want = read_columns(out), read_columns(baked["full"])
    for column in OUR_COLUMNS:
        if column == "mlp_name":
            assert got[column] == want[column]
        else:
            assert_bytes_equal(got[column], want[column], column)


def test_merge_accepts_partials_in_any_order(baked, tmp_path, read_columns):
    out = merge_datasets([baked["p1"], baked["p0"]], output_dir=tmp_path / "merged")
    assert read_columns(out)["mlp_id"].tolist() == [0, 1, 2, 3, 4]


def test_merged_file_has_the_same_parquet_schema_as_a_bake(baked, tmp_path):
    out = merge_datasets([baked["p0"], baked["p1"]], output_dir=tmp_path / "merged")
    got = pq.ParquetFile(out / SHARD).schema_arrow
    assert got.equals(pq.ParquetFile(baked["full"] / SHARD).schema_arrow, check_metadata=True)


def test_merged_metadata_is_the_first_partials_minus_partial_keys_then_merge_keys(baked, tmp_path, read_metadata):
    out = merge_datasets([baked["p0"], baked["p1"]], output_dir=tmp_path / "merged")
    md, first = read_metadata(out), read_metadata(baked["p0"])
    dropped = {"is_partial", "mlp_range", "total_n_mlps", "hardware", "created_at_utc", "checksums_written_for", "checksums"}
    kept = [k for k in first if k not in dropped]
    assert list(md) == kept + [
        "created_at_utc", "merged_at_utc", "hardware_fingerprints", "partials_count", "checksums_written_for", "checksums",
    ]
    assert md["n_mlps"] == 5 and md["partials_count"] == 2
    assert md["seed_list_digest"] == read_metadata(baked["full"])["seed_list_digest"]
    assert md["created_at_utc"] == min(read_metadata(baked[p])["created_at_utc"] for p in ("p0", "p1"))
    validate_metadata(md)  # complete: loads without allow_partial


def test_merged_bake_command_is_the_whole_datasets(baked, tmp_path, read_metadata):
    out = merge_datasets([baked["p0"], baked["p1"]], output_dir=tmp_path / "merged")
    cmd = read_metadata(out)["bake_command"]
    assert "--mlp-range" not in cmd and "--slice" not in cmd
    assert cmd.endswith(f"--output {out}")


@pytest.mark.parametrize(
    "recorded, expected",
    [
        ("whest dataset bake --n-mlps 6 --slice 1/3 --output p1", "whest dataset bake --n-mlps 6 --output OUT"),
        ("whest dataset bake --mlp-range=0-3 --output=p0 --seed 1", "whest dataset bake --seed 1 --output OUT"),
        ("whest dataset bake --n-mlps 6 --mlp-range 2-3", "whest dataset bake --n-mlps 6 --output OUT"),
        (["whest", "--slice", "0/2", "--output", "a"], ["whest", "--output", "OUT"]),
        ("whest 'unbalanced", None),
    ],
)
def test_merged_bake_command_drops_the_slice_and_points_at_the_output(recorded, expected):
    md = merged_metadata([{"total_n_mlps": 6, "mlp_range": [0, 6], "bake_command": recorded}], output="OUT")
    assert md.get("bake_command") == expected


def test_merged_checksums_cover_the_new_shards_and_readme_is_rendered(baked, tmp_path, read_metadata):
    out = merge_datasets([baked["p0"], baked["p1"]], output_dir=tmp_path / "merged")
    md = read_metadata(out)
    assert md["checksums"] == dataset_checksums(out)
    verify_checksums(out, md)
    readme = (out / "README.md").read_text()
    assert readme.startswith("---\n") and "partial" not in readme.split("---")[1]


def test_merged_hardware_fingerprints_collapse_identical_hosts(baked, tmp_path, read_metadata):
    out = merge_datasets([baked["p0"], baked["p1"]], output_dir=tmp_path / "merged")
    (fp,) = read_metadata(out)["hardware_fingerprints"]
    assert fp["mlp_count"] == 2  # counts partials, as whestbench 0.16 does
    assert None not in fp.values() and [] not in fp.values()


def test_hardware_fingerprints_keep_distinct_gpus_apart_and_list_drivers():
    def md(i, gpu, driver, host):
        return {
            "mlp_range": [i, i + 1],
            "cuda_device_name": gpu,
            "cuda_driver_version": driver,
            "hardware": {"hostname": host, "os_release": "k1", "python_version": "3.11"},
        }

    fps = merge_mod.hardware_fingerprints(
        [md(0, "H100", "550", "a"), md(1, "H100", "560", "b"), md(2, "A100", "550", "c")]
    )
    assert [fp["cuda_device_name"] for fp in fps] == ["H100", "A100"]
    assert fps[0]["drivers_seen"] == ["550", "560"] and fps[0]["representative_hostnames"] == ["a", "b"]
    assert fps[0]["mlp_count"] == 2 and fps[1]["mlp_count"] == 1


def test_merge_streams_into_several_shards_when_they_would_be_too_big(baked, part, tmp_path, monkeypatch, read_columns, assert_bytes_equal):
    # A partial stored as two shards, and an output limit of two rows per shard and one per row group.
    p1 = part("p1")
    table = pq.read_table(p1 / SHARD)
    (p1 / SHARD).unlink()
    pq.write_table(table.slice(0, 1), p1 / "data/public-00000-of-00002.parquet")
    pq.write_table(table.slice(1), p1 / "data/public-00001-of-00002.parquet")
    _edit_metadata(p1, checksums=dataset_checksums(p1))
    row = merge_mod.row_bytes(8, 2)
    monkeypatch.setattr(merge_mod, "MAX_SHARD_BYTES", 2 * row)
    monkeypatch.setattr(merge_mod, "MAX_ROW_GROUP_BYTES", row)

    out = merge_datasets([baked["p0"], p1], output_dir=tmp_path / "merged")

    shards = data_files(out, "public")
    assert [f.name for f in shards] == [f"public-0000{i}-of-00003.parquet" for i in range(3)]
    assert [pq.ParquetFile(f).metadata.num_row_groups for f in shards] == [2, 2, 1]
    got, want = read_columns(out), read_columns(baked["full"])
    for column in ("mlp_id", "weights", "all_layer_means", "avg_variance"):
        assert_bytes_equal(got[column], want[column], column)


@pytest.fixture
def hf_cache(tmp_path, monkeypatch) -> Path:
    """A private ``datasets`` cache, so loads never write to ~/.cache and leaks can be seen."""
    import datasets

    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(cache))
    return cache


def test_merge_writes_nothing_to_the_datasets_cache(baked, tmp_path, hf_cache):
    merge_datasets([baked["p0"], baked["p1"]], output_dir=tmp_path / "merged")
    assert list(hf_cache.iterdir()) == []


def test_merged_dataset_loads(baked, tmp_path, hf_cache):
    import whestbench

    out = merge_datasets([baked["p0"], baked["p1"]], output_dir=tmp_path / "merged")
    assert [m.name for m in whestbench.iter_mlps(whestbench.load_dataset(out))] == read_names(baked["full"])


# --- whestbench 0.16.2 partials ------------------------------------------------------------------


def test_merging_0162_partials_reproduces_0162s_merged_dataset(golden_dir, tmp_path, read_columns, read_metadata, assert_bytes_equal):
    parts = [golden_dir / f"part-{k}-of-3" for k in (2, 0, 1)]
    out = merge_datasets(parts, output_dir=tmp_path / "merged")
    golden = golden_dir / "merged-w64-d4"
    got, want = read_columns(out), read_columns(golden)
    for column in DATA_COLUMNS:
        if column == "mlp_name":
            assert got[column] == want[column]
        else:
            assert_bytes_equal(got[column], want[column], column)
    md, ref = read_metadata(out), read_metadata(golden)
    assert list(md) == list(ref) + ["checksums_written_for", "checksums"]
    assert md["hardware_fingerprints"] == ref["hardware_fingerprints"]
    assert {k: v for k, v in md.items() if k not in ("merged_at_utc", "checksums_written_for", "checksums")} == {
        k: v for k, v in ref.items() if k != "merged_at_utc"
    } | {"hardware_fingerprints": ref["hardware_fingerprints"]}


def test_a_0162_partial_and_ours_cannot_prove_a_common_seed_list(golden_dir, tmp_path):
    ours = tmp_path / "ours"
    create_dataset(n_mlps=6, n_samples=20001, width=64, depth=4, mlp_seeds=[11, 22, 33, 44, 55, 66],
                   output_path=ours, mlp_range=(4, 6))
    with pytest.raises(MergeIncompatibleError, match="seed_list_digest"):
        merge_datasets([golden_dir / "part-0-of-3", golden_dir / "part-1-of-3", ours], output_dir=tmp_path / "out")
    _no_output(tmp_path / "out")


# --- refusals --------------------------------------------------------------------------------------


def test_complete_dataset_is_refused(baked, tmp_path):
    with pytest.raises(MergeIncompatibleError, match="complete .non-partial. dataset"):
        merge_datasets([baked["full"]], output_dir=tmp_path / "out")
    _no_output(tmp_path / "out")


def test_missing_middle_range_is_incomplete(baked, tmp_path):
    with pytest.raises(MergeIncompleteError, match=r"gap: no partial covers MLPs \[2, 3\)"):
        merge_datasets([baked["p0"], baked["tail"]], output_dir=tmp_path / "out")
    _no_output(tmp_path / "out")


def test_missing_last_range_is_incomplete(baked, tmp_path):
    with pytest.raises(MergeIncompleteError, match=r"\[2, 5\).*--mlp-range 2-4"):
        merge_datasets([baked["p0"]], output_dir=tmp_path / "out")


def test_overlapping_ranges_are_refused(baked, tmp_path):
    with pytest.raises(MergeOverlapError, match="starts at 1 but previous range ended at 2"):
        merge_datasets([baked["p0"], baked["mid"], baked["tail"]], output_dir=tmp_path / "out")
    _no_output(tmp_path / "out")


def test_the_same_partial_twice_overlaps(baked, tmp_path):
    with pytest.raises(MergeOverlapError):
        merge_datasets([baked["p0"], baked["p0"], baked["p1"]], output_dir=tmp_path / "out")


def test_partials_of_different_seed_lists_are_refused(baked, tmp_path):
    with pytest.raises(MergeIncompatibleError, match="different seed lists .seed_list_digest.*--mlp-seeds file or --seed"):
        merge_datasets([baked["p0"], baked["other"]], output_dir=tmp_path / "out")
    _no_output(tmp_path / "out")


def test_partials_without_digests_that_repeat_a_seed_are_refused(part, tmp_path):
    p0, dup = part("p0"), part("dup")
    for d in (p0, dup):  # as whestbench 0.16 partials: no digest to compare, no checksums
        _edit_metadata(d, seed_list_digest=None, checksums=None, checksums_written_for=None)
    with pytest.raises(MergeIncompatibleError, match="mlp_seed 11 appears at MLPs 0 and 2"):
        merge_datasets([p0, dup], output_dir=tmp_path / "out")


@pytest.mark.parametrize(
    "key, value",
    [
        ("split", "holdout"),
        ("config", "other"),
        ("n_samples", 301),
        ("width", 16),
        ("depth", 3),
        ("backend", "torch"),
        ("total_n_mlps", 6),
        ("sampler", {"name": "philox", "version": "1", "block_size": 65536}),
        ("seed_protocol", {"name": "whestbench_kdf_per_mlp_seeds", "version": "4.0", "kdf": "blake2b-keyed",
                           "salt_source": "metadata", "salt": "00"}),
    ],
)
def test_partials_that_differ_in_a_bake_parameter_are_refused(baked, part, tmp_path, key, value):
    p1 = part("p1")
    _edit_metadata(p1, **{key: value})
    # 0.16's keys are compared before any validation (a MergeIncompatibleError naming the key, as 0.16.2);
    # a sampler that does not go with its backend is then refused by the one metadata validator
    refused, words = ((InvalidDatasetError, "backend") if key == "sampler" else (MergeIncompatibleError, key))
    with pytest.raises(refused, match=words):
        merge_datasets([baked["p0"], p1], output_dir=tmp_path / "out")
    _no_output(tmp_path / "out")


def test_tampered_partial_fails_its_checksum(baked, part, tmp_path):
    p1 = part("p1")
    data = bytearray((p1 / SHARD).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (p1 / SHARD).write_bytes(bytes(data))
    with pytest.raises(MergeCorruptError, match="does not match its checksum"):
        merge_datasets([baked["p0"], p1], output_dir=tmp_path / "out")
    _no_output(tmp_path / "out")


def test_truncated_parquet_without_checksums_is_corrupt(baked, part, tmp_path):
    p1 = part("p1")
    (p1 / SHARD).write_bytes((p1 / SHARD).read_bytes()[:-100])
    _edit_metadata(p1, checksums=None)  # as whestbench 0.16 wrote it: nothing to compare against
    with pytest.raises(MergeCorruptError, match="not a readable Parquet file"):
        merge_datasets([baked["p0"], p1], output_dir=tmp_path / "out")
    _no_output(tmp_path / "out")


def test_shards_of_another_shape_are_corrupt(part, tmp_path):
    p0, p1 = part("p0"), part("p1")
    for d in (p0, p1):  # the metadata agree with each other, not with the files (no checksums to say so)
        _edit_metadata(d, width=16, checksums=None, checksums_written_for=None)
    with pytest.raises(MergeCorruptError, match="does not have the WhestBench columns for width=16"):
        merge_datasets([p0, p1], output_dir=tmp_path / "out")


def test_a_width_edited_after_the_bake_is_refused_by_the_checksums(part, tmp_path):
    p0, p1 = part("p0"), part("p1")
    for d in (p0, p1):
        _edit_metadata(d, width=16)
    with pytest.raises(MergeCorruptError, match="metadata.json says width=16 but its checksums were written for width=8"):
        merge_datasets([p0, p1], output_dir=tmp_path / "out")
    _no_output(tmp_path / "out")


def test_rows_whose_mlp_id_disagree_with_the_range_are_corrupt(baked, part, tmp_path):
    p1 = part("p1")
    _rewrite_column(p1, "mlp_id", [2, 3, 7])
    # checked once, by the partial's own checks (its trail first, then verify's mlp_id), not by merge again
    with pytest.raises(MergeCorruptError, match=r"in-p1 fails the trail contract: .* is mlp_id 7"):
        merge_datasets([baked["p0"], p1], output_dir=tmp_path / "out")


def test_seed_column_that_does_not_hash_to_the_digest_is_corrupt(baked, part, tmp_path):
    p1 = part("p1")
    _rewrite_column(p1, "mlp_seed", [33, 44, 77])
    with pytest.raises(MergeCorruptError, match="seed_list_digest"):
        merge_datasets([baked["p0"], p1], output_dir=tmp_path / "out")


def test_row_count_that_disagrees_with_n_mlps_is_corrupt(baked, part, tmp_path):
    p1 = part("p1")
    table = pq.read_table(p1 / SHARD)
    pq.write_table(table.slice(0, 2), p1 / SHARD)
    _edit_metadata(p1, checksums=None)
    with pytest.raises(MergeCorruptError, match="hold 2 rows but metadata.json declares n_mlps=3"):
        merge_datasets([baked["p0"], p1], output_dir=tmp_path / "out")


def test_a_stray_parquet_file_is_corrupt(baked, part, tmp_path):
    p1 = part("p1")
    shutil.copyfile(p1 / SHARD, p1 / "data/holdout-00000-of-00001.parquet")
    _edit_metadata(p1, checksums=None)
    with pytest.raises(MergeCorruptError, match="not a shard of split 'public'"):
        merge_datasets([baked["p0"], p1], output_dir=tmp_path / "out")


def test_edited_range_that_does_not_fit_is_corrupt(baked, part, tmp_path):
    p1 = part("p1")
    _edit_metadata(p1, mlp_range=[2, 9])
    with pytest.raises(InvalidDatasetError, match="mlp_range"):  # the metadata validator: past total_n_mlps
        merge_datasets([baked["p0"], p1], output_dir=tmp_path / "out")


def test_merge_of_nothing_is_refused(tmp_path):
    with pytest.raises(MergeIncompatibleError, match="no partials"):
        merge_datasets([], output_dir=tmp_path / "out")


def test_a_missing_input_is_a_usage_error(baked, tmp_path):
    with pytest.raises(InputPathError, match="does not exist") as info:
        merge_datasets([baked["p0"], tmp_path / "nope"], output_dir=tmp_path / "out")
    assert isinstance(info.value, UsageError) and isinstance(info.value, InvalidDatasetError)
    _no_output(tmp_path / "out")


def test_a_file_input_is_a_usage_error(baked, tmp_path):
    with pytest.raises(InputPathError, match="is a file, not a dataset directory"):
        merge_datasets([baked["p0"], baked["p1"] / "metadata.json"], output_dir=tmp_path / "out")


def test_a_directory_without_metadata_is_invalid(baked, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidDatasetError, match="missing metadata.json"):
        merge_datasets([baked["p0"], tmp_path / "empty"], output_dir=tmp_path / "out")


def test_an_existing_output_is_refused_before_any_validation_and_left_untouched(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(OutputExistsError, match="already exists") as info:
        merge_datasets([tmp_path / "nope"], output_dir=out)  # the missing input is never looked at
    assert isinstance(info.value, FileExistsError) and isinstance(info.value, UsageError)
    assert [p.name for p in out.iterdir()] == ["keep.txt"] and (out / "keep.txt").read_text() == "mine"


def test_a_failure_while_writing_leaves_no_output_and_no_staging(baked, tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(merge_mod, "finish_dataset_dir", boom)  # the last write of the dataset
    with pytest.raises(OSError, match="disk full"):
        merge_datasets([baked["p0"], baked["p1"]], output_dir=tmp_path / "out")
    _no_output(tmp_path / "out")


def test_a_merged_target_bakes_samples_used_covers_every_row(tmp_path):
    """Issue 28: each partial records its own ``samples_used``; the merge recomputes it over the
    merged rows instead of copying the first partial's."""
    from whestbench.bake.pipeline import BakeConfig, bake
    from whestbench.compute.estimation import Estimation

    shape = dict(n_mlps=4, n_samples=200_000, width=8, depth=2, seed=6, estimation=Estimation(target_stderr=3e-3))
    parts = [bake(BakeConfig(**shape, mlp_range=r, output=tmp_path / f"p{r[0]}")) for r in ((0, 1), (1, 4))]
    out = merge_datasets(parts, output_dir=tmp_path / "m")
    used = pq.read_table(sorted((out / "data").glob("*.parquet")), columns=["n_samples_used"])["n_samples_used"].to_pylist()
    md = json.loads((out / "metadata.json").read_text())
    assert md["samples_used"]["total"] == sum(used) and md["samples_used"]["max"] == max(used)
    assert md["samples_used"]["min"] == min(used) and md["samples_used"]["at_cap"] == used.count(200_000)
    first = json.loads((tmp_path / "p0" / "metadata.json").read_text())["samples_used"]
    assert first["total"] == used[0] != md["samples_used"]["total"]


def test_partials_whose_cards_differ_are_refused_unless_a_card_settles_them(tmp_path):
    from whestbench.bake.pipeline import BakeConfig, bake
    from whestbench.errors import MergeIncompatibleError

    shape = dict(n_mlps=4, n_samples=200, width=4, depth=2, seed=6)
    parts = [bake(BakeConfig(**shape, mlp_range=r, card=c, output=tmp_path / f"p{r[0]}"))
             for r, c in (((0, 1), {"license": "mit"}), ((1, 4), None))]
    with pytest.raises(MergeIncompatibleError, match=r"differ in license \(.*'mit'.*the default\)"):
        merge_datasets(parts, output_dir=tmp_path / "m")
    assert not (tmp_path / "m").exists()
    out = merge_datasets(parts, output_dir=tmp_path / "m", card={"license": "apache-2.0"})
    assert json.loads((out / "metadata.json").read_text())["card"] == {"license": "apache-2.0"}


def test_merge_reports_progress_while_it_verifies_its_partials(tmp_path):
    from whestbench.bake.pipeline import BakeConfig, bake

    shape = dict(n_mlps=3, n_samples=200, width=4, depth=2, seed=7)
    parts = [bake(BakeConfig(**shape, mlp_range=r, output=tmp_path / f"p{r[0]}")) for r in ((0, 1), (1, 3))]
    events = []
    merge_datasets(parts, output_dir=tmp_path / "m", on_event=events.append)
    progress = [e.progress for e in events if e.progress is not None]
    first_copy = next(i for i, p in enumerate(progress) if p.what == "rows")
    for part, n in zip(parts, (1, 2)):
        mine = [p for p in progress[:first_copy] if p.phase == f"verifying partial {part}"]
        assert mine and (mine[-1].what, mine[-1].done, mine[-1].total) == ("MLPs", n, n)


@pytest.mark.parametrize("edit", [{"backend": "torch"}, {"format": "x"}])
def test_backend_edited_partial_raises_merge_incompatible(baked, part, tmp_path, edit):
    """A partial hand-edited to another backend raised InvalidDatasetError from its own validation;
    whestbench 0.16.2 raises MergeIncompatibleError, which its callers catch, naming the field."""
    p1 = part("p1")
    _edit_metadata(p1, **edit)
    (key,) = edit
    with pytest.raises(MergeIncompatibleError, match=key):
        merge_datasets([baked["p0"], p1], output_dir=tmp_path / "out")
    _no_output(tmp_path / "out")
