"""SIGTERM / SIGUSR1 (SLURM's pre-timeout signal) / SIGHUP (a dropped ssh session) / SIGQUIT stop a bake cleanly: exit 75, progress kept, resumable.

Also: a re-run with different numbers-changing flags is refused instead of mixing two bakes.
Each test runs ``python -m whestbench dataset bake`` as a subprocess and signals it for real.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from whestbench.bake.pipeline import BakeConfig, bake
from whestbench.cli.common import err

from helpers.procs import STEP_TIMEOUT_S, clean_env, finish, start_bake, thaw, units_dir, wait_for_units
from helpers.signal_points import ENV_MARK, SCRIPT


EXIT_RESUMABLE = 75
COMPARED = ("mlp_id", "mlp_name", "mlp_seed", "weights", "all_layer_means", "final_means", "avg_variance",
            "all_layer_stderr")
SHAPE = dict(n_mlps=10, n_samples=120_000, width=32, depth=3, seed=11)


def _args(n_samples: int = SHAPE["n_samples"], threads: int = 1) -> list[str]:
    return [
        "--n-mlps", str(SHAPE["n_mlps"]), "--n-samples", str(n_samples),
        "--width", str(SHAPE["width"]), "--depth", str(SHAPE["depth"]), "--seed", str(SHAPE["seed"]),
        "--max-threads", str(threads), "--quiet",
    ]  # fmt: skip


def _interrupted(output: Path, sig: int = signal.SIGTERM, args: list[str] | None = None) -> tuple[int, str]:
    """Start a bake, let it save two units, send ``sig``; return its exit code and stderr."""
    proc = start_bake(args or _args(), output)
    wait_for_units(proc, output, 2, freeze=True)  # frozen until the signal is sent: a fast machine cannot finish first
    thaw(proc, sig)
    return finish(proc)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("uninterrupted") / "ds"
    return bake(BakeConfig(output=out, **SHAPE))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1, signal.SIGHUP, signal.SIGQUIT],
                         ids=["SIGTERM", "SIGUSR1", "SIGHUP", "SIGQUIT"])
def test_signal_stops_with_exit_75_keeping_finished_units(tmp_path, sig):
    output = tmp_path / "ds"
    code, err = _interrupted(output, sig)
    assert code == EXIT_RESUMABLE, err
    assert f"received {signal.Signals(sig).name}" in err
    assert "re-run the same command to resume" in err
    assert len(list(units_dir(output).glob("*.unit"))) >= 2  # the units finished before the signal
    assert not output.exists()  # nothing half-written where the dataset goes
    assert not list(tmp_path.glob(".ds.staging-*"))


@pytest.mark.parametrize("order", ["stop-then-resume", "resume-then-stop"])
def test_a_stop_sent_to_a_suspended_bake_stops_it_when_it_resumes(tmp_path, order):
    """A SLURM job suspended (SIGSTOP), then signalled and resumed: the kernel hands the stop to a
    worker thread, and the main thread, asleep in one endless wait for the units, ran its handler
    only after the last unit: the bake said "checkpointing the units in flight, then stopping",
    ran to the end and exited 0."""
    output = tmp_path / "ds"
    proc = start_bake(_args(), output)
    wait_for_units(proc, output, 2, freeze=True)
    if order == "stop-then-resume":
        thaw(proc, signal.SIGTERM)
    else:
        proc.send_signal(signal.SIGCONT)
        proc.send_signal(signal.SIGTERM)
    code, err = finish(proc)
    assert code == EXIT_RESUMABLE, err
    assert "stopped: " in err and "re-run the same command to resume" in err, err
    assert not output.exists()
    assert 2 <= len(list(units_dir(output).glob("*.unit"))) < SHAPE["n_mlps"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1], ids=["SIGTERM", "SIGUSR1"])
def test_rerun_after_a_signal_completes_and_equals_the_uninterrupted_bake(
    tmp_path, sig, uninterrupted, read_columns, assert_bytes_equal
):
    output = tmp_path / "ds"
    assert _interrupted(output, sig)[0] == EXIT_RESUMABLE
    code, err = finish(start_bake(_args(), output))
    assert code == 0, err
    assert "resuming:" in err
    got, want = read_columns(output), read_columns(uninterrupted)
    for col in COMPARED:
        if col == "mlp_name":
            assert got[col] == want[col]
        else:
            assert_bytes_equal(got[col], want[col], col)
    assert not (tmp_path / "ds.whest-work").exists()


def test_ctrl_c_stops_a_threaded_bake_without_computing_the_rest(tmp_path):
    output = tmp_path / "ds"
    code, err = _interrupted(output, signal.SIGINT, _args(threads=2))
    assert code == 130, err
    saved = len(list(units_dir(output).glob("*.unit")))
    assert 2 <= saved < SHAPE["n_mlps"]  # the queued units were dropped, the finished ones kept
    assert not output.exists()


def test_resuming_with_different_n_samples_is_refused_naming_the_field(tmp_path):
    output = tmp_path / "ds"
    assert _interrupted(output)[0] == EXIT_RESUMABLE
    saved = sorted(p.name for p in units_dir(output).glob("*.unit"))
    code, err = finish(start_bake(_args(n_samples=SHAPE["n_samples"] // 2), output))
    assert code == 2, err
    assert "n_samples" in err and str(SHAPE["n_samples"]) in err  # which field, and the saved value
    assert "re-run the original command" in err and "delete" in err  # the two ways out
    assert sorted(p.name for p in units_dir(output).glob("*.unit")) == saved  # the saved work is untouched
    assert not output.exists()


# --- signals during start-up and set-up ----------------------------------------------------------


SET_UP_POINTS = {
    # inside the CLI's import, the module half-initialized (the SIGTERM handler once imported
    # whestbench.errors there and died of "cannot import name 'SignalStop' from partially initialized module")
    "importing-the-cli": "exec:whestbench.cli.app",
    "importing-the-pipeline": "exec:whestbench.bake.pipeline",
    "deriving-seeds": "call:whestbench.compute.seeds:derived_seeds",
    "timing-probe": "call:whestbench.bake.cost:probe",
    "inside-the-probe-unit": "call:whestbench.work.steps:run_unit#1",  # on the probe's worker thread
    "inside-the-unit": "call:whestbench.work.steps:run_unit#2",
}


@pytest.mark.parametrize("point", list(SET_UP_POINTS))
@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 75), (signal.SIGUSR1, 75), (signal.SIGINT, 130)],
                         ids=["SIGTERM", "SIGUSR1", "SIGINT"])
def test_a_signal_at_any_moment_of_set_up_ends_the_bake_with_the_resume_advice(tmp_path, point, sig, code):
    import subprocess
    import sys

    output = tmp_path / "ds"
    # A set-up with work in it (a slice of a long derived seed list: seeds, names, planning) and one
    # unit of hours after it (2e10 samples at 32x3: ~1e14 FLOP), so the bake can only have ended by
    # stopping, on any machine: that it ends at all (within finish's hang guard) is the verdict, not
    # how fast. The signal is sent at a named point of the run (tests/helpers/signal_points.py), so a busy
    # machine cannot move it to another phase (a delay after the handler's installation did: 0.4 s
    # landed in the import of whestbench.errors on a loaded machine).
    args = ["--n-mlps", "300000", "--n-samples", "2e10", "--width", "32", "--depth", "3", "--seed", "3",
            "--mlp-range", "0-0", "--max-threads", "1", "--quiet"]
    mark = tmp_path / "signal-sent"
    cmd = [sys.executable, SCRIPT, SET_UP_POINTS[point], str(int(sig)), "dataset", "bake", *args, "--output", str(output)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=clean_env(**{ENV_MARK: str(mark)}))
    rc, err = finish(proc)
    assert mark.exists(), f"the bake never reached {SET_UP_POINTS[point]}: {err}"
    assert rc == code, err
    assert "re-run the same command" in err, err
    assert "Traceback" not in err
    # the signal line (and at most one progress note); on a machine whose numba cache is cold the bake
    # also says, once, that it compiles the CPU kernels
    lines = [line for line in err.strip().splitlines() if not line.startswith("note: compiling the CPU kernels")]
    assert len(lines) <= 2, err
    assert not output.exists()
    assert not list(units_dir(output).glob("*.unit"))  # stopped inside its unit, not after it


@pytest.mark.parametrize("sig, raised", [(signal.SIGUSR1, "SignalStop"), (signal.SIGINT, "KeyboardInterrupt")])
def test_a_stop_that_lands_inside_a_c_callback_is_kept_and_raised_before_the_units_start(capsys, sig, raised):
    """numba calls back into Python while it loads cached kernels: a signal handled there raises where
    Python cannot deliver it ("Exception ignored in ..." and a traceback). The bake keeps it silently
    and stops before its units start."""
    import ctypes
    import os

    from whestbench.cli.signals import StopSignals
    from whestbench.events import Event

    @ctypes.CFUNCTYPE(None)
    def callback():
        os.kill(os.getpid(), sig)
        for _ in range(10_000):  # the handler runs here, inside the callback
            pass

    signals = StopSignals(err)
    with signals, pytest.raises(BaseException) as stopped:
        callback()  # the stop cannot leave the callback
        signals.on_event(Event("start"))
    assert type(stopped.value).__name__ == raised
    assert not signals.running
    assert "Traceback" not in capsys.readouterr().err


def test_a_stop_that_a_library_swallows_during_set_up_is_still_raised_before_the_units_start():
    """A library's bare ``except:`` around set-up work can drop the stop a signal raised there; the
    bake kept it and stops before its units start, instead of running them all."""
    import os

    from whestbench.cli.signals import StopSignals
    from whestbench.cli.signals import pending
    from whestbench.events import Event

    signals = StopSignals(err)
    with signals, pytest.raises(BaseException) as stopped:
        try:  # a library's guarded import or probe, with the signal landing inside it
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(10_000):  # the handler runs here
                pass
        except BaseException:  # noqa: BLE001 - what the library does
            pass
        signals.on_event(Event("start"))
    assert type(stopped.value).__name__ == "SignalStop" and stopped.value.signum == signal.SIGTERM
    assert not signals.running
    assert pending == []  # nothing kept for a later bake in this process


def test_a_stop_delivered_normally_is_not_raised_again():
    """The kept copy of a stop that did get out is dropped with the stop handling, so a later bake in
    the same process starts clean."""
    import os

    from whestbench.cli.signals import StopSignals
    from whestbench.events import Event

    with pytest.raises(BaseException), StopSignals(err):
        os.kill(os.getpid(), signal.SIGUSR1)
        for _ in range(10_000):
            pass
    signals = StopSignals(err)
    with signals:
        signals.on_event(Event("start"))
    assert signals.running


def test_a_stop_that_arrives_after_the_dataset_is_written_does_not_fail_the_bake(tmp_path):
    """SLURM's SIGTERM can land while a finished bake is exiting: the dataset is complete, so the
    exit code stays 0 (not 143, which would mark the job step failed)."""
    import subprocess
    import sys

    output = tmp_path / "ds"
    cmd = [sys.executable, "-m", "whestbench", "dataset", "bake", *_args(n_samples=20_000), "--output", str(output)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env())
    for line in proc.stdout:
        if line.startswith("✓ Wrote"):
            proc.send_signal(signal.SIGTERM)
            break
    proc.stdout.read()
    assert proc.wait(timeout=STEP_TIMEOUT_S) == 0, proc.stderr.read()
    assert output.exists()


def test_verify_recompute_stopped_exits_75_as_the_docs_say(tmp_path, capsys, monkeypatch):
    """verify --recompute stopped by SIGTERM exits 75 ("stopped, progress saved"): the code maps its
    bake's stop to 75, and docs/cli.md's exit table and Signals section say so (they said 143)."""
    from whestbench.bake.pipeline import create_dataset
    from whestbench.cli import main
    from whestbench.errors import BakeInterrupted
    from whestbench.verify import recompute as recompute_mod

    ds = create_dataset(n_mlps=2, n_samples=2000, width=4, depth=2, seed=1, output_path=tmp_path / "ds")

    def stopped(*args, **kwargs):
        raise BakeInterrupted("stopped: 0 of 1 MLPs complete, 2,048 of 2,000 samples saved; re-run the same command to "
                              "resume.")

    monkeypatch.setattr(recompute_mod, "recompute", stopped)
    rc = main(["dataset", "verify", str(ds), "--recompute", "1", "--recompute-dir", str(tmp_path / "cache")])
    assert rc == EXIT_RESUMABLE
    assert re.search(r"re-run the same command to resume \(it continues the same draw; elsewhere, or with --no-cache: "
                     r"--recompute 1 --recompute-seed \d+\)", capsys.readouterr().err)
    docs = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    row = next(line for line in docs.splitlines() if line.startswith("| 75 |"))
    assert "verify --recompute" in row
    assert "- `verify --recompute` exits **75**" in docs


def test_every_stop_words_the_advice_alike():
    """The Ctrl-C line printed while Python loads the entry point (``__main__.py``, which can import
    nothing of ours) gives the advice in the words every other stop uses."""
    from pathlib import Path

    import whestbench
    from whestbench.errors import RESUME, RETRY

    text = (Path(whestbench.__file__).parent / "__main__.py").read_text()
    assert "re-run the same command" in RESUME and "re-run the same command" in RETRY
    assert "re-run the same command" in text and "re-run the command" not in text
