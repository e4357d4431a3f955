#!/usr/bin/env python
"""GPU bake benchmark: the fused Triton kernel vs our plain torch CUDA path vs whestbench 0.16.2.

SPEC section 6 asks, on an H100/H200, for >= 150 TFLOP/s effective at width 256 depth 8 and at
1024 x 16 with the precision gate passing, and >= 3x whestbench 0.16.2's ``--torch --compile`` bake
on the same GPU in the same session. For each shape this script times

- **fused**: ``philox_triton.range_sums_triton`` over all of each MLP's samples, per precision;
- **torch**: our plain CUDA path (``--gpu-kernel torch``), ``compute/philox/cuda_engine.CudaEngine`` as a bake's units call it;
- **reference**: whestbench 0.16.2's CLI, ``dataset bake --torch --device cuda --compile``, run as a
  separate process from its own ``--target`` directory (``tools/reference-gpu-wheels.sh`` fetches
  the wheels; this machine needs no network). Its whole-process time includes start-up and
  ``torch.compile``, so it is run at N/4 and at N samples and the *marginal* rate
  ``(3N/4) / (t(N) - t(N/4))`` is what is compared; the raw times are reported too.

and prints effective TFLOP/s (``2·w²·d·N·n_mlps / s``), the fraction of the ceiling of each
arithmetic (H100: fp32 67, 3xTF32 165, 3xFP16 330 TFLOP/s; k-part splits = peak / k), the ratio to the
reference, the precision gate measured ON the GPU (SPEC section 3: the kernel's means vs an fp64
forward pass on the kernel's own inputs, at 256x8 and 1024x16, N = 2**16), and projected wall times
for 100 and 1000 MLPs x 10**9 samples on 1 and 8 GPUs.

    # on the GPU machine (no network): install the reference into its own directory first
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ref .whl/*.whl
    python benchmarks/bench_gpu.py --reference-path /tmp/ref --json bench-gpu.json
    python benchmarks/bench_gpu.py --skip-reference --sweep          # tune the kernel's blocks
    # anywhere (no GPU needed)
    python benchmarks/bench_gpu.py --dry-run                          # the plan and the report layout
    python benchmarks/bench_gpu.py --ptxas                            # compile for sm_90: registers, spills
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

try:
    from .shapes import Shape, count, shape_arg
except ImportError:  # run as a script, ``python benchmarks/bench_gpu.py``: its folder is on sys.path
    from shapes import Shape, count, shape_arg

REF_CLI = "import sys; from whestbench.cli import main; sys.exit(main())"
SPEC_SHAPES = ((256, 8), (1024, 16))  # where SPEC section 3 gates and section 6 sets targets
TARGET_TFLOPS = 150.0
TARGET_RATIO = 3.0
# H100 SXM dense peaks (TFLOP/s); an H200 has the same compute. A k-part split's ceiling is peak / k.
H100_PEAKS = {"fp32": 67.0, "tf32": 495.0, "fp16": 989.0}
SPLIT_PARTS = {"3xtf32": ("tf32", 3), "4xtf32": ("tf32", 4), "3xfp16": ("fp16", 3), "4xfp16": ("fp16", 4)}
ALL_PRECISIONS = ("ieee", "3xtf32", "4xtf32", "3xfp16", "4xfp16")
SEED_ROOT = 20260101


def ceiling_tflops(precision: str, peaks: dict) -> float:
    """The arithmetic's ceiling: fp32 CUDA cores for ``ieee`` and the torch path, peak / parts for a split."""
    if precision in SPLIT_PARTS:
        fmt, parts = SPLIT_PARTS[precision]
        return peaks[fmt] / parts
    return peaks["fp32"]


@dataclass
class Timing:
    path: str  # fused | torch | reference | ours-cli
    precision: str
    seconds: list[float] = field(default_factory=list)
    median_s: float | None = None
    tflops: float | None = None
    ceiling_tflops: float | None = None
    note: str = ""


@dataclass
class ShapeReport:
    shape: Shape
    timings: list[Timing] = field(default_factory=list)
    reference_raw_s: dict = field(default_factory=dict)  # n_samples -> whole-process seconds


