"""``whest doctor``: this machine's versions and device, the device check of every bake path, and speed.

``diagnose(device)`` is what a user runs on a new machine and pastes into a bug report: the
versions and device facts, the device checks (``work/device_check.py``) at ``SHAPES`` on every path
a bake can take here (``paths``; the pcg64 path gets ``block-sums`` and ``fused-invariance``,
``check_pcg64``), and a throughput probe per path at ``PROBE_SHAPE`` (about ``PROBE_SECONDS``
each; ``quick``: about one). What each part reports: docs/gpu.md, "First run on a new GPU machine".

Everything is measured, nothing written: the CLI prints the result and writes ``--json``."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from whestbench import optional
from whestbench.bake.pipeline import _load_kernels
from whestbench.bake.plan import BakeConfig, plan_bake
from whestbench.compute import device_check as judge
from whestbench.compute.device_check import CheckResult
from whestbench.compute.mlp import sample_weights
from whestbench.compute.pcg64 import chunk_rows, sample_layer_sums
from whestbench.compute.philox import spec as philox
from whestbench.compute.seeds import derived_seeds, spawn_streams
from whestbench.errors import UsageError
from whestbench.work import device_check as dc
from whestbench.work.calibrate import calibrate
from whestbench.work.device_check import CHECK_ROOT_SEED, stretch_samples
from whestbench.work.executor import bake_workers
from whestbench.work.threads import one_blas_thread, one_torch_thread
from whestbench.work.torch_env import resolve_device

SHAPES = ((256, 8), (1024, 16))
PROBE_SHAPE = (256, 8)
PROBE_SECONDS = 20.0
QUICK_PROBE_SECONDS = 1.0
PROJECT_MLPS, PROJECT_SAMPLES = 100, 10**9


@dataclass(frozen=True)
class BakePath:
    """One way a bake can compute here: ``label`` for people, ``config`` for ``plan_bake``."""

    label: str
    config: dict[str, Any]


@dataclass
class Diagnosis:
    device: dict[str, Any]
    versions: dict[str, Any]
    checks: list[dict[str, Any]] = field(default_factory=list)
    throughput: list[dict[str, Any]] = field(default_factory=list)
    peak_gflops: float | None = None
    peak: dict[str, Any] | None = None
    """What the reference ``peak_gflops`` was measured on (``reference_sgemm``)."""
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c["passed"] for c in self.checks)

    def record(self) -> dict[str, Any]:
        return {"passed": self.passed, "versions": self.versions, "device": self.device, "checks": self.checks,
                "throughput": self.throughput, "peak_gflops": self.peak_gflops, "peak": self.peak, "notes": self.notes}


def _torch_device(device: str) -> str | None:
    """The torch device to diagnose (None: torch is not installed and none was asked for)."""
    try:
        optional.require("torch")
    except ImportError:
        if device in ("auto", "cpu"):
            return None
        raise UsageError(f"--device {device} needs torch:", fix="pip install 'whestbench[gpu]'.") from None
    return resolve_device(device)


def paths(torch_device: str | None) -> list[BakePath]:
    """Every bake path available here: the CPU default path, torch on the device, the integer kernel on CUDA."""
    out = [BakePath("cpu (pcg64)", {"backend": "cpu"})]
    if torch_device is None:
        return out
    torch = optional.require("torch")
    engine = optional.engine_module("numba").resolve_engine("auto", torch.device(torch_device))
    out.append(BakePath(f"torch {torch_device} ({engine})", {"backend": "torch", "device": torch_device}))
    # The fused kernel's splits are withdrawn (WITHDRAWN_GPU_KERNELS): no bake path runs them.
    if torch_device == "cuda":
        if optional.engine_module("ozaki").ozaki_available("cuda", PROBE_SHAPE[0])[0]:
            out.append(BakePath("ozaki (integer kernel)", {"backend": "torch", "device": "cuda", "gpu_kernel": "ozaki"}))
    return out


def _plan(path: BakePath, width: int, depth: int, n_mlps: int = PROJECT_MLPS, n_samples: int = PROJECT_SAMPLES):
    """The plan of a bake of this path and shape (seeds from 0; nothing is written)."""
    return plan_bake(BakeConfig(n_mlps=n_mlps, n_samples=n_samples, width=width, depth=depth, output=None, seed=0,
                                **path.config), probe=False)


def check_pcg64(width: int, depth: int) -> tuple[CheckResult, CheckResult]:
    """The CPU default path's checks: ``block-sums`` (its fused kernels against an fp64 forward pass on
    the same pcg64 samples) and ``fused-invariance`` (fused kernels and plain passes: identical bits)."""
    weight_ss, sample_ss, _ = spawn_streams(derived_seeds(CHECK_ROOT_SEED, 1)[0])
    weights = sample_weights(weight_ss, width, depth)
    chunk = chunk_rows(width)
    n = max(stretch_samples(width, depth), chunk)
    with one_blas_thread():  # as every bake's worker runs
        fused = philox.pack(sample_layer_sums(weights, sample_ss, n, fused=True))
        plain = philox.pack(sample_layer_sums(weights, sample_ss, n, fused=False))
    rng = np.random.default_rng(sample_ss)  # the same draws, chunk by chunk as the stream makes them
    x = np.concatenate([rng.standard_normal((min(chunk, n - r0), width), dtype=np.float32) for r0 in range(0, n, chunk)])
    block = judge.judge_block_sums(fused, judge.fp64_packed(weights, x, chunk), n, depth)
    same = judge.judge_row_invariance(fused, plain, "the fused kernels and the plain numpy passes (a bake's size picks one)")
    return block, dataclasses.replace(same, name="fused-invariance")


def sgemm_peak(device: str, seconds: float) -> float:
    """The device's float32 matmul rate in GFLOP/s, best of repeated square products (all cores on
    a CPU, with numpy's BLAS; torch on a GPU, at its current matmul-precision setting)."""
    if device == "cpu":
        n = 2048
        a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
        b = a.T.copy()
        run, sync = (lambda: a @ b), (lambda: None)
    else:
        import torch

        n = 8192
        a = torch.randn((n, n), device=device)
        b = torch.randn((n, n), device=device)
        run = lambda: a @ b  # noqa: E731
        sync = torch.cuda.synchronize if device.startswith("cuda") else torch.mps.synchronize
    run()
    sync()
    best, start = 0.0, time.perf_counter()
    while True:
        t0 = time.perf_counter()
        run()
        sync()
        best = max(best, 2 * n**3 / (time.perf_counter() - t0) / 1e9)
        if time.perf_counter() - start >= seconds:
            return best


