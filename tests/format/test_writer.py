"""The Parquet writer: shard plan and names, HF-readable shards in order, atomic dataset directories."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from whestbench.format.checksums import checksum_state, dataset_checksums
from whestbench.format.reader import shard_name
from whestbench.format.schema import hf_features
from whestbench.format import writer
from whestbench.format.writer import (
    row_bytes,
    rows_table,
    shard_plan,
    shard_schema,
    write_dataset,
    write_parquet_shards,
)

W, D = 4, 2


def _rows(n: int, *, fail_at: int | None = None):
    for i in range(n):
        if i == fail_at:
            raise RuntimeError(f"row {i} could not be made")
        yield {
            "mlp_id": i,
            "mlp_name": f"mlp-{i}",
            "mlp_seed": 1000 + i,
            "weights": np.full((D, W, W), i, dtype=np.float32),
            "all_layer_means": np.full((D, W), i / 10, dtype=np.float32),
            "final_means": np.full(W, i / 10, dtype=np.float32),
            "avg_variance": float(i),
            "sampling_budget_breakdown": "{}",
        }


def _md() -> dict:
    return {"schema_version": "3.0", "n_mlps": 7}


@pytest.fixture
def card(monkeypatch):
    """The writer renders a stand-in card: these metadata are too thin for the real one."""
    monkeypatch.setattr(writer, "render_card", lambda md: "# card\n")


def _max_shard_rows(monkeypatch, n: int) -> None:
    monkeypatch.setattr(writer, "MAX_SHARD_BYTES", n * row_bytes(W, D))


def test_shard_names_are_five_digit_index_of_count():
    assert shard_name("public", 0, 1) == "public-00000-of-00001.parquet"
    assert shard_name("holdout", 11, 12) == "holdout-00011-of-00012.parquet"


def test_shard_plan_keeps_every_shard_under_the_limit_with_even_sizes():
    per_row = row_bytes(W, D)
    plan = shard_plan(10, W, D, 3 * per_row)
    assert sum(plan) == 10
    assert len(plan) == 4 and max(plan) - min(plan) <= 1
    assert all(n * per_row <= 3 * per_row for n in plan)


def test_one_shard_when_everything_fits():
    assert shard_plan(5, W, D, writer.MAX_SHARD_BYTES) == [5]


def test_small_shards_are_named_in_order_and_read_back_by_datasets(tmp_path, monkeypatch):
    import datasets

    _max_shard_rows(monkeypatch, 2)
    paths = write_parquet_shards(tmp_path, "public", _rows(7), 7, W, D)
    names = [p.name for p in paths]
    assert names == [f"public-0000{i}-of-00004.parquet" for i in range(4)]
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == names

    by_files = datasets.load_dataset(
        "parquet", data_files=[str(p) for p in paths], split="train", cache_dir=str(tmp_path / "hf-cache")
    )
    assert by_files["mlp_id"] == list(range(7))
    assert by_files.features["weights"].shape == (D, W, W)
    np.testing.assert_array_equal(np.asarray(by_files[6]["weights"], dtype=np.float32), np.full((D, W, W), 6))

    by_dir = datasets.load_dataset(str(tmp_path), split="public", cache_dir=str(tmp_path / "hf-cache2"))
    assert by_dir["mlp_id"] == list(range(7))
    assert by_dir["mlp_name"] == [f"mlp-{i}" for i in range(7)]


def test_shards_carry_the_hf_features_schema(tmp_path):
    import pyarrow.parquet as pq

    (path,) = write_parquet_shards(tmp_path, "public", _rows(2), 2, W, D)
    meta = json.loads(pq.read_schema(path).metadata[b"huggingface"])
    feats = meta["info"]["features"]
    assert list(feats) == [
        "mlp_id", "mlp_name", "mlp_seed", "weights", "all_layer_means", "final_means", "avg_variance",
        "sampling_budget_breakdown",
    ]
    assert feats["weights"] == {"shape": [D, W, W], "dtype": "float32", "_type": "Array3D"}
    assert feats["final_means"]["length"] == W


def test_write_dataset_makes_the_directory_and_records_checksums(tmp_path, card, monkeypatch):
    md = _md()
    _max_shard_rows(monkeypatch, 3)
    out = write_dataset(tmp_path / "ds", "public", _rows(7), 7, W, D, md)
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "data", "metadata.json"]
    assert len(list((out / "data").iterdir())) == 3
    written = json.loads((out / "metadata.json").read_text())
    assert written["checksums"] == dataset_checksums(out) == md["checksums"]
    assert list(written)[-2:] == ["checksums_written_for", "checksums"]
    assert checksum_state(out, written).state == "ok"  # bound to what it was written for
    assert (out / "README.md").read_text() == "# card\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]  # no staging dir left beside it


def test_a_failure_while_writing_rows_leaves_nothing_behind(tmp_path, card, monkeypatch):
    _max_shard_rows(monkeypatch, 2)
    with pytest.raises(RuntimeError, match="row 4 could not be made"):
        write_dataset(tmp_path / "ds", "public", _rows(7, fail_at=4), 7, W, D, _md())
    assert list(tmp_path.iterdir()) == []


def test_a_failure_while_rendering_the_card_leaves_nothing_behind(tmp_path, monkeypatch):
    def broken_card(md):
        raise ValueError("template broke")

    monkeypatch.setattr(writer, "render_card", broken_card)
    with pytest.raises(ValueError, match="template broke"):
        write_dataset(tmp_path / "ds", "public", _rows(2), 2, W, D, _md())
    assert list(tmp_path.iterdir()) == []


def test_an_existing_output_is_never_overwritten(tmp_path, card):
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        write_dataset(tmp_path / "ds", "public", _rows(2), 2, W, D, _md())
    assert [p.name for p in (tmp_path / "ds").iterdir()] == ["keep.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


def test_checksums_cover_only_the_data_files(tmp_path, card):
    out = write_dataset(tmp_path / "ds", "public", _rows(2), 2, W, D, _md())
    # metadata.json and README.md are not listed: a hand-edited metadata.json is judged on its content
    # (only the facts in checksums_written_for are bound).
    assert list(dataset_checksums(out)) == ["data/public-00000-of-00001.parquet"]


# --- the shards are what `datasets` writes, without importing it --------------------------------


@pytest.mark.parametrize(("width", "depth"), [(W, D), (1, 1), (64, 5)])
@pytest.mark.parametrize("extra", [(), ("all_layer_stderr",), ("all_layer_stderr", "n_samples_used")],
                         ids=["reference-8", "with-stderr", "with-stderr-and-n-used"])
def test_shard_schema_serialises_to_the_bytes_of_the_datasets_features(width, depth, extra):
    from whestbench.format.schema import COLUMNS, make_features

    columns = COLUMNS + extra
    features = make_features(width, depth, columns)
    ours = shard_schema(width, depth, columns)
    assert ours.serialize().to_pybytes() == features.arrow_schema.serialize().to_pybytes()
    assert json.dumps(hf_features(width, depth, columns)) == json.dumps(features.to_dict())  # key order too


def test_the_column_schema_is_whestbench_016s_features_spelled_out():
    """``schema.COLUMN_DOCS`` is the one column schema; here it is held to the types whestbench 0.16
    writes, spelled out with ``datasets``' own classes (``all_layer_stderr`` typed as the means)."""
    from datasets import Array2D, Array3D, Features, List, Value

    from whestbench.format.schema import COLUMNS, make_features

    w, d = 5, 3
    want = Features({
        "mlp_id": Value("int32"), "mlp_name": Value("string"), "mlp_seed": Value("int64"),
        "weights": Array3D(shape=(d, w, w), dtype="float32"), "all_layer_means": Array2D(shape=(d, w), dtype="float32"),
        "final_means": List(Value("float32"), length=w), "avg_variance": Value("float64"),
        "sampling_budget_breakdown": Value("string"), "all_layer_stderr": Array2D(shape=(d, w), dtype="float32"),
        "n_samples_used": Value("int64"),
    })
    got = make_features(w, d, COLUMNS + ("all_layer_stderr", "n_samples_used"))
    assert got == want and list(got) == list(want)
    assert got.arrow_schema.serialize().to_pybytes() == want.arrow_schema.serialize().to_pybytes()


