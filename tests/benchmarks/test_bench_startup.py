"""The start-up benchmark's pure parts: its targets and its report (no bakes run)."""

from __future__ import annotations

from benchmarks import bench_startup


def _result(ours: float, torch: float, ref: float, torch_import: float) -> bench_startup.StartupResult:
    r = bench_startup.StartupResult(tiny="64x4 1x1,000")
    r.runs = {"ours": [ours, ours + 0.1, ours - 0.1], "ours-torch": [torch] * 3, "reference": [ref] * 3}
    r.torch_import_s = [torch_import] * 3
    return r


def test_the_targets_compare_medians_with_the_reference_and_import_torch():
    met = bench_startup.targets(_result(ours=0.4, torch=2.2, ref=1.2, torch_import=1.2))
    assert [(round(o, 2), round(limit, 2), ok) for _, o, limit, ok in met] == [(0.4, 1.2, True), (2.2, 2.4, True)]
    missed = bench_startup.targets(_result(ours=1.3, torch=2.5, ref=1.2, torch_import=1.2))
    assert [ok for *_, ok in missed] == [False, False]


def test_the_report_gives_fixed_costs_verdicts_cold_runs_and_big_ratios():
    r = _result(ours=0.4, torch=2.2, ref=1.2, torch_import=1.2)
    r.cold, r.cold_note = {"ours": 0.45, "ours-torch": 7.0}, {"ours": False, "ours-torch": True}
    r.big, r.big_s = "256x8 2x1,200,000", {"ours": 40.0, "ours-torch": 32.0, "reference": 80.0}
    info = {"cpu": "test", "logical_cpus": 2, "reference_whestbench": "0.16.2", "loadavg_start": [0.1], "loadavg_end": [0.2]}
    out = bench_startup.report(info, r)
    assert "PASS  default path fixed cost <= reference's: 0.40 s vs 1.20 s (0.33x)" in out
    assert "PASS  torch CPU path fixed cost <= reference's + import torch: 2.20 s vs 2.40 s (0.92x)" in out
    assert "cold numba cache, ours-torch: 7.00 s (+4.80 s over a warm run; printed the compiling note)" in out
    assert "2.00x the reference" in out and "2.50x the reference" in out


def test_the_cold_note_is_the_bakes_own_message():
    from whestbench.bake.pipeline import KERNELS_NOTE

    assert KERNELS_NOTE.startswith(bench_startup.COLD_NOTE)
