"""A torch bake checks its device before any work (issue 20): a failure exits 1 with one line naming
the check, its figures and a JSON report beside --output, and leaves nothing at --output; the result
is recorded in metadata.json and shown by inspect.

Each fault-injection test also runs the same faulty bake with its check removed (``run_checks``
without it) and shows that bake succeeding: the refusal comes from that check and nothing else.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from whestbench.compute.philox import numba_kernels as philox_numba  # noqa: E402
from whestbench.compute.philox import torch_engine as philox_torch
from whestbench.compute.precision import GATE_MAX_ABS  # noqa: E402
from whestbench.work import device_check as dc  # noqa: E402
from whestbench.work.workdir import work_dir_for  # noqa: E402

from helpers.cli import run
from helpers.device_faults import row_count_dependent_bmm  # noqa: E402


SHAPE = ["--n-mlps", "2", "--n-samples", "5000", "--width", "16", "--depth", "2", "--seed", "1", "--quiet"]


def bake(tmp_path: Path, capsys, *extra: str, name: str = "out"):
    out = tmp_path / name
    rc, stdout, err = run(["dataset", "bake", "--torch", "--device", "cpu", *SHAPE, *extra, "--output", str(out)], capsys)
    return rc, stdout, err, out


def _metadata(out: Path) -> dict:
    return json.loads((out / "metadata.json").read_text())


def _remove_check(monkeypatch, name: str) -> None:
    """The build with check ``name`` removed."""
    real = dc.run_checks
    monkeypatch.setattr(dc, "run_checks", lambda spec, compute: tuple(c for c in real(spec, compute) if c.name != name))


def assert_refused(rc, err, out: Path, check: str, *, figure: str) -> dict:
    assert rc == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: device check failed ({check})"), err
    assert figure in lines[0] and "Traceback" not in err
    report = Path(str(out) + ".device-check.json")
    assert f"report: {report}" in lines[0]
    assert not out.exists() and not work_dir_for(out).exists()
    doc = json.loads(report.read_text())
    assert doc["device_check"]["passed"] is False
    assert [c["name"] for c in doc["device_check"]["checks"] if not c["passed"]] == [check]
    return doc


def test_a_torch_bake_records_three_passed_checks_and_inspect_shows_them(tmp_path, capsys):
    rc, _, err, out = bake(tmp_path, capsys)
    assert rc == 0, err
    record = _metadata(out)["device_check"]
    assert record["passed"] is True and record["skipped"] is False
    assert [c["name"] for c in record["checks"] if c["passed"]] == ["philox-words", "block-sums", "row-invariance"]
    assert record["device"]["type"] == "cpu" and record["versions"]["torch"] == torch.__version__
    assert record["seconds"] > 0
    assert not Path(str(out) + ".device-check.json").exists()
    rc, stdout, _ = run(["dataset", "inspect", str(out)], capsys)
    assert rc == 0
    [line] = [ln for ln in stdout.splitlines() if "device check" in ln]
    assert "passed" in line and "row-invariance ok" in line


def test_skip_device_check_skips_and_is_recorded(tmp_path, capsys):
    rc, _, err, out = bake(tmp_path, capsys, "--skip-device-check")
    assert rc == 0, err
    assert "device check skipped" in err
    record = _metadata(out)["device_check"]
    assert record["skipped"] is True and record["checks"] == []


@pytest.mark.parametrize("case", ["directory", "fifo", "name-too-long"])
def test_the_device_check_reports_path_is_checked_before_any_work(tmp_path, capsys, monkeypatch, count_work, case):
    """The report is written only when the check fails, but where it would go is checked at plan time
    like every output file: it was checked only when written ("not written (...)"), after the check."""
    import os

    checked = []
    monkeypatch.setattr(dc, "check_device", lambda *a, **k: checked.append(1))
    name = "o" * 225 if case == "name-too-long" else "out"  # 225 bytes: fine for --output, too long for its report
    report = tmp_path / f"{name}.device-check.json"
    if case == "directory":
        report.mkdir()
    elif case == "fifo":
        os.mkfifo(report)
    rc, stdout, err, out = bake(tmp_path, capsys, name=name)
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "the device check's report" in lines[0] and "--output" in lines[0], err
    assert "Traceback" not in err
    assert checked == [] and count_work == {"units": 0, "seeds": 0}  # before the check and any work
    assert not out.exists() and not work_dir_for(out).exists()
    if case != "name-too-long":  # a bake that skips the check writes no report: nothing to refuse
        rc, stdout, err, out = bake(tmp_path, capsys, "--skip-device-check", name=name)
        assert rc == 0, err


def test_the_cpu_path_refuses_the_device_check_flags(tmp_path, capsys):
    rc, _, err = run(["dataset", "bake", *SHAPE, "--skip-device-check", "--output", str(tmp_path / "o")], capsys)
    assert rc == 2 and "torch backend only" in err


def test_one_flipped_philox_word_stops_the_bake(tmp_path, capsys, monkeypatch):
    real = philox_numba.words_into

    def flipped(key, n0, out):
        real(key, n0, out)
        if tuple(key) == (0xA4093822, 0x299F31D0) and n0 < 2**32 <= n0 + 70 < n0 + len(out):  # sample 2**32 + 6
            out[70, 1] ^= np.uint32(1 << 9)

    monkeypatch.setattr(philox_numba, "words_into", flipped)
    rc, _, err, out = bake(tmp_path, capsys)
    assert_refused(rc, err, out, "philox-words", figure="1 of")
    _remove_check(monkeypatch, "philox-words")
    assert bake(tmp_path, capsys, name="unchecked")[0] == 0


def test_block_sums_off_by_ten_times_the_gate_stop_the_bake(tmp_path, capsys, monkeypatch):
    real = philox_torch.block_batches_torch

    def off(*args, **kwargs):
        raw, counts = real(*args, **kwargs)  # (B, batches, 2·depth+1, w)
        depth = (raw.shape[2] - 1) // 2
        raw = raw.copy()
        raw[:, :, :depth] += 10 * GATE_MAX_ABS * counts[None, :, None, None]  # every mean 1e-5 high
        return raw, counts

    monkeypatch.setattr(philox_torch, "block_batches_torch", off)
    rc, _, err, out = bake(tmp_path, capsys)
    doc = assert_refused(rc, err, out, "block-sums", figure="max |Δ mean| 1e-05 (limit 1e-06")
    assert doc["device_check"]["checks"][1]["figure"] == pytest.approx(10 * GATE_MAX_ABS, rel=1e-3)
    _remove_check(monkeypatch, "block-sums")
    assert bake(tmp_path, capsys, name="unchecked")[0] == 0


def test_a_matmul_whose_rows_depend_on_the_row_count_stops_the_bake(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch, "bmm", row_count_dependent_bmm(512))  # the bake's chunks: 1024 rows
    rc, _, err, out = bake(tmp_path, capsys)
    assert_refused(rc, err, out, "row-invariance", figure="differ (limit 0")
    assert "--accept-non-invariant" in err
    rc, _, err, accepted = bake(tmp_path, capsys, "--accept-non-invariant", name="accepted")
    assert rc == 0 and "accepted (--accept-non-invariant)" in err
    record = _metadata(accepted)["device_check"]
    assert record["passed"] is False and record["accepted"] == ["row-invariance"]
    _remove_check(monkeypatch, "row-invariance")
    assert bake(tmp_path, capsys, name="unchecked")[0] == 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_bake_records_three_passed_checks(tmp_path, capsys):
    out = tmp_path / "gpu"
    rc, _, err = run(["dataset", "bake", "--device", "cuda", *SHAPE, "--output", str(out)], capsys)
    assert rc == 0, err
    record = _metadata(out)["device_check"]
    assert record["passed"] and record["device"]["type"] == "cuda" and len(record["checks"]) == 3
