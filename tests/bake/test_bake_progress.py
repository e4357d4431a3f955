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
