"""The distributed-scale benchmark runs end to end at a tiny rank count, faults included, so it cannot rot."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch.distributed")

from benchmarks import bench_dist_scale  # noqa: E402

from helpers.procs import children  # noqa: E402


@pytest.mark.slow  # ~10 small bakes of 4 simulated ranks in 3-4 processes each
@pytest.mark.distributed
def test_dist_scale_benchmark_loses_no_unit_and_recovers_from_every_fault(tmp_path):
    out = tmp_path / "bench.json"
    # --peer-timeout 10: 20 heartbeats of a live rank (the kill-no-restart fault waits it out); a
    # restarted or late rank's process is up before the clock starts, so no start-up of seconds on a
    # busy machine counts against it (it did: "rank 3 stopped responding", then the restarted rank's
    # "nothing answers at 127.0.0.1:... after 10s"). --timeout 240: a hang guard per run (~3-20 s each).
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


def _alive(pid: int, started: str) -> bool:
    """Whether process ``pid``, started at ``started`` (its /proc start time), still runs (a zombie
    waiting for its reaper does not)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[19] == started and fields[0] not in ("Z", "X")


@pytest.mark.distributed
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_no_node_outlives_a_killed_benchmark(tmp_path, sig):
    """The nodes run in sessions of their own (so a node can be killed whole); a driver killed before
    its ``finally`` could end them (a test run's timeout, a SIGKILL, a SIGTERM's default action)
    left them running: waiting forever for a go file, or baking hour-long units. Here the driver is
    killed with every node up (imported, planned) and the units an hour long, so only their dying
    with it ends them."""
    if not Path("/proc/self/stat").exists():
        pytest.skip("reads the process table from /proc")
    work = tmp_path / "work"
    with open(tmp_path / "driver.txt", "w") as log:
        driver = subprocess.Popen([sys.executable, bench_dist_scale.__file__, "--ranks", "4", "--units", "8",
                                   "--unit-seconds", "3600", "--ranks-per-process", "2", "--faults", "none",
                                   "--timeout", "600", "--work", str(work)], stdout=log, stderr=subprocess.STDOUT)
    nodes: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 300  # a hang guard: the nodes import torch (seconds; more on a busy machine)
        while len(list((work / "clean").glob("ready-*"))) < 3:  # 3 nodes: rank 0, ranks 1-2, rank 3
            assert driver.poll() is None, (tmp_path / "driver.txt").read_text()
            assert time.monotonic() < deadline, "the benchmark's 3 nodes did not get ready within 300 s"
            time.sleep(0.05)
        nodes = children(driver.pid)
        assert len(nodes) == 3, nodes
        driver.send_signal(sig)
        driver.wait(timeout=60)
        deadline = time.monotonic() + 60  # they end within 0.1 s; the rest is slack for a busy machine
        while any(_alive(pid, t) for pid, t in nodes.items()):
            if time.monotonic() > deadline:
                survivors = [pid for pid, t in nodes.items() if _alive(pid, t)]
                raise AssertionError(f"nodes {survivors} still run 60 s after their driver was killed ({sig!r})")
            time.sleep(0.05)
    finally:
        for pid, t in nodes.items():  # never leave one behind, even when the test fails
            if _alive(pid, t):
                os.kill(pid, signal.SIGKILL)
        if driver.poll() is None:
            driver.kill()
            driver.wait()
