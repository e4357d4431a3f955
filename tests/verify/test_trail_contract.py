"""The trail held to what the metadata promises (verify/trail_contract.py, issue 34): each forgery that costs
the forger no compute, re-signed with fresh checksums as a careful forger leaves it, fails verify without
--spot-check (the contract runs with or without the audit pilot: ``pilot=False`` here) and is refused by merge
and combine-splits, which write nothing.

Before the contract, on main, the trail checks passed every one of these forgeries (the exact check rebuilt
the stored numbers from whatever segments and columns the file held, reading the segment count from the very
metadata it checked), merge and combine-splits signed them, and a whole verify passed the collapsed trail at
the same N and the copied segments outright (at this small shape it caught the N x4 ones through layer 1's
closed form and the dropped columns' error bars x0.7 through the pilot, by their own power, not the trail's).

The forgeries: the control-variate columns dropped (error bars x0.7 with them); the trail collapsed to one
segment per MLP (same N, and N x4 with error bars /2); N x4 with error bars /2 and the trail removed;
audit.values or audit.version not what the recipe keeps; two segments of an MLP copied (identical means,
with the stored numbers recombined to match)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from whestbench.bake.pipeline import create_dataset
from whestbench.errors import MergeCorruptError
from whestbench.verify.run import verify_dataset

from helpers.cli import run
from helpers.datasets import resign


SHAPE = dict(n_samples=200_000, width=8, depth=3)  # pcg64 at width 8: 13 segments of one 16,384-row chunk
SEEDS = [11, 22, 33, 44]
TRAIL = Path("audit") / "public.parquet"


@pytest.fixture(scope="module")
def bakes(tmp_path_factory):
    root = tmp_path_factory.mktemp("contract")
    out = {"plain": create_dataset(3, mlp_seeds=SEEDS[:3], output_path=root / "plain", **SHAPE),
           "cv": create_dataset(3, mlp_seeds=SEEDS[:3], output_path=root / "cv", estimator="control-variate", **SHAPE)}
    for k, rng in enumerate([(0, 2), (2, 4)]):
        out[f"p{k}"] = create_dataset(4, mlp_seeds=SEEDS, mlp_range=rng, output_path=root / f"p{k}", **SHAPE)
    out["holdout"] = create_dataset(2, mlp_seeds=[7, 8], split="holdout", config="holdout",
                                    output_path=root / "holdout", **SHAPE)
    return out


# --- the forger's tools: edit, then re-sign -----------------------------------------------------------


def _md(ds: Path) -> dict:
    return json.loads((ds / "metadata.json").read_text())


def _shard(ds: Path) -> Path:
    return sorted((ds / "data").glob("*.parquet"))[0]


def _set_rows(ds: Path, **columns) -> None:
    """Replace data columns (name -> per-row values), keeping the shard's Arrow types and metadata."""
    t = pq.read_table(_shard(ds))
    for name, values in columns.items():
        i = t.schema.get_field_index(name)
        t = t.set_column(i, t.schema.field(i), pa.array(values, type=t.schema.field(i).type))
    pq.write_table(t, _shard(ds))


def _rows(ds: Path) -> dict:
    return pq.read_table(_shard(ds)).to_pydict()


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _trail(ds: Path) -> pa.Table:
    return pq.read_table(ds / TRAIL)


def _floats(t: pa.Table, name: str) -> np.ndarray:
    return np.array(t.column(name).to_pylist(), dtype=np.float64)


def _write_trail(ds: Path, t: pa.Table) -> None:
    pq.write_table(t, ds / TRAIL)


