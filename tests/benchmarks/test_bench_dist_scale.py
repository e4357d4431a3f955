"""The distributed-scale benchmark runs end to end at a tiny rank count, faults included, so it cannot rot."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch.distributed")

from benchmarks import bench_dist_scale  # noqa: E402


@pytest.mark.slow  # ~10 small bakes of 4 simulated ranks in 3-4 processes each
@pytest.mark.distributed
def test_dist_scale_benchmark_loses_no_unit_and_recovers_from_every_fault(tmp_path):
    out = tmp_path / "bench.json"
    rc = bench_dist_scale.main(["--ranks", "4", "--units", "8", "--unit-seconds", "1", "--checkpoint-every", "0.5",
                                "--ranks-per-process", "2", "--peer-timeout", "10", "--json", str(out),
                                "--timeout", "240"])
    report = json.loads(out.read_text())
    assert rc == 0, report
    for field in ("ranks", "units", "overhead_fraction", "rank0_poll_ms_p50", "rank0_poll_ms_p99", "store_ops_per_s",
                  "lost_units", "faults", "projection"):
        assert field in report
    assert report["lost_units"] == 0 and report["store_ops_per_s"] > 0
    assert [f["kind"] for f in report["faults"]] == list(bench_dist_scale.FAULTS)
    assert all(f["recovered"] and f["seconds"] > 0 for f in report["faults"]), report["faults"]
    assert set(report["projection"]) == {"1024", "4096", "model"}
