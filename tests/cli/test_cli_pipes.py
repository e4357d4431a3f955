"""A closed stdout is no error (issue 28): `whest ... | head -1` exits 0 quietly, under
`set -o pipefail` too, and the verb still does its work (a bake still bakes) and keeps its own
exit code. Only a stdout whose reader has gone counts: any other failed write stays exit 1."""

from __future__ import annotations

import errno
import shutil
import subprocess
import sys

import pytest


@pytest.fixture
def small(tiny):
    return tiny["public"]


def closed_stdout(*args: str, cwd=None) -> tuple[int, str]:
    """Run ``whest ARGS`` with its stdout a pipe whose read end is closed before the child writes:
    every write to stdout fails with EPIPE, deterministically."""
    proc = subprocess.Popen([sys.executable, "-m", "whestbench", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=cwd)
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    return proc.wait(timeout=120), stderr


VERBS = {
    "verify": lambda ds: ["dataset", "verify", str(ds)],
    "inspect": lambda ds: ["dataset", "inspect", str(ds)],
    "push --dry-run": lambda ds: ["dataset", "push", str(ds), "--repo", "o/r", "--dry-run"],
    "generate-seeds": lambda ds: ["dataset", "generate-seeds", "--n-mlps", "100000"],
    "--version": lambda ds: ["--version"],
    "dataset --help": lambda ds: ["dataset", "--help"],
}


@pytest.mark.parametrize("verb", VERBS)
def test_a_verb_whose_reader_went_away_exits_0_quietly(small, verb):
    rc, stderr = closed_stdout(*VERBS[verb](small))
    assert rc == 0, stderr
    assert "Broken pipe" not in stderr and "Exception ignored" not in stderr and "error" not in stderr


def test_a_bake_whose_reader_went_away_still_bakes_and_exits_0(tmp_path):
    out = tmp_path / "b"
    rc, stderr = closed_stdout("dataset", "bake", "--n-mlps", "2", "--n-samples", "1000", "--width", "8",
                               "--depth", "2", "--seed", "1", "--output", str(out))
    assert rc == 0, stderr
    assert (out / "metadata.json").is_file()
    assert "Broken pipe" not in stderr and "Exception ignored" not in stderr


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("head") is None, reason="needs bash and head")
def test_verify_piped_to_head_passes_under_pipefail(small):
    cmd = f"{sys.executable} -m whestbench dataset verify {small} | head -1"
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() and "Broken pipe" not in proc.stderr


def test_a_broken_pipe_that_is_not_stdout_stays_an_error(monkeypatch, capsys):
    """push and pull talk to sockets: their EPIPE is a failure, exit 1 with one line."""
    from whestbench.cli import app

    def socket_gone(*a, **k):
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    monkeypatch.setattr(app.cli, "invoke", socket_gone)
    assert app.main(["dataset", "generate-seeds", "--n-mlps", "3"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error:") and "Broken pipe" in err and len(err.strip().splitlines()) == 1


def test_a_stdout_that_fails_otherwise_is_an_error_of_one_line():
    """Only a reader that went away is quiet: a full or too-large stdout (EFBIG here) stays exit 1."""
    code = (
        "import errno, io, sys\n"
        "class Full(io.TextIOWrapper):\n"
        "    def write(self, s):\n"
        "        raise OSError(errno.EFBIG, 'File too large')\n"
        "sys.stdout = Full(io.BytesIO())\n"
        "sys.argv = ['whest', 'dataset', 'generate-seeds', '--n-mlps', '3']\n"
        "from whestbench.cli.app import run\n"
        "run()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith("error: ") and "File too large" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
