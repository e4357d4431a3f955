"""One shard-schema check (``format.shards.ShardSchema``) for verify, merge/combine's input check and push:
a shard whose column has another type under the same name is refused by all three, each in its own words.
Before the one check, push compared the column names only and would have published such a shard."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers.datasets import edit_metadata
from whestbench.assemble.inputs import check_files
from whestbench.cli import main
from whestbench.errors import InvalidDatasetError, MergeCorruptError
from whestbench.format.reader import data_files, read_metadata
from whestbench.format.schema import columns_for
from whestbench.format.shards import ShardSchema
from whestbench.hub.push import plan_push
from whestbench.verify.run import verify_dataset


@pytest.fixture(scope="module")
def baked(tmp_path_factory):
    out = tmp_path_factory.mktemp("shards") / "ds"
    assert main(["dataset", "bake", "--width", "4", "--depth", "2", "--n-samples", "2000", "--seed", "1",
                 "--n-mlps", "2", "--output", str(out)]) == 0
    return out


def _retyped(src, dst, column: str):
    """A copy of ``src`` whose ``column`` holds float64 lists (same name, same values); no checksums to catch it."""
    import shutil

    shutil.copytree(src, dst)
    shard = data_files(dst, "public")[0]
    table = pq.read_table(shard)
    i = table.schema.get_field_index(column)
    values = pa.array(table.column(column).to_pylist(), type=pa.list_(pa.list_(pa.float64())))
    pq.write_table(table.set_column(i, column, values), shard)
    edit_metadata(dst, checksums=None, checksums_written_for=None)
    return dst, shard


def test_the_baked_shards_match_their_schema(baked):
    md = read_metadata(baked)
    expected = ShardSchema(md["width"], md["depth"], columns_for(md))
    assert expected.problems(pq.read_schema(data_files(baked, "public")[0])) == []


def test_a_column_of_another_type_is_refused_by_verify_merge_and_push(baked, tmp_path):
    d, shard = _retyped(baked, tmp_path / "ds", "all_layer_means")
    md = read_metadata(d)
    said = ShardSchema(md["width"], md["depth"], columns_for(md)).problems(pq.read_schema(shard), hf_metadata=False)
    assert len(said) == 1 and said[0].startswith("all_layer_means is list<list<double>>, expected Array2D")
    report = verify_dataset(d)
    assert not report.ok and any(f"{shard.name}: {said[0]}" in str(c) for c in report.checks), report.checks
    with pytest.raises(MergeCorruptError, match="does not have the WhestBench columns for width=4"):
        check_files(d, md, [shard], md["n_mlps"])
    with pytest.raises(InvalidDatasetError) as exc:
        plan_push(d, "org/name")
    assert f"{shard.name}: {said[0]}; push publishes only datasets whose files match" in str(exc.value)
    assert str(exc.value).endswith("(`whest dataset verify` shows every problem).")


def test_push_names_the_missing_column_as_before(baked, tmp_path):
    import shutil

    d = tmp_path / "ds"
    shutil.copytree(baked, d)
    shard = data_files(d, "public")[0]
    pq.write_table(pq.read_table(shard).drop_columns(["avg_variance"]), shard)
    edit_metadata(d, checksums=None, checksums_written_for=None)
    with pytest.raises(InvalidDatasetError, match=f"{shard.name} lacks avg_variance, which its metadata.json "
                                                  r"promises \(mlp_id, mlp_name, "):
        plan_push(d, "org/name")