def _collapse(src: Path, dst: Path, factor: int, *, segments_said: int = 1, command: bool = False) -> Path:
    """Every MLP's trail pooled into one segment [0, factor·N); n_samples ×factor, error bars /√factor, the
    pooled variance and avg_variance chosen so the exact trail check holds (se²·(N−1)·N = N·v)."""
    ds = _copy(src, dst)
    md = _md(ds)
    t = _trail(ds)
    d, w = md["depth"], md["width"]
    n = md["n_samples"] * factor
    ids = np.array(t.column("mlp_id").to_pylist())
    rows = _rows(ds)
    se = np.array(rows["all_layer_stderr"], dtype=np.float32) / np.float32(np.sqrt(factor))
    means, var, states, avg = [], [], [], []
    for k, mlp in enumerate(rows["mlp_id"]):
        v = se[k].astype(np.float64) ** 2 * (n - 1)  # one segment: A = N·v, B = 0
        means.append(np.array(rows["all_layer_means"][k], dtype=np.float32).reshape(-1))
        var.append(v.astype(np.float32).reshape(-1))
        states.append(t.column("pcg64_state")[int(np.flatnonzero(ids == mlp)[0])].as_py())
        avg.append(float(np.mean(v.astype(np.float32)[-1].astype(np.float64))))
    size = d * w
    cols = {"mlp_id": pa.array(rows["mlp_id"], pa.int32()), "segment": pa.array([0] * len(means), pa.int32()),
            "sample_start": pa.array([0] * len(means), pa.int64()), "sample_end": pa.array([n] * len(means), pa.int64()),
            "means": pa.FixedSizeListArray.from_arrays(pa.array(np.concatenate(means)), size),
            "var": pa.FixedSizeListArray.from_arrays(pa.array(np.concatenate(var)), size),
            "pcg64_state": pa.array(states, pa.string())}
    _write_trail(ds, pa.Table.from_arrays(list(cols.values()), schema=t.schema))
    _set_rows(ds, all_layer_stderr=[s.tolist() for s in se], avg_variance=avg)
    md["n_samples"] = n
    md["audit"]["segments"] = segments_said
    if command:
        md["bake_command"] = md["bake_command"].replace(f"--n-samples {SHAPE['n_samples']}", f"--n-samples {n}") \
            + f" --audit-segments {segments_said}"
    return resign(ds, md)


def _drop_cv(src: Path, dst: Path, *, list_them: bool, se_scale: float = 1.0) -> Path:
    """The cv_* columns dropped from the trail (and from audit.values unless ``list_them``), error bars scaled."""
    ds = _copy(src, dst)
    md = _md(ds)
    _write_trail(ds, _trail(ds).drop_columns(["cv_means", "cv_var"]))
    if not list_them:
        md["audit"]["values"] = [v for v in md["audit"]["values"] if not v.startswith("cv_")]
    if se_scale != 1.0:
        rows = _rows(ds)
        _set_rows(ds, all_layer_stderr=[(np.array(s, np.float32) * np.float32(se_scale)).tolist()
                                        for s in rows["all_layer_stderr"]])
    return resign(ds, md)


def _remove_trail(src: Path, dst: Path, factor: int, *, command: str | None) -> Path:
    """N ×factor, error bars /√factor, the trail and its audit block removed; ``command``: "n" edits the
    recorded bake_command's --n-samples, "n+0" also adds --audit-segments 0."""
    ds = _copy(src, dst)
    md = _md(ds)
    shutil.rmtree(ds / "audit")
    del md["audit"]
    rows = _rows(ds)
    _set_rows(ds, all_layer_stderr=[(np.array(s, np.float32) / np.float32(np.sqrt(factor))).tolist()
                                    for s in rows["all_layer_stderr"]])
    md["n_samples"] *= factor
    if command:
        md["bake_command"] = md["bake_command"].replace(f"--n-samples {SHAPE['n_samples']}", f"--n-samples {md['n_samples']}")
        if command == "n+0":
            md["bake_command"] += " --audit-segments 0"
    return resign(ds, md)


