"""verify's ``trail segments`` check (verify/trail_segments.py, issue 34): forgeries that keep the exact
``trail`` check satisfied (the stored columns recombined from the edited segments, re-signed) but leave a
segment, or an MLP, that no honest bake makes. Each passed every trail check on main before this check:

- one segment's variance cut to a quarter (every neuron of layers 2..);
- a shift of +3 standard errors of one neuron's mean packed into one segment, that segment's variance cut
  just enough to keep the standard error (so only a spot check drawing that segment regenerates it);
- the trail rescaled to claim N x4 (ranges x4, means and variances kept, error bars /2, the recorded
  command edited to match): the segments' means then scatter 4x what their variances say.

Honest bakes never fail it: ``benchmarks/trail_false_alarms.py`` (docs/cli.md states the count)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from whestbench.bake.pipeline import create_dataset
from whestbench.format.checksums import bind_checksums, dataset_checksums
from whestbench.verify.run import verify_dataset
from whestbench.verify.trail_segments import chernoff_limit

N = 32 * 16_384  # 32 segments of one 16,384-row pcg64 chunk at width 8
SHAPE = dict(n_samples=N, width=8, depth=3)


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    return create_dataset(3, mlp_seeds=[5, 6, 7], output_path=tmp_path_factory.mktemp("seg") / "ds", **SHAPE)


def _edit(src, dst, edit, *, n_factor: int = 1):
    """Copy ``src``; ``edit(ids, segs, n_s, m, v)`` changes the trail's per-row arrays in place (float64
    (rows, L·W)); every MLP's stored means, standard errors, final_means and avg_variance are then
    recombined from the edited segments (ranges ×``n_factor``), so the exact trail check holds; re-signed."""
    shutil.copytree(src, dst)
    md = json.loads((dst / "metadata.json").read_text())
    d, w = md["depth"], md["width"]
    path = dst / "audit" / "public.parquet"
    t = pq.read_table(path)
    ids, segs = np.array(t.column("mlp_id").to_pylist()), np.array(t.column("segment").to_pylist())
    start = np.array(t.column("sample_start").to_pylist()) * n_factor
    end = np.array(t.column("sample_end").to_pylist()) * n_factor
    m = np.array(t.column("means").to_pylist(), dtype=np.float64)
    v = np.array(t.column("var").to_pylist(), dtype=np.float64)
    edit(ids, segs, (end - start).astype(np.float64), m, v)
    m32, v32 = m.astype(np.float32), v.astype(np.float32)
    for name, arr in (("means", m32), ("var", v32)):
        t = t.set_column(t.schema.get_field_index(name), name, pa.FixedSizeListArray.from_arrays(pa.array(arr.reshape(-1)), d * w))
    for name, arr in (("sample_start", start), ("sample_end", end)):
        t = t.set_column(t.schema.get_field_index(name), name, pa.array(arr, pa.int64()))
    pq.write_table(t, path)
    shard = sorted((dst / "data").glob("*.parquet"))[0]
    rows = pq.read_table(shard)
    cols = rows.to_pydict()
    for k, mlp in enumerate(cols["mlp_id"]):
        sel = ids == mlp
        n_s = (end - start)[sel][:, None].astype(np.float64)
        ms, vs, n = m32[sel].astype(np.float64), v32[sel].astype(np.float64), float(n_s.sum())
        mean = (n_s * ms).sum(0) / n
        se = np.sqrt(((n_s * vs).sum(0) + (n_s * (ms - mean) ** 2).sum(0)) / ((n - 1) * n))
        final = mean.reshape(d, w)[-1].astype(np.float32)
        second = ((n_s * (vs + ms**2)).sum(0) / n).reshape(d, w)[-1]
        cols["all_layer_means"][k] = mean.reshape(d, w).astype(np.float32).tolist()
        cols["all_layer_stderr"][k] = se.reshape(d, w).astype(np.float32).tolist()
        cols["final_means"][k] = final.tolist()
        cols["avg_variance"][k] = float(np.mean(second - final.astype(np.float64) ** 2))
    for name in ("all_layer_means", "all_layer_stderr", "final_means", "avg_variance"):
        i = rows.schema.get_field_index(name)
        rows = rows.set_column(i, rows.schema.field(i), pa.array(cols[name], type=rows.schema.field(i).type))
    pq.write_table(rows, shard)
    if n_factor != 1:
        md["bake_command"] = md["bake_command"].replace(f"--n-samples {N}", f"--n-samples {N * n_factor}")
        md["n_samples"] = N * n_factor
    md.pop("checksums")
    bind_checksums(md, dataset_checksums(dst))
    (dst / "metadata.json").write_text(json.dumps(md, indent=2))
    return dst


def _verdict(ds):
    report = verify_dataset(ds, pilot=False)
    assert report.get("trail contract").ok and report.get("trail").ok, [c.detail for c in report.failures]
    return report.get("trail segments"), report


def test_an_honest_bake_passes_every_segment_family(plain):
    check, report = _verdict(plain)
    assert check.ok and not check.skipped, check.detail
    for family in ("variances", "layer variances", "means", "spread"):
        assert f"{family} (" in check.detail
    assert not report.failures


def test_one_segment_whose_variance_was_cut_to_a_quarter_fails(plain, tmp_path):
    def cut(ids, segs, n_s, m, v):
        v[(ids == 1) & (segs == 9), 8:] *= 0.25  # layers 2..: layer 1's error bars are held to their exact value

    check, report = _verdict(_edit(plain, tmp_path / "ds", cut))
    assert not check.ok and "mlp_id 1 segment 9 layer " in check.detail and "variance 0.2" in check.detail, check.detail
    assert [c.name for c in report.failures] == ["trail segments"]


def test_a_shift_packed_into_one_segment_fails(plain, tmp_path):
    """+3 standard errors on one neuron's mean, all of it in segment 20, whose variance makes room for it."""
    def pack(ids, segs, n_s, m, v):
        sel = ids == 2
        rows = np.flatnonzero(sel)
        ns, big_n = n_s[sel], n_s[sel].sum()
        j = 1 * 8 + 3  # layer 2 neuron 3
        mean = (ns * m[rows, j]).sum() / big_n
        spread = (ns * (v[rows, j] + (m[rows, j] - mean) ** 2)).sum()
        se = np.sqrt(spread / ((big_n - 1) * big_n))
        r = rows[20]
        shift = 3 * se * big_n / n_s[r]  # the whole shift in one segment
        before = (ns * (m[rows, j] - mean) ** 2).sum()
        m[r, j] += shift
        new_mean = (ns * m[rows, j]).sum() / big_n
        after = (ns * (m[rows, j] - new_mean) ** 2).sum()
        v[r, j] -= (after - before) / n_s[r]  # A + B kept: the standard error stays
        assert v[r, j] > 0.9 * v[rows[19], j]  # a small cut: the variance families alone would not see it

    check, _ = _verdict(_edit(plain, tmp_path / "ds", pack))
    assert not check.ok and "mlp_id 2 segment 20 layer 2 neuron 3: mean" in check.detail, check.detail


def test_a_trail_rescaled_to_claim_four_times_the_samples_fails(plain, tmp_path):
    check, _ = _verdict(_edit(plain, tmp_path / "ds", lambda *a: None, n_factor=4))
    assert not check.ok and "the segments' means scatter" in check.detail, check.detail


def test_chernoff_limit_solves_its_bound():
    for p, d in ((1e-6, 31), (2.5e-7, 93), (1e-9, 5)):
        x = chernoff_limit(p, d)
        assert x > 1 and abs((d / 2) * (np.log(x) + 1 - x) - np.log(p)) < 1e-6
