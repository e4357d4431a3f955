#!/usr/bin/env python
"""Global-memory traffic and launches of the plain CUDA path, counted on the CPU (no GPU needed).

    python benchmarks/gpu_traffic.py --json        # {"bytes_per_sample": ..., "launches_per_chunk_per_mlp": ...}
    python benchmarks/gpu_traffic.py               # the breakdown per kind of op, today's and the old path's
    python benchmarks/gpu_traffic.py --ptxas       # its kernels compiled for sm_90 and sm_80: registers, spills

It runs the very code a ``whest dataset bake --device cuda`` unit runs -- ``work/steps._block_runner``
with the ``cuda`` engine (``compute/philox/cuda_engine.py``), one call of the blocks a unit's step
covers -- on torch's ``meta`` device, under a ``TorchDispatchMode`` that counts every aten op: the
bytes of global memory it reads and writes (each tensor's distinct elements: a broadcast dimension
counts once; a view, an allocation or a metadata change is no op) and one launch. A Triton launch is
counted as the engine declares it at its one launch site (``cuda_engine._launch``), and skipped: on
``meta`` nothing is computed, so a count at 256×8 takes a second. A transfer to the host is counted
on the device side. The same mode over the same code with CPU tensors and Triton's interpreter
gives the same counts (``tests/benchmarks/test_gpu_traffic.py``), so this is the path, not a model.

The old path (``engine="torch"``: int64 Philox ops, ``bmm``, strided-add trees; what a CUDA bake ran
before, MPS still does) is counted the same way for the comparison (``--old-chunk``).

Budget (issue 33), at 256×8: <= 40 KiB of global memory per sample and <= 25 launches per chunk per
MLP. The JSON's figures are for ``--mlps-per-batch`` (default 1: the most launches per MLP).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterator

BUDGET_BYTES_PER_SAMPLE = 40 * 1024
BUDGET_LAUNCHES_PER_CHUNK_PER_MLP = 25
BANDWIDTH = {"H100 SXM": 3.35e12, "H200": 4.8e12}  # bytes/s, the vendors' HBM figures
SGEMM_H200 = 50.7e12  # FLOP/s: the plain sgemm `whest doctor` measured on an H200 (docs/gpu.md)
REFERENCE_H200 = 30.5e12  # whestbench 0.16.2 --torch --compile, marginal, 256x8, the same H200


@dataclass
class Tally:
    launches: int = 0
    reads: int = 0
    writes: int = 0


@dataclass
class Count:
    """What one counted run moved: per kind of op, and the units the budget is stated in."""

    path: str
    width: int
    depth: int
    mlps: int
    samples: int  # per MLP
    chunks: int  # chunks of B MLPs
    kinds: dict[str, Tally] = field(default_factory=dict)

    @property
    def bytes(self) -> int:
        return sum(t.reads + t.writes for t in self.kinds.values())

    @property
    def launches(self) -> int:
        return sum(t.launches for t in self.kinds.values())

    @property
    def bytes_per_sample(self) -> float:
        return self.bytes / (self.mlps * self.samples)

    @property
    def launches_per_chunk_per_mlp(self) -> float:
        return self.launches / (self.chunks * self.mlps)

    @property
    def gemm_bytes(self) -> int:
        return sum(t.reads + t.writes for k, t in self.kinds.items() if k in GEMM_KINDS)

    def flops_per_sample(self) -> float:
        return 2.0 * self.width * self.width * self.depth


GEMM_KINDS = ("mm", "bmm")


def _footprint(t) -> int:
    """Bytes of the distinct elements a tensor covers (a stride-0 dimension counts once)."""
    n = 1
    for size, stride in zip(t.shape, t.stride()):
        if stride != 0:
            n *= size
    return n * t.element_size()


def _tensors(value) -> list:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []


def make_counter(device_type: str = "meta", run_triton: bool = False):
    """A ``TorchDispatchMode`` counting ops on ``device_type`` tensors, with a ``triton(launch)``
    observer for ``cuda_engine.observe``; ``run_triton``: run the kernels (the interpreter on CPU)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten
    free = {aten.empty.memory_format, aten.empty_strided.default, aten.empty_like.default, aten.new_empty.default,
            aten.new_empty_strided.default, aten._unsafe_view.default, aten.lift_fresh.default}

    class TrafficCounter(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.kinds: dict[str, Tally] = defaultdict(Tally)
            self.paused = False

        def _bytes(self, t) -> int:
            return _footprint(t) if t.device.type == device_type else 0

        def _add(self, kind: str, reads: int, writes: int) -> None:
            tally = self.kinds[kind]
            tally.launches += 1
            tally.reads += reads
            tally.writes += writes

        @contextlib.contextmanager
        def triton(self, launch) -> Iterator[bool]:
            self._add(launch.kernel, launch.reads, launch.writes)
            self.paused = True  # the interpreter's own torch calls are not the kernel's traffic
            try:
                yield run_triton
            finally:
                self.paused = False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            schema = func._schema
            view = bool(schema.returns) and all(r.alias_info is not None and not r.alias_info.is_write
                                                for r in schema.returns)
            if self.paused or func in free or view:
                return func(*args, **kwargs)
            reads = writes = 0
            named = list(zip(schema.arguments, args)) + [(a, kwargs[a.name]) for a in schema.arguments
                                                         if a.name in kwargs]
            for arg, value in named:
                mutable = arg.alias_info is not None and arg.alias_info.is_write
                for t in _tensors(value):
                    b = self._bytes(t)
                    writes += b if mutable else 0
                    reads += b if not (mutable and arg.kwarg_only) else 0  # out= is written, not read
            result = self._run(func, args, kwargs)
            outs = result if isinstance(result, (list, tuple)) else [result]
            for ret, r in zip(schema.returns, outs):
                if ret.alias_info is None:
                    writes += sum(self._bytes(t) for t in _tensors(r))
            to_host = func in (aten._to_copy.default, aten.copy_.default) and any(
                t.device.type == device_type for t in _tensors(args[-1] if func is aten.copy_.default else args[0])
            ) and any(t.device.type != device_type for t in _tensors(result))
            self._add("to-host" if to_host else func.overloadpacket.__name__, reads, writes)
            return result

        @staticmethod
        def _run(func, args, kwargs):
            """Run the op; a copy out of ``meta`` (which has no data) gives zeros on its target device."""
            if func is aten._to_copy.default and args[0].device.type == "meta":
                target = kwargs.get("device") or args[0].device
                if torch.device(target).type != "meta":
                    return torch.zeros(args[0].shape, dtype=kwargs.get("dtype") or args[0].dtype, device=target)
            if func is aten.copy_.default and args[1].device.type == "meta" and args[0].device.type != "meta":
                return args[0]
            return func(*args, **kwargs)

    return TrafficCounter()


def _mlps(width: int, depth: int, mlps: int, device_type: str):
    """Weights and keys of ``mlps`` MLPs (zeros on ``meta``, where no value is read; real ones on a CPU)."""
    import numpy as np

    if device_type == "meta":
        return np.zeros((mlps, depth, width, width), dtype=np.float32), np.zeros((mlps, 2), dtype=np.uint32)
    from whestbench.compute.mlp import weights_for_seed
    from whestbench.compute.philox import spec as philox
    from whestbench.compute.seeds import spawn_streams

    weights = np.stack([weights_for_seed(s, width, depth) for s in range(1, mlps + 1)])
    keys = np.array([philox.philox_key(spawn_streams(s)[1]) for s in range(1, mlps + 1)], dtype=np.uint32)
    return weights, keys


def count_path(width: int = 256, depth: int = 8, mlps: int = 1, *, engine: str = "cuda", rows: int | None = None,
               block_size: int | None = None, device: str = "meta", run_triton: bool = False,
               calls: int = 1, blocks: int | None = None) -> Count:
    """Count ``calls`` calls of a unit's step (``steps._block_runner``, as ``steps._run_philox`` calls it)
    of ``engine`` on ``device``, each of ``blocks`` blocks (default: as many as a step takes).
    ``rows``: the cuda engine's GEMM rows, or the old path's chunk."""
    import torch

    from whestbench.compute.philox import cuda_engine
    from whestbench.compute.philox import spec as philox
    from whestbench.work.steps import Compute, _block_runner
    from whestbench.work.units import WorkSpec

    bs = block_size or philox.BLOCK_SIZE
    weights, keys = _mlps(width, depth, mlps, torch.device(device).type)
    compute = Compute(engine, device, rows)
    probe = WorkSpec(seeds=(), n_samples=bs, width=width, depth=depth, mlp_range=(0, mlps), sampler="philox",
                     block_size=bs, unit_blocks=1, mlps_per_unit=mlps)
    per_call = blocks or getattr(_block_runner(probe, compute, weights, keys, None), "blocks_per_call", 1)
    n_blocks = per_call * calls
    spec = WorkSpec(seeds=(), n_samples=n_blocks * bs, width=width, depth=depth, mlp_range=(0, mlps),
                    sampler="philox", block_size=bs, unit_blocks=1 << max(n_blocks - 1, 0).bit_length(),
                    mlps_per_unit=mlps)
    run = _block_runner(spec, compute, weights, keys, None)  # the unit's set-up: once per unit, not counted
    if engine == "cuda":
        chunk = min(rows or cuda_engine.gemm_rows(width, bs), bs)
    else:
        from whestbench.compute.philox.torch_engine import step_rows

        chunk = step_rows(rows, torch.device(device), mlps, width, bs)
    counter = make_counter(torch.device(device).type, run_triton)
    with cuda_engine.observe(counter.triton), counter:
        for b0 in range(0, n_blocks, per_call):
            run(b0, b0 + per_call)
    return Count(engine, width, depth, mlps, n_blocks * bs, n_blocks * (bs // chunk), dict(counter.kinds))


def report(new: Count, olds: list[Count]) -> str:
    """The readable breakdown: per kind of op, per chunk and MLP and per sample; the roofline."""
    lines = [f"Counted on the CPU ({new.width}x{new.depth}, {new.mlps} MLP(s) per batch; a Triton kernel as declared "
             "at its launch, every aten op by the bytes of its tensors):", ""]
    for c in [new] + olds:
        title = ("the plain CUDA path (cuda engine)" if c.path == "cuda"
                 else f"the old path (engine torch, chunk {c.samples // c.chunks:,} rows, {c.mlps} MLPs)")
        lines.append(f"{title}: {c.bytes_per_sample / 1024:.1f} KiB per sample, "
                     f"{c.launches_per_chunk_per_mlp:.2f} launches per chunk per MLP, "
                     f"{c.launches / c.chunks:.0f} per chunk of {c.mlps} MLP(s), "
                     f"{c.launches * 65536 / (c.samples * c.mlps):.1f} per 65,536 samples per MLP")
        lines.append(f"  {'kind':<18} {'launches/chunk/MLP':>19} {'KiB read/sample':>16} {'KiB written/sample':>19}")
        per = c.mlps * c.samples
        for kind, t in sorted(c.kinds.items(), key=lambda kv: -(kv[1].reads + kv[1].writes)):
            lines.append(f"  {kind:<18} {t.launches / (c.chunks * c.mlps):>19.3f} {t.reads / per / 1024:>16.2f} "
                         f"{t.writes / per / 1024:>19.2f}")
        lines.append("")
    lines.append("Roofline (a model from the counts, not a measurement; no GPU ran this): time per sample =")
    lines.append("GEMM FLOPs / the H200's measured sgemm rate (50.7 TFLOP/s) + the other bytes / HBM bandwidth.")
    for c in [new] + olds:
        for name, bw in BANDWIDTH.items():
            mem_only = c.flops_per_sample() / (c.bytes_per_sample / bw) / 1e12
            t = c.flops_per_sample() / SGEMM_H200 + (c.bytes - c.gemm_bytes) / (c.mlps * c.samples) / bw
            label = "cuda" if c.path == "cuda" else f"old, chunk {c.samples // c.chunks}"
            lines.append(f"  {label:<16} {name:<9} memory-bound ceiling {mem_only:6.1f} TFLOP/s; with the GEMMs at "
                         f"sgemm speed {c.flops_per_sample() / t / 1e12:5.1f} TFLOP/s "
                         f"({c.flops_per_sample() / t / REFERENCE_H200:.2f}x 0.16.2's 30.5 on the H200)")
    return "\n".join(lines)


KERNEL_SIGNATURES = {  # the engine's Triton kernels: argument types, and constexprs as the engine launches them
    "sampler": ("_sampler_kernel", {"key_ptr": "*i64", "out_ptr": "*fp32", "n0": "i64", "valid": "i32", "rows": "i32",
                                    "cols": "i32", "stride_b": "i32"}, {"WORDS": False}),
    "relu-tree": ("_relu_tree_kernel", {"y_ptr": "*fp32", "part_ptr": "*fp64", "width": "i32", "stride_yb": "i32",
                                        "stride_pb": "i32", "stride_pt": "i32", "sum_row": "i32", "sq_row": "i32",
                                        "z2_row": "i32"}, {"Z2": True}),
    "batch-tree": ("_batch_tree_kernel", {"part_ptr": "*fp64", "out_ptr": "*fp64", "width": "i32", "n_rows": "i32",
                                          "stride_pb": "i32", "stride_pt": "i32", "stride_ob": "i32",
                                          "stride_on": "i32", "batch0": "i32"}, {}),
}


def ptxas_report(capabilities=(90, 80)) -> list[tuple[str, int, int | None, int | None, int]]:
    """Compile the engine's kernels for each capability without a GPU (Triton, then its ptxas):
    ``(kernel, capability, registers, spilled bytes, shared bytes)``. Run where triton was imported
    without ``TRITON_INTERPRET``."""
    import re
    import subprocess
    import tempfile
    from pathlib import Path

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from whestbench.compute.philox import cuda_engine as ce

    tiles = ce.TILE_ROWS
    tpb = ce.MIN_ROWS // tiles
    constexprs = {"sampler": {"ROWS": ce.SAMPLER_ROWS, "GROUPS": ce.SAMPLER_GROUPS},
                  "relu-tree": {"TR": tiles, "LOG_TR": tiles.bit_length() - 1, "TC": ce.TILE_COLS},
                  "batch-tree": {"TPB": tpb, "LOG_TPB": tpb.bit_length() - 1, "TC": ce.TILE_COLS}}
    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    out = []
    for cap in capabilities:
        for name, (fn, sig, fixed) in KERNEL_SIGNATURES.items():
            consts = {**constexprs[name], **fixed}
            src = ASTSource(fn=getattr(ce, fn), signature={**sig, **{k: "constexpr" for k in consts}}, constexprs=consts)
            cc = triton.compile(src, target=GPUTarget("cuda", cap, 32), options={"num_warps": 4})
            with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
                f.write(cc.asm["ptx"])
            arch = f"sm_{cap}a" if cap >= 90 else f"sm_{cap}"
            res = subprocess.run([str(ptxas), "-v", f"-arch={arch}", f.name, "-o", os.devnull], capture_output=True,
                                 text=True)
            os.unlink(f.name)
            if res.returncode:
                raise RuntimeError(f"ptxas failed on {name} for {arch}: {res.stderr.strip()[:500]}")
            regs = re.search(r"Used (\d+) registers", res.stderr)
            spill = re.search(r"(\d+) bytes spill stores", res.stderr)
            out.append((name, cap, int(regs.group(1)) if regs else None, int(spill.group(1)) if spill else None,
                        int(cc.metadata.shared)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print only {bytes_per_sample, launches_per_chunk_per_mlp}")
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--mlps-per-batch", type=int, default=1)
    ap.add_argument("--old-chunk", type=int, action="append", default=None,
                    help="also count the old path at this chunk (default 4096 and the GPU default, 65536 at 4 MLPs)")
    ap.add_argument("--ptxas", action="store_true",
                    help="compile the engine's kernels for sm_90 and sm_80 (no GPU needed): registers, spills, shared")
    args = ap.parse_args(argv)
    if args.ptxas:
        if os.environ.get("TRITON_INTERPRET"):
            print("error: --ptxas compiles the kernels: unset TRITON_INTERPRET", file=sys.stderr)
            return 2
        for name, cap, regs, spill, shared in ptxas_report():
            print(f"sm_{cap} {name:<11} {regs} registers, {spill} B spilled, {shared} B shared (4 warps)")
        return 0
    # Nothing is launched on meta; the interpreter only keeps triton from wanting a GPU at import.
    os.environ.setdefault("TRITON_INTERPRET", "1")
    new = count_path(args.width, args.depth, args.mlps_per_batch)
    if args.json:
        print(json.dumps({"bytes_per_sample": round(new.bytes_per_sample, 1),
                          "launches_per_chunk_per_mlp": round(new.launches_per_chunk_per_mlp, 3)}))
        return 0
    olds = [count_path(args.width, args.depth, 4, engine="torch", rows=chunk) for chunk in (args.old_chunk or (4096, 65536))]
    print(report(new, olds))
    within = (new.bytes_per_sample <= BUDGET_BYTES_PER_SAMPLE
              and new.launches_per_chunk_per_mlp <= BUDGET_LAUNCHES_PER_CHUNK_PER_MLP)
    print(f"\nbudget (<= {BUDGET_BYTES_PER_SAMPLE // 1024} KiB per sample, <= {BUDGET_LAUNCHES_PER_CHUNK_PER_MLP} "
          f"launches per chunk per MLP): {'within' if within else 'EXCEEDED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
