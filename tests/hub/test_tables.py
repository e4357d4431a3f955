"""hub/tables.py: the Python API gives an MLP's samples and standard errors, and numpy and pandas routes
give arrays in the stored dtypes, never object columns or float32 copies of float64 data (issue 35)."""

from __future__ import annotations

import datasets
import numpy as np
import pyarrow.parquet as pq
import pytest

import whestbench
from whestbench.bake.pipeline import create_dataset

WIDTH, DEPTH = 8, 3


@pytest.fixture(scope="module", autouse=True)
def private_hf_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path_factory.mktemp("hf-cache")))
        yield


@pytest.fixture(scope="module")
def fixed(tmp_path_factory):
    return create_dataset(n_mlps=3, n_samples=5_000, width=WIDTH, depth=DEPTH, seed=1,
                          output_path=tmp_path_factory.mktemp("t") / "fixed")


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    """A target bake whose MLPs stop at different counts (plain: 32,768 to 200,000 samples, the cap)."""
    return create_dataset(n_mlps=4, n_samples=200_000, width=WIDTH, depth=DEPTH, seed=5, target_stderr=0.004,
                          output_path=tmp_path_factory.mktemp("t") / "target")


def _parquet(d):
    return pq.read_table(d / "data").to_pydict()


def test_an_mlp_carries_its_samples_and_standard_errors_fixed_n(fixed):
    ds = whestbench.load_dataset(fixed)
    stored = _parquet(fixed)
    mlps = list(whestbench.iter_mlps(ds))
    assert [m.n_samples_used for m in mlps] == [5_000] * 3 == [whestbench.mlp_at(ds, i).n_samples_used for i in range(3)]
    for i, m in enumerate(mlps):
        assert m.stderr.dtype == np.float32 and m.stderr.shape == (DEPTH, WIDTH)
        np.testing.assert_array_equal(m.stderr, np.asarray(stored["all_layer_stderr"][i], dtype=np.float32))
        np.testing.assert_array_equal(m.means, np.asarray(stored["all_layer_means"][i], dtype=np.float32))


def test_a_target_bakes_mlps_carry_their_own_n_not_the_cap(target):
    ds = whestbench.load_dataset(target)
    used = _parquet(target)["n_samples_used"]
    assert len(set(used)) > 1, used  # the test needs MLPs that stopped at different counts
    assert [m.n_samples_used for m in whestbench.iter_mlps(ds)] == used
    assert whestbench.mlp_at(ds, -1).n_samples_used == used[-1]
    assert all(n <= whestbench.metadata(ds)["n_samples"] for n in used)


def test_without_metadata_a_fixed_n_is_unknown_but_a_column_is_read(target, fixed):
    from whestbench.hub.loader import mlp_from_row

    row = _parquet(fixed)
    first = {k: v[0] for k, v in row.items()}
    assert mlp_from_row(first, "3.0").n_samples_used is None  # no metadata: N is not in the row
    assert mlp_from_row(first, whestbench.metadata(whestbench.load_dataset(fixed))).n_samples_used == 5_000
    trow = {k: v[1] for k, v in _parquet(target).items()}
    assert mlp_from_row(trow, "3.0").n_samples_used == trow["n_samples_used"]


def test_an_016_dataset_gives_its_n_and_no_standard_errors(dataset16):
    ds = whestbench.load_dataset(dataset16("golden/full-w64-d4"))
    mlp = whestbench.mlp_at(ds, 0)
    assert mlp.stderr is None and mlp.n_samples_used == whestbench.metadata(ds)["n_samples"]
    a = whestbench.arrays(ds)
    assert "all_layer_stderr" not in a and a["weights"].shape == (len(ds), 4, 64, 64)
    assert "stderr" not in whestbench.neuron_frame(ds).columns