@dataclass
class GateLine:
    shape: str
    path: str
    precision: str
    max_abs: float | None
    max_bias: float | None
    passes: bool | None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", type=shape_arg, action="append", help="WxD:N_MLPS:N_SAMPLES (repeatable); default 256x8:8:2**22 and 1024x16:4:2**20")
    p.add_argument("--precision", action="append", choices=ALL_PRECISIONS, help="fused kernel precisions to time (repeatable; default all)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--reference-path", type=Path, help="directory holding whestbench 0.16.2 (pip --target); put on PYTHONPATH of its runs")
    p.add_argument("--reference-python", default=sys.executable, help="python that runs the reference (default: this one)")
    p.add_argument("--skip-reference", action="store_true")
    p.add_argument("--skip-torch", action="store_true", help="do not time our plain torch path")
    p.add_argument("--ours-cli", action="store_true", help="also time our whole CLI bake (--torch --device cuda), marginally like the reference")
    p.add_argument("--gate-samples", type=count, default=1 << 16, help="samples for the on-GPU precision gate (>= 2**16)")
    p.add_argument("--skip-gate", action="store_true")
    p.add_argument("--sweep", action="store_true", help="time a grid of kernel configurations per shape and precision; report the best")
    p.add_argument("--n-programs", type=int, default=None, help="persistent grid size of the fused kernel (default: one per SM)")
    p.add_argument("--peak", action="append", default=[], metavar="FMT=TFLOPS", help="override a peak, e.g. fp16=989 (fp32, tf32, fp16)")
    p.add_argument("--workdir", type=Path, help="scratch directory for reference outputs (default: a temp dir)")
    p.add_argument("--json", type=Path, help="write every number to this file")
    p.add_argument("--dry-run", action="store_true", help="parse, plan and print the report layout; touch no GPU")
    p.add_argument("--ptxas", action="store_true", help="compile the fused kernel for sm_90 (no GPU needed) and print registers, spills, shared memory")
    return p


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    args.shape = args.shape or [shape_arg("256x8:8:2**22"), shape_arg("1024x16:4:2**20")]
    args.precision = args.precision or list(ALL_PRECISIONS)
    args.peaks = dict(H100_PEAKS)
    for item in args.peak:
        fmt, _, value = item.partition("=")
        if fmt not in H100_PEAKS:
            raise SystemExit(f"--peak {item}: the format must be one of {sorted(H100_PEAKS)}.")
        args.peaks[fmt] = float(value)
    if args.gate_samples < (1 << 16):
        raise SystemExit(f"--gate-samples {args.gate_samples}: the gate needs N >= 2**16 (SPEC section 3).")
    if not (args.skip_reference or args.dry_run or args.ptxas) and args.reference_path is None:
        raise SystemExit(
            "--reference-path DIR is needed to run whestbench 0.16.2 (install its wheels with pip --target DIR; "
            "see tools/reference-gpu-wheels.sh), or pass --skip-reference."
        )
    return args


# --- workloads ------------------------------------------------------------------------------------


def mlp_batch(shape: Shape):
    """Seeds, (B, depth, w, w) weights and (B, 2) Philox keys of the benchmark's MLPs (as a bake derives them)."""
    import numpy as np

    from whestbench.compute.philox import spec as philox
    from whestbench.compute.mlp import weights_for_seed
    from whestbench.compute.seeds import derived_seeds, spawn_streams

    seeds = derived_seeds(SEED_ROOT, shape.n_mlps)
    weights = np.stack([weights_for_seed(s, shape.width, shape.depth) for s in seeds])
    keys = np.array([philox.philox_key(spawn_streams(s)[1]) for s in seeds], dtype=np.uint32)
    return seeds, weights, keys


def _cuda_time(fn, repeats: int) -> list[float]:
    import torch

    out = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return out


def time_fused(shape: Shape, weights, keys, precision: str, args, config=None) -> Timing:
    import torch

    from whestbench.compute.philox import spec as philox
    from whestbench.compute.philox import triton_kernel as ptt

    config = config or ptt.config_for(shape.width, precision)
    w_dev = torch.as_tensor(weights, device="cuda")
    nb = philox.block_count(shape.n_samples)

    def run(n_blocks=nb):
        ptt.range_sums_triton(w_dev, keys, (0, n_blocks), shape.n_samples, config=config, n_programs=args.n_programs)

    run(1)  # compile and warm up
    t = Timing("fused", precision, _cuda_time(run, args.repeats))
    t.note = json.dumps(dataclasses.asdict(config))
    return t


