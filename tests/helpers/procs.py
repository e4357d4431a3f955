"""Helpers for tests that run ``python -m whestbench dataset bake`` as a real subprocess and signal or
kill it; ``children(pid)``, a process's children read from /proc; and ``free_port()``: a TCP port free
on 127.0.0.1 now (for a torch.distributed rendezvous)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

STEP_TIMEOUT_S = 300  # a hang guard (the slowest step, a 10-MLP bake, takes ~5 s idle): never a verdict on speed
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK", "LOCAL_WORLD_SIZE")


def clean_env(**extra: str) -> dict[str, str]:
    """This machine's environment minus anything that would make a bake think it is one rank of many."""
    env = {
        k: v for k, v in os.environ.items()
        if k not in LAUNCHER_VARS and not k.startswith(("SLURM_", "TORCHELASTIC_"))
    }  # fmt: skip
    env.update(PYTHONUNBUFFERED="1", **extra)
    return env


def start_bake(args: list[str], output: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "whestbench", "dataset", "bake", *args, "--output", str(output)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env())


def units_dir(output: Path) -> Path:
    return output.parent / f"{output.name}.whest-work" / "units"


def units_saved(output: Path) -> int:
    return len(list(units_dir(output).glob("*.unit")))


def wait_for_units(
    proc: subprocess.Popen, output: Path, n: int, *, must_live: bool = True, timeout_s: float = STEP_TIMEOUT_S,
    freeze: bool = False,
) -> None:
    """Wait until ``n`` units are saved. With ``must_live`` the bake ending first is a failure;
    without, an early end simply stops the wait (the caller looks at what was left).

    ``freeze``: stop the process (SIGSTOP) as soon as the units are seen, so whatever the test does
    next (signal it, start a second bake beside it) meets a bake still in progress however fast the
    machine computes the rest; ``thaw`` lets it go on."""
    deadline = time.monotonic() + timeout_s
    while units_saved(output) < n:
        if proc.poll() is not None:
            assert not must_live, f"the bake ended (exit {proc.returncode}) before saving {n} units"
            return
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"no {n} units saved within {timeout_s}s")
        time.sleep(0.002 if freeze else 0.01)
    if freeze and proc.poll() is None:
        proc.send_signal(signal.SIGSTOP)


def thaw(proc: subprocess.Popen, sig: int | None = None) -> None:
    """Send ``sig`` (if any) to a process ``wait_for_units(freeze=True)`` stopped, then let it run: the
    signal is pending when it resumes, so it lands in the bake that was frozen."""
    if sig is not None:
        proc.send_signal(sig)
    proc.send_signal(signal.SIGCONT)


def finish(proc: subprocess.Popen, timeout_s: float = STEP_TIMEOUT_S) -> tuple[int, str]:
    """Wait for the bake to end; return its exit code and stderr (kill it if it hangs)."""
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return proc.returncode, err


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children(pid: int) -> dict[int, str]:
    """``pid``'s child processes (Linux: read from /proc): {pid: start time}."""
    kids = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids[int(stat.parent.name)] = fields[19]
    return kids
