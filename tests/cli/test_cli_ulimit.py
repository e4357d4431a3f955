"""Every verb that writes files, run for real under a file-size limit (``ulimit -f``, RLIMIT_FSIZE)
smaller than what it writes: one line naming the limit and the fix, exit 1, no traceback, no raw
``[Errno 27]``, and nothing half-written (no output, no staging or temporary file beside it, the
inputs untouched). Bake and generate-seeds have theirs in test_cli_exit.py and test_cli_seeds.py.

Python ignores SIGXFSZ, so a write past the limit fails with EFBIG instead of killing the process.
"""

from __future__ import annotations

import hashlib
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.cli import run
from helpers.datasets import make_merge_inputs
from helpers.procs import clean_env


REPO = Path(__file__).resolve().parents[2]
LIMIT = 64 * 1024  # every output below writes a file larger than this (weights of 64x4: 64 KiB per MLP)
SHAPE = dict(n_samples=2000, width=64, depth=4)


def limited(argv: list[str], limit: int = LIMIT, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = clean_env(PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "whestbench", *argv], capture_output=True, text=True, timeout=300,
                          env=env, cwd=cwd, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))


def one_line_about_the_limit(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 1, (p.returncode, p.stderr)
    # stderr is a pipe here: the progress lines come first (plain, as in a log), then one error line
    lines = [line for line in p.stderr.strip().splitlines() if not line.startswith(("[", "… "))]
    assert len(lines) == 1 and p.stderr.strip().endswith(lines[0]), p.stderr
    assert "the file-size limit (ulimit -f) stopped the write" in lines[0] and "ulimit -f unlimited" in lines[0], p.stderr
    assert "Traceback" not in p.stderr + p.stdout and "[Errno" not in p.stderr, p.stderr
    return lines[0]


def tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` with its content's digest (what "untouched" compares)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    return make_merge_inputs(tmp_path_factory.mktemp("inputs"), **SHAPE)


@pytest.mark.parametrize("verb", ["merge", "combine-splits"])
def test_merge_and_combine_under_ulimit_f_are_one_line_and_leave_nothing(inputs, tmp_path, verb):
    before = tree(inputs["root"])
    out = tmp_path / "out"
    srcs = inputs["parts"] if verb == "merge" else inputs["splits"]
    line = one_line_about_the_limit(limited(["dataset", verb, *srcs, "--output", str(out)]))
    # the file being written, never an input (a copy's error named its source: "writing .../public/data/...")
    assert str(inputs["root"]) not in line, line
    assert sorted(os.listdir(tmp_path)) == [], os.listdir(tmp_path)  # no output, no staging directory
    assert tree(inputs["root"]) == before  # the inputs untouched


def test_verify_recompute_under_ulimit_f_is_one_line_and_caches_nothing(inputs, tmp_path, capsys):
    cache = tmp_path / "cache"
    cache.mkdir()
    before = tree(inputs["root"])
    argv = ["dataset", "verify", inputs["parts"][0], "--recompute", "1", "--recompute-dir", str(cache)]
    line = one_line_about_the_limit(limited(argv))
    assert "a re-run resumes" in line, line  # its re-bake's work directory is kept, as a bake's is
    # no cache entry a later --recompute could take up: only the re-bake's work directory (and the draw it
    # continues, so that the re-run resumes it)
    assert all(name.endswith(".whest-work") or name.startswith("pending-") for name in os.listdir(cache)), os.listdir(cache)
    assert tree(inputs["root"]) == before
    rc, out, err = run(argv, capsys)  # the re-run without the limit resumes and passes
    assert rc == 0 and "bit-identical" in out, out + err


def test_prepare_arrow_under_ulimit_f_is_one_line_and_keeps_the_prepared_copies(inputs, tmp_path, capsys):
    combined = tmp_path / "combined"
    assert run(["dataset", "combine-splits", *inputs["splits"], "--output", str(combined)], capsys)[0] == 0
    before = tree(combined)
    p = limited(["dataset", "prepare-arrow", str(combined)])
    one_line_about_the_limit(p)
    assert tree(combined) == before  # the copies it had, unchanged, and no half-built one beside them
    assert sorted(os.listdir(tmp_path)) == ["combined"]
    assert run(["dataset", "verify", str(combined)], capsys)[0] == 0


def test_doctor_json_under_ulimit_f_is_one_line_and_writes_no_file(tmp_path):
    p = limited(["doctor", "--device", "cpu", "--quick", "--json", str(tmp_path / "doctor.json")], limit=256)
    one_line_about_the_limit(p)
    assert os.listdir(tmp_path) == []  # neither the report nor its temporary file