def _reference_sums():
    """``tests/philox_reference.py``: the plain torch sums the tests compare with (not in src)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    import philox_reference

    return philox_reference


def time_torch(shape: Shape, weights, keys, args) -> Timing:
    """The plain CUDA path as a bake's units run it (``--gpu-kernel torch``: the cuda engine, one wait
    for the device per call of ``blocks_per_call`` blocks), its batch sums copied to the host."""
    from whestbench.compute.philox import cuda_engine as ce
    from whestbench.compute.philox import spec as philox

    engine = ce.CudaEngine(weights, keys, "cuda", z2sq=False)
    nb = philox.block_count(shape.n_samples)

    def run(n_blocks=nb):
        step = engine.blocks_per_call
        return [engine.batches_host(b0, min(b0 + step, n_blocks), shape.n_samples) for b0 in range(0, n_blocks, step)]

    run(1)
    return Timing("torch", "fp32", _cuda_time(run, args.repeats))


def _bake_marginal(cmd_for, shape: Shape, env: dict, workdir: Path, repeats: int, tag: str):
    """Whole-process times at N/4 and N; the marginal seconds for the 3N/4 samples in between."""
    small = max(1, shape.n_samples // 4)
    raw = {small: [], shape.n_samples: []}
    for r in range(repeats):
        for n in (small, shape.n_samples):
            out = workdir / f"{tag}-{shape.label}-{n}-{r}"
            t0 = time.perf_counter()
            proc = subprocess.run(cmd_for(n, out), env=env, capture_output=True, text=True)
            dt = time.perf_counter() - t0
            if proc.returncode != 0:
                raise RuntimeError(f"{tag} bake failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}{proc.stdout[-2000:]}")
            raw[n].append(dt)
            subprocess.run(["rm", "-rf", str(out)], check=False)
    marginal = [b - a for a, b in zip(raw[small], raw[shape.n_samples])]
    scale = shape.n_samples / (shape.n_samples - small)  # marginal covers 3N/4: report per N samples
    return [m * scale for m in marginal], raw


def reference_command(args, shape: Shape, seeds_file: Path, n_samples: int, out: Path) -> list[str]:
    return [
        args.reference_python, "-c", REF_CLI, "dataset", "bake", "--torch", "--device", "cuda", "--compile",
        "--n-mlps", str(shape.n_mlps), "--n-samples", str(n_samples), "--width", str(shape.width),
        "--depth", str(shape.depth), "--mlp-seeds", str(seeds_file), "--output", str(out),
    ]  # fmt: skip


def ours_cli_command(shape: Shape, seeds_file: Path, n_samples: int, out: Path) -> list[str]:
    return [
        sys.executable, "-m", "whestbench", "dataset", "bake", "--torch", "--device", "cuda", "--quiet",
        "--n-mlps", str(shape.n_mlps), "--n-samples", str(n_samples), "--width", str(shape.width),
        "--depth", str(shape.depth), "--mlp-seeds", str(seeds_file), "--output", str(out),
    ]  # fmt: skip


def _seeds_file(workdir: Path, seeds) -> Path:
    path = workdir / f"seeds-{len(seeds)}.json"
    path.write_text(json.dumps([int(s) for s in seeds]))
    return path


def time_reference(args, shape: Shape, seeds, workdir: Path, report: ShapeReport) -> Timing:
    env = dict(os.environ, PYTHONPATH=str(args.reference_path))
    seeds_file = _seeds_file(workdir, seeds)
    marginal, raw = _bake_marginal(
        lambda n, out: reference_command(args, shape, seeds_file, n, out), shape, env, workdir, args.repeats, "reference"
    )
    report.reference_raw_s = {str(n): v for n, v in raw.items()}
    t = Timing("reference", "fp32", marginal)
    t.note = "marginal: (t(N) - t(N/4)) scaled to N samples; excludes start-up and torch.compile"
    return t


def time_ours_cli(shape: Shape, seeds, workdir: Path, repeats: int) -> Timing:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    seeds_file = _seeds_file(workdir, seeds)
    marginal, _ = _bake_marginal(
        lambda n, out: ours_cli_command(shape, seeds_file, n, out), shape, env, workdir, repeats, "ours"
    )
    t = Timing("ours-cli", "default", marginal)
    t.note = "whole CLI bake, marginal like the reference"
    return t


def sweep_configs(width: int, precision: str):
    """Candidate kernel configurations around the default (the ones that fail to compile are skipped)."""
    from whestbench.compute.philox import triton_kernel as ptt

    base = ptt.config_for(width, precision)
    seen = []
    for rows in (64, 128):
        for block_n in (128, 256):
            for block_k in (16, 32, 64):
                for num_warps in (4, 8):
                    for num_stages in (2, 3):
                        if block_n > base.padded_width(width):
                            continue
                        cfg = dataclasses.replace(
                            base, rows=rows, block_n=block_n, block_k=block_k, num_warps=num_warps, num_stages=num_stages
                        )
                        if cfg.padded_width(width) == base.padded_width(width) and cfg not in seen:
                            seen.append(cfg)
    return seen


def run_sweep(shape: Shape, weights, keys, precision: str, args) -> Timing | None:
    best = None
    small = dataclasses.replace(shape, n_samples=min(shape.n_samples, 1 << 20))
    quick = argparse.Namespace(**{**vars(args), "repeats": 1})
    for cfg in sweep_configs(shape.width, precision):
        try:
            t = time_fused(small, weights, keys, precision, quick, config=cfg)
        except Exception as exc:  # out of shared memory, too many registers: skip that configuration
            print(f"  sweep {shape.label} {precision} {cfg}: {type(exc).__name__}", file=sys.stderr)
            continue
        print(f"  sweep {shape.label} {precision} {t.seconds[0]:.4f}s {cfg}", file=sys.stderr)
        if best is None or t.seconds[0] < best[0]:
            best = (t.seconds[0], cfg)
    if best is None:
        return None
    return time_fused(shape, weights, keys, precision, args, config=best[1])


# --- the precision gate on the GPU ----------------------------------------------------------------


def gate_on_gpu(args) -> list[GateLine]:
    """SPEC section 3 on the device: each path's means vs an fp64 forward pass over the same inputs."""
    import numpy as np
    import torch

    from whestbench.compute.philox import cuda_engine as ce
    from whestbench.compute.philox import triton_kernel as ptt
    from whestbench.compute import precision as gate

    pt = _reference_sums()

    n = args.gate_samples
    block = 1 << (n - 1).bit_length()  # one canonical block holds all the gate's samples
    lines = []
    for width, depth in SPEC_SHAPES:
        shape = Shape(width, depth, 1, n)
        _, weights, keys = mlp_batch(shape)
        key = (int(keys[0, 0]), int(keys[0, 1]))
        w64 = torch.as_tensor(weights[0], device="cuda", dtype=torch.float64)

        def fp64_means(x32: torch.Tensor) -> np.ndarray:
            h = x32.to(torch.float64)
            means = []
            for layer in range(depth):
                h = torch.relu(h @ w64[layer])
                means.append(h.mean(dim=0))
            return torch.stack(means).cpu().numpy()

        # The kernels' own inputs (the fused kernel and the cuda engine's sampler share their Box-Muller
        # code and libdevice): identical samples.
        x_kernel = torch.as_tensor(ce.sampler_normals(key, 0, n, width, "cuda"), device="cuda")
        ref_kernel = fp64_means(x_kernel)
        for precision in args.precision:
            config = ptt.config_for(width, precision)
            s = ptt.range_sums_triton(
                torch.as_tensor(weights, device="cuda"), keys, (0, 1), n, config=config, block_size=block
            )[0]
            a, b = gate.gate_figures(s.sums / n, ref_kernel)
            lines.append(GateLine(shape.label, "fused", precision, a, b, gate.gate_passes(a, b)))
        s = pt.block_sums_torch(weights, keys, 0, n, "cuda", block_size=block, engine="cuda")[0]
        a, b = gate.gate_figures(s.sums / n, ref_kernel)
        lines.append(GateLine(shape.label, "torch", "fp32", a, b, gate.gate_passes(a, b)))
    return lines


