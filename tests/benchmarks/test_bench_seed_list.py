"""The seed-list benchmark runs end to end at a small size and checks the names it bakes."""

from __future__ import annotations

import json

import pytest

from benchmarks import bench_seed_list


@pytest.mark.slow  # three bakes in fresh processes: ~10 s
def test_seed_list_benchmark_times_every_command_and_checks_the_slice_names(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert bench_seed_list.main(["--n-mlps", "300", "--check-names", "50", "--json", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    assert len(results) == 3 and all(r["wall_s"][0] > 0 and r["peak_rss_bytes"] > 0 for r in results.values())
    printed = capsys.readouterr().out
    assert "equal faker's: True" in printed and "prefix: True" in printed
