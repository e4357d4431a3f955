"""Running one unit: a unit stopped mid-way and continued from its checkpoint gives the same bits as
one uninterrupted run, on both samplers; damaged checkpoints are reported and the unit restarts."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from whestbench.compute.seeds import derived_seeds
from whestbench.work.ledger import Ledger
from whestbench.work.steps import Compute, UnitContext, UnitStopped, kernel_module, run_unit
from whestbench.work.units import WorkSpec

PCG = WorkSpec(seeds=tuple(derived_seeds(4, 2)), n_samples=3 * 16384 + 77, width=16, depth=3, mlp_range=(0, 2))
PHILOX = WorkSpec(seeds=tuple(derived_seeds(4, 2)), n_samples=9 * 128 + 5, width=12, depth=2, mlp_range=(0, 2),
                  sampler="philox", block_size=128, unit_blocks=16, mlps_per_unit=2)


def _bits(s) -> bytes:
    return s.sums.tobytes() + s.sumsq.tobytes() + str(s.count).encode()


def _stop_after(n_calls: int, stop: threading.Event):
    calls = []

    def on_samples(n):
        calls.append(n)
        if len(calls) == n_calls:
            stop.set()

    return on_samples


try:
    import torch  # noqa: F401

    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False
_needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")

CASES = [
    pytest.param(PCG, Compute(), id="pcg64"),
    pytest.param(PHILOX, Compute("numpy"), id="philox-numpy"),
    pytest.param(PHILOX, Compute("numba", step_rows=64), id="philox-numba", marks=_needs_torch),
    pytest.param(PHILOX, Compute("torch", step_rows=64), id="philox-torch", marks=_needs_torch),
]


@pytest.mark.parametrize("spec, compute", CASES)
@pytest.mark.parametrize("stop_at", [1, 2])
def test_a_unit_stopped_and_resumed_from_its_checkpoint_equals_an_uninterrupted_one(tmp_path, spec, compute, stop_at):
    unit = spec.units()[0]
    whole = run_unit(spec, compute, unit)
    ledger = Ledger(tmp_path / "w", spec.identity())
    stop = threading.Event()
    saved = []
    with pytest.raises(UnitStopped):
        run_unit(spec, compute, unit, UnitContext(on_samples=_stop_after(stop_at, stop), stop=stop, checkpoints=ledger,
                                                  on_checkpoint=lambda: saved.append(1)))
    assert saved == [1] and ledger.checkpoint_path(unit.key).exists()
    resumed_from, computed = [], []
    again = run_unit(spec, compute, unit, UnitContext(checkpoints=ledger, on_resumed=resumed_from.append,
                                                      on_samples=computed.append))
    assert _bits(again) == _bits(whole)
    total = spec.unit_samples(unit) * unit.mlp_count
    assert resumed_from and 0 < resumed_from[0] < total
    assert resumed_from[0] + sum(computed) == total  # nothing computed twice


def test_checkpoints_are_written_every_interval(tmp_path, monkeypatch):
    from whestbench.work import steps

    clock = iter(range(0, 10_000, 30))  # every step advances 30 "seconds"
    monkeypatch.setattr(steps.time, "monotonic", lambda: next(clock))
    ledger = Ledger(tmp_path / "w", PCG.identity())
    saved = []
    run_unit(PCG, Compute(), PCG.units()[0], UnitContext(checkpoints=ledger, checkpoint_every=60, on_checkpoint=lambda: saved.append(1)))
    assert len(saved) == 1  # 3 chunk boundaries before the end, one of them 60 s after the start


def test_a_damaged_checkpoint_is_reported_and_the_unit_restarts(tmp_path):
    unit = PCG.units()[0]
    ledger = Ledger(tmp_path / "w", PCG.identity())
    stop = threading.Event()
    with pytest.raises(UnitStopped):
        run_unit(PCG, Compute(), unit, UnitContext(on_samples=_stop_after(1, stop), stop=stop, checkpoints=ledger))
    path = ledger.checkpoint_path(unit.key)
    path.write_bytes(path.read_bytes()[:-10])  # truncated
    notes = []
    again = run_unit(PCG, Compute(), unit, UnitContext(checkpoints=ledger, on_note=notes.append))
    assert _bits(again) == _bits(run_unit(PCG, Compute(), unit))
    assert len(notes) == 1 and "failed its check" in notes[0] and str(path) in notes[0]


def test_a_checkpoint_of_another_unit_is_not_used(tmp_path):
    u0, u1 = PCG.units()
    ledger = Ledger(tmp_path / "w", PCG.identity())
    stop = threading.Event()
    with pytest.raises(UnitStopped):
        run_unit(PCG, Compute(), u0, UnitContext(on_samples=_stop_after(1, stop), stop=stop, checkpoints=ledger))
    ledger.checkpoint_path(u0.key).rename(ledger.checkpoint_path(u1.key))  # swapped in by hand
    notes = []
    got = run_unit(PCG, Compute(), u1, UnitContext(checkpoints=ledger, on_note=notes.append))
    assert _bits(got) == _bits(run_unit(PCG, Compute(), u1))
    assert notes and "not mlp00000001" in notes[0]


def test_without_a_ledger_a_stop_just_stops():
    stop = threading.Event()
    stop.set()
    with pytest.raises(UnitStopped):
        run_unit(PCG, Compute(), PCG.units()[0], UnitContext(stop=stop))


# --- which compiled kernels units use (start-up: numba costs ~0.3 s to import, seconds to compile) --


def test_a_small_pcg64_bake_runs_without_numba():
    code = (
        "import sys\n"
        "from whestbench.work.steps import Compute, kernel_module, run_unit\n"
        "from whestbench.work.units import WorkSpec\n"
        "spec = WorkSpec(seeds=(1, 2), n_samples=3000, width=16, depth=3, mlp_range=(0, 2))\n"
        "assert kernel_module(spec, Compute()) is None\n"
        "run_unit(spec, Compute(), spec.units()[0])\n"
        "print('numba' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_a_fused_pcg64_unit_resumed_from_its_checkpoint_equals_an_uninterrupted_plain_one(tmp_path, monkeypatch):
    from whestbench.compute import fused, pcg64

    unit = PCG.units()[0]
    plain = run_unit(PCG, Compute(), unit)  # PCG is far below FUSED_MIN_ACTIVATIONS
    monkeypatch.setattr(pcg64, "FUSED_MIN_ACTIVATIONS", 0)
    assert kernel_module(PCG, Compute()) is fused
    calls, kernel = [], fused.relu_colsum_sq
    monkeypatch.setattr(fused, "relu_colsum_sq", lambda *a: (calls.append(1), kernel(*a)))
    ledger = Ledger(tmp_path / "w", PCG.identity())
    stop = threading.Event()
    with pytest.raises(UnitStopped):
        run_unit(PCG, Compute(), unit, UnitContext(on_samples=_stop_after(1, stop), stop=stop, checkpoints=ledger))
    again = run_unit(PCG, Compute(), unit, UnitContext(checkpoints=ledger))
    assert _bits(again) == _bits(plain)
    assert calls  # the fused kernels ran


def test_kernel_module_names_the_kernels_the_units_call():
    from whestbench.compute import fused
    from whestbench.compute.philox import numba_kernels as philox_numba
    from whestbench.compute.pcg64 import FUSED_MIN_ACTIVATIONS

    big = WorkSpec(seeds=(1, 2), n_samples=FUSED_MIN_ACTIVATIONS // (16 * 3) + 1, width=16, depth=3, mlp_range=(0, 1))
    assert kernel_module(PCG, Compute()) is None
    assert kernel_module(big, Compute()) is fused
    assert kernel_module(PHILOX, Compute("numpy")) is None
    assert kernel_module(PHILOX, Compute("numba")) is philox_numba
    assert kernel_module(PHILOX, Compute("torch")) is None


def test_a_unit_saves_nothing_once_the_bakes_fixed_arithmetic_is_lifted():
    """A bake leaving on an error lifts the BLAS limit while a unit may still run: the unit then
    stops at its next step without saving a checkpoint of sums computed under other arithmetic."""
    saved = []

    class Store:
        def save_checkpoint(self, key, meta, arrays):
            saved.append(key)

    held = threading.Event()
    held.set()
    ctx = UnitContext(checkpoints=Store(), checkpoint_every=0.0, arithmetic=held)
    ctx.after_step("u", lambda: ({}, {}))  # due at once: saved while the arithmetic holds
    assert saved == ["u"]
    held.clear()
    with pytest.raises(UnitStopped):
        ctx.after_step("u", lambda: ({}, {}))
    assert saved == ["u"] and not ctx.arithmetic_held()


@pytest.mark.parametrize("spec, compute", CASES[:2])
def test_a_checkpoint_with_non_finite_sums_but_a_valid_checksum_is_recomputed(tmp_path, spec, compute):
    import numpy as np

    unit = spec.units()[0]
    ledger = Ledger(tmp_path / "w", spec.identity())
    stop = threading.Event()
    with pytest.raises(UnitStopped):
        run_unit(spec, compute, unit, UnitContext(on_samples=_stop_after(1, stop), stop=stop, checkpoints=ledger))
    meta, arrays = ledger.load_checkpoint(unit.key)
    name = next(k for k, a in arrays.items() if a.dtype.kind == "f")
    arrays[name] = np.full_like(arrays[name], np.nan)
    ledger.save_checkpoint(unit.key, meta, arrays)  # forged: a fresh, valid checksum over NaN sums
    notes = []
    again = run_unit(spec, compute, unit, UnitContext(checkpoints=ledger, on_note=notes.append))
    assert _bits(again) == _bits(run_unit(spec, compute, unit))
    assert len(notes) == 1 and "non-finite" in notes[0] and f"restarting unit {unit.key}" in notes[0]


def test_the_fitted_controls_are_reused_and_kept_within_their_byte_budget(monkeypatch):
    """One MLP's controls are 240 MiB at 1024×16: the cache must be bounded by bytes, not by a count,
    and a fit evicted and made again must give the same bits (the fit is a function of the seed)."""
    import numpy as np

    from whestbench.compute.estimators import fit_controls
    from whestbench.compute.seeds import PILOT, stream
    from whestbench.compute.mlp import weights_for_seed
    from whestbench.work import controls

    width, depth = 16, 3
    one = 2 * width * 8 + 2 * width * (depth - 1) * width * 8  # bytes of one MLP's controls (mu1, ez2sq, coef)
    monkeypatch.setattr(controls, "CONTROLS_CACHE_BYTES", 2 * one + one // 2)  # room for two
    monkeypatch.setattr(controls, "_controls", type(controls._controls)())
    seeds = [101, 202, 303, 404]
    weights = {s: weights_for_seed(s, width, depth) for s in seeds}
    first = {s: controls.controls_for(s, weights[s]) for s in seeds}
    held = sum(c.mu1.nbytes + c.ez2sq.nbytes + c.coef.nbytes for c in controls._controls.values())
    assert [k[0] for k in controls._controls] == [303, 404] and held <= controls.CONTROLS_CACHE_BYTES
    assert controls.controls_for(404, weights[404]) is first[404]  # a hit: no refit
    again = controls.controls_for(101, weights[101])  # evicted: fitted again
    assert again is not first[101]
    direct = fit_controls(weights[101], stream(101, PILOT))
    for name in ("mu1", "ez2sq", "coef"):
        assert np.array_equal(getattr(again, name), getattr(first[101], name))
        assert np.array_equal(getattr(again, name), getattr(direct, name))