# --- ptxas: what the compiler makes of the kernel, without a GPU ----------------------------------


def ptxas_report(args) -> list[str]:
    import math
    import re

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from whestbench.compute.philox import triton_kernel as ptt

    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    sig = {
        "w_ptr": "*fp32", "key_ptr": "*i64", "out_ptr": "*fp64", "scratch_ptr": "*fp32",
        "n_mlps": "i32", "depth": "i32", "width": "i32", "n_tiles": "i32", "n_first": "i64", "n_end": "i64",
        "stride_wb": "i32", "stride_wl": "i32", "stride_ob": "i32", "stride_ot": "i32", "stride_ol": "i32",
    }  # fmt: skip
    lines = []
    for shape in args.shape:
        for precision in args.precision:
            cfg = ptt.config_for(shape.width, precision)
            consts = {
                "WP": cfg.padded_width(shape.width), "ROWS": cfg.rows, "LOG_ROWS": int(math.log2(cfg.rows)),
                "BLOCK_N": cfg.block_n, "BLOCK_K": cfg.block_k, "GROUP_BLOCK": cfg.group_block,
                "SUM_BLOCK": cfg.sum_block, "PRECISION": ptt.PRECISIONS.index(precision),
                "FP16_SCALE": ptt.FP16_LO_SCALE,
            }  # fmt: skip
            src = ASTSource(
                fn=ptt._fused_mlp_tile_kernel, signature={**sig, **{k: "constexpr" for k in consts}}, constexprs=consts
            )
            opts = {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
            cc = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)
            with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
                f.write(cc.asm["ptx"])
            res = subprocess.run([str(ptxas), "-v", "-arch=sm_90a", f.name, "-o", os.devnull], capture_output=True, text=True)
            os.unlink(f.name)
            regs = re.search(r"Used (\d+) registers", res.stderr)
            spill = re.search(r"(\d+) bytes spill stores", res.stderr)
            wgmma = cc.asm["ptx"].count("wgmma.mma_async")
            lines.append(
                f"{shape.label:>8} {precision:>7} rows={cfg.rows} bn={cfg.block_n} bk={cfg.block_k} warps={cfg.num_warps}: "
                f"{regs.group(1) if regs else '?'} registers, {spill.group(1) if spill else '?'} B spilled, "
                f"{cc.metadata.shared} B shared, {wgmma} wgmma in the PTX"
            )
    return lines


