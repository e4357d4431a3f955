"""The GPU benchmark's CPU parts: its dry run and its report (no GPU, torch or triton needed)."""

from __future__ import annotations

import pytest

from benchmarks import bench_gpu


def test_gpu_benchmark_dry_run_prints_every_section(capsys):
    assert bench_gpu.main(["--dry-run", "--shape", "256x8:2:2**20", "--precision", "4xfp16"]) == 0
    out = capsys.readouterr().out
    for part in ("--torch --device cuda --compile", "== 256x8: 2 MLPs x 1048576", "precision gate", "projected"):
        assert part in out


def test_gpu_benchmark_reports_rates_ceilings_ratios_and_projections():
    shape = bench_gpu.shape_arg("256x8:100:1e9")
    fused = bench_gpu.finish(bench_gpu.Timing("fused", "4xfp16", [2.0 * 3600]), shape, bench_gpu.H100_PEAKS)
    ref = bench_gpu.finish(bench_gpu.Timing("reference", "fp32", [8.0 * 3600]), shape, bench_gpu.H100_PEAKS)
    assert fused.tflops == pytest.approx(shape.flops / 7200 / 1e12)
    assert fused.ceiling_tflops == pytest.approx(989 / 4)
    gate = [bench_gpu.GateLine("256x8", "fused", "4xfp16", 1e-8, 3e-10, True)]
    out = bench_gpu.format_report("test", [bench_gpu.ShapeReport(shape, [fused, ref])], gate, bench_gpu.H100_PEAKS)
    line = next(li for li in out.splitlines() if li.startswith("fused"))
    assert "4.00" in line  # 4x the reference
    assert "PASS" in out
    # 100 MLPs x 1e9 took 2 h on one GPU, so 1000 MLPs on 8 GPUs take 2.5 h.
    proj = next(li for li in out.splitlines() if li.split()[:2] == ["256x8", "fused"] and "max|d|" not in li)
    assert proj.split()[-4:] == ["2.00", "0.25", "20.00", "2.50"]


def test_every_call_into_our_gpu_modules_names_parameters_that_exist():
    """The GPU-only sections cannot run here; a keyword the engine no longer takes (``method=``
    became ``engine=``) crashed them on the first real GPU. Check every call's keywords statically."""
    import ast
    import importlib
    import inspect
    from pathlib import Path

    pytest.importorskip("torch")
    pytest.importorskip("triton")
    aliases = {"pt": bench_gpu._reference_sums(),  # the plain torch sums (tests/philox_reference.py)
               "ptt": "whestbench.compute.philox.triton_kernel", "gate": "whestbench.compute.precision",
               "ce": "whestbench.compute.philox.cuda_engine"}
    tree = ast.parse(Path(bench_gpu.__file__).read_text())
    checked = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
            module = aliases.get(node.func.value.id)
            if module is None:
                continue
            module = importlib.import_module(module) if isinstance(module, str) else module
            params = inspect.signature(getattr(module, node.func.attr)).parameters
            takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
            for kw in node.keywords:
                assert kw.arg is None or takes_any or kw.arg in params, f"line {node.lineno}: {node.func.attr}({kw.arg}=...)"
            checked += 1
    assert checked >= 5
