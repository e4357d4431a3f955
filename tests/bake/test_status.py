"""``whest dataset status``: a bake's state read from its output and work directory (issue 28)."""

from __future__ import annotations

import json
import os
import threading

import pytest

from whestbench.bake.pipeline import BakeConfig, bake, saved_samples
from whestbench.bake.plan import plan_bake
from whestbench.bake.status import bake_status, status_lines
from whestbench.errors import UsageError

from helpers.datasets import stopped_after_first_unit
from helpers.procs import clean_env


SHAPE = dict(n_mlps=4, n_samples=400_000, width=16, depth=3, seed=5, max_threads=1, checkpoint_every=0.05)


def test_status_of_a_stopped_bake(tmp_path):
    cfg = BakeConfig(**SHAPE, output=tmp_path / "out")
    stopped_after_first_unit(cfg)
    doc = bake_status(tmp_path / "out")
    assert doc["state"] == "stopped" and doc["last_run"]["pid"] == os.getpid()
    assert 1 <= doc["units_done"] < 4 and doc["units_total"] == 4
    assert doc["samples_saved"] == saved_samples(plan_bake(cfg)) and doc["samples_total"] == 1_600_000
    assert doc["projected_left_s"] > 0
    assert doc["redo"].startswith(f"{4 - doc['units_done']} of 4 units")
    assert bake_status(tmp_path / "out.whest-work") == doc  # the work directory names the same bake
    assert any(line.startswith("  a re-run of the same command redoes: ") for line in status_lines(doc))
    assert "ranks" not in doc and not any("rank" in line for line in status_lines(doc))  # one process: no ranks


def test_status_names_each_ranks_host_and_the_ranks_never_seen(tmp_path):
    """A distributed bake's status: before rank 0's first record it says none is recorded yet (not
    that every rank is missing); after it, each rank with its host and the ranks never seen."""
    from whestbench.work.workdir import update_status

    stopped_after_first_unit(BakeConfig(**SHAPE, output=tmp_path / "out"))
    work = tmp_path / "out.whest-work"
    update_status(work, {"world_size": 4})
    doc = bake_status(work)
    assert doc["ranks"] == [] and doc["ranks_never_seen"] == []
    assert "  ranks: none recorded yet (world size 4); rank 0 records them every few seconds once its units start" \
        in status_lines(doc)
    update_status(work, {"ranks_recorded_utc": "2026-11-27T10:00:05Z", "ranks": {
        "0": {"last_heartbeat_utc": "2026-11-27T10:00:04Z", "epoch": "0", "host": "node-a", "pid": 11},
        "2": {"last_heartbeat_utc": "2026-11-27T10:00:01Z", "epoch": "0", "host": "node-c\x1b[2J", "pid": 12}}})
    doc = bake_status(work)
    assert [(r["rank"], r["host"], r["pid"]) for r in doc["ranks"]] == [(0, "node-a", 11), (2, "node-c\x1b[2J", 12)]
    assert doc["ranks_never_seen"] == [1, 3]
    lines = status_lines(doc)
    at = lines.index("  ranks (world size 4), as rank 0 last recorded them at 2026-11-27T10:00:05Z:")
    assert [line.split(",")[0] for line in lines[at + 1:at + 5]] == [
        "    rank 0: on node-a (pid 11)", "    rank 1: never seen", "    rank 2: on node-c (pid 12)",  # no escape reaches the terminal
        "    rank 3: never seen"]


def test_status_of_a_running_bake(tmp_path):
    at_checkpoint, release = threading.Event(), threading.Event()

    def sink(event):
        if event.kind == "checkpoint" and not at_checkpoint.is_set():
            at_checkpoint.set()
            release.wait(60)

    cfg = BakeConfig(**SHAPE, output=tmp_path / "out")
    worker = threading.Thread(target=bake, args=(cfg,), kwargs={"on_event": sink})
    worker.start()
    try:
        assert at_checkpoint.wait(60)
        doc = bake_status(tmp_path / "out")
        assert doc["state"] == "running" and doc["holder"]["pid"] == os.getpid()
    finally:
        release.set()
        worker.join(120)
    assert bake_status(tmp_path / "out")["state"] == "complete"


def test_status_of_a_complete_output_and_of_nothing(tmp_path):
    out = bake(BakeConfig(n_mlps=2, n_samples=200, width=4, depth=2, seed=1, output=tmp_path / "done"))
    doc = bake_status(out)
    assert doc["state"] == "complete" and doc["redo"] == "nothing" and doc["n_mlps"] == 2
    with pytest.raises(UsageError, match="neither a dataset nor a bake"):
        bake_status(tmp_path / "nothing")