# --- report ---------------------------------------------------------------------------------------


def _fmt(x, spec: str, missing: str = "n/a") -> str:
    return missing if x is None else format(x, spec)


def finish(t: Timing, shape: Shape, peaks: dict) -> Timing:
    if t.seconds:
        t.median_s = statistics.median(t.seconds)
        t.tflops = shape.flops / t.median_s / 1e12 if t.median_s > 0 else None
    t.ceiling_tflops = ceiling_tflops(t.precision, peaks) if t.path in ("fused", "torch") else None
    return t


def projection_hours(width: int, depth: int, tflops: float | None, n_mlps: int, n_gpus: int, n_samples: float = 1e9):
    if not tflops:
        return None
    return 2.0 * width * width * depth * n_samples * n_mlps / (tflops * 1e12 * n_gpus) / 3600.0


def format_report(device: str, reports: list[ShapeReport], gate: list[GateLine], peaks: dict) -> str:
    out = [f"device: {device}", "ceilings (TFLOP/s): " + ", ".join(f"{k} {ceiling_tflops(k, peaks):.0f}" for k in ("ieee",) + tuple(SPLIT_PARTS))]
    for rep in reports:
        s = rep.shape
        ref = next((t for t in rep.timings if t.path == "reference"), None)
        out.append("")
        out.append(f"== {s.label}: {s.n_mlps} MLPs x {s.n_samples} samples ({s.flops / 1e12:.1f} TFLOP effective)")
        out.append(f"{'path':<10} {'precision':<9} {'median s':>9} {'TFLOP/s':>8} {'% ceil':>7} {'x ref':>6}  target")
        for t in rep.timings:
            pct = 100 * t.tflops / t.ceiling_tflops if (t.tflops and t.ceiling_tflops) else None
            ratio = ref.median_s / t.median_s if (ref and ref.median_s and t.median_s and t is not ref) else None
            target = ""
            if t.path == "fused" and t.tflops is not None:
                ok = t.tflops >= TARGET_TFLOPS and (ratio is None or ratio >= TARGET_RATIO)
                target = "met" if ok else "missed"
            out.append(
                f"{t.path:<10} {t.precision:<9} {_fmt(t.median_s, '9.4f'):>9} {_fmt(t.tflops, '8.1f'):>8} "
                f"{_fmt(pct, '6.1f'):>7} {_fmt(ratio, '6.2f'):>6}  {target}"
            )
        if rep.reference_raw_s:
            raw = ", ".join(f"N={n}: {statistics.median(v):.2f}s" for n, v in rep.reference_raw_s.items() if v)
            out.append(f"reference whole-process (incl. start-up and compile): {raw}")
    out.append("")
    out.append(f"precision gate on the device (N = identical samples; pass: max|d| <= 1e-6, max|bias| <= 1e-7)")
    if not gate:
        out.append("  not measured")
    for g in gate:
        verdict = {True: "PASS", False: "FAIL", None: "n/a"}[g.passes]
        out.append(f"  {g.shape:>8} {g.path:<6} {g.precision:<7} max|d|={_fmt(g.max_abs, '.3g')} max|bias|={_fmt(g.max_bias, '.3g')} {verdict}")
    out.append("")
    out.append("projected wall time for 10^9 samples per MLP (hours), at the measured rate, linear in GPUs:")
    out.append(f"  {'shape':>8} {'path':<10} {'precision':<9} {'100x1':>8} {'100x8':>8} {'1000x1':>8} {'1000x8':>8}")
    for rep in reports:
        for t in rep.timings:
            cells = [projection_hours(rep.shape.width, rep.shape.depth, t.tflops, m, g) for m in (100, 1000) for g in (1, 8)]
            out.append(
                f"  {rep.shape.label:>8} {t.path:<10} {t.precision:<9} " + " ".join(f"{_fmt(c, '8.2f'):>8}" for c in cells)
            )
    return "\n".join(out)


