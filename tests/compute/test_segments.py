"""The audit trail's segments (compute/segments.py) and the pcg64 stream's trail: fixed by the data,
kept apart from the running sums (the columns keep their bits), restartable from the stored states."""

from __future__ import annotations

import numpy as np
import pytest

from whestbench.compute.estimators import fit_controls
from whestbench.compute.mlp import sample_weights
from whestbench.compute.pcg64 import Pcg64Stream, chunk_rows
from whestbench.compute.seeds import spawn_streams
from whestbench.compute.segments import finish, segment_bounds, segment_samples


@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("t", [1, 5, 8, 15, 16, 17, 31, 100])
@pytest.mark.parametrize("ragged", [0, 37])
def test_bounds_cover_and_tile(aligned, t, ragged):
    step, s = 64, 8
    n = t * step - (ragged if t > 1 else 0)
    bounds = segment_bounds(n, step, s, aligned)
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    assert all(start % step == 0 and start < end for start, end in bounds)
    if aligned:
        p = segment_samples(n, step, s)
        assert p & (p - 1) == 0 and all(start % p == 0 for start, _ in bounds)
        assert all(end - start == p for start, end in bounds[:-1])
        assert len(bounds) <= s and (len(bounds) > s // 2 or len(bounds) == -(-n // step))
    else:
        assert len(bounds) == min(s, -(-n // step))
        sizes = {-(-(end - start) // step) for start, end in bounds}
        assert max(sizes) - min(sizes) <= 1  # exact S: sizes differ by at most one chunk
    assert segment_bounds(n, step, 0, aligned) == []


def test_finish_is_mean_and_population_variance():
    rng = np.random.default_rng(1)
    y = rng.random((50, 2, 3))
    packed = np.concatenate([y.sum(0), (y ** 2).sum(0)])
    out = finish(packed, 50, 2)
    np.testing.assert_allclose(out["means"], y.mean(0), rtol=1e-6)
    np.testing.assert_allclose(out["var"], y.var(0), rtol=1e-5)
    assert out["means"].dtype == np.float32 and set(out) == {"means", "var"}


def _stream(fused, cv, segments=None, n=None):
    width, depth = 16, 3
    seed = 5
    w_ss, s_ss, _ = spawn_streams(seed)
    weights = sample_weights(w_ss, width, depth)
    controls = fit_controls(weights, np.random.SeedSequence(9), 2048) if cv else None
    n = n or 13 * chunk_rows(width) + 100
    return Pcg64Stream(weights, s_ss, n, fused=fused, controls=controls, segments=segments)


def _run(stream):
    while not stream.done:
        stream.step()
    return stream.result()


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("cv", [False, True])
def test_trail_leaves_sums_bit_identical(fused, cv):
    plain = _run(_stream(fused, cv))
    n = plain.count
    bounds = segment_bounds(n, chunk_rows(16), 8, False)
    traced = _run(_stream(fused, cv, bounds))
    for k, v in plain.arrays().items():
        assert traced.arrays()[k].tobytes() == v.tobytes()
    trail = traced.trail
    assert trail.count == len(bounds) == 8 and len(trail.states) == 8
    # the segments combine into the totals (up to float32 rounding of the segment means)
    sizes = np.array([e - s for s, e in bounds], dtype=np.float64)[:, None, None]
    total = (trail.values["means"].astype(np.float64) * sizes).sum(0) / n
    np.testing.assert_allclose(total, plain.sums / n, rtol=1e-6, atol=1e-12)
    if cv:
        cvm = (trail.values["cv_means"].astype(np.float64) * sizes).sum(0) / n
        np.testing.assert_allclose(cvm[1:], plain.cv[1:] / n, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("cv", [False, True])
def test_trail_states_restart_segments(cv):
    n = 13 * chunk_rows(16) + 100
    bounds = segment_bounds(n, chunk_rows(16), 8, False)
    whole = _run(_stream(True, cv, bounds)).trail
    for k in (0, 3, 7):
        again = _stream(True, cv, bounds)
        again.seek(k, whole.states[k])
        while again.position < bounds[k][1]:
            again.step()
        for name, v in again.segment_values(k).items():
            assert v.tobytes() == whole.values[name][k].tobytes()
        if k + 1 < len(bounds):
            assert again.rng.bit_generator.state == whole.states[k + 1]


@pytest.mark.parametrize("fused", [False, True])
def test_checkpoint_mid_segment_resumes_same_trail(fused):
    n = 13 * chunk_rows(16) + 100
    bounds = segment_bounds(n, chunk_rows(16), 5, False)
    whole = _run(_stream(fused, True, bounds))
    first = _stream(fused, True, bounds)
    for _ in range(4):  # 13 chunks into 5 segments: the 4th chunk ends inside segment 1
        first.step()
    meta, arrays = first.state()
    second = _stream(fused, True, bounds)
    second.restore(meta, arrays)
    resumed = _run(second)
    for name, v in whole.trail.values.items():
        assert resumed.trail.values[name].tobytes() == v.tobytes()
    assert resumed.trail.states == whole.trail.states
    assert resumed.sums.tobytes() == whole.sums.tobytes()
    meta["trail_states"] = meta["trail_states"][:-1]
    with pytest.raises(ValueError, match="segment states"):
        _stream(fused, True, bounds).restore(meta, arrays)
