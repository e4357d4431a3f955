"""The audit trail through units: any cut of a philox MLP into units (and any resume) gives the same
trail, the segments combine into the stored total bit for bit, and unit records carry the trail."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest

from whestbench.compute.estimation import Estimation
from whestbench.compute.philox.spec import combine_in_order, pack
from whestbench.compute.seeds import derived_seeds
from whestbench.compute.segments import finish
from whestbench.compute.stats import LayerSums
from whestbench.errors import DamagedRecord
from whestbench.work.ledger import Ledger, read_unit_record, unit_record
from whestbench.work.steps import Compute, UnitContext, UnitStopped, run_unit
from whestbench.work.units import mlp_totals, mlp_trail

BASE = dict(seeds=tuple(derived_seeds(7, 3)), n_samples=37 * 1024 + 300, width=8, depth=3, mlp_range=(0, 3),
            sampler="philox", block_size=1024, audit_segments=8)


def _spec(**kw):
    from whestbench.work.units import WorkSpec

    return WorkSpec(**{**BASE, "unit_blocks": 4, "mlps_per_unit": 1, **kw})


def _bake(spec):
    results = {u.key: run_unit(spec, Compute("numpy"), u) for u in spec.units()}
    return [(mlp_totals(spec, i, results), mlp_trail(spec, i, results)) for i in range(*spec.mlp_range)]


def _same(a, b):
    for (ta, ra), (tb, rb) in zip(a, b):
        assert pack(ta).tobytes() == pack(tb).tobytes()
        assert ra.values.keys() == rb.values.keys()
        for k in ra.values:
            assert ra.values[k].tobytes() == rb.values[k].tobytes(), k


@pytest.mark.parametrize("cv", [False, True])
def test_philox_trail_invariant_to_cut(cv):
    est = Estimation("control-variate") if cv else Estimation()
    ref = _bake(_spec(unit_blocks=1, estimation=est))
    assert ref[0][1].count == 5  # 37 blocks of one batch, runs of 8: segments of 8 blocks, the last ragged
    for ub, mpu in [(4, 2), (64, 1), (64, 3), (8, 2)]:
        _same(ref, _bake(_spec(unit_blocks=ub, mlps_per_unit=mpu, estimation=est)))
    plain = _bake(_spec(unit_blocks=4, estimation=est, audit_segments=0))
    for (t, _), (p, trail) in zip(ref, plain):
        assert pack(t).tobytes() == pack(p).tobytes() and trail is None


def test_philox_segment_combine_is_total():
    spec = _spec(unit_blocks=2)
    results = {u.key: run_unit(spec, Compute("numpy"), u) for u in spec.units()}
    # segments are the tree's subtrees: their sums, combined in order, are the total, bit for bit
    seg_sums = []
    for s0, s1 in spec.segments(1):
        parts = [run_unit(dataclasses.replace(spec, audit_segments=0), Compute("numpy"), u).mlp(0)
                 for u in spec.units() if u.mlp_index == 1 and s0 <= u.block_start * 1024 < s1]
        seg_sums.append(combine_in_order(parts))
        assert finish(pack(seg_sums[-1]), s1 - s0, 3)["means"].tobytes() == \
            mlp_trail(spec, 1, results).values["means"][len(seg_sums) - 1].tobytes()
    assert pack(combine_in_order(seg_sums)).tobytes() == pack(mlp_totals(spec, 1, results)).tobytes()


@pytest.mark.parametrize("stop_at", [3, 6])
def test_philox_resume_mid_segment(tmp_path, stop_at):
    spec = _spec(unit_blocks=64, mlps_per_unit=3, estimation=Estimation("control-variate"))
    unit = spec.units()[0]
    whole = run_unit(spec, Compute("numpy"), unit)
    ledger = Ledger(tmp_path / "w", spec.identity())
    stop, calls = threading.Event(), []

    def on_samples(n):
        calls.append(n)
        if len(calls) == stop_at:
            stop.set()

    with pytest.raises(UnitStopped):
        run_unit(spec, Compute("numpy"), unit, UnitContext(on_samples=on_samples, stop=stop, checkpoints=ledger))
    again = run_unit(spec, Compute("numpy"), unit, UnitContext(checkpoints=ledger))
    assert pack(again.mlp(1)).tobytes() == pack(whole.mlp(1)).tobytes()
    for k, v in whole.trail.values.items():
        assert again.trail.values[k].tobytes() == v.tobytes()


def test_unit_record_roundtrips_trail():
    spec = _spec(unit_blocks=64, mlps_per_unit=3)
    unit = spec.units()[0]
    sums = run_unit(spec, Compute("numpy"), unit)
    back, _ = read_unit_record(unit_record(unit.key, "d", sums, 1.0), unit.key, "d", lambda s: spec.check_result(unit, s))
    assert back.trail.first == 0 and back.trail.values["means"].tobytes() == sums.trail.values["means"].tobytes()


def test_check_result_rejects_bad_trail():
    spec = _spec(unit_blocks=64, mlps_per_unit=3)
    unit = spec.units()[0]
    sums = run_unit(spec, Compute("numpy"), unit)
    assert spec.check_result(unit, sums) is None
    bad = LayerSums(sums.sums, sums.sumsq, sums.count)
    assert "no audit trail" in spec.check_result(unit, bad)
    sums.trail.values["var"][0, 1, 0, 0] = -1.0
    assert "negative" in spec.check_result(unit, sums)
    sums.trail.values["var"] = sums.trail.values["var"].astype(np.float64)
    with pytest.raises(DamagedRecord):
        read_unit_record(unit_record(unit.key, "d", sums, 1.0), unit.key, "d", lambda s: spec.check_result(unit, s))
    assert "audit trail this bake" in _spec(unit_blocks=64, mlps_per_unit=3, audit_segments=0).check_result(unit, sums)
