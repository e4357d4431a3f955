"""A bake killed with SIGKILL at any moment resumes, and the resumed dataset equals an uninterrupted one.

Each test runs ``python -m whestbench dataset bake`` as a subprocess and kills it for real; the
reference is the same bake run in-process without interruption, and so is a re-run that is not
killed again (the re-run after a killed writer, and after the kill inside one MLP). Kill points are drawn from a seeded
generator, measured in units saved (so they land mid-bake however fast or loaded the machine is)
plus a random delay (so they land anywhere inside a unit, or during start-up or writing).
"""

from __future__ import annotations

import random
import re
import signal
import time
from pathlib import Path

import importlib.util

import pytest

from whestbench.bake.pipeline import BakeConfig, bake

from helpers.cli import run
from helpers.procs import clean_env, finish, start_bake, units_saved, wait_for_units


# What identifies a row and what the bake computed: identical bytes, or the resume is wrong.
COMPARED = ("mlp_id", "mlp_name", "mlp_seed", "weights", "all_layer_means", "final_means", "avg_variance",
            "all_layer_stderr")
SHAPE = dict(n_mlps=12, n_samples=200_000, width=32, depth=3, seed=5)
# The CPU path. The philox/torch path joins as another entry: (id, extra CLI flags, BakeConfig fields).
BACKENDS = [
    pytest.param([], {}, id="cpu-pcg64"),
    pytest.param(
        ["--torch", "--device", "cpu", "--mlps-per-batch", "1"],
        {"backend": "torch", "device": "cpu", "mlps_per_batch": 1},
        id="torch-cpu-philox",
        marks=pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed"),
    ),
]


def _bake_args(shape: dict, extra: list[str]) -> list[str]:
    return [
        "--n-mlps", str(shape["n_mlps"]), "--n-samples", str(shape["n_samples"]),
        "--width", str(shape["width"]), "--depth", str(shape["depth"]), "--seed", str(shape["seed"]),
        "--quiet", *extra,
    ] + ([] if "--torch" in extra else ["--max-threads", "2"])  # fmt: skip


def _rerun_in_process(args: list[str], output: Path, capsys) -> tuple[int, str]:
    """The bake's CLI in this process (a re-run nothing kills): its exit code and stderr."""
    code, _, err = run(["dataset", "bake", *args, "--output", str(output)], capsys)
    return code, err


def _assert_same_rows(read_columns, assert_bytes_equal, got: Path, want: Path) -> None:
    a, b = read_columns(got), read_columns(want)
    for col in COMPARED:
        if col == "mlp_name":
            assert a[col] == b[col]
        else:
            assert_bytes_equal(a[col], b[col], col)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict[str, Path]:
    """The reference bakes, made once per backend (in-process: the same code, never interrupted)."""
    made: dict[str, Path] = {}

    def get(fields: dict) -> Path:
        key = repr(sorted(fields.items()))
        if key not in made:
            out = tmp_path_factory.mktemp("uninterrupted") / "ds"
            bake(BakeConfig(output=out, **SHAPE, **fields))
            made[key] = out
        return made[key]

    return get


@pytest.mark.parametrize("flags, fields", BACKENDS)
def test_sigkill_at_random_points_then_resume_equals_uninterrupted(
    tmp_path, flags, fields, uninterrupted, read_columns, assert_bytes_equal
):
    rng = random.Random(1234)
    output = tmp_path / "ds"
    args = _bake_args(SHAPE, flags)
    kills, recovered, runs = 0, [], 0
    while True:
        runs += 1
        assert runs <= 8, "the bake never completed"
        proc = start_bake(args, output)
        if kills < 3:
            # the first kill waits for progress (so a resume has something to recover); later ones
            # may land anywhere, start-up included
            ahead = rng.randint(1, 4) if kills == 0 else rng.randint(0, 4)
            # the first kill freezes the bake as its units appear (a fast machine would otherwise finish
            # it within the random delay, and nothing would have been killed); later ones land anywhere
            wait_for_units(proc, output, units_saved(output) + ahead, must_live=False, freeze=kills == 0)
            if kills:
                time.sleep(rng.uniform(0.0, 0.25))
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                kills += 1
        code, err = finish(proc)
        recovered += [int(k) for k in re.findall(r"resuming: (\d+) of \d+ units recovered", err)]
        if code == 0:
            break
        assert code == -signal.SIGKILL, f"run {runs} failed on its own (exit {code}): {err[-2000:]}"
    assert kills >= 1
    assert any(k > 0 for k in recovered), "no run resumed from saved units"
    _assert_same_rows(read_columns, assert_bytes_equal, output, uninterrupted(fields))
    assert not (tmp_path / "ds.whest-work").exists(), "the work directory outlived the bake"
    assert not list(tmp_path.glob(".ds.staging-*")), "a staging directory was left behind"