def reference_sgemm(device: str, seconds: float) -> dict[str, Any]:
    """What ``sgemm_peak`` measures, as a record: the op, its size, the library and threads, the
    seconds (the rate is a reference, not the device's peak: a busy machine lowers it, and kernels
    can beat one large sgemm)."""
    info: dict[str, Any] = {"op": "sgemm", "n": 2048 if device == "cpu" else 8192, "seconds": seconds,
                            "library": "torch", "threads": None}
    if device == "cpu":
        try:
            from threadpoolctl import threadpool_info

            blas = next((i for i in threadpool_info() if i.get("user_api") == "blas"), {})
            info.update(library=f"numpy/{blas.get('internal_api', 'BLAS')}", threads=blas.get("num_threads"))
        except Exception:  # noqa: BLE001 - the record is a description; the rate stands without it
            info["library"] = "numpy"
    return info


def describe_reference(peak: dict[str, Any] | None) -> str:
    """``numpy/openblas 2048², 2 threads, best of 1 s``."""
    if not peak:
        return "this device's own sgemm"
    threads = f", {peak['threads']} threads" if peak.get("threads") else ""
    return f"{peak.get('library')} {peak.get('op')} {peak.get('n')}²{threads}, best of {peak.get('seconds'):g} s"


def throughput(path: BakePath, seconds: float) -> dict[str, Any]:
    """A timed bake of this path at ``PROBE_SHAPE`` lasting about ``seconds``: its effective GFLOP/s."""
    width, depth = PROBE_SHAPE
    plan = _plan(path, width, depth)
    workers = bake_workers(plan.workers)
    mlps = plan.spec.mlps_per_unit * (workers if plan.compute.device == "cpu" else 1)
    step = plan.spec.block_size or 16384  # philox: a canonical block; pcg64: a 256-wide chunk is 4096
    with one_torch_thread(plan.compute.pins_torch_threads):
        n = step
        for _ in range(3):  # size the timed run from the last one (a short run's rate is a rough guide)
            cal = calibrate(plan.scaled_job, planned_mlps=PROJECT_MLPS, planned_samples=PROJECT_SAMPLES,
                            calib_mlps=mlps, calib_samples=n, workers=plan.workers)
            if cal.seconds >= 0.6 * seconds:
                break
            n = max(n + step, int(n * seconds / max(cal.seconds, 1e-6)) // step * step)
    return {"path": path.label, "shape": f"{width}x{depth}", "gflops": cal.gflops, "samples_per_s": cal.samples_per_s,
            "seconds": cal.seconds, "mlps": mlps, "samples_per_mlp": cal.calib_samples,
            "projected_s": cal.projected_s, "projected": f"{PROJECT_MLPS} MLPs × {PROJECT_SAMPLES:,} samples"}


def diagnose(device: str = "auto", *, quick: bool = False, on_note: Callable[[str], None] = lambda s: None) -> Diagnosis:
    """Versions, device facts, every path's device checks at ``SHAPES``, and a throughput probe each."""
    torch_device = _torch_device(device)
    where = torch_device or "cpu"
    diag = Diagnosis(device=dc.device_facts(where), versions=dc.versions())
    if torch_device is None:
        diag.notes.append("torch is not installed: only the CPU default path is checked (pip install 'whestbench[gpu]')")
    found = paths(torch_device)
    if torch_device == "cuda":
        diag.notes.append("fused kernel not checked: --gpu-kernel fused is withdrawn (docs/gpu-kernel.md)")
    for path in found:
        for width, depth in SHAPES:
            on_note(f"checking {path.label} at {width}×{depth}")
            if path.config["backend"] == "cpu":
                results = check_pcg64(width, depth)
            else:
                plan = _plan(path, width, depth)
                _load_kernels(plan, lambda e: None)
                with one_torch_thread(plan.compute.pins_torch_threads):
                    results = dc.run_checks(plan.spec, plan.compute)
            diag.checks += [{"path": path.label, "shape": f"{width}x{depth}", **c.record()} for c in results]
    seconds = QUICK_PROBE_SECONDS if quick else PROBE_SECONDS
    on_note(f"measuring the {where} sgemm reference")
    peak_s = min(seconds, 3.0)
    diag.peak_gflops = sgemm_peak(where, peak_s)
    diag.peak = reference_sgemm(where, peak_s)
    for path in found:
        on_note(f"timing {path.label} at {PROBE_SHAPE[0]}×{PROBE_SHAPE[1]} (about {seconds:.0f} s)")
        diag.throughput.append(throughput(path, seconds))
    if found:  # once more after the probes (a machine busy at the first try): the better of the two
        diag.peak_gflops = max(diag.peak_gflops, sgemm_peak(where, peak_s))
    for entry in diag.throughput:
        ratio = entry["gflops"] / diag.peak_gflops if diag.peak_gflops else None
        # a fraction of a peak cannot exceed 1: above the reference, the reference was not the peak
        entry["ratio_to_reference"] = ratio
        entry["fraction_of_peak"] = min(ratio, 1.0) if ratio is not None else None
        entry["peak_exceeded"] = ratio is not None and ratio > 1.0
    return diag
