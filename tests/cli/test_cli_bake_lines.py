"""What a bake prints besides its progress: the ``✓ Wrote`` line's times, a target bake's words for how
its MLPs stopped, and the lines of a stopped and resumed bake.

- The ``✓ Wrote`` line's time starts after the start-up (imports, checks, the timing probe), so a
  bake's closing line also gives the whole command's wall time: comparable with the Plan line's "the
  whole command ≈ T" (issue 35's "times that include everything"). Before, a fresh-clone torch bake
  said ``✓ Wrote gt-fresh in 570.8s`` for a command that ran 618.4 s, and nothing said which.
- A bake to a target standard error words how its MLPs stopped from the real counts. With control
  variates and ``--n-samples 1e6 --width 8 --depth 3 --target-stderr 0.05`` every MLP stops at
  524,288 samples, its 32-batch floor (docs/cli.md): the floor, not the target, decided.
- A stopped and resumed bake: timestamps on the stop lines, a plan line that projects the rest, and a
  first progress line that counts what the work directory already holds.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from whestbench.cli.signals import StopSignals

from helpers.cli import run
from helpers.procs import clean_env


# --- the ✓ Wrote line ---------------------------------------------------------------------------------

WROTE = re.compile(r"^✓ Wrote .* in ([0-9.]+)s .*; the whole command took ([0-9.]+)s \(start-up ([0-9.]+)s\)$")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the process's age is read from /proc")
def test_the_wrote_line_gives_the_whole_commands_time_with_its_start_up(tmp_path):
    cmd = [sys.executable, "-m", "whestbench", "dataset", "bake", "--n-mlps", "2", "--n-samples", "2000",
           "--width", "8", "--depth", "2", "--seed", "1", "--quiet", "--output", str(tmp_path / "ds")]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=clean_env(), timeout=600)
    outside = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("✓ Wrote"))
    m = WROTE.match(line)
    assert m, line
    dt, whole, start_up = (float(g) for g in m.groups())
    assert whole >= dt and start_up > 0  # the interpreter and the imports come before the bake's clock starts
    assert abs(whole - dt - start_up) <= 0.11  # the three figures agree (each rounded to 0.1 s)
    assert whole <= outside + 0.1  # the process's own age, not some other clock's


# --- a target bake's words for how its MLPs stopped ----------------------------------------------------

SHAPE = ["--n-mlps", "2", "--n-samples", "1e6", "--width", "8", "--depth", "3", "--seed", "1", "--quiet"]


def test_every_stop_at_the_control_variate_floor_is_said_to_be_the_floors(tmp_path, capsys):
    rc, out, err = run(["dataset", "bake", *SHAPE, "--estimator", "control-variate", "--target-stderr", "0.05",
                        "--output", str(tmp_path / "cv")], capsys)
    assert rc == 0, err
    wrote = next(line for line in out.splitlines() if line.startswith("✓ Wrote"))
    assert "all stopped at 524,288 samples, the control-variate floor" in wrote
    assert "stopped some early" not in wrote
    assert "note: every MLP stopped at 524,288 samples, the control-variate floor" in err
    assert "largest stored standard error" in wrote and "× the target" in wrote
    assert "note: stored standard errors vs the target E=0.05: median" in err


def test_a_plain_target_bake_counts_the_mlps_it_stopped_early(tmp_path, capsys):
    rc, out, err = run(["dataset", "bake", *SHAPE, "--target-stderr", "0.05", "--output", str(tmp_path / "p")], capsys)
    assert rc == 0, err
    wrote = next(line for line in out.splitlines() if line.startswith("✓ Wrote"))
    assert "the target standard error stopped all early" in wrote and "some" not in wrote
    assert "control-variate floor" not in err


def test_the_control_variate_floor_is_the_first_check_point_with_32_batches():
    from whestbench.compute.estimators import cv_floor_samples

    assert cv_floor_samples(10**6, 16384, 16384) == 524_288  # 32 steps of 16,384: check point 32
    assert cv_floor_samples(10**6, 8192, 16384) == 524_288  # 64 steps: check point 64
    assert cv_floor_samples(100_000, 16384, 16384) == 100_000  # the cap comes first


def test_the_plan_line_of_a_target_bake_is_its_planned_total(tmp_path, capsys):
    """Issue 28: the Plan line came from the --n-samples cap (2,000,000 here); the pilots plan every
    MLP's count first, so it states what will be sampled."""
    rc, out, err = run(["dataset", "bake", *SHAPE, "--estimator", "control-variate", "--target-stderr", "0.05",
                        "--output", str(tmp_path / "cv")], capsys)
    assert rc == 0, err
    plan = next(line for line in out.splitlines() if line.startswith("Plan:"))
    assert plan.startswith("Plan: 1,048,576 samples (524,288 per MLP, planned by their pilots") and "cap 1,000,000" in plan
    assert "2,000,000" not in plan