def test_the_cli_prints_json_and_refuses_a_missing_path(tmp_path, capsys):
    from whestbench.cli import main

    bake(BakeConfig(n_mlps=2, n_samples=200, width=4, depth=2, seed=1, output=tmp_path / "done"))
    assert main(["dataset", "status", str(tmp_path / "done"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "complete"
    assert main(["dataset", "status", str(tmp_path / "nothing")]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_a_stopped_target_bakes_status_counts_its_planned_total_and_resumes(tmp_path):
    """A target bake's total is what its pilots planned (the bake records it in status.json, which a
    resume accepts), not the --n-samples cap."""
    from whestbench.compute.estimation import Estimation

    cfg = BakeConfig(n_mlps=4, n_samples=10**6, width=8, depth=3, seed=45, max_threads=1, output=tmp_path / "t",
                     estimation=Estimation("control-variate", 0.05))
    events, _ = stopped_after_first_unit(cfg)
    planned = next(e for e in events if e.kind == "plan").data["plan"].planned_total
    doc = bake_status(tmp_path / "t")
    assert doc["samples_total"] == planned < 4 * 10**6 and doc["samples_total_is"] == "planned by the pilots"
    assert doc["units_total"] == 4 and doc["projected_left_s"] > 0
    assert bake(cfg) == tmp_path / "t" and bake_status(tmp_path / "t")["state"] == "complete"


def test_a_distributed_bakes_projection_counts_every_ranks_workers(tmp_path):
    """The projected time left of a distributed bake divides by the workers of every rank (rank 0
    records the world size in status.json), not rank 0's alone."""
    from whestbench.work.workdir import update_status

    cfg = BakeConfig(**SHAPE, output=tmp_path / "out")
    stopped_after_first_unit(cfg)
    one = bake_status(tmp_path / "out")
    update_status(tmp_path / "out.whest-work", {"world_size": 4})
    four = bake_status(tmp_path / "out")
    assert four["projected_left_s"] == pytest.approx(one["projected_left_s"] / 4)
    assert "× 4 ranks" in four["projected_at"]


@pytest.mark.parametrize("planted", ["fifo", "dev-zero"])
def test_status_and_a_rerun_read_no_fifo_or_device_planted_in_the_work_directory(tmp_path, planted):
    """A work file replaced by a FIFO blocked `status` (and a re-run) forever; one replaced by a link
    to /dev/zero read until the memory ran out (killed). Such a file is unreadable, like a damaged one."""
    import subprocess
    import sys

    cfg = BakeConfig(**SHAPE, output=tmp_path / "out")
    stopped_after_first_unit(cfg)
    work = tmp_path / "out.whest-work"
    units = sorted((work / "units").glob("*.unit"))
    for path in [work / "status.json", work / "lock", units[0]]:
        path.unlink()
        os.mkfifo(path) if planted == "fifo" else path.symlink_to("/dev/zero")
    # a hang guard, not a time bound: a blocked read never ends, a memory-eating one is killed
    cmd = [sys.executable, "-m", "whestbench", "dataset", "status", str(tmp_path / "out")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=clean_env(),
                          preexec_fn=lambda: __import__("resource").setrlimit(
                              __import__("resource").RLIMIT_AS, (4 << 30, 4 << 30)))
    assert done.returncode == 0, done.stderr
    assert "units finished: " in done.stdout and "Traceback" not in done.stderr
    cmd = [sys.executable, "-m", "whestbench", "dataset", "bake", "--n-mlps", "4", "--n-samples", "400000", "--width",
           "16", "--depth", "3", "--seed", "5", "--max-threads", "1", "--quiet", "--output", str(tmp_path / "out")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=clean_env(),
                          preexec_fn=lambda: __import__("resource").setrlimit(
                              __import__("resource").RLIMIT_AS, (4 << 30, 4 << 30)))
    # a re-run refuses the planted lock and status.json (one line, exit 2, nothing else touched);
    # without them, it recomputes the planted unit with a line and completes
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and f"{work / 'lock'} is a " in done.stderr, done.stderr
    (work / "lock").unlink()
    (work / "status.json").unlink()  # refused alike; the units are read by the ledger, which checks each
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=clean_env(),
                          preexec_fn=lambda: __import__("resource").setrlimit(
                              __import__("resource").RLIMIT_AS, (4 << 30, 4 << 30)))
    assert done.returncode == 0, done.stderr
    assert f"work file {units[0]} failed its check" in done.stderr, done.stderr  # recomputed, with a line


def test_status_tells_a_killed_rank_from_one_alive_to_the_end(tmp_path):
    """After a rank was killed both ranks showed the same last heartbeat (the last periodic look's):
    rank 0 now records each rank's own time of its last beat and how each left."""
    from whestbench.work.workdir import update_status

    stopped_after_first_unit(BakeConfig(**SHAPE, output=tmp_path / "out"))
    update_status(tmp_path / "out.whest-work", {"world_size": 2, "ranks_recorded_utc": "2026-11-27T10:00:09Z", "ranks": {
        "0": {"last_heartbeat_utc": "2026-11-27T10:00:09Z", "epoch": "1", "host": "a", "pid": 11, "ended": "failed"},
        "1": {"last_heartbeat_utc": "2026-11-27T10:00:02Z", "epoch": "1", "host": "a", "pid": 12, "ended": "no-goodbye"}}})
    doc = bake_status(tmp_path / "out")
    assert [(r["rank"], r["ended"]) for r in doc["ranks"]] == [(0, "failed"), (1, "no-goodbye")]
    lines = [line for line in status_lines(doc) if line.startswith("    rank ")]
    assert lines[0].endswith("; rank 0, failed") and "last heartbeat 2026-11-27T10:00:09Z" in lines[0]
    assert "last heartbeat 2026-11-27T10:00:02Z" in lines[1] and "never acknowledged the end: killed" in lines[1]


def test_a_heartbeat_carries_its_ranks_own_time():
    from whestbench.work.distributed.store import beat_fields as _beat_fields

    assert _beat_fields("3 node-a:4242:ab12 17 1764000000.250") == ("3", "node-a", 4242, 1764000000.25)
    assert _beat_fields("3 node-a:4242:ab12 17") == ("3", "node-a", 4242, None)  # an older whestbench's beat
    assert _beat_fields("3 node-a:4242:ab12 17 nan")[3] is None
