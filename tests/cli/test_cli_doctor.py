"""`whest doctor` (issue 20): versions, device, the device checks of every bake path at 256×8 and
1024×16, a throughput probe per path; exit 0 when every check passes, 1 otherwise; the same facts
in --json."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from whestbench.compute.philox import numba_kernels as philox_numba  # noqa: E402
from whestbench.bake import doctor as doctor_mod  # noqa: E402

from helpers.cli import run


@pytest.mark.slow
def test_doctor_on_the_cpu_passes_every_check_and_reports_throughput(tmp_path, capsys):
    report = tmp_path / "doctor.json"
    rc, out, err = run(["doctor", "--device", "cpu", "--quick", "--json", str(report)], capsys)
    assert rc == 0, err
    doc = json.loads(report.read_text())
    assert {"checks", "throughput", "versions", "device"} <= set(doc)
    torch_checks = [c for c in doc["checks"] if c["path"] == "torch cpu (numba)"]
    assert sorted({c["shape"] for c in doc["checks"]}) == ["1024x16", "256x8"]
    assert [c["name"] for c in torch_checks] == ["philox-words", "block-sums", "row-invariance"] * 2
    assert all(c["passed"] for c in doc["checks"]) and doc["passed"] is True
    for c in doc["checks"]:
        assert {"name", "passed", "figure", "limit"} <= set(c)
    assert [t["path"] for t in doc["throughput"]] == ["cpu (pcg64)", "torch cpu (numba)"]
    for t in doc["throughput"]:
        assert t["shape"] == "256x8" and t["gflops"] > 0 and 0 < t["fraction_of_peak"]
        assert t["projected_s"] == pytest.approx(100 * 10**9 * 2 * 256 * 256 * 8 / (t["gflops"] * 1e9), rel=1e-6)
    assert doc["versions"]["torch"] == torch.__version__ and doc["device"]["type"] == "cpu"
    assert out.splitlines()[-2] == f"all {len(doc['checks'])} checks passed"


def _small(monkeypatch):
    monkeypatch.setattr(doctor_mod, "SHAPES", ((16, 2),))
    monkeypatch.setattr(doctor_mod, "PROBE_SHAPE", (16, 2))


def test_doctor_exits_1_naming_the_failed_check(tmp_path, capsys, monkeypatch):
    _small(monkeypatch)
    real = philox_numba.words_into

    def flipped(key, n0, out):
        real(key, n0, out)
        out[0, 0] ^= np.uint32(1)

    monkeypatch.setattr(philox_numba, "words_into", flipped)
    rc, out, err = run(["doctor", "--device", "cpu", "--quick"], capsys)
    assert rc == 1
    assert "FAILED torch cpu (numba)" in out and "philox-words" in out
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: 1 device check(s) failed: philox-words (torch cpu (numba), 16x2)")


def test_doctor_refuses_a_missing_device_and_a_json_path_in_no_directory(tmp_path, capsys):
    if not torch.cuda.is_available():
        rc, _, err = run(["doctor", "--device", "cuda"], capsys)
        assert rc == 2 and "--device cuda" in err
    rc, _, err = run(["doctor", "--device", "cpu", "--json", str(tmp_path / "no" / "such" / "dir.json")], capsys)
    assert rc == 2 and "does not exist" in err


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_doctor_on_cuda_checks_torch_and_every_fused_precision(tmp_path, capsys):
    report = tmp_path / "doctor.json"
    rc, _, err = run(["doctor", "--device", "cuda", "--quick", "--json", str(report)], capsys)
    doc = json.loads(report.read_text())
    paths = {c["path"] for c in doc["checks"]}
    assert "torch cuda (cuda)" in paths  # the plain CUDA path: compute/philox/cuda_engine.py
    assert rc == 0, [c for c in doc["checks"] if not c["passed"]]


def test_throughput_above_the_reference_is_said_so_and_no_fraction_exceeds_1(tmp_path, capsys, monkeypatch):
    """Issue 28: doctor printed "1.10 of peak"; the 'peak' was one numpy sgemm measured on a busy machine."""
    _small(monkeypatch)
    monkeypatch.setattr(doctor_mod, "sgemm_peak", lambda device, seconds: 1e-3)  # every probe beats it
    report = tmp_path / "doctor.json"
    rc, out, err = run(["doctor", "--device", "cpu", "--quick", "--json", str(report)], capsys)
    assert rc == 0, err
    doc = json.loads(report.read_text())
    assert doc["peak"]["op"] == "sgemm" and doc["peak"]["n"] == 2048
    for t in doc["throughput"]:
        assert t["fraction_of_peak"] == 1.0 and t["ratio_to_reference"] > 1 and t["peak_exceeded"] is True
    assert "of peak" not in out and "above the reference" in out and "sgemm 2048²" in out


@pytest.mark.parametrize("kind", ["fifo", "directory", "symlink-to-fifo", "empty", "dangling-symlink"])
def test_json_target_that_is_not_a_regular_file_is_refused_before_work(tmp_path, capsys, monkeypatch, kind):
    """`--json /dev/full` run as root replaced the device node with a regular file, and `--json ''` failed
    with errno 16 after 50 s of work: every such target is refused (exit 2, one line) before diagnose runs."""
    import os

    def no_work(*a, **k):
        raise AssertionError("diagnose ran before the --json target was checked")

    monkeypatch.setattr(doctor_mod, "diagnose", no_work)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    target = {"fifo": fifo, "directory": tmp_path, "symlink-to-fifo": tmp_path / "link", "empty": "",
              "dangling-symlink": tmp_path / "dangling"}[kind]
    if kind == "symlink-to-fifo":
        os.symlink(fifo, target)
    if kind == "dangling-symlink":
        os.symlink(tmp_path / "nowhere", target)
    rc, out, err = run(["doctor", "--device", "cpu", "--quick", "--json", str(target)], capsys)
    assert rc == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert os.path.exists(fifo) and not os.path.isfile(fifo)  # still a FIFO
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["fifo"] + (["link"] if kind == "symlink-to-fifo" else []) + (["dangling"] if kind == "dangling-symlink" else []))
