"""The process entry point leaves with main()'s exit code, even past threads it cannot wait for."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def test_a_lingering_distributed_thread_does_not_hold_or_abort_the_exit():
    # A non-daemon thread named like a distributed unit thread, stuck for good: an ordinary exit
    # would wait for it forever. The entry point must flush its message and leave with code 2.
    code = textwrap.dedent(
        """
        import sys, threading
        import whestbench.work.distributed.store_executor as dist
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


@pytest.mark.parametrize("exc, words", [
    (OSError(27, "File too large"), "the file-size limit (ulimit -f) stopped the write"),
    (OSError("Error writing bytes to file. Detail: [errno 27] File too large"), "the file-size limit (ulimit -f)"),
    (PermissionError(1, "Operation not permitted", "/data/out/.x.tmp"), "an immutable or read-only file"),
    (MemoryError(), "out of memory or address space (ulimit -v)"),
    (OSError("failed to map segment from shared object"), "out of memory or address space (ulimit -v)"),
], ids=["efbig", "pyarrow-efbig", "eperm", "memory", "map-segment"])
def test_resource_limits_give_one_line(tmp_path, capsys, monkeypatch, exc, words):
    """ulimit -f, an immutable directory and ulimit -v printed '[Errno 27] Error writing bytes...',
    '[Errno 1] Operation not permitted' or 'failed to map segment': one line naming the limit and the fix."""
    import whestbench.bake.pipeline as bake_mod
    from whestbench.cli import main

    def fails(*a, **k):
        try:
            raise exc
        except BaseException as inner:  # wrapped, as datasets' DatasetGenerationError wraps pyarrow's
            raise RuntimeError("An error occurred while generating the dataset") from inner

    monkeypatch.setattr(bake_mod, "bake", fails)
    rc = main(["dataset", "bake", "--n-mlps", "2", "--n-samples", "100", "--width", "4", "--depth", "1", "--seed", "1",
               "--quiet", "--output", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1 and words in err, err
    assert "Traceback" not in err and "[Errno" not in err and "re-run the same command" in err


def test_a_bake_under_ulimit_f_is_one_line_and_resumable(tmp_path):
    """A real bake under RLIMIT_FSIZE = 64 KiB (its shard is ~200 KiB): one line naming the limit, exit 1;
    its work directory is kept for the re-run."""
    import os
    import resource
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(repo / "src"), os.environ.get("PYTHONPATH", "")]))
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "whestbench", "dataset", "bake", "--n-mlps", "3", "--n-samples", "2000",
                        "--width", "64", "--depth", "4", "--seed", "1", "--quiet", "--output", str(out)],
                       capture_output=True, text=True, timeout=300, env=env,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536)))
    assert p.returncode == 1, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "the file-size limit (ulimit -f) stopped the write" in lines[0], p.stderr
    assert "[Errno" not in p.stderr and not out.exists()