def plan(args) -> list[str]:
    lines = ["plan:"]
    for s in args.shape:
        lines.append(f"  {s.label}: {s.n_mlps} MLPs x {s.n_samples} samples; fused {', '.join(args.precision)}"
                     + ("" if args.skip_torch else "; torch") + ("" if args.skip_reference else "; reference"))
        if not args.skip_reference:
            cmd = reference_command(args, s, Path("SEEDS.json"), s.n_samples, Path("OUT"))
            lines.append(f"    PYTHONPATH={args.reference_path or 'REFDIR'} " + " ".join(cmd[:2]) + " '...' " + " ".join(cmd[3:]))
    if not args.skip_gate:
        lines.append(f"  gate: {', '.join(f'{w}x{d}' for w, d in SPEC_SHAPES)} at N={args.gate_samples}")
    return lines


def main(argv=None) -> int:
    args = resolve(build_parser().parse_args(argv))
    if args.ptxas:
        print("\n".join(ptxas_report(args)))
        return 0
    if args.dry_run:
        print("\n".join(plan(args)))
        reports = []
        for s in args.shape:
            rep = ShapeReport(s, [finish(Timing("fused", p), s, args.peaks) for p in args.precision])
            if not args.skip_torch:
                rep.timings.append(finish(Timing("torch", "fp32"), s, args.peaks))
            if not args.skip_reference:
                rep.timings.append(finish(Timing("reference", "fp32"), s, args.peaks))
            reports.append(rep)
        gate = [GateLine(f"{w}x{d}", "fused", p, None, None, None) for w, d in SPEC_SHAPES for p in args.precision]
        print(format_report("dry run (no device)", reports, gate, args.peaks))
        return 0

    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run this on the GPU machine, or use --dry-run / --ptxas here.")
    device = f"{torch.cuda.get_device_name(0)} (capability {'.'.join(map(str, torch.cuda.get_device_capability(0)))})"
    print("\n".join(plan(args)), file=sys.stderr)
    reports = []
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        workdir = Path(tmp)
        for s in args.shape:
            rep = ShapeReport(s)
            seeds, weights, keys = mlp_batch(s)
            for precision in args.precision:
                t = run_sweep(s, weights, keys, precision, args) if args.sweep else time_fused(s, weights, keys, precision, args)
                if t is not None:
                    rep.timings.append(finish(t, s, args.peaks))
                    print(f"{s.label} fused {precision}: {rep.timings[-1].tflops:.1f} TFLOP/s", file=sys.stderr)
            if not args.skip_torch:
                rep.timings.append(finish(time_torch(s, weights, keys, args), s, args.peaks))
            if not args.skip_reference:
                rep.timings.append(finish(time_reference(args, s, seeds, workdir, rep), s, args.peaks))
            if args.ours_cli:
                rep.timings.append(finish(time_ours_cli(s, seeds, workdir, args.repeats), s, args.peaks))
            reports.append(rep)
    gate = [] if args.skip_gate else gate_on_gpu(args)
    print(format_report(device, reports, gate, args.peaks))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "device": device,
                    "peaks": args.peaks,
                    "shapes": [dataclasses.asdict(r) for r in reports],
                    "gate": [dataclasses.asdict(g) for g in gate],
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
