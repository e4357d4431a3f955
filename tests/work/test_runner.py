"""The unit runner: results independent of the worker count, clean stops, failures propagated."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from whestbench.compute.stats import LayerSums
from whestbench.work.ledger import Ledger
from whestbench.work.runner import BakeInterrupted, run_units
from whestbench.work.units import WorkSpec, plan_units, run_unit_pcg64

SPEC = WorkSpec(seeds=(11, 22, 33, 44, 55), n_samples=3000, width=8, depth=2, mlp_range=(0, 5))


def _bytes(results: dict) -> dict[str, bytes]:
    return {k: s.sums.tobytes() + s.sumsq.tobytes() + str(s.count).encode() for k, (s, _) in results.items()}


def test_results_do_not_depend_on_the_worker_count():
    units = plan_units(SPEC)
    by_workers = {w: _bytes(run_units(SPEC, units, workers=w)) for w in (1, 2, 3)}
    assert sorted(by_workers[1]) == [u.key for u in units]
    assert by_workers[1] == by_workers[2] == by_workers[3]


def test_each_unit_equals_running_it_alone():
    units = plan_units(SPEC)
    results = run_units(SPEC, units, workers=3)
    alone = run_unit_pcg64(SPEC, units[3])
    assert results[units[3].key][0].sums.tobytes() == alone.sums.tobytes()


def test_a_slice_computes_only_its_units():
    spec = WorkSpec(seeds=SPEC.seeds, n_samples=3000, width=8, depth=2, mlp_range=(2, 4))
    sliced = run_units(spec, plan_units(spec), workers=2)
    full = run_units(SPEC, plan_units(SPEC), workers=2)
    assert sorted(sliced) == ["mlp00000002", "mlp00000003"]
    assert _bytes(sliced) == {k: v for k, v in _bytes(full).items() if k in sliced}


def test_events_report_start_progress_units_and_done():
    events = []
    run_units(SPEC, plan_units(SPEC), workers=2, on_event=events.append)
    phases = [e["phase"] for e in events]
    assert phases[0] == "start" and phases[-1] == "done"
    assert phases.count("unit_done") == 5
    assert events[-1]["samples_done"] == events[-1]["samples_total"] == 5 * 3000
    assert events[-1]["units_done"] == events[-1]["units_total"] == 5


def test_finished_units_are_saved_to_the_ledger(tmp_path):
    ledger = Ledger(tmp_path / "w", SPEC.identity())
    results = run_units(SPEC, plan_units(SPEC), workers=2, ledger=ledger)
    assert _bytes(ledger.load_done()) == _bytes(results)


def _stop_after_first_unit(stop: threading.Event, seen: list):
    def on_event(e):
        if e["phase"] == "unit_done":
            seen.append(e["unit"])
            stop.set()

    return on_event


@pytest.mark.parametrize("workers", [1, 2])
def test_a_stop_request_raises_bake_interrupted_with_finished_units_saved(tmp_path, workers):
    ledger = Ledger(tmp_path / "w", SPEC.identity())
    stop, seen = threading.Event(), []
    with pytest.raises(BakeInterrupted, match="re-run the same command to resume"):
        run_units(SPEC, plan_units(SPEC), workers=workers, ledger=ledger, stop=stop,
                  on_event=_stop_after_first_unit(stop, seen))
    saved = ledger.load_done()
    # Units already running when the stop came finish and are saved; no new unit starts.
    assert sorted(saved) == sorted(seen)
    assert 1 <= len(saved) <= workers < 5


def test_a_resumed_run_computes_only_the_missing_units_and_matches(tmp_path):
    units = plan_units(SPEC)
    ledger = Ledger(tmp_path / "w", SPEC.identity())
    stop, seen = threading.Event(), []
    with pytest.raises(BakeInterrupted):
        run_units(SPEC, units, workers=1, ledger=ledger, stop=stop, on_event=_stop_after_first_unit(stop, seen))
    computed = []

    def counting_unit_fn(spec, unit, on_samples):
        computed.append(unit.key)
        return run_unit_pcg64(spec, unit, on_samples)

    events = []
    resumed = run_units(SPEC, units, workers=2, ledger=Ledger(tmp_path / "w", SPEC.identity()),
                        unit_fn=counting_unit_fn, on_event=events.append)
    assert sorted(computed) == sorted(set(u.key for u in units) - set(seen))
    assert events[0]["recovered_units"] == len(seen)
    assert _bytes(resumed) == _bytes(run_units(SPEC, units, workers=1))


class UnitBroke(RuntimeError):
    pass


@pytest.mark.parametrize("workers", [1, 3])
def test_a_failing_unit_propagates_its_exception(workers):
    def unit_fn(spec, unit, on_samples):
        if unit.mlp_index == 2:
            raise UnitBroke(f"unit {unit.key} broke")
        return LayerSums(sums=np.zeros((spec.depth, spec.width)), sumsq=np.zeros(spec.width), count=spec.n_samples)

    with pytest.raises(UnitBroke, match="mlp00000002 broke"):
        run_units(SPEC, plan_units(SPEC), workers=workers, unit_fn=unit_fn)