def test_shards_are_byte_identical_to_the_ones_datasets_builds(tmp_path):
    """The writer's former path: ``datasets`` builds the row group's table, the same ParquetWriter writes it."""
    import datasets
    import pyarrow.parquet as pq

    from whestbench.format.schema import make_features

    rows = list(_rows(5))
    (ours,) = write_parquet_shards(tmp_path / "ours", "public", iter(rows), 5, W, D)
    features = make_features(W, D)
    table = datasets.Dataset.from_dict({c: [r[c] for r in rows] for c in features}, features=features).data.table
    theirs = tmp_path / "theirs.parquet"
    with pq.ParquetWriter(theirs, features.arrow_schema, compression="snappy") as writer:
        writer.write_table(table, row_group_size=5)
    assert ours.read_bytes() == theirs.read_bytes()


def test_shard_arrow_schema_equals_a_datasets_to_parquet_file_exactly(tmp_path):
    """As whestbench 0.16 writes (``Dataset.from_dict(..., features).to_parquet``): the same Arrow
    schema with every field's and the schema's metadata, and the same serialised ``ARROW:schema``."""
    import datasets
    import pyarrow.parquet as pq

    from whestbench.format.schema import make_features

    rows = list(_rows(3))
    (ours,) = write_parquet_shards(tmp_path / "ours", "public", iter(rows), 3, W, D)
    features = make_features(W, D)
    theirs = tmp_path / "theirs.parquet"
    datasets.Dataset.from_dict({c: [r[c] for r in rows] for c in features}, features=features).to_parquet(str(theirs))
    a, b = pq.read_schema(ours), pq.read_schema(theirs)
    assert a.equals(b, check_metadata=True)
    assert [f.metadata for f in a] == [f.metadata for f in b]
    meta_a, meta_b = pq.ParquetFile(ours).metadata.metadata, pq.ParquetFile(theirs).metadata.metadata
    assert meta_a[b"ARROW:schema"] == meta_b[b"ARROW:schema"]
    assert meta_a[b"huggingface"] == meta_b[b"huggingface"]


