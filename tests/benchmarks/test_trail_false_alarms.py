"""benchmarks/trail_false_alarms.py: a tiny run bakes honest datasets, finds no false alarm, and prints every
figure docs/cli.md quotes from it (per check: ran and failed; per segment family: tests and margin)."""

from __future__ import annotations

import json

from benchmarks import trail_false_alarms


def test_a_tiny_run_prints_its_figures_and_finds_no_false_alarm(tmp_path, capsys):
    rc = trail_false_alarms.main(["--datasets", "2", "--seed", "3", "--json", str(tmp_path / "rows.json")])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "2 honest datasets in" in out
    for check in trail_false_alarms.CHECKS:
        assert f"  {check}: ran on " in out and f"{check}: ran on" in out
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert len(rows) == 2 and all(not r["failed"] for r in rows)


def test_margins_reads_a_passed_segments_line():
    line = ("each segment's mean and variance ...: variances (7,616 tests; largest 0.42 of its limit); layer variances "
            "(512 tests; largest 0.28 of its limit); means (5,568 tests; largest 0.44 of its limit)")
    assert trail_false_alarms.margins(line) == {"variances": (7616, 0.42), "layer variances": (512, 0.28),
                                                "means": (5568, 0.44)}


def test_a_tiny_torch_run_bakes_philox_trails(tmp_path, capsys):
    import pytest

    pytest.importorskip("torch")
    rc = trail_false_alarms.main(["--datasets", "1", "--seed", "1", "--torch", "--json", str(tmp_path / "rows.json")])
    assert rc == 0, capsys.readouterr().out
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert rows[0]["checks"]["trail contract"]["ok"] and "aligned" in rows[0]["checks"]["trail contract"]["detail"]
