"""The local executor: results independent of the worker count, clean stops, failures propagated,
finished units saved and skipped on resume, progress counted in samples and whole MLPs."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from whestbench.compute.stats import LayerSums
from whestbench.work.executor import BakeInterrupted, Job, LocalExecutor
from whestbench.work.ledger import Ledger
from whestbench.work.steps import Compute, run_unit
from whestbench.work.units import WorkSpec

SPEC = WorkSpec(seeds=(11, 22, 33, 44, 55), n_samples=3000, width=8, depth=2, mlp_range=(0, 5))


def _run(tmp_path, name, spec=SPEC, workers=2, **kw) -> dict[str, bytes]:
    ledger = Ledger(tmp_path / name, spec.identity())
    LocalExecutor(workers).run(Job(spec, Compute(), ledger), **kw)
    return _saved(ledger, spec)


def _saved(ledger: Ledger, spec: WorkSpec) -> dict[str, bytes]:
    out = {}
    for u in spec.units():
        if ledger.unit_path(u.key).exists():
            s, _ = ledger.load(u.key)
            out[u.key] = s.sums.tobytes() + s.sumsq.tobytes() + str(s.count).encode()
    return out


def test_results_do_not_depend_on_the_worker_count(tmp_path):
    by_workers = {w: _run(tmp_path, f"w{w}", workers=w) for w in (1, 2, 3)}
    assert sorted(by_workers[1]) == [u.key for u in SPEC.units()]
    assert by_workers[1] == by_workers[2] == by_workers[3]


def test_each_unit_equals_running_it_alone(tmp_path):
    saved = _run(tmp_path, "w", workers=3)
    unit = SPEC.units()[3]
    alone = run_unit(SPEC, Compute(), unit)
    assert saved[unit.key] == alone.sums.tobytes() + alone.sumsq.tobytes() + str(alone.count).encode()


def test_a_slice_computes_only_its_units(tmp_path):
    spec = WorkSpec(seeds=SPEC.seeds, n_samples=3000, width=8, depth=2, mlp_range=(2, 4))
    sliced = _run(tmp_path, "s", spec)
    full = _run(tmp_path, "f")
    assert sorted(sliced) == ["mlp00000002", "mlp00000003"]
    assert sliced == {k: v for k, v in full.items() if k in sliced}


def test_events_report_samples_and_whole_mlps(tmp_path):
    events = []
    _run(tmp_path, "w", on_event=events.append)
    kinds = [e.kind for e in events]
    assert kinds[0] == "start" and kinds[-1] == "done"
    assert kinds.count("unit_done") == 5
    last = events[-1].progress
    assert last.done == last.total == 5 * 3000 and last.what == "samples"
    assert last.mlps_done == last.mlps_total == 5
    assert last.flops_per_item == 2 * 8 * 8 * 2
    mlps = [e.progress.mlps_done for e in events if e.progress is not None]
    assert mlps == sorted(mlps)  # whole MLPs only ever go up


def test_a_philox_mlp_counts_as_done_only_when_all_its_units_are():
    spec = WorkSpec(seeds=(1, 2), n_samples=1000, width=4, depth=1, mlp_range=(0, 2), sampler="philox",
                    block_size=128, unit_blocks=2)
    events = []
    LocalExecutor(1).run(Job(spec, Compute("numpy")), on_event=events.append)
    per_unit = [e.progress.mlps_done for e in events if e.kind == "unit_done"]
    # 2 MLPs x 4 units each (8 blocks of 128): the first MLP completes with the 4th unit
    assert per_unit == [0, 0, 0, 1, 1, 1, 1, 2]


def _stop_after_first_unit(stop: threading.Event, seen: list):
    def on_event(e):
        if e.kind == "unit_done":
            seen.append(e.data["unit"])
            stop.set()

    return on_event


@pytest.mark.parametrize("workers", [1, 2])
def test_a_stop_request_raises_bake_interrupted_with_finished_units_saved(tmp_path, workers):
    ledger = Ledger(tmp_path / "w", SPEC.identity())
    stop, seen = threading.Event(), []
    with pytest.raises(BakeInterrupted, match="re-run the same command to resume") as info:
        LocalExecutor(workers).run(Job(SPEC, Compute(), ledger), stop=stop, on_event=_stop_after_first_unit(stop, seen))
    assert info.value.exit_code == 75
    saved = _saved(ledger, SPEC)
    assert seen[0] in saved and 1 <= len(saved) < 5


def test_a_resumed_run_computes_only_the_missing_units_and_matches(tmp_path):
    ledger = Ledger(tmp_path / "w", SPEC.identity())
    stop, seen = threading.Event(), []
    with pytest.raises(BakeInterrupted):
        LocalExecutor(1).run(Job(SPEC, Compute(), ledger), stop=stop, on_event=_stop_after_first_unit(stop, seen))
    before = set(_saved(ledger, SPEC))
    events = []
    LocalExecutor(2).run(Job(SPEC, Compute(), Ledger(tmp_path / "w", SPEC.identity())), on_event=events.append)
    computed = [e.data["unit"] for e in events if e.kind == "unit_done"]
    assert sorted(computed) == sorted({u.key for u in SPEC.units()} - before)
    start = next(e for e in events if e.kind == "start")
    assert start.progress.recovered == len(before) * SPEC.n_samples
    assert any("resuming" in e.message for e in events if e.kind == "note")
    assert _saved(ledger, SPEC) == _run(tmp_path, "fresh", workers=1)


class UnitBroke(RuntimeError):
    pass


@pytest.mark.parametrize("workers", [1, 3])
def test_a_failing_unit_propagates_its_exception(monkeypatch, workers):
    from whestbench.work import executor

    def broken(spec, compute, unit, ctx=None):
        if unit.mlp_index == 2:
            raise UnitBroke(f"unit {unit.key} broke")
        return LayerSums(sums=np.zeros((spec.depth, spec.width)), sumsq=np.zeros((spec.depth, spec.width)), count=spec.n_samples)

    monkeypatch.setattr(executor, "run_unit", broken)
    with pytest.raises(UnitBroke, match="mlp00000002 broke"):
        LocalExecutor(workers).run(Job(SPEC, Compute()))


def test_the_tracker_marks_resumed_samples_of_every_rank_as_recovered():
    from whestbench.work.executor import Tracker

    units = SPEC.units()
    events = []
    tracker = Tracker(SPEC, units, {units[0].key: 3000}, events.append)  # one unit finished by an earlier run
    tracker.resumed(units[1].key, 1000)  # this rank continued a unit from its checkpoint
    tracker.set_external(1, running=2500, checkpoints=2, resumed=2000)  # rank 1: 2000 of its 2500 from a checkpoint
    p = tracker.progress()
    assert p.done == 3000 + 1000 + 2500 and p.recovered == 3000 + 1000 + 2000 and p.checkpoints == 2


def test_a_peers_unit_collected_by_rank_0_is_not_counted_twice():
    from whestbench.work.executor import Tracker

    units = SPEC.units()
    tracker = Tracker(SPEC, units, {}, lambda e: None)
    tracker.set_external(1, running=2900, checkpoints=0)  # rank 1's last report: unit 0 nearly done
    tracker.unit_done(units[0], owner=1)  # its result arrives before rank 1's next report
    assert tracker.progress().done == 3000  # not 3000 + 2900


def test_rank_0_counts_every_saved_checkpoint_from_its_first_line_whichever_rank_resumes_it():
    """A resumed distributed bake's first progress line showed the finished units' samples alone
    (6,000,000 of the 10,046,848 saved): rank 0 now counts its ledger's checkpoints from the start, and
    a rank that resumes one posts only its own new samples, so nothing is counted twice later."""
    from whestbench.work.executor import Tracker

    units = SPEC.units()
    first = []
    rank0 = Tracker(SPEC, units, {units[0].key: 3000}, first.append,
                    checkpointed={units[1].key: 1200, units[2].key: 800})
    rank0.event("start")
    assert first[0].progress.done == 3000 + 1200 + 800 and first[0].progress.recovered == 5000
    peer = Tracker(SPEC, units, {}, lambda e: None)  # rank 1: no ledger, its checkpoints arrive from rank 0
    peer.resumed(units[1].key, 1200)
    peer.samples(units[1].key, 300)
    assert peer.running == 1500 and peer.taken_over == 1200
    rank0.set_external(1, running=peer.running - peer.taken_over, checkpoints=0, resumed=1200)  # what it posts
    rank0.resumed(units[2].key, 800)  # rank 0 resumes the other itself
    rank0.samples(units[2].key, 100)
    p = rank0.progress()
    assert p.done == 3000 + 1200 + 300 + 800 + 100 and p.recovered == 5000
    rank0.unit_done(units[1], 3000, owner=1)
    peer.unit_abandoned(units[1])  # a peer forgets a unit once it posted it
    assert peer.taken_over == 0
    assert rank0.progress().done == 3000 + 3000 + 800 + 100


def test_both_executors_declare_the_executor_protocol_with_its_exact_signature():
    """The local and the distributed executor are interchangeable for the pipeline: both declare
    ``Executor`` and their ``run`` has its signature (a renamed keyword would break one caller)."""
    import inspect

    from whestbench.work.distributed.store_executor import StoreExecutor
    from whestbench.work.executor import Executor, LocalExecutor

    assert issubclass(LocalExecutor, Executor) and issubclass(StoreExecutor, Executor)
    want = inspect.signature(Executor.run)
    assert inspect.signature(LocalExecutor.run) == want and inspect.signature(StoreExecutor.run) == want