def test_writing_a_dataset_imports_neither_datasets_nor_pandas(tmp_path):
    """``datasets`` (~1 s) and pandas (~0.15 s, which ``pa.array`` pulls in) stay out of a bake's start-up."""
    code = f"""
import sys
import numpy as np
from whestbench.format.writer import write_dataset
row = dict(mlp_id=0, mlp_name="a", mlp_seed=1, weights=np.zeros(({D}, {W}, {W}), np.float32),
           all_layer_means=np.zeros(({D}, {W}), np.float32), final_means=np.zeros({W}, np.float32),
           avg_variance=0.0, sampling_budget_breakdown="{{}}")
write_dataset({str(tmp_path / "ds")!r}, "public", [row], 1, {W}, {D}, {{"n_mlps": 1, "width": {W}, "depth": {D}}})
print(sorted(m for m in ("datasets", "pandas") if m in sys.modules))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
    assert (tmp_path / "ds" / "data" / "public-00000-of-00001.parquet").is_file()


def test_rows_table_names_a_column_with_the_wrong_shape():
    rows = list(_rows(2))
    rows[1]["weights"] = np.zeros((W, W, D), dtype=np.float32)
    with pytest.raises(ValueError, match=r"row 1: weights has shape \(4, 4, 2\); expected \(2, 4, 4\)"):
        rows_table(rows, W, D)


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("mlp_id", 2**31, "mlp_id: values must fit int32"),
        ("mlp_id", 1.5, "mlp_id: expected one integer per row"),
        ("mlp_seed", 2**64, "mlp_seed: expected one integer per row"),
        ("mlp_name", 7, "mlp_name: expected a str per row; got int"),
    ],
)
def test_rows_table_refuses_values_the_schema_cannot_hold(column, value, message):
    rows = list(_rows(2))
    rows[0][column] = value
    with pytest.raises(ValueError, match=message):
        rows_table(rows, W, D)
