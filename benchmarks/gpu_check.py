#!/usr/bin/env python
"""One short GPU check of the Triton kernels (issue 33), and its CPU emulation.

    python benchmarks/gpu_check.py --dry-run                          # the GPU plan; no GPU needed
    TRITON_INTERPRET=1 python benchmarks/gpu_check.py --emulate --json  # per kernel: offered, integer,
                                                                        # byte_equal, gate under both models
    python benchmarks/gpu_check.py --reference-path /tmp/ref          # on one H100/H200, <= 8 minutes

**--emulate** (CPU, Triton's interpreter): for every Triton kernel -- the fused kernel at each of its
precisions (``compute/philox/triton_kernel.py``; the four splits are withdrawn) and the integer kernel
(``compute/philox/ozaki.py``, 4 digits, and the 3-digit variant) -- whether the interpreter's tile sums
equal the kernel's numpy emulation byte for byte (the integer kernel at 3 shapes, 37x3, 256x8 and
1024x16 at 16 samples, x 3 batch/tile/grid settings, its block sums also identical across the settings;
the fused kernel at 37x3), and the precision gate (SPEC section 3) on identical samples against an fp64
forward pass under round-to-nearest accumulation and under the H100 tensor-core accumulator model
(``tests/precision_emulation.py``). ``--json`` prints exactly
``{"kernels": {NAME: {"offered", "integer", "byte_equal", "gate": {"nearest", "hardware"}}}}``.

**On a GPU** (the default), within ``--budget-s`` (480 s; a section that would not fit is skipped with
its reason): versions; a tensor-core rounding probe (does one fp16 MMA step round toward zero and drop
products below 2 extra bits?); the gate on the device for every kernel at 256x8 and 1024x16 (N = 2**16),
with the share of negative deviations and the mean deviation per layer; the invariance grid (MLPs per
batch {1, 2, 4, 16} x chunk {512, 2048, 8192}) through a bake unit's own runner at both shapes, for the
plain CUDA path and the integer kernel; our CLI bake (``--gpu-kernel torch`` and ``ozaki``) against
whestbench 0.16.2's ``--torch --device cuda --compile`` on the same seeds, marginal rates and effective
TFLOP/s = 2 * width**2 * depth * n_samples * n_mlps / s; projections for 100 MLPs x 1e9 on 1 and 8 GPUs.
The reference's wheels: ``../shared/tools/reference-gpu-wheels.sh`` (pip install --target DIR).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHAPES = ((256, 8), (1024, 16))
GATE_SAMPLES = 1 << 16
GRID_BATCH = (1, 2, 4, 16)
GRID_CHUNK = (512, 2048, 8192)
SPLITS = ("3xtf32", "4xtf32", "3xfp16", "4xfp16")
KERNELS = ("fused-ieee",) + tuple(f"fused-{p}" for p in SPLITS) + ("ozaki", "ozaki-3digits")
SETTINGS = ((2, 16, 4), (1, 16, 1), (2, 32, 2))  # MLPs per launch, rows per tile, programs
BAKE = {(256, 8): (4, 1 << 24), (1024, 16): (2, 1 << 21)}  # n_mlps, n_samples of the timed bakes
PROJECT = (100, 10**9)
# Estimated seconds per section on an H100 (from the plain path's and the reference's measured rates).
ESTIMATE_S = {"versions": 5, "probe": 10, "gate": 90, "grid": 90, "bakes": 240, "projections": 0}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dry-run", action="store_true", help="print the GPU plan and exit (no GPU, no triton needed)")
    p.add_argument("--emulate", action="store_true", help="the CPU emulation (Triton's interpreter) instead of the GPU")
    p.add_argument("--json", action="store_true", help="--emulate: print only the JSON verdicts")
    p.add_argument("--emulate-shapes", default="37x3,256x8,1024x16",
                   help="--emulate: shapes of the integer kernel's byte-for-byte check (WxD, comma-separated)")
    p.add_argument("--gate-shapes", default="256x8,1024x16", help="--emulate: shapes of the gate")
    p.add_argument("--gate-rows", type=int, default=1024, help="--emulate: identical samples per gate (round-to-nearest)")
    p.add_argument("--hardware-rows", type=int, default=128,
                   help="--emulate: samples per gate under the hardware model (it is slow; its deviation is a bias)")
    p.add_argument("--budget-s", type=float, default=480.0, help="GPU: total seconds; later sections are skipped")
    p.add_argument("--reference-path", type=Path, help="GPU: whestbench 0.16.2 installed with pip --target DIR")
    p.add_argument("--reference-python", default=sys.executable, help="GPU: python that runs the reference")
    p.add_argument("--workdir", type=Path, help="GPU: scratch directory for the timed bakes (default: a temp dir)")
    return p


def _shape(text: str) -> tuple[int, int]:
    w, _, d = text.lower().partition("x")
    return int(w), int(d)


# --- the plan --------------------------------------------------------------------------------------


def plan_lines(args) -> list[str]:
    out = [f"gpu_check plan (budget {args.budget_s:.0f} s; estimated per section on an H100):"]
    out.append(f"  1. versions: torch, CUDA, driver, triton, GPU name and SM count, whestbench (~{ESTIMATE_S['versions']} s)")
    out.append("  2. tensor-core rounding probe: 1 + 3 products of 2**-25 (round toward zero gives 1, nearest 1 + 2**-23);"
               f" 1 + 16 products of 2**-27 (dropped below the 2 extra bits: 1) (~{ESTIMATE_S['probe']} s)")
    shapes = ", ".join(f"{w}x{d}" for w, d in SHAPES)
    out.append(f"  3. precision gate on the device, N = {GATE_SAMPLES:,}, at {shapes}, kernels: {', '.join(KERNELS[:-1])};"
               f" max|d|, max|bias|, share of negative deviations, mean deviation per layer (~{ESTIMATE_S['gate']} s)")
    out.append(f"  4. invariance grid at {shapes}: MLPs per batch {GRID_BATCH} x chunk {GRID_CHUNK}, 16 MLPs, one block,"
               f" plain CUDA path and ozaki: every cell identical? (~{ESTIMATE_S['grid']} s)")
    ref = args.reference_path or "REFDIR"
    for (w, d), (m, n) in BAKE.items():
        out.append(f"  5. bakes {w}x{d}: {m} MLPs x {n:,} samples (and N/4, marginal): whest --gpu-kernel torch, "
                   f"whest --gpu-kernel ozaki, PYTHONPATH={ref} whestbench 0.16.2 --torch --device cuda --compile")
    out.append(f"     (~{ESTIMATE_S['bakes']} s); effective TFLOP/s = 2*width**2*depth*n_samples*n_mlps/s")
    out.append(f"  6. projections: {PROJECT[0]} MLPs x {PROJECT[1]:.0e} samples on 1 and 8 GPUs from the marginal rates")
    if args.reference_path is None:
        out.append("  note: without --reference-path the 0.16.2 bakes are skipped (../shared/tools/reference-gpu-wheels.sh)")
    return out


# --- the emulation (CPU) ---------------------------------------------------------------------------


def _emulation_modules():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    sys.path.insert(0, str(REPO / "tests"))
    import precision_emulation as emu  # tests/precision_emulation.py

    from whestbench.compute.philox import ozaki as ok
    from whestbench.compute.philox import ozaki_spec as oz
    from whestbench.compute.philox import cuda_engine  # noqa: F401  (the sampler stages, interpreted too)
    from whestbench.compute.philox import triton_kernel as ptt

    return emu, ok, oz, ptt


def _sampler_normals(key, n0: int, n1: int, width: int, device):
    """The Triton kernels' own inputs (their in-kernel Philox and Box-Muller), as the cuda engine's sampler draws them."""
    from whestbench.compute.philox import cuda_engine

    return cuda_engine.sampler_normals(key, n0, n1, width, device)


def _ozaki_config(ok, width: int, digits: int = 4, rows: int = 16):
    """Interpreter-sized blocks: several scale blocks per row at every shape (the interpreter is slow)."""
    block_n = 32 if width <= 64 else (128 if width <= 256 else 256)
    return ok.OzakiConfig(rows=rows, block_n=block_n, block_k=block_n, group_block=min(16, block_n // 4),
                          sum_block=min(block_n, 128), digits=digits)


def _spec_tiles(oz, ptt, weights, key, n_tiles, n_end, config):
    width = weights.shape[2]
    x = np.zeros((n_tiles * config.rows, width), dtype=np.float32)
    x[:n_end] = _sampler_normals(key, 0, n_end, width, "cpu")
    return oz.forward_sums(x, [oz.split_weights(w, config.digits) for w in weights], config.block_n, config.rows,
                           n_digits=config.digits)


def ozaki_byte_equal(emu, ok, oz, ptt, shapes, digits: int = 4) -> tuple[bool, list[str]]:
    """The integer kernel's tile sums == the specification's, and its block sums identical across SETTINGS."""
    from whestbench.compute.mlp import weights_for_seed
    from whestbench.compute.philox import spec as philox

    keys = [(1, 2), (0xDEADBEEF, 7)]
    notes, equal = [], True
    for width, depth in shapes:
        weights = np.stack([weights_for_seed(s, width, depth) for s in (3, 4)])
        n = 16
        blocks = []
        for per_launch, rows, programs in SETTINGS:
            cfg = _ozaki_config(ok, width, digits, rows)
            n_tiles = -(-n // rows)
            for b0 in range(0, 2, per_launch):
                got = ok.tile_sums_ozaki(weights[b0 : b0 + per_launch], keys[b0 : b0 + per_launch], 0, n_tiles, n,
                                         config=cfg, n_programs=programs).numpy()
                for i in range(got.shape[0]):
                    want = _spec_tiles(oz, ptt, weights[b0 + i], keys[b0 + i], n_tiles, n, cfg)
                    same = np.array_equal(got[i].view(np.int64), want.view(np.int64))
                    equal &= same
                    if not same:
                        notes.append(f"{width}x{depth} {per_launch}/{rows}/{programs} MLP {b0 + i}: tiles differ")
            sums = []
            for b0 in range(0, 2, per_launch):
                sums += ok.range_sums_ozaki(weights[b0 : b0 + per_launch], keys[b0 : b0 + per_launch], (0, 1), n,
                                            config=cfg, n_programs=programs)
            blocks.append(np.stack([philox.pack(s) for s in sums]))
        invariant = all(np.array_equal(b.view(np.int64), blocks[0].view(np.int64)) for b in blocks[1:])
        equal &= invariant
        notes.append(f"{width}x{depth} ({digits} digits): tiles {'equal' if equal else 'DIFFER'}, block sums "
                     f"{'identical' if invariant else 'DIFFER'} across {len(SETTINGS)} batch/tile/grid settings")
    return equal, notes


def fused_byte_equal(emu, ptt, precision: str) -> bool:
    """The fused kernel's tile sums at 37x3 == numpy's with ``emulate_matmul`` (the same parts, BLAS order)."""
    from whestbench.compute.mlp import weights_for_seed
    from whestbench.compute.philox import spec as philox

    width, depth, rows = 37, 3, 16
    cfg = ptt.KernelConfig(rows=rows, block_n=16, block_k=16, group_block=4, sum_block=16, precision=precision, num_warps=4)
    weights = weights_for_seed(3, width, depth)
    got = ptt.tile_sums_triton(weights[None], [(1, 2)], 0, 1, rows, config=cfg).numpy()[0, 0]
    x = _sampler_normals((1, 2), 0, rows, width, "cpu")
    want = np.empty_like(got)
    for layer in range(depth):
        x = np.maximum(emu.emulate_matmul(x, weights[layer], precision), np.float32(0.0))
        want[layer] = philox.pairwise_colsum(x.astype(np.float64))
        want[depth + layer] = philox.pairwise_colsum(x.astype(np.float64) ** 2)
    return bool(np.array_equal(got.view(np.int64), want.view(np.int64)))


def ozaki_same_bytes_under_hardware(emu, oz, kernel: str, shape, rows: int) -> bool:
    """The integer arithmetic's layer means with every digit GEMM through the tensor cores' float
    accumulator model == with exact integer sums, byte for byte (``rows`` samples)."""
    from whestbench.compute.mlp import weights_for_seed

    width, depth = shape
    weights = weights_for_seed(12345, width, depth)
    x = np.random.default_rng(1).standard_normal((rows, width), dtype=np.float32)
    digits = 3 if kernel == "ozaki-3digits" else 4
    exact = oz.layer_means(weights, x, min(oz.DEFAULT_SCALE_K, width), n_digits=digits)
    hard = oz.layer_means(weights, x, min(oz.DEFAULT_SCALE_K, width), n_digits=digits, block_integer=emu.hardware_block_integer)
    return bool(np.array_equal(exact.view(np.int64), hard.view(np.int64)))


def gate_figures(emu, oz, kernel: str, shape, rows: int, model: str):
    """``(max|d|, max|bias|, share negative)`` of ``kernel`` under ``model`` on ``rows`` identical samples."""
    from whestbench.compute import precision as prec
    from whestbench.compute.mlp import weights_for_seed

    width, depth = shape
    weights = weights_for_seed(12345, width, depth)
    x = np.random.default_rng(1).standard_normal((rows, width), dtype=np.float32)
    ref = emu.layer_means(weights, x, "fp64")
    if kernel.startswith("fused-"):
        means = emu.layer_means(weights, x, kernel[6:], model)
    else:
        means = oz.layer_means(weights, x, min(oz.DEFAULT_SCALE_K, width), n_digits=3 if kernel == "ozaki-3digits" else 4)
    a, b = prec.gate_figures(means, ref)
    return a, b, float(np.mean(means < ref))


def emulate(args) -> dict:
    emu, ok, oz, ptt = _emulation_modules()
    from whestbench.compute import precision as prec
    from whestbench.work import GPU_KERNELS, WITHDRAWN_GPU_KERNELS

    offered_kernels = {k for k in GPU_KERNELS if k not in WITHDRAWN_GPU_KERNELS}
    byte_shapes = [_shape(s) for s in args.emulate_shapes.split(",") if s]
    gate_shapes = [_shape(s) for s in args.gate_shapes.split(",") if s]
    result, log = {}, []
    for name in KERNELS:
        integer = name.startswith("ozaki")
        if integer:
            digits = 3 if name == "ozaki-3digits" else 4
            equal, notes = ozaki_byte_equal(emu, ok, oz, ptt, byte_shapes if digits == 4 else byte_shapes[:1], digits)
            log += [f"{name}: {n}" for n in notes]
            offered = name == "ozaki" and "ozaki" in offered_kernels
        else:
            equal = fused_byte_equal(emu, ptt, name[6:])
            offered = "fused" in offered_kernels
            log.append(f"{name}: tiles at 37x3 {'equal' if equal else 'differ from'} numpy's emulate_matmul byte for byte")
        verdict = {}
        for shape in gate_shapes:
            t0 = time.perf_counter()
            a, b, neg = gate_figures(emu, oz, name, shape, args.gate_rows, "nearest")
            near = prec.gate_passes(a, b)
            log.append(f"{name}: gate {shape[0]}x{shape[1]} nearest  {args.gate_rows:>5} rows: max|d| {a:.2e} "
                       f"max|bias| {b:.2e} negative {neg:.0%} -> {'pass' if near else 'FAIL'} ({time.perf_counter() - t0:.0f} s)")
            t0 = time.perf_counter()
            if integer:  # the hardware model on the digit GEMMs: the same bytes? then the same verdict
                rows = min(args.hardware_rows, 16)
                same = ozaki_same_bytes_under_hardware(emu, oz, name, shape, rows)
                hard = near and same
                log.append(f"{name}: gate {shape[0]}x{shape[1]} hardware {rows:>5} rows: the accumulator model gives "
                           f"{'the same bytes as exact integer sums, so the same verdict' if same else 'OTHER BYTES'}"
                           f" -> {'pass' if hard else 'FAIL'} ({time.perf_counter() - t0:.0f} s)")
            else:
                a, b, neg = gate_figures(emu, oz, name, shape, args.hardware_rows, "hardware")
                hard = prec.gate_passes(a, b)
                log.append(f"{name}: gate {shape[0]}x{shape[1]} hardware {args.hardware_rows:>5} rows: max|d| {a:.2e} "
                           f"max|bias| {b:.2e} negative {neg:.0%} -> {'pass' if hard else 'FAIL'} "
                           f"({time.perf_counter() - t0:.0f} s)")
            verdict["nearest"] = verdict.get("nearest", True) and bool(near)
            verdict["hardware"] = verdict.get("hardware", True) and bool(hard)
        result[name] = {"offered": bool(offered), "integer": integer, "byte_equal": bool(equal), "gate": verdict}
    return {"kernels": result}, log


# --- the GPU sections ------------------------------------------------------------------------------


class Budget:
    def __init__(self, seconds: float):
        self.end = time.perf_counter() + seconds

    def left(self) -> float:
        return self.end - time.perf_counter()

    def allows(self, section: str) -> bool:
        if self.left() >= ESTIMATE_S[section]:
            return True
        print(f"[{section}] skipped: {self.left():.0f} s left of the budget, the section needs ~{ESTIMATE_S[section]} s")
        return False


def section_versions():
    import torch
    import triton

    from whestbench import __version__

    dev = torch.cuda.get_device_properties(0)
    print(f"[versions] whestbench {__version__}, torch {torch.__version__}, CUDA {torch.version.cuda}, triton "
          f"{triton.__version__}, GPU {dev.name} (sm_{dev.major}{dev.minor}, {dev.multi_processor_count} SMs, "
          f"{dev.total_memory / 2**30:.0f} GiB)")


def section_probe():
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def probe(a_ptr, b_ptr, o_ptr):
        i = tl.arange(0, 16)
        a = tl.load(a_ptr + i[:, None] * 16 + i[None, :])
        b = tl.load(b_ptr + i[:, None] * 16 + i[None, :])
        acc = tl.full((16, 16), 1.0, tl.float32)
        acc = tl.dot(a, b, acc)
        tl.store(o_ptr + i[:, None] * 16 + i[None, :], acc)

    def run(products: int, value_exp: int) -> float:
        a = torch.zeros((16, 16), dtype=torch.float16, device="cuda")
        b = torch.zeros((16, 16), dtype=torch.float16, device="cuda")
        a[0, :products] = 2.0 ** (value_exp // 2)
        b[:products, 0] = 2.0 ** (value_exp - value_exp // 2)
        out = torch.empty((16, 16), dtype=torch.float32, device="cuda")
        probe[(1,)](a, b, out)
        return float(out[0, 0])

    r1 = run(3, -25)
    r2 = run(16, -27)
    print(f"[probe] 1 + 3*2**-25 -> 1 + {(r1 - 1) / 2**-23:.2f} ulp ({'toward zero' if r1 == 1.0 else 'nearest'}); "
          f"1 + 16*2**-27 -> 1 + {(r2 - 1) / 2**-23:.2f} ulp "
          f"({'products below the extra bits dropped' if r2 == 1.0 else 'kept'}); the H100 model predicts 0 and 0")


def _device_gate(kernel: str, width: int, depth: int):
    import torch

    from whestbench.compute import precision as prec
    from whestbench.compute.philox import ozaki as ok
    from whestbench.compute.philox import spec as philox
    from whestbench.compute.philox import triton_kernel as ptt
    from whestbench.compute.seeds import spawn_streams

    weight_ss, sample_ss, _ = spawn_streams(2026)
    from whestbench.compute.mlp import sample_weights

    weights = sample_weights(weight_ss, width, depth)
    key = philox.philox_key(sample_ss)
    if kernel.startswith("ozaki"):
        cfg = ok.default_config(width)
        if kernel == "ozaki-3digits":
            cfg = ok.OzakiConfig(**{**cfg.__dict__, "digits": 3})
        sums = ok.range_sums_ozaki(weights[None], [key], (0, 1), GATE_SAMPLES, config=cfg, device="cuda")[0]
    else:
        cfg = ptt.config_for(width, kernel[6:])
        sums = ptt.range_sums_triton(weights[None], [key], (0, 1), GATE_SAMPLES, config=cfg, device="cuda")[0]
    means = sums.sums / GATE_SAMPLES
    w64 = torch.as_tensor(weights, device="cuda").double()
    acc = torch.zeros((depth, width), dtype=torch.float64, device="cuda")
    for c0 in range(0, GATE_SAMPLES, 8192):
        h = torch.as_tensor(_sampler_normals(key, c0, c0 + 8192, width, "cuda"), device="cuda").double()
        for layer in range(depth):
            h = torch.clamp_min(h @ w64[layer], 0.0)
            acc[layer] += h.sum(0)
    ref = (acc / GATE_SAMPLES).cpu().numpy()
    a, b = prec.gate_figures(means, ref)
    delta = means - ref
    return a, b, float(np.mean(delta < 0)), delta.mean(axis=1), prec.gate_passes(a, b)


def section_gate():
    for width, depth in SHAPES:
        for kernel in KERNELS:
            try:
                a, b, neg, per_layer, passed = _device_gate(kernel, width, depth)
            except Exception as exc:  # a kernel that fails to compile or run is a finding, not the end
                print(f"[gate] {width}x{depth} {kernel}: could not run: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            layers = " ".join(f"{v:+.1e}" for v in per_layer)
            print(f"[gate] {width}x{depth} {kernel:<14} max|d| {a:.2e} max|bias| {b:.2e} negative {neg:.0%} "
                  f"{'pass' if passed else 'FAIL'}; mean d per layer: {layers}")


def section_grid():
    """Each cell is planned as a bake with ``--mlps-per-batch B --chunk-size C`` plans it (the knobs reach
    whatever the plan lets them reach), then 16 MLPs' sums over one block through a unit's own runner."""
    from whestbench.bake.plan import BakeConfig, plan_bake

    for width, depth in SHAPES:
        for kernel in ("torch", "ozaki"):
            cells = {}
            for batch in GRID_BATCH:
                for chunk in GRID_CHUNK:
                    plan = plan_bake(BakeConfig(n_mlps=16, n_samples=1 << 16, width=width, depth=depth, output=None,
                                                seed=1, backend="torch", device="cuda", mlps_per_batch=batch,
                                                chunk_size=chunk, gpu_kernel=kernel, audit_segments=0), probe=False)
                    cells[(batch, chunk)] = _grid_cell(plan.spec, plan.compute, plan.spec.mlps_per_unit)
            first = next(iter(cells.values()))
            differ = [k for k, v in cells.items() if not np.array_equal(v.view(np.int64), first.view(np.int64))]
            print(f"[grid] {width}x{depth} {kernel}: {len(cells) - len(differ)} of {len(cells)} cells identical"
                  + (f"; differ (batch, chunk): {differ}" if differ else ""))


def _grid_cell(spec, compute, batch: int):
    """Packed sums of 16 MLPs over one block, in batches of ``batch`` MLPs through a bake unit's runner."""
    import dataclasses

    from whestbench.compute.mlp import weights_for_seed
    from whestbench.compute.philox import spec as philox
    from whestbench.work import steps

    weights = np.stack([weights_for_seed(s, spec.width, spec.depth) for s in range(16)])
    keys = np.array([[s, s + 1] for s in range(16)], dtype=np.uint32)
    out = []
    for b0 in range(0, 16, batch):
        sp = dataclasses.replace(spec, mlp_range=(0, batch), mlps_per_unit=batch)
        packed, counts = steps._block_runner(sp, compute, weights[b0 : b0 + batch], keys[b0 : b0 + batch], None)(0, 1)
        tree = philox.PairwiseStack()
        for j, c in enumerate(counts):
            tree.push(np.asarray(packed)[:, j], philox.level_of(int(c)))
        out.append(np.asarray(tree.value()))
    return np.concatenate(out)


