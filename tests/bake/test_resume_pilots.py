"""A resumed target bake reads the pilots' planned counts it saved instead of running every MLP's
pilot again (issue 35: 12 s for 8 MLPs), and still writes identical numeric columns."""

from __future__ import annotations

import json
import threading

import pytest

from whestbench.bake.pipeline import BakeConfig, bake
from whestbench.compute.estimation import Estimation
from whestbench.errors import BakeInterrupted
from whestbench.work.units import WorkSpec

SHAPE = dict(n_mlps=4, n_samples=10**6, width=8, depth=3, seed=45, max_threads=1,
             estimation=Estimation("control-variate", 0.05))


def test_a_resumed_target_bake_reads_its_saved_pilots_and_writes_identical_columns(tmp_path, monkeypatch, read_columns,
                                                                                   assert_bytes_equal):
    stop = threading.Event()
    notes = []
    with pytest.raises(BakeInterrupted):
        bake(BakeConfig(**SHAPE, output=tmp_path / "t"), on_event=lambda e: e.kind == "unit_done" and stop.set(),
             stop=stop)
    saved = json.loads((tmp_path / "t.whest-work" / "pilots.json").read_text())
    assert len(saved["counts"]) == 4

    calls = []
    original = WorkSpec.planned_samples

    def counted(self, index):
        if self.planned is None:  # a pilot, not a look-up of a planned count
            calls.append(index)
        return original(self, index)

    monkeypatch.setattr(WorkSpec, "planned_samples", counted)
    resumed = bake(BakeConfig(**SHAPE, output=tmp_path / "t"), on_event=lambda e: notes.append(e))
    assert calls == []  # no pilot ran again
    assert any(e.kind == "note" and "the pilots are not run again" in e.message for e in notes)
    assert not any(e.progress is not None and e.progress.what == "pilots" for e in notes)
    monkeypatch.setattr(WorkSpec, "planned_samples", original)
    whole = bake(BakeConfig(**SHAPE, output=tmp_path / "whole"))
    a, b = read_columns(resumed), read_columns(whole)
    for column in ("mlp_seed", "all_layer_means", "final_means", "avg_variance", "all_layer_stderr", "n_samples_used"):
        assert_bytes_equal(a[column], b[column], column)


@pytest.mark.parametrize("edit", ["counts", "plan_digest", "format"])
def test_saved_pilots_that_are_edited_or_anothers_are_not_used(tmp_path, edit):
    from whestbench.work.ledger import load_pilots, save_pilots

    save_pilots(tmp_path, "abc", [5, 6, 7])
    assert load_pilots(tmp_path, "abc", 3, 10) == [5, 6, 7]
    path = tmp_path / "pilots.json"
    doc = json.loads(path.read_text())
    doc[edit] = [5, 6, 8] if edit == "counts" else "other"
    path.write_text(json.dumps(doc))
    assert load_pilots(tmp_path, "abc", 3, 10) is None
    save_pilots(tmp_path, "abc", [5, 6, 70])
    assert load_pilots(tmp_path, "abc", 3, 10) is None  # above the cap: no count a bake plans
    assert load_pilots(tmp_path, "abc", 2, 100) is None  # another range
