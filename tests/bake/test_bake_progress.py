"""The Python API's ``progress=`` callback (whestbench 0.16's dicts): sampling counts up to its
total, and the writer's rows are reported as their own phase, up to the last row."""

from __future__ import annotations

from whestbench.dataset import create_dataset


def test_sampling_ends_at_its_total_and_writing_reports_every_row(tmp_path):
    events: list[dict] = []
    create_dataset(n_mlps=3, n_samples=300, width=4, depth=2, mlp_seeds=[1, 2, 3], output_path=tmp_path / "ds",
                   progress=events.append)
    sampling = [e for e in events if e["phase"] == "sampling"]
    writing = [e for e in events if e["phase"] == "writing" and "completed" in e]
    assert sampling and all(e["unit"] == "samples" for e in sampling)
    assert (sampling[-1]["completed"], sampling[-1]["total"]) == (900, 900)
    assert [e["completed"] for e in writing] == [0, 1, 2, 3] and {e["total"] for e in writing} == {3}


# --- a target bake counts what it will sample (issue 28) ------------------------------------------


import pyarrow.parquet as pq  # noqa: E402
import pytest  # noqa: E402

from whestbench.bake import plan as plan_mod  # noqa: E402
from whestbench.bake.pipeline import BakeConfig, bake  # noqa: E402
from whestbench.compute.estimation import Estimation  # noqa: E402
from whestbench.errors import BakeInterrupted  # noqa: E402

from helpers.datasets import stopped_after_first_unit  # noqa: E402

R1 = dict(n_mlps=6, n_samples=10**6, width=8, depth=3, seed=45, estimation=Estimation("control-variate", 0.05))
CAP_TOTAL = 6 * 10**6


def _columns(path):
    table = pq.read_table(sorted(path.joinpath("data").glob("*.parquet")))
    return {c: table[c] for c in table.column_names if c != "sampling_budget_breakdown"}


def test_a_target_bakes_first_progress_total_is_its_planned_samples(tmp_path, monkeypatch):
    events = []
    out = bake(BakeConfig(**R1, output=tmp_path / "planned"), on_event=events.append)
    used = _columns(out)["n_samples_used"].to_pylist()
    kinds = [(e.kind, e.progress.what if e.progress else None) for e in events]
    start = next(e for e in events if e.kind == "start")
    assert start.progress.total == sum(used) < CAP_TOTAL  # not the cap
    assert kinds.index(("progress", "pilots")) < kinds.index(("start", "samples"))
    pilots = [e.progress for e in events if e.progress is not None and e.progress.what == "pilots"]
    assert (pilots[-1].done, pilots[-1].total) == (6, 6)
    (plan_event,) = [e for e in events if e.kind == "plan"]
    assert plan_event.data["plan"].planned_total == sum(used)
    # the numbers never depend on whether the counts were planned up front or by each unit
    monkeypatch.setattr(plan_mod, "PLAN_UPFRONT_MLPS", 0)
    lazy = bake(BakeConfig(**R1, output=tmp_path / "lazy"))
    assert _columns(lazy) == _columns(out)


def test_a_stopped_target_bake_counts_its_saved_samples_out_of_the_planned_total(tmp_path):
    events, stopped = stopped_after_first_unit(BakeConfig(**R1, output=tmp_path / "stopped", max_threads=1))
    planned = next(e for e in events if e.kind == "plan").data["plan"].planned_total
    assert planned < CAP_TOTAL
    assert f"of {planned:,} samples saved" in str(stopped)


def test_a_stop_during_the_pilots_stops_the_bake_before_any_unit(tmp_path):
    import threading

    stop = threading.Event()
    events = []

    def sink(event):
        events.append(event)
        if event.progress is not None and event.progress.what == "pilots" and event.progress.done == 1:
            stop.set()

    with pytest.raises(BakeInterrupted):
        bake(BakeConfig(**R1, output=tmp_path / "s", max_threads=1), on_event=sink, stop=stop)
    assert not [e for e in events if e.kind == "unit_done"]
    pilots = [e.progress.done for e in events if e.progress is not None and e.progress.what == "pilots"]
    assert pilots[-1] == 6  # the rest returned at once