def section_bakes(args, budget: Budget) -> dict:
    import tempfile

    from benchmarks import bench_gpu as bg

    rates = {}
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="gpu-check-"))
    for (width, depth), (n_mlps, n_samples) in BAKE.items():
        shape = bg.Shape(width, depth, n_mlps, n_samples)
        seeds = list(range(bg.SEED_ROOT, bg.SEED_ROOT + n_mlps))
        seeds_file = bg._seeds_file(workdir, seeds)
        runs = [(f"ours --gpu-kernel {k}", {k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
                 lambda n, out, k=k: bg.ours_cli_command(shape, seeds_file, n, out) + ["--gpu-kernel", k])
                for k in ("torch", "ozaki")]
        if args.reference_path is not None:
            runs.append(("whestbench 0.16.2 --compile", dict(os.environ, PYTHONPATH=str(args.reference_path)),
                         lambda n, out: bg.reference_command(args, shape, seeds_file, n, out)))
        for label, env, cmd in runs:
            if budget.left() < 30:
                print(f"[bakes] {shape.label} {label}: skipped, {budget.left():.0f} s left of the budget")
                continue
            try:
                marginal, _ = bg._bake_marginal(cmd, shape, env, workdir, 1, label.split()[0])
            except Exception as exc:
                print(f"[bakes] {shape.label} {label}: failed: {str(exc)[:300]}")
                continue
            tflops = 2 * width**2 * depth * n_samples * n_mlps / marginal[0] / 1e12
            rates[(width, depth, label)] = tflops
            print(f"[bakes] {shape.label} {label}: marginal {marginal[0]:.2f} s for {n_mlps} x {n_samples:,}: {tflops:.1f} TFLOP/s")
    return rates


def section_projections(rates: dict):
    m, n = PROJECT
    for (width, depth, label), tflops in rates.items():
        hours = 2 * width**2 * depth * n * m / (tflops * 1e12) / 3600
        print(f"[projection] {width}x{depth} {label}: {m} MLPs x {n:.0e}: {hours:.2f} h on 1 GPU, {hours / 8:.2f} h on 8")


def run_gpu(args) -> int:
    import torch

    if not torch.cuda.is_available():
        print("error: no CUDA device: run on a GPU, or use --dry-run / --emulate.", file=sys.stderr)
        return 1
    budget = Budget(args.budget_s)
    for name, fn in (("versions", section_versions), ("probe", section_probe), ("gate", section_gate),
                     ("grid", section_grid)):
        if budget.allows(name):
            t0 = time.perf_counter()
            fn()
            print(f"[{name}] {time.perf_counter() - t0:.0f} s")
    rates = section_bakes(args, budget) if budget.allows("bakes") else {}
    section_projections(rates)
    return 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.dry_run:
        print("\n".join(plan_lines(args)))
        return 0
    if args.emulate:
        verdicts, log = emulate(args)
        if not args.json:
            print("\n".join(log))
        print(json.dumps(verdicts, indent=None if args.json else 2))
        return 0
    if args.json:
        print("error: --json goes with --emulate.", file=sys.stderr)
        return 2
    return run_gpu(args)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
