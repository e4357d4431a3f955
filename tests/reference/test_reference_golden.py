"""The golden set the tests bake from whestbench 0.16.2 agrees with the one it baked on another machine.

``golden_dir`` is made here at test time; ``fixtures16 / "golden"`` holds the same commands' bakes run
on another x86-64 machine on 2026-11-21 (see the README there). SPEC §2 (b): the identity columns agree bit for bit; the means within 4 float32 ulps + 1e-6,
``avg_variance`` within 1e-6 relative, because OpenBLAS picks its kernel by machine.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

pytestmark = pytest.mark.reference

BAKES = ["full-w64-d4", "full-w256-d8", "holdout-w64-d4"]  # the three bakes; the rest derive from them


@pytest.fixture(scope="module")
def other_machine(fixtures16):
    """``"<bake>/<column>"`` -> the other machine's column, read from its Parquet files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = {}
    for name in BAKES:
        table = pa.concat_tables(pq.read_table(f) for f in sorted((fixtures16 / "golden" / name / "data").glob("*.parquet")))
        for column in ("mlp_seed", "mlp_name", "avg_variance", "final_means", "all_layer_means", "weights"):
            out[f"{name}/{column}"] = np.asarray(table[column].to_pylist(),
                                                 dtype=object if column == "mlp_name" else None)
        out[f"{name}/weights_sha256"] = np.array([hashlib.sha256(np.asarray(w, np.float32).tobytes()).hexdigest()
                                                  for w in table["weights"].to_pylist()])
    return out


@pytest.mark.parametrize("name", BAKES)
def test_identity_columns_are_bit_identical_to_the_other_machines(name, golden_dir, read_columns, other_machine):
    cols = read_columns(golden_dir / name)
    assert cols["mlp_seed"].tolist() == other_machine[f"{name}/mlp_seed"].tolist()
    assert cols["mlp_name"] == other_machine[f"{name}/mlp_name"].tolist()
    digests = [hashlib.sha256(w.tobytes()).hexdigest() for w in cols["weights"]]
    assert digests == other_machine[f"{name}/weights_sha256"].tolist()


@pytest.mark.parametrize("name", BAKES)
def test_ground_truth_is_within_float32_rounding_of_the_other_machines(name, golden_dir, read_columns, other_machine):
    cols = read_columns(golden_dir / name)
    for column in ("all_layer_means", "final_means"):
        here, there = cols[column], other_machine[f"{name}/{column}"]
        bound = 4 * np.spacing(np.maximum(np.abs(here), np.abs(there))).astype(np.float64) + 1e-6
        assert np.all(np.abs(here.astype(np.float64) - there) <= bound), column
    np.testing.assert_allclose(cols["avg_variance"], other_machine[f"{name}/avg_variance"], rtol=1e-6, atol=0)
