"""The audit trail through a bake and the datasets made of datasets: the side file is written and listed,
the numeric columns keep their bytes, and a resumed, 2-thread, sliced-and-merged or combined bake carries
the trail a single uninterrupted bake writes."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from whestbench.assemble.combine import combine_split_datasets
from whestbench.assemble.merge import merge_datasets
from whestbench.bake.pipeline import BakeConfig, _bake_command, bake
from whestbench.compute.pcg64 import chunk_rows
from whestbench.compute.segments import segment_bounds
from whestbench.errors import UsageError

from helpers.datasets import stopped_after_first_unit

SEEDS = (101, 202, 303, 404, 505)
SHAPE = dict(n_samples=5 * chunk_rows(8) + 123, width=8, depth=3)
NUMERIC = ("all_layer_means", "final_means", "avg_variance", "all_layer_stderr")


def _cfg(out, **kw):
    return BakeConfig(n_mlps=5, output=out, mlp_seeds=SEEDS, **{"max_threads": 1, "audit_segments": 4, **SHAPE, **kw})


def _trail(ds, split="public"):
    return pq.read_table(ds / "audit" / f"{split}.parquet")


def _columns(ds, split="public"):
    return pq.read_table(ds / "data" / f"{split}-00000-of-00001.parquet")


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    return bake(_cfg(tmp_path_factory.mktemp("single") / "ds"))


def test_bake_writes_listed_trail_and_same_columns(single, tmp_path):
    off = bake(_cfg(tmp_path / "off", audit_segments=0))
    a, b = _columns(single), _columns(off)
    for col in NUMERIC + ("weights", "mlp_seed", "mlp_id"):
        assert a.column(col).equals(b.column(col)), col
    md = json.loads((single / "metadata.json").read_text())
    assert md["audit"] == {"version": "1", "segments": 4, "step_samples": chunk_rows(8), "aligned": False,
                           "file": "audit/public.parquet", "values": ["means", "var", "pcg64_state"]}
    assert "audit/public.parquet" in md["checksums"]
    t = _trail(single)
    want = segment_bounds(SHAPE["n_samples"], chunk_rows(8), 4, False)
    assert t.num_rows == 5 * len(want) == 20
    assert list(zip(t.column("sample_start").to_pylist(), t.column("sample_end").to_pylist()))[:4] == want
    assert t.column("mlp_id").to_pylist() == [i for i in range(5) for _ in want]
    md_off = json.loads((off / "metadata.json").read_text())
    assert "audit" not in md_off and not (off / "audit").exists()
    assert not any(k.startswith("audit/") for k in md_off["checksums"])


def test_resumed_and_two_thread_bakes_give_the_same_trail(single, tmp_path):
    cfg = _cfg(tmp_path / "resumed", checkpoint_every=1e-6)
    stopped_after_first_unit(cfg)
    bake(cfg)
    assert _trail(tmp_path / "resumed").equals(_trail(single))
    two = bake(_cfg(tmp_path / "two", max_threads=2))
    assert _trail(two).equals(_trail(single))


def test_slices_merged_trail_equals_single(single, tmp_path):
    parts = [bake(_cfg(tmp_path / f"p{k}", mlp_range=r)) for k, r in enumerate([(0, 2), (2, 5)])]
    merged = merge_datasets(parts, output_dir=tmp_path / "merged")
    assert _trail(merged).equals(_trail(single))
    md = json.loads((merged / "metadata.json").read_text())
    assert md["audit"]["file"] == "audit/public.parquet" and "audit/public.parquet" in md["checksums"]


def test_merge_refuses_partials_with_other_trails(tmp_path):
    a = bake(_cfg(tmp_path / "a", mlp_range=(0, 2)))
    b = bake(_cfg(tmp_path / "b", mlp_range=(2, 5), audit_segments=8))
    from whestbench.errors import MergeIncompatibleError

    with pytest.raises(MergeIncompatibleError, match="audit="):
        merge_datasets([a, b], output_dir=tmp_path / "m")


def test_combine_copies_trails(single, tmp_path):
    holdout = bake(BakeConfig(n_mlps=2, output=tmp_path / "h", mlp_seeds=(7, 8), split="holdout", audit_segments=4,
                              **SHAPE))
    out = combine_split_datasets([single, holdout], output_dir=tmp_path / "combined")
    md = json.loads((out / "metadata.json").read_text())
    assert {"audit/public.parquet", "audit/holdout.parquet"} <= set(md["checksums"])
    assert md["splits"]["holdout"]["audit"]["file"] == "audit/holdout.parquet"
    assert _trail(out, "holdout").equals(_trail(holdout, "holdout"))
    from whestbench.verify.run import verify_dataset

    report = verify_dataset(out)
    assert report.get("public: trail").ok and report.get("holdout: trail").ok


def test_audit_segments_checked_and_recorded():
    with pytest.raises(UsageError, match="--audit-segments"):
        BakeConfig(n_mlps=1, output=None, audit_segments=-1, **SHAPE)
    with pytest.raises(UsageError, match="--audit-segments"):
        BakeConfig(n_mlps=1, output=None, audit_segments=2000, **SHAPE)
    for few in (1, 2, 3):  # a trail of fewer than 4 segments: a spot check of one costs a whole MLP (issue 34)
        with pytest.raises(UsageError, match=r"--audit-segments must be 0 \(no trail\) or an integer from 4 to 1024"):
            BakeConfig(n_mlps=1, output=None, audit_segments=few, **SHAPE)
    assert "--audit-segments 4" in _bake_command(_cfg(None), {"method": "explicit"})
    assert "--audit-segments 0" in _bake_command(_cfg(None, audit_segments=0), {"method": "explicit"})
    assert "--audit-segments" not in _bake_command(_cfg(None, audit_segments=32), {"method": "explicit"})


def test_trail_size_per_mlp_at_256x8_is_under_a_mib():
    """The size rule (docs/format.md): S = 32 segments of a 256x8 MLP, plain and control-variate, in the side file."""
    import tempfile
    from pathlib import Path

    from whestbench.compute.segments import SegmentTrail
    from whestbench.format.trail import TrailWriter

    rng = np.random.default_rng(0)
    bounds = segment_bounds(10**9, chunk_rows(256), 32, False)
    for cv in (False, True):
        names = ("means", "var", "cv_means", "cv_var") if cv else ("means", "var")
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "t.parquet"
            w = TrailWriter(path, 8, 256, cv, True)
            for i in range(4):
                vals = {k: rng.random((32, 8, 256), dtype=np.float32) for k in names}
                w.add(i, SegmentTrail(0, vals, [np.random.default_rng(i).bit_generator.state] * 32), bounds)
            w.close()
            assert path.stat().st_size / 4 < 2**20, (cv, path.stat().st_size / 4)