@pytest.mark.parametrize("flags, fields", BACKENDS)
def test_resume_clears_the_staging_directory_of_a_writer_killed_mid_write(
    tmp_path, capsys, flags, fields, uninterrupted, read_columns, assert_bytes_equal
):
    output = tmp_path / "ds"
    proc = start_bake(_bake_args(SHAPE, flags), output)
    wait_for_units(proc, output, 1, freeze=True)  # killed while frozen: the bake had not finished
    proc.send_signal(signal.SIGKILL)
    finish(proc)
    # what a SIGKILL between "start writing" and "rename into place" leaves beside the output: a
    # staging directory marked by a process that no longer runs
    import json
    import socket

    from whestbench.atomic import STAGING_MARK

    stale = tmp_path / ".ds.staging-k1ll3d"
    (stale / "data").mkdir(parents=True)
    (stale / "data" / "public-00000-of-00001.parquet").write_bytes(b"half a parquet file")
    (stale / STAGING_MARK).write_text(json.dumps({"target": "ds", "pid": proc.pid, "host": socket.gethostname()}))
    users = tmp_path / ".ds.staging-mine"  # a user's directory with a similar name, not ours
    users.mkdir()
    code, err = _rerun_in_process(_bake_args(SHAPE, flags), output, capsys)
    assert code == 0, err
    assert not stale.exists() and users.exists()
    _assert_same_rows(read_columns, assert_bytes_equal, output, uninterrupted(fields))


# --- a kill inside one long unit loses at most a checkpoint interval ------------------------------

ONE_MLP = dict(n_mlps=1, n_samples=1_200_000, width=64, depth=4, seed=3)


@pytest.mark.parametrize("flags, fields", BACKENDS)
def test_sigkill_inside_one_mlp_resumes_from_its_latest_checkpoint_and_equals_uninterrupted(
    tmp_path, capsys, flags, fields, read_columns, assert_bytes_equal
):
    import subprocess
    import sys

    output = tmp_path / "ds"
    args = [
        "--n-mlps", "1", "--n-samples", str(ONE_MLP["n_samples"]), "--width", "64", "--depth", "4", "--seed", "3",
        "--checkpoint-every", "0.05", *flags,
    ]  # fmt: skip
    cmd = [sys.executable, "-m", "whestbench", "dataset", "bake", *args, "--log-every", "0.05", "--output", str(output)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=clean_env())
    # Kill on the first line past 40 % whose checkpoint count rose since the line before: that checkpoint
    # was saved after the line before was printed, so it holds at least that line's samples. The bound
    # comes from the log, not from a rate, so it holds on a fast machine and a loaded one alike.
    floor, before, lines = None, (0, 0), []
    for line in proc.stderr:  # plain progress lines: stderr is a pipe, not a terminal
        lines.append(line)
        m = re.search(r"([\d,]+)/([\d,]+) samples.*?(\d+) checkpoints?", line)
        if m:
            done, total, count = (int(v.replace(",", "")) for v in m.groups())
            if count > before[1] and before[0] >= 0.4 * total:
                proc.send_signal(signal.SIGKILL)
                floor = before[0]
                break
            before = (done, count)
    proc.wait()
    assert floor is not None, "the bake ended before a checkpoint past 40% was seen:\n" + "".join(lines[-5:])
    code, err = _rerun_in_process(args + ["--quiet"], output, capsys)
    assert code == 0, err
    m = re.search(r"resuming unit \S+ from its checkpoint at ([\d,]+) of", err)
    assert m, err
    resumed_from = int(m.group(1).replace(",", ""))
    # the latest checkpoint, not an earlier one: at least what the log showed before it was saved
    assert floor <= resumed_from < ONE_MLP["n_samples"], (floor, resumed_from)
    want = tmp_path / "want"
    bake(BakeConfig(output=want, **ONE_MLP, **fields))
    _assert_same_rows(read_columns, assert_bytes_equal, output, want)
