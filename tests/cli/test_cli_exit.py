"""The process entry point leaves with main()'s exit code, even past threads it cannot wait for."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_a_lingering_distributed_thread_does_not_hold_or_abort_the_exit():
    # A non-daemon thread named like a distributed unit thread, stuck for good: an ordinary exit
    # would wait for it forever. The entry point must flush its message and leave with code 2.
    code = textwrap.dedent(
        """
        import sys, threading
        import whestbench.work.distributed as dist
        threading.Thread(target=threading.Event().wait, name=dist.THREAD_PREFIX + "unit-0").start()
        sys.argv = ["whest", "dataset", "bake", "--n-mlps", "0"]
        from whestbench.cli.app import run
        run()
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error:") and len(proc.stderr.strip().splitlines()) == 1


def test_without_lingering_threads_the_entry_point_exits_normally():
    proc = subprocess.run(
        [sys.executable, "-m", "whestbench", "dataset", "bake", "--n-mlps", "0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.startswith("error:")


def test_a_finaliser_failing_at_shutdown_is_not_printed_but_one_failing_earlier_is(monkeypatch, capsys):
    """After a stop, llvmlite's finalisers can fail while the interpreter shuts down; the command has
    already said how it ended, so that traceback is noise. Earlier, Python's own hook reports it."""
    import gc

    from whestbench.cli import signals

    class Handle:
        def __del__(self):
            raise AttributeError("'NoneType' object has no attribute '_as_parameter_'")

    def failing(finalizing: bool) -> str:
        monkeypatch.setattr(sys, "is_finalizing", lambda: finalizing)
        h = Handle()
        del h
        gc.collect()
        return capsys.readouterr().err

    monkeypatch.setattr(sys, "unraisablehook", signals.swallowed_stops)
    monkeypatch.delenv("WHEST_DEBUG", raising=False)
    assert failing(True) == ""
    assert "_as_parameter_" in failing(False)