def _copy_segment(src: Path, dst: Path, mlp: int, seg: int) -> Path:
    """Segment ``seg + 1`` of MLP ``mlp`` made a copy of segment ``seg`` (its range kept), and that MLP's
    stored means, standard errors and avg_variance recombined from the trail so the exact check holds."""
    ds = _copy(src, dst)
    md = _md(ds)
    t = _trail(ds)
    d, w = md["depth"], md["width"]
    ids, segs = np.array(t.column("mlp_id").to_pylist()), np.array(t.column("segment").to_pylist())
    m, v = _floats(t, "means").astype(np.float32), _floats(t, "var").astype(np.float32)
    a, b = int(np.flatnonzero((ids == mlp) & (segs == seg))[0]), int(np.flatnonzero((ids == mlp) & (segs == seg + 1))[0])
    m[b], v[b] = m[a], v[a]
    t = t.set_column(t.schema.get_field_index("means"), "means", pa.FixedSizeListArray.from_arrays(pa.array(m.reshape(-1)), d * w))
    t = t.set_column(t.schema.get_field_index("var"), "var", pa.FixedSizeListArray.from_arrays(pa.array(v.reshape(-1)), d * w))
    _write_trail(ds, t)
    rows = _rows(ds)
    k = rows["mlp_id"].index(mlp)
    sel = ids == mlp
    n_s = (np.array(t.column("sample_end").to_pylist()) - np.array(t.column("sample_start").to_pylist()))[sel][:, None]
    ms, vs, n = m[sel].astype(np.float64), v[sel].astype(np.float64), float(n_s.sum())
    mean = (n_s * ms).sum(0) / n
    se = np.sqrt(((n_s * vs).sum(0) + (n_s * (ms - mean) ** 2).sum(0)) / ((n - 1) * n))
    final = mean.reshape(d, w)[-1].astype(np.float32).astype(np.float64)
    second = ((n_s * (vs + ms**2)).sum(0) / n).reshape(d, w)[-1]
    means = [list(r) for r in rows["all_layer_means"]]
    means[k] = mean.reshape(d, w).astype(np.float32).tolist()
    stderr = [list(r) for r in rows["all_layer_stderr"]]
    stderr[k] = se.reshape(d, w).astype(np.float32).tolist()
    finals = [list(r) for r in rows["final_means"]]
    finals[k] = mean.reshape(d, w)[-1].astype(np.float32).tolist()
    avg = list(rows["avg_variance"])
    avg[k] = float(np.mean(second - final**2))
    _set_rows(ds, all_layer_means=means, all_layer_stderr=stderr, final_means=finals, avg_variance=avg)
    return resign(ds, md)


# --- verify --------------------------------------------------------------------------------------------


def _contract(ds: Path):
    report = verify_dataset(ds, pilot=False)
    return report.get("trail contract"), report


def test_honest_bakes_meet_the_contract(bakes):
    for name in ("plain", "cv", "p0"):
        check, report = _contract(bakes[name])
        assert check.ok and not check.skipped, check.detail
        assert "bake_command agrees with the metadata" in check.detail
        assert not report.failures, [c.detail for c in report.failures]


@pytest.mark.parametrize("list_them", [False, True], ids=["unlisted", "still-listed"])
def test_control_variate_columns_dropped_fail(bakes, tmp_path, list_them):
    ds = _drop_cv(bakes["cv"], tmp_path / "ds", list_them=list_them, se_scale=0.7)
    check, report = _contract(ds)
    said = ('audit.values ["means", "var", "pcg64_state"] are not the means, var, cv_means, cv_var, pcg64_state'
            if not list_them else "public.parquet lacks cv_means, cv_var: a trail of this recipe holds the columns")
    assert not check.ok and said in check.detail, check.detail
    spot = verify_dataset(ds, pilot=False, spot_check=2, cache=False).get("spot-check")
    assert spot.skipped and "not run" in spot.detail  # nothing re-draws segments of a trail that breaks the contract