def test_a_re_run_of_a_finished_target_bake_states_the_samples_used(tmp_path, capsys):
    """Issue 28: the no-op line said "2 MLPs × 1,000,000 samples" (the cap)."""
    argv = ["dataset", "bake", *SHAPE, "--estimator", "control-variate", "--target-stderr", "0.05",
            "--output", str(tmp_path / "cv")]
    assert run(argv, capsys)[0] == 0
    rc, out, err = run(argv, capsys)
    assert rc == 0, err
    assert "2 MLPs, 524,288 samples each (target standard error 0.05, cap 1,000,000)" in out
    assert "× 1,000,000 samples" not in out
    import json

    md = json.loads((tmp_path / "cv" / "metadata.json").read_text())
    assert md["samples_used"] == {"min": 524288, "median": 524288, "max": 524288, "total": 1048576, "at_cap": 0}


# --- a stopped and resumed bake ------------------------------------------------------------------------

STAMP = re.compile(r"^\[\d\d:\d\d:\d\d\] ")


def _stopped_then_resumed(tmp_path, capsys, monkeypatch, sig: int):
    """A bake that sends itself ``sig`` once half its samples are done, then the same command again:
    each run's ``(exit code, stdout, stderr)``."""
    argv = ["dataset", "bake", "--n-mlps", "1", "--n-samples", "400000", "--width", "16", "--depth", "2", "--seed", "3",
            "--max-threads", "1", "--checkpoint-every", "0.05", "--log-every", "60", "--output", str(tmp_path / "ds")]
    original = StopSignals.on_event
    sent = []

    def signal_midway(self, event):
        original(self, event)
        p = event.progress
        if not sent and event.kind == "progress" and p is not None and p.done >= p.total // 2:
            sent.append(1)
            os.kill(os.getpid(), sig)

    monkeypatch.setattr(StopSignals, "on_event", signal_midway)
    stopped = run(argv, capsys)
    monkeypatch.setattr(StopSignals, "on_event", original)
    return stopped, run(argv, capsys)


def test_a_stopped_then_resumed_bake_prints_stamped_stop_lines_the_rest_and_no_0_percent(tmp_path, capsys, monkeypatch):
    (rc, out, err), resumed = _stopped_then_resumed(tmp_path, capsys, monkeypatch, signal.SIGTERM)
    assert rc == 75, err
    received = [line for line in err.splitlines() if "received SIGTERM" in line]
    stopped = [line for line in err.splitlines() if "stopped:" in line]
    assert received and all(STAMP.match(line) for line in received), err
    assert stopped and all(STAMP.match(line) for line in stopped), err

    rc, out, err = resumed
    assert rc == 0, err
    plan = next(line for line in out.splitlines() if line.startswith("Plan:"))
    assert "the rest:" in plan and "of 400,000 samples are saved" in plan
    first = next(line for line in err.splitlines() if " bake: " in line and "samples (" in line)
    assert "(0.0%)" not in first, err


def test_ctrl_c_says_it_checkpoints_like_a_stop_signal_and_the_resume_counts_what_was_saved(tmp_path, capsys, monkeypatch):
    """Ctrl-C printed no "received ..." line while the bake checkpointed (docs/cli.md says it does what
    SIGTERM does); exit 130, and the resumed run's first progress line counts the checkpointed samples."""
    (rc, out, err), resumed = _stopped_then_resumed(tmp_path, capsys, monkeypatch, signal.SIGINT)
    assert rc == 130, err
    received = [line for line in err.splitlines() if "received SIGINT (Ctrl-C): checkpointing the units in flight" in line]
    assert len(received) == 1 and STAMP.match(received[0]), err
    stopped = next(line for line in err.splitlines() if "stopped:" in line)
    saved = int(re.search(r"([\d,]+) of 400,000 samples saved", stopped).group(1).replace(",", ""))
    assert saved > 0, stopped
    rc, out, err = resumed
    assert rc == 0, err
    first = next(line for line in err.splitlines() if " bake: " in line and "samples (" in line)
    assert f"{saved:,}/400,000 samples" in first, (saved, err)
