"""The torch backend's bake contracts (SPEC §2 philox): invariance to every scheduling knob, the same
weights/names/seeds as the CPU path, resumable, and clear refusals. Runs on torch's CPU device."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from whestbench.bake import plan as plan_mod  # noqa: E402
from whestbench.bake.pipeline import BakeConfig, bake  # noqa: E402
from whestbench.assemble.merge import merge_datasets  # noqa: E402
from whestbench.dataset_torch import create_dataset_torch  # noqa: E402

from helpers.cli import dataset  # noqa: E402
from helpers.datasets import stopped_after_first_unit  # noqa: E402
from helpers.procs import free_port as _free_port  # noqa: E402


NUMERIC = ("all_layer_means", "final_means", "avg_variance", "all_layer_stderr")
IDENTITY = ("mlp_id", "mlp_name", "mlp_seed", "weights")
# 70000 samples = one full canonical block (65536) and a ragged one.
SHAPE = dict(n_mlps=3, n_samples=70_000, width=12, depth=2)


def _torch_bake(tmp_path, name, **kw):
    args = {**SHAPE, "seed": 11, **kw}
    return create_dataset_torch(output_path=tmp_path / name, device="cpu", **args)


def test_numbers_do_not_depend_on_batch_or_chunk_size(tmp_path, read_columns, assert_bytes_equal):
    a = read_columns(_torch_bake(tmp_path, "a", mlps_per_batch=1, chunk_size=64))
    b = read_columns(_torch_bake(tmp_path, "b", mlps_per_batch=3, chunk_size=65536))
    c = read_columns(_torch_bake(tmp_path, "c", mlps_per_batch=2, chunk_size=1000))  # rounded to 512
    for col in NUMERIC + IDENTITY:
        assert_bytes_equal(a[col], b[col], col)
        assert_bytes_equal(a[col], c[col], col)


def test_numbers_do_not_depend_on_how_an_mlp_is_cut_into_units(tmp_path, monkeypatch, read_columns, assert_bytes_equal):
    whole = read_columns(_torch_bake(tmp_path, "whole"))
    monkeypatch.setattr(plan_mod, "PHILOX_UNIT_BLOCKS", 1)  # every canonical block its own unit
    cut = read_columns(_torch_bake(tmp_path, "cut"))
    for col in NUMERIC:
        assert_bytes_equal(whole[col], cut[col], col)


def test_weights_names_ids_and_seeds_equal_the_cpu_path(tmp_path, read_columns, assert_bytes_equal):
    from whestbench.bake.pipeline import create_dataset

    t = read_columns(_torch_bake(tmp_path, "t"))
    c = read_columns(create_dataset(**SHAPE, seed=11, output_path=tmp_path / "c"))
    for col in IDENTITY:
        assert_bytes_equal(t[col], c[col], col)
    # Different samplers: the means agree statistically, not bitwise.
    assert not np.array_equal(np.asarray(t["all_layer_means"]), np.asarray(c["all_layer_means"]))


def test_slices_merge_to_the_single_bake(tmp_path, read_columns, assert_bytes_equal):
    full = read_columns(_torch_bake(tmp_path, "full"))
    parts = [_torch_bake(tmp_path, f"p{k}", mlp_range=r) for k, r in enumerate([(0, 1), (1, 3)])]
    merged = read_columns(merge_datasets(parts, output_dir=tmp_path / "merged"))
    for col in NUMERIC + IDENTITY:
        assert_bytes_equal(full[col], merged[col], col)


def test_interrupted_bake_resumes_to_identical_numbers(tmp_path, read_columns, assert_bytes_equal):
    ref = read_columns(_torch_bake(tmp_path, "ref", mlps_per_batch=1))
    cfg = BakeConfig(**SHAPE, seed=11, output=tmp_path / "out", backend="torch", device="cpu", mlps_per_batch=1)
    stopped_after_first_unit(cfg)
    assert not (tmp_path / "out").exists()
    assert list((tmp_path / "out.whest-work" / "units").glob("*.unit"))
    got = read_columns(bake(cfg))
    for col in NUMERIC:
        assert_bytes_equal(ref[col], got[col], col)
    assert not (tmp_path / "out.whest-work").exists()


def test_metadata_records_what_can_change_the_numbers(tmp_path):
    md = json.loads((_torch_bake(tmp_path, "m") / "metadata.json").read_text())
    assert md["backend"] == "torch"
    assert md["sampler"]["name"] == "philox" and md["sampler"]["block_size"] == 65536
    assert md["device"] == "cpu" and md["torch_version"] == torch.__version__
    assert md["kernel"]["precision_class"].endswith("-cpu-numba2-fp32-fp64acc")  # names the arithmetic
    assert md["kernel"]["accumulation"] == "float64"
    assert "--torch" in md["bake_command"]


def _cli(capsys, *args):
    """``whest dataset bake ARGS``: its exit code and its output (``.out``, ``.err``)."""
    rc, out, err = dataset(capsys, "bake", *args)
    return rc, SimpleNamespace(out=out, err=err)


def test_max_threads_with_torch_is_a_usage_error(tmp_path, capsys):
    rc, cap = _cli(capsys, "--n-mlps", "1", "--n-samples", "10", "--width", "4", "--depth", "1",
                   "--torch", "--device", "cpu", "--max-threads", "2", "--output", str(tmp_path / "o"))
    assert rc == 2 and "--max-threads" in cap.err and "Traceback" not in cap.err
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_explicit_cuda_without_cuda_is_refused_without_fallback(tmp_path, capsys):
    rc, cap = _cli(capsys, "--n-mlps", "1", "--n-samples", "10", "--width", "4", "--depth", "1",
                   "--device", "cuda", "--output", str(tmp_path / "o"))
    assert rc == 2
    lines = [ln for ln in cap.err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "--device cuda" in lines[0] and "--device cpu" in lines[0]
    assert "Baking" not in cap.out  # refused before anything is announced
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_the_bake_line_names_the_device_auto_resolved_to(tmp_path, capsys):
    rc, cap = _cli(capsys, "--n-mlps", "1", "--n-samples", "100", "--width", "4", "--depth", "1",
                   "--torch", "--seed", "1", "--quiet", "--output", str(tmp_path / "o"))
    expected = "mps" if torch.backends.mps.is_available() else "cpu"
    assert rc == 0 and f"on torch ({expected}) " in cap.out, cap.out


def test_device_without_torch_selects_the_torch_backend_and_says_so(tmp_path, capsys):
    rc, cap = _cli(capsys, "--n-mlps", "1", "--n-samples", "100", "--width", "4", "--depth", "1",
                   "--device", "cpu", "--seed", "1", "--quiet", "--output", str(tmp_path / "o"))
    assert rc == 0 and "selects the torch backend" in cap.err
    assert json.loads((tmp_path / "o" / "metadata.json").read_text())["backend"] == "torch"


def test_torch_knobs_on_the_cpu_path_are_ignored_with_a_note(tmp_path, capsys):
    # The manual's bit-equivalence recipe passes --chunk-size to a CPU bake; whestbench 0.16 ignores it.
    rc, cap = _cli(capsys, "--n-mlps", "1", "--n-samples", "10", "--width", "4", "--depth", "1", "--seed", "1",
                   "--chunk-size", "524288", "--mlps-per-batch", "4", "--quiet", "--output", str(tmp_path / "o"))
    assert rc == 0, cap.err
    note = [line for line in cap.err.splitlines() if line.startswith("note:")]
    assert len(note) == 1 and "--chunk-size" in note[0] and "bit-identity" in note[0]
    assert json.loads((tmp_path / "o" / "metadata.json").read_text())["backend"] == "flopscope"


@pytest.mark.distributed
@pytest.mark.slow
def test_one_mlp_shared_by_two_ranks_equals_one_process(tmp_path, read_columns, assert_bytes_equal):
    # 2**24 + 1000 samples = 256 + 1 canonical blocks = two units of one MLP, one per rank.
    args = ["dataset", "bake", "--n-mlps", "1", "--n-samples", str(2**24 + 1000), "--width", "4", "--depth", "1",
            "--seed", "3", "--device", "cpu", "--quiet"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    single = tmp_path / "single"
    subprocess.run([sys.executable, "-m", "whestbench", *args, "--output", str(single)], check=True, env=env, timeout=300)
    dist = tmp_path / "dist"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(_free_port())]
    out = subprocess.run([*torchrun, "-m", "whestbench", *args, "--output", str(dist)], env=env, timeout=300,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    a, b = read_columns(single), read_columns(dist)
    for col in NUMERIC + IDENTITY:
        assert_bytes_equal(a[col], b[col], col)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_the_integer_kernel_without_cuda_is_refused_and_the_withdrawn_fused_kernel_names_it(tmp_path, capsys):
    pytest.importorskip("triton")
    tiny = ("--n-mlps", "1", "--n-samples", "10", "--width", "4", "--depth", "1", "--device", "cpu")
    rc, cap = _cli(capsys, *tiny, "--gpu-kernel", "ozaki", "--output", str(tmp_path / "o"))
    assert rc == 2 and "--gpu-kernel ozaki cannot run here: the integer kernel runs on CUDA devices" in cap.err
    assert "--gpu-kernel torch" in cap.err
    rc, cap = _cli(capsys, *tiny, "--gpu-kernel", "fused", "--output", str(tmp_path / "o"))
    assert rc == 2 and "withdrawn" in cap.err and "use --gpu-kernel ozaki." in cap.err
    assert not (tmp_path / "o").exists()