@pytest.mark.parametrize("which", ["fixed", "target"])
def test_arrays_are_the_stored_columns_in_their_dtypes_and_shapes(which, request):
    d = request.getfixturevalue(which)
    ds = whestbench.load_dataset(d)
    a = whestbench.arrays(ds)
    table = pq.read_table(d / "data")
    n = table.num_rows
    want = {"mlp_id": (np.int32, (n,)), "mlp_seed": (np.int64, (n,)), "weights": (np.float32, (n, DEPTH, WIDTH, WIDTH)),
            "all_layer_means": (np.float32, (n, DEPTH, WIDTH)), "final_means": (np.float32, (n, WIDTH)),
            "avg_variance": (np.float64, (n,)), "all_layer_stderr": (np.float32, (n, DEPTH, WIDTH))}
    if which == "target":
        want["n_samples_used"] = (np.int64, (n,))
    for name, (dtype, shape) in want.items():
        assert type(a[name]) is np.ndarray and a[name].dtype == dtype and a[name].shape == shape, name
        np.testing.assert_array_equal(a[name], np.asarray(table.column(name).to_pylist(), dtype=dtype), err_msg=name)
    assert a["mlp_name"].dtype.kind == "U" and list(a["mlp_name"]) == table.column("mlp_name").to_pylist()
    assert set(a) == set(table.column_names)
    # the float64 column keeps its bits, which datasets' numpy format does not (it casts to float32)
    assert a["avg_variance"].tobytes() == table.column("avg_variance").to_numpy().tobytes()
    cast = ds.with_format("numpy")[:]  # README's claims about datasets' own routes
    assert cast["avg_variance"].dtype == np.float32 and cast["mlp_id"].dtype == np.int64
    assert ds.to_pandas()["final_means"].dtype == object
    scalars = ds.select_columns(["mlp_id", "mlp_name", "avg_variance"]).to_pandas()
    assert (str(scalars["mlp_id"].dtype), str(scalars["avg_variance"].dtype)) == ("int32", "float64")


def test_arrays_follow_a_selection_and_a_column_list(fixed):
    ds = whestbench.load_dataset(fixed)
    full = whestbench.arrays(ds)
    picked = whestbench.arrays(ds.select([2, 0]), ["mlp_id", "weights"])
    assert list(picked) == ["mlp_id", "weights"] and picked["mlp_id"].tolist() == [2, 0]
    np.testing.assert_array_equal(picked["weights"], full["weights"][[2, 0]])
    with pytest.raises(KeyError, match="no column"):
        whestbench.arrays(ds, ["nope"])


def test_arrays_refuse_a_dataset_dict(tmp_path, fixed):
    from whestbench.assemble.combine import combine_split_datasets

    hold = create_dataset(n_mlps=1, n_samples=5_000, width=WIDTH, depth=DEPTH, seed=9, split="holdout",
                          config="holdout", output_path=tmp_path / "h")
    dd = whestbench.load_dataset(combine_split_datasets([fixed, hold], output_dir=tmp_path / "c"))
    with pytest.raises(TypeError, match=r"arrays\(ds\['holdout'\]\)"):
        whestbench.arrays(dd)
    assert whestbench.arrays(dd["holdout"])["weights"].shape == (1, DEPTH, WIDTH, WIDTH)


def test_the_neuron_frame_has_one_numeric_row_per_neuron(target):
    ds = whestbench.load_dataset(target)
    df = whestbench.neuron_frame(ds)
    a = whestbench.arrays(ds)
    n = len(ds)
    assert len(df) == n * DEPTH * WIDTH
    assert {c: str(t) for c, t in df.dtypes.items()} == {
        "mlp_id": "int32", "layer": "int16", "neuron": "int32", "mean": "float32", "stderr": "float32",
        "n_samples": "int64"}
    row = df[(df.mlp_id == 2) & (df.layer == 3) & (df.neuron == 5)].iloc[0]
    assert row["mean"] == a["all_layer_means"][2, 2, 5] and row["stderr"] == a["all_layer_stderr"][2, 2, 5]
    assert row["n_samples"] == a["n_samples_used"][2]
    medians = df.groupby("layer")["stderr"].median()
    np.testing.assert_array_equal(medians.to_numpy(), np.median(a["all_layer_stderr"], axis=(0, 2)).astype(np.float32))
    fixed_frame = whestbench.neuron_frame(whestbench.load_dataset(target).select([0]))
    assert "n_samples" in fixed_frame.columns  # the row carries it; no metadata needed