@pytest.mark.parametrize("factor", [1, 4])
def test_trail_collapsed_to_one_segment_fails(bakes, tmp_path, factor):
    ds = _collapse(bakes["plain"], tmp_path / "ds", factor)
    check, _ = _contract(ds)
    assert not check.ok and "audit.segments 1 is not a count from 4 to 1024" in check.detail, check.detail
    if factor == 4:  # the recorded command, left alone, says the true N
        assert "bake_command says --n-samples 200000, the metadata 800000" in check.detail


def test_trail_collapsed_with_the_recipe_rewritten_fails(bakes, tmp_path):
    """The command edited to match (--n-samples ×4, --audit-segments 1): a bake never keeps fewer than 4."""
    ds = _collapse(bakes["plain"], tmp_path / "ds", 4, command=True)
    check, _ = _contract(ds)
    assert not check.ok and "audit.segments 1 is not a count from 4 to 1024" in check.detail, check.detail


def test_trail_collapsed_under_the_recorded_segment_count_fails(bakes, tmp_path):
    """audit.segments left as the recipe says (32): each MLP's one segment is fewer than a bake makes."""
    ds = _collapse(bakes["plain"], tmp_path / "ds", 1, segments_said=32)
    check, _ = _contract(ds)
    assert not check.ok and "mlp_id 0: 1 segment(s), but a bake of 200,000 samples at step 16,384 with S = 32 makes 13 " \
        "(never fewer)" in check.detail, check.detail


@pytest.mark.parametrize("command", [None, "n"])
def test_n_times_4_with_the_trail_removed_fails(bakes, tmp_path, command):
    ds = _remove_trail(bakes["plain"], tmp_path / "ds", 4, command=command)
    check, _ = _contract(ds)
    assert not check.ok and "the recorded bake_command keeps an audit trail (--audit-segments 32), but the metadata " \
        "has no audit block and audit/public.parquet is missing" in check.detail, check.detail


def test_a_recipe_without_a_trail_passes_and_says_what_it_did_not_check(bakes, tmp_path, capsys):
    """Removed with the command rewritten to --audit-segments 0, the dataset reads as a bake without a trail:
    what the trail would have checked is named in the OK line (the limit docs/cli.md states)."""
    ds = _remove_trail(bakes["plain"], tmp_path / "ds", 1, command="n+0")
    check, report = _contract(ds)
    assert check.ok and check.skipped and "baked with --audit-segments 0" in check.detail
    rc, out, _ = run(["dataset", "verify", str(ds)], capsys)
    ok = out.splitlines()[-1]
    assert rc == 0 and ok.startswith("OK:") and "trail: none: the means, standard errors and sample counts are not " \
        "checked against an audit trail, and --spot-check cannot run" in ok, ok


def test_whestbench_016_datasets_pass_without_a_trail_and_say_so(fixtures16, capsys):
    rc, out, _ = run(["dataset", "verify", str(fixtures16 / "golden" / "full-w64-d4")], capsys)
    ok = out.splitlines()[-1]
    assert rc == 0 and "– trail contract: no audit trail (no bake_command is recorded" in out
    assert "trail: none" in ok, ok


@pytest.mark.parametrize("edit, said", [
    (lambda a: a.update(values=["means", "var"]), 'audit.values ["means", "var"] are not the means, var, pcg64_state'),
    (lambda a: a.update(values=["means", "var", "cv_means", "cv_var", "pcg64_state"]), "a plain pcg64 bake keeps"),
    (lambda a: a.update(version="2"), "audit.version '2' is not one this whestbench reads (1)"),
    (lambda a: a.update(step_samples=4096), "audit.step_samples 4096 is not the pcg64 step 16384"),
    (lambda a: a.update(segments=64), "audit.segments 64 is not the 32 of the recorded bake_command"),
], ids=["values-short", "values-cv", "version", "step", "segments"])
def test_audit_block_not_what_the_recipe_keeps_fails(bakes, tmp_path, edit, said):
    ds = _copy(bakes["plain"], tmp_path / "ds")
    md = _md(ds)
    edit(md["audit"])
    check, _ = _contract(resign(ds, md))
    assert not check.ok and said in check.detail, check.detail


