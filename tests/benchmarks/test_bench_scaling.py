"""The scaling benchmark (docs/distributed.md, "Scaling on one machine") runs end to end at a tiny shape, so
the commands the docs show cannot rot (tests/test_docs_commands.py skips them there as benchmarks)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch.distributed")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_scaling.py"


@pytest.mark.slow  # three small bakes, one of them under torchrun (~20 s)
@pytest.mark.distributed
def test_the_scaling_benchmark_runs_and_finds_identical_columns(tmp_path):
    out = tmp_path / "scaling.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--shape", "8x2:2:4096", "--repeats", "1",
                           "--workdir", str(tmp_path), "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["identical"] is True and report["shape"] == [8, 2, 2, 4096]
    assert set(report["results"]) == {"1 proc x 1 thread", "2 procs x 1 thread", "1 proc x 2 threads"}
    assert all(r["wall_s"] > 0 and r["bake_s"] > 0 for r in report["results"].values())
    assert "identical numeric columns across configurations: yes" in proc.stdout
