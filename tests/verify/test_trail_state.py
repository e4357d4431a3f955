"""A pcg64 trail's generator states edited into what numpy cannot take (issue 34): ``{}``, ``null``, ``-5``
and ``1e400`` passed plain verify (only segment 0's state is compared with the stream) and reached numpy
in ``--spot-check`` as a raw ``TypeError: state must be a dict``. Now the trail check names the segment
and verify fails in one line; the spot check never hands numpy an unchecked state."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from whestbench.format.trail import pcg64_state

from helpers.cli import run
from helpers.datasets import resign


BAD = ["{}", "null", "-5", "1e400", '{"bit_generator": "PCG64", "state": {"state": -1, "inc": 1}, "has_uint32": 0, '
       '"uinteger": 0}', "[1, 2]", "not json"]


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    from whestbench import create_dataset

    return create_dataset(2, 20_000, 8, 2, seed=1, output_path=tmp_path_factory.mktemp("state") / "ds")


def _with_state(src, dst, row: int, text: str):
    shutil.copytree(src, dst)
    path = dst / "audit" / "public.parquet"
    t = pq.read_table(path)
    col = t.column("pcg64_state").to_pylist()
    assert len(col) > row
    col[row] = text
    pq.write_table(t.set_column(t.schema.get_field_index("pcg64_state"), "pcg64_state", pa.array(col, pa.string())), path)
    return resign(dst, json.loads((dst / "metadata.json").read_text()))


@pytest.mark.parametrize("text", BAD)
def test_a_state_no_generator_takes_is_refused_with_the_segment_named(text):
    with pytest.raises(ValueError, match=r"^mlp_id 3 segment 1's pcg64_state .*(is not JSON|is not a PCG64 generator)"):
        pcg64_state(text, "mlp_id 3 segment 1")


@pytest.mark.parametrize("text", BAD[:4])
def test_verify_and_the_spot_check_fail_in_one_line_on_a_damaged_later_state(plain, tmp_path, capsys, text):
    ds = _with_state(plain, tmp_path / "ds", 1, text)  # segment 1 of MLP 0: only a spot check regenerates from it
    rc, out, err = run(["dataset", "verify", str(ds)], capsys)
    errors = [x for x in err.splitlines() if not x.startswith("[")]  # progress lines aside
    assert rc == 1 and errors == ["error: verify: 1 of 21 checks failed (trail); see the ✗ lines above"]
    assert "✗ trail:" in out and "mlp_id 0 segment 1's pcg64_state" in out
    rc, out, err = run(["dataset", "verify", str(ds), "--spot-check", "16", "--no-cache"], capsys)
    errors = [x for x in err.splitlines() if not x.startswith("[")]
    assert rc == 1 and len(errors) == 1 and errors[0].startswith("error: verify:") and "TypeError" not in out + err


def test_the_spot_check_itself_refuses_an_unchecked_state(plain):
    """The spot check reads its rows apart from the trail check: it checks each state it hands to numpy."""
    from whestbench.format.reader import open_dataset
    from whestbench.verify.scan import DatasetScan, scan_split
    from whestbench.verify.spot import _one, trail_blocks

    md = open_dataset(plain).meta().md
    ds = DatasetScan(plain, md, md["width"], md["depth"], md["n_samples"], [])
    ds.splits.append(scan_split(plain, "public", md["width"], md["depth"], rederive=False))
    s, block, path = trail_blocks(ds)[0]
    stored = pq.read_table(path).slice(1, 1).to_pylist()[0]
    assert stored["segment"] == 1 and stored["mlp_id"] == 0
    stored["pcg64_state"] = "{}"
    why, mode = _one(ds, s, block, 0, 1, stored, None, None)
    assert why == "segment 1's pcg64_state {} is not a PCG64 generator state" and mode == "-"


def test_a_trail_whose_shapes_no_bake_writes_is_refused_before_its_rows_are_read(plain, tmp_path, capsys):
    """A re-signed trail whose value lists hold 4·10⁶ floats (or whose row group holds more rows than the
    writer's groups) was read whole before its shape was looked at."""
    from whestbench.format.trail import iter_trail

    ds = _with_state(plain, tmp_path / "ds", 1, pq.read_table(plain / "audit" / "public.parquet")
                     .column("pcg64_state")[1].as_py())
    path = ds / "audit" / "public.parquet"
    big = pa.FixedSizeListArray.from_arrays(pa.array([0.0] * 4_000_000, pa.float32()), 4_000_000)
    t = pa.table({"mlp_id": pa.array([0], pa.int32()), "segment": pa.array([0], pa.int32()),
                  "sample_start": pa.array([0], pa.int64()), "sample_end": pa.array([1], pa.int64()),
                  "means": big, "var": big})
    pq.write_table(t, path)
    with pytest.raises(ValueError, match="its column .means. is fixed_size_list<.*>\\[4000000\\], not a fixed "
                                         "list of 16 floats"):
        next(iter_trail(path, 2, 8))
    n = 64 * 1024 + 1
    small = pa.FixedSizeListArray.from_arrays(pa.array([0.0] * (16 * n), pa.float32()), 16)
    pq.write_table(pa.table({"mlp_id": pa.array([0] * n, pa.int32()), "segment": pa.array(range(n), pa.int32()),
                             "sample_start": pa.array([0] * n, pa.int64()), "sample_end": pa.array([1] * n, pa.int64()),
                             "means": small, "var": small}), path, row_group_size=n)
    with pytest.raises(ValueError, match="its row group 0 holds 65,537 rows; a trail's hold at most 65,536"):
        next(iter_trail(path, 2, 8))
