"""What a stopped and resumed bake prints: timestamps on the stop lines, a plan line that projects
the rest, and a first progress line that counts what the work directory already holds."""

from __future__ import annotations

import os
import re
import signal

from whestbench.cli.signals import StopSignals

from helpers.cli import run


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