def test_a_check_without_the_pilot_does_not_claim_its_statistics(bakes):
    """verify_dataset(pilot=False) (a re-run's check) said "statistics: all N MLPs" as a full verify does."""
    without = verify_dataset(bakes["plain"], pilot=False).coverage["statistics"]
    assert without.startswith("all 3 MLPs for layer 1's exact means") and "the audit pilot" in without \
        and "did not run" in without, without
    assert verify_dataset(bakes["plain"]).coverage["statistics"] == "all 3 MLPs"


def test_copied_segments_fail(bakes, tmp_path):
    ds = _copy_segment(bakes["plain"], tmp_path / "ds", mlp=1, seg=4)
    report = verify_dataset(ds, pilot=False)
    trail = report.get("trail")
    assert report.get("trail contract").ok  # the ranges are a bake's: the values are not
    assert not trail.ok and "mlp_id 1: segments 4 and 5 hold identical means" in trail.detail, trail.detail
    assert [c.name for c in report.failures] == ["trail"]  # recombined: every other check passes


# --- merge and combine-splits refuse them, writing nothing ---------------------------------------------


FORGERIES = {
    "cv-dropped": lambda src, dst: _drop_cv(src, dst, list_them=False),
    "collapsed": lambda src, dst: _collapse(src, dst, 1),  # the inputs of one bake share N: the forger keeps it
    "removed": lambda src, dst: _remove_trail(src, dst, 1, command=None),
}


@pytest.mark.parametrize("forgery", ["collapsed", "removed", "copied"])
def test_merge_refuses_a_forged_partial_and_writes_nothing(bakes, tmp_path, capsys, forgery):
    from whestbench.assemble.merge import merge_datasets

    forge = FORGERIES.get(forgery) or (lambda src, dst: _copy_segment(src, dst, mlp=int(dst.name[1]) * 2, seg=3))
    parts = [forge(bakes[p], tmp_path / p) for p in ("p0", "p1")]  # partials of one bake share their recipe: both forged
    with pytest.raises(MergeCorruptError, match=r"partial .*p0 fails (the trail contract|verify: trail)"):
        merge_datasets(parts, output_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()
    rc, _, err = run(["dataset", "merge", *map(str, parts), "--output", str(tmp_path / "out2")], capsys)
    errors = [x for x in err.splitlines() if not x.startswith("[")]  # progress lines aside
    assert rc == 1 and len(errors) == 1 and "p0 fails" in errors[0] and "trail" in errors[0], err
    assert not (tmp_path / "out2").exists()


@pytest.mark.parametrize("forgery", ["cv-dropped", "collapsed", "removed"])
def test_combine_refuses_a_forged_input_and_writes_nothing(bakes, tmp_path, capsys, forgery):
    from whestbench.assemble.combine import combine_split_datasets

    bad = FORGERIES[forgery](bakes["cv" if forgery == "cv-dropped" else "plain"], tmp_path / "bad")
    honest = bakes["holdout"]
    if forgery == "cv-dropped":  # a control-variate split of its own
        honest = create_dataset(2, mlp_seeds=[7, 8], split="holdout", config="holdout", estimator="control-variate",
                                output_path=tmp_path / "holdout", **SHAPE)
    with pytest.raises(MergeCorruptError, match=r"input .*bad fails the trail contract"):
        combine_split_datasets([bad, honest], output_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()
    rc, _, err = run(["dataset", "combine-splits", str(bad), str(honest), "--output", str(tmp_path / "out2")], capsys)
    errors = [x for x in err.splitlines() if not x.startswith("[")]  # progress lines aside
    assert rc == 1 and len(errors) == 1 and "fails the trail contract" in errors[0], err
    assert not (tmp_path / "out2").exists()
