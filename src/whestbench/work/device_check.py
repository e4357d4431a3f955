"""The device check: before a torch bake's first unit, its own path checked against the numpy specification.

``check_device(spec, compute)`` runs the three checks of ``compute/device_check.py``
(``philox-words``, ``block-sums``, ``row-invariance``) on exactly what the bake will run: the plan's
width, depth, engine (numba, torch, the plain CUDA path or the fused kernel), precision class, chunk size and MLPs per
batch, on its device, through the same ``steps._block_runner`` its units call. What each check
compares, why a row-invariance failure refuses the bake (naming ``--accept-non-invariant``) and
what it costs: docs/gpu.md, "The device check at the start of every torch bake".

Nothing here writes a file or prints: the bake records ``DeviceCheck.record()`` in metadata.json and,
on a failure, writes it beside ``--output`` (``bake/pipeline.py``).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from whestbench.compute import device_check as judge
from whestbench.compute.philox import spec as philox
from whestbench.compute.device_check import BLOCK_SUMS, PHILOX_WORDS, ROW_INVARIANCE, CheckResult
from whestbench.compute.estimators import fit_controls
from whestbench.compute.estimation import PILOT_SAMPLES
from whestbench.compute.seeds import PILOT, derived_seeds, spawn_streams, stream
from whestbench.errors import DeviceCheckFailed
from whestbench.work.steps import Compute, _block_runner
from whestbench.work.machine import device_facts, versions
from whestbench.work.torch_env import sync_device
from whestbench.work.units import WorkSpec
from whestbench.compute.mlp import sample_weights
from whestbench.optional import engine_module, require
from whestbench.text import one_line

CHECK_ROOT_SEED = 2026  # the checks' MLPs: seeds derived from this root (fixed, so a report is reproducible)
MIN_STRETCH, MAX_STRETCH = 1024, 8192  # samples of the block-sums stretch
STRETCH_FLOPS = 2**33  # the fp64 reference's budget: 8192 samples at 256×8, 1024 at 1024×16 (~1 s here)
ACCEPT_FLAG = "--accept-non-invariant"


@dataclass(frozen=True)
class DeviceCheck:
    """What a device check found; ``record()`` is the ``device_check`` block of metadata.json."""

    passed: bool
    skipped: bool
    checks: tuple[CheckResult, ...]
    seconds: float
    device: dict[str, Any]
    versions: dict[str, Any]
    accepted: tuple[str, ...] = ()
    """Failed checks the bake was told to accept (``--accept-non-invariant``: row-invariance)."""

    def record(self) -> dict[str, Any]:
        md: dict[str, Any] = {"passed": self.passed, "skipped": self.skipped,
                              "checks": [c.record() for c in self.checks], "seconds": round(self.seconds, 3),
                              "device": self.device, "versions": self.versions}
        if self.accepted:
            md["accepted"] = list(self.accepted)
        return md

    def refusals(self) -> list[CheckResult]:
        """The failed checks that stop the bake."""
        return [c for c in self.checks if not c.passed and c.name not in self.accepted]


def stretch_samples(width: int, depth: int) -> int:
    """Samples of the block-sums stretch: a power of two in [1024, 8192] within ``STRETCH_FLOPS`` of
    fp64 forward pass (the reference's cost, on the CPU, bounds the check's)."""
    n = STRETCH_FLOPS // max(1, 2 * width * width * depth)
    n = 1 << max(n, 1).bit_length() - 1
    return min(MAX_STRETCH, max(MIN_STRETCH, n))


# --- the path's sampler stages --------------------------------------------------------------------


Stage = Callable[[tuple[int, int], int, int, int], np.ndarray]  # (key, n0, n1, width) -> (rows, cols)


def sampler_stages(compute: Compute) -> tuple[Stage, Stage | None, Stage]:
    """``(words, uniforms or None, normals)`` of ``compute``'s engine on its device, as numpy arrays:
    what the bake's inputs are made of. ``uniforms`` takes the words instead of counters."""
    engine, device = compute.engine, compute.device
    if engine == "numba":
        philox_numba = engine_module("numba_kernels")

        def words(key, n0, n1, width):
            out = np.empty((n1 - n0, 4 * philox.n_groups(width)), dtype=np.uint32)
            philox_numba.words_into(key, n0, out)
            return out

        def normals(key, n0, n1, width):
            out = np.empty((n1 - n0, width), dtype=np.float32)
            philox_numba.normals_into(key, n0, out)
            return out

        return words, lambda w: philox_numba.uniforms_of(w), normals
    if engine in ("cuda", "triton"):  # the Triton kernels all draw with triton_kernel's Philox and Box-Muller
        cuda_engine = engine_module("cuda")
        return (lambda key, n0, n1, width: cuda_engine.sampler_words(key, n0, n1, width, device), None,
                lambda key, n0, n1, width: cuda_engine.sampler_normals(key, n0, n1, width, device))
    if engine == "torch":
        torch, philox_torch = require("torch"), engine_module("torch")

        def t_words(key, n0, n1, width):
            return philox_torch.words_torch(np.array([key], dtype=np.uint32), n0, n1, width, device)[0]

        def uniforms(w):
            t = torch.as_tensor(np.asarray(w, dtype=np.int64), device=torch.device(device))
            return philox_torch.uniforms_torch(t).cpu().numpy()

        return (lambda key, n0, n1, width: t_words(key, n0, n1, width).cpu().numpy().astype(np.uint32), uniforms,
                lambda key, n0, n1, width: philox_torch.box_muller_torch(t_words(key, n0, n1, width))[:, :width].cpu().numpy())
    # numpy: the specification itself
    return (philox.philox_words, philox.uniforms, philox.normals)


def check_philox(compute: Compute, width: int) -> CheckResult:
    """``philox-words`` for ``compute``'s path at ``width`` (the words of its neuron groups)."""
    words_of, uniforms_of, normals_of = sampler_stages(compute)
    words, refs, unifs, normals, ref_normals = [], [], [], [], []
    for key in judge.CHECK_KEYS:
        for n0, n1 in judge.CHECK_COUNTERS:
            ref = philox.philox_words(key, n0, n1, width)
            w = words_of(key, n0, n1, width)
            words.append(w)
            refs.append(ref)
            if uniforms_of is not None:
                unifs.append(uniforms_of(w) if w.shape == ref.shape else np.zeros(0, np.float32))
            normals.append(normals_of(key, n0, n1, width))
            ref_normals.append(philox.box_muller(ref)[:, :width])
    return judge.judge_philox(words, refs, unifs if uniforms_of is not None else None, normals, ref_normals)


# --- the stretch through the bake's own path ---------------------------------------------------------


@dataclass
class _Stretch:
    """The checks' MLPs: ``B`` keys (fixed seeds), one weight set shared by all (cheap at 1024×16;
    the batch still multiplies B different inputs), and with control variates one ``Controls``."""

    spec: WorkSpec
    weights: np.ndarray  # (B, depth, width, width) float32
    keys: np.ndarray  # (B, 2) uint32
    controls: list | None
    samples: int


def _stretch(spec: WorkSpec, batch: int) -> _Stretch:
    n = min(stretch_samples(spec.width, spec.depth), spec.block_size or MAX_STRETCH)
    seeds = derived_seeds(CHECK_ROOT_SEED, max(batch, 2))
    streams = [spawn_streams(s) for s in seeds]
    w0 = sample_weights(streams[0][0], spec.width, spec.depth)
    weights = np.stack([w0] * batch)
    keys = np.array([philox.philox_key(ss[1]) for ss in streams[:batch]], dtype=np.uint32)
    controls = None
    if spec.estimation.is_cv:
        controls = [fit_controls(w0, stream(seeds[0], PILOT), n_pilot=_pilot_samples(spec))] * batch
    short = dataclasses.replace(spec, seeds=tuple(seeds), n_samples=n, mlp_range=(0, batch),
                                estimation=dataclasses.replace(spec.estimation, target_stderr=None),
                                mlps_per_unit=batch)
    return _Stretch(short, weights, keys, controls, n)


def _pilot_samples(spec: WorkSpec) -> int:
    """The checks' control-variate pilot: the bake's (``PILOT_SAMPLES``) up to 256×8; shorter above,
    where a full pilot would cost seconds (any fixed coefficients test the arithmetic)."""
    affordable = 2**32 // max(1, 2 * spec.width * spec.width * spec.depth)
    return int(min(PILOT_SAMPLES, max(4 * spec.width, affordable)))


def device_packed(st: _Stretch, compute: Compute, batch: int, *, n_programs: int | None = None) -> np.ndarray:
    """``(batch, rows, width)`` packed sums of the stretch's first ``batch`` MLPs through ``compute``'s
    path: the ``_block_runner`` a bake's units call, its parts added by the pairwise tree as
    ``steps._run_philox`` adds them. ``n_programs`` (fused kernel only): the persistent grid."""
    spec = dataclasses.replace(st.spec, mlp_range=(0, batch), mlps_per_unit=batch)
    w, k = st.weights[:batch], st.keys[:batch]
    controls = st.controls[:batch] if st.controls is not None else None
    if compute.engine == "triton" and n_programs is not None:
        sums = engine_module("ozaki").range_sums_for(compute.kernel_config)(w, k, (0, 1), spec.n_samples, config=compute.kernel_config,
                                                     block_size=spec.block_size, device=compute.device,
                                                     n_programs=n_programs)
        return np.stack([philox.pack(s) for s in sums])
    packed, counts = _block_runner(spec, compute, w, k, controls)(0, 1)  # (B, parts, rows, w)
    tree = philox.PairwiseStack()
    for j, c in enumerate(counts):
        tree.push(np.asarray(packed[:, j]), philox.level_of(int(c)))
    return np.asarray(tree.value()) + 0.0


def other_rows(compute: Compute, spec: WorkSpec, samples: int) -> int:
    """The second run's chunk: a quarter of the bake's (so the stretch is cut into more, smaller
    matmuls), or four times it when a quarter is below the smallest chunk."""
    torch, philox_torch = require("torch"), engine_module("torch")
    rows = compute.step_rows or philox_torch.step_rows(None, torch.device(compute.device), spec.mlps_per_unit,
                                                       spec.width, spec.block_size)
    used = min(rows, samples)
    return used // 4 if used // 4 >= philox_torch.MIN_CHUNK else min(used * 4, spec.block_size)


def check_sums(spec: WorkSpec, compute: Compute) -> tuple[CheckResult, CheckResult]:
    """``block-sums`` and ``row-invariance`` on one stretch (the first run serves both)."""
    batch = max(1, spec.mlps_per_unit)
    st = _stretch(spec, max(batch, 2))  # the second run may batch 2
    first = device_packed(st, compute, batch)  # the bake's own chunk and batch
    # block-sums: MLP 0 against the fp64 forward pass on the inputs this path draws
    _, _, normals_of = sampler_stages(compute)
    x = normals_of(tuple(int(v) for v in st.keys[0]), 0, st.samples, spec.width)  # (n, w) float32
    ref = judge.fp64_packed(st.weights[0], x, min(philox.BATCH, spec.block_size),
                            st.controls[0] if st.controls is not None else None)
    block = judge.judge_block_sums(first[0], ref, st.samples, spec.depth)
    # row-invariance: another chunk size and another batch size, same samples
    other_batch = 1 if batch > 1 else 2
    if compute.engine == "triton":
        second = device_packed(st, compute, other_batch, n_programs=3)
        what = (f"launches of {batch} and {other_batch} MLPs on the default grid and on 3 programs "
                f"(the fused kernel's matmul tile is fixed by construction)")
    elif compute.engine == "numpy":
        second = device_packed(st, compute, other_batch)
        what = f"batches of {batch} and {other_batch} MLPs"
    elif compute.engine == "cuda":
        second = device_packed(st, compute, other_batch)
        rows = compute.step_rows or engine_module("cuda").gemm_rows(spec.width, spec.block_size)
        what = (f"batches of {batch} and {other_batch} MLPs over the same {st.samples:,} samples (every GEMM is "
                f"{rows:,} rows by construction, whatever --chunk-size)")
    else:
        rows_a = min(compute.step_rows or st.samples, st.samples)
        if compute.engine == "numba":
            rows_a = min(rows_a, philox.BATCH)  # the numba tree runs inside one batch
        rows_b = other_rows(compute, st.spec, st.samples)
        second = device_packed(st, dataclasses.replace(compute, step_rows=rows_b), other_batch)
        what = (f"chunks of {rows_a:,} rows × {batch} MLP(s) and {rows_b:,} rows × {other_batch} MLP(s) "
                f"over the same {st.samples:,} samples")
    rows = judge.judge_row_invariance(first[0], second[0], what)
    return block, rows


def _raised(names: tuple[str, ...], exc: Exception) -> tuple[CheckResult, ...]:
    """A check that could not run failed: on a new device a kernel that does not compile or a
    driver error is exactly what the check is for, and it belongs in the report, not a traceback."""
    why = f"could not run: {type(exc).__name__}: {one_line(str(exc))[:300]}"
    return tuple(CheckResult(name, False, float("inf"), 0.0, why) for name in names)


def run_checks(spec: WorkSpec, compute: Compute) -> tuple[CheckResult, ...]:
    """The three checks of ``compute``'s path at ``spec``'s shape (one that raises fails)."""
    try:
        words = (check_philox(compute, spec.width),)
    except Exception as exc:  # noqa: BLE001 - reported as the check's failure
        words = _raised((PHILOX_WORDS,), exc)
    try:
        sums = check_sums(spec, compute)
    except Exception as exc:  # noqa: BLE001
        sums = _raised((BLOCK_SUMS, ROW_INVARIANCE), exc)
    return (*words, *sums)


def check_device(spec: WorkSpec, compute: Compute, *, accept_non_invariant: bool = False) -> DeviceCheck:
    """Run the three checks on the bake's own path; the caller refuses the bake on ``refusals()``."""
    t0 = time.perf_counter()
    checks = run_checks(spec, compute)
    sync_device(compute.device)
    seconds = time.perf_counter() - t0
    accepted = tuple(c.name for c in checks if not c.passed and c.name == ROW_INVARIANCE and accept_non_invariant)
    return DeviceCheck(all(c.passed for c in checks), False, checks, seconds, device_facts(compute.device),
                       versions(), accepted)


def skipped_check(compute: Compute) -> DeviceCheck:
    """The record of a bake run with ``--skip-device-check``."""
    return DeviceCheck(False, True, (), 0.0, device_facts(compute.device), versions())


def failure(check: DeviceCheck, report: str | None) -> DeviceCheckFailed:
    """The error a refused bake raises: the failed checks with their figures, what to do, the report."""
    failed = check.refusals()
    names = ", ".join(c.name for c in failed)
    what = "; ".join(f"{c.name}: {c.detail}" for c in failed)
    advice = ("the device computes something other than the specification: do not bake on it; "
              "run `whest doctor` and send the report to the whestbench maintainers")
    if [c.name for c in failed] == [ROW_INVARIANCE]:
        advice = (f"results would depend on --chunk-size and --mlps-per-batch on this device; pass {ACCEPT_FLAG} "
                  "to bake anyway (recorded in metadata.json), or run `whest doctor` and send the report")
    where = f"; report: {report}" if report else ""
    device = check.device.get("name") or check.device.get("type")
    return DeviceCheckFailed(f"device check failed ({names}) on {device}: {what};", fix=f"{advice}{where}")


def summary_line(record: Any) -> str | None:
    """``inspect``'s one line for a metadata ``device_check`` block (None when there is none)."""
    if not isinstance(record, dict):
        return None
    if record.get("skipped"):
        return "  device check: skipped (--skip-device-check)"
    checks = [c for c in record.get("checks") or [] if isinstance(c, dict)]
    bits = []
    for c in checks:
        mark = "ok" if c.get("passed") else "FAILED"
        figure = c.get("figure")
        if c.get("name") == BLOCK_SUMS and isinstance(figure, (int, float)):
            bits.append(f"{c.get('name')} {mark} ({figure:.2g} {'≤' if c.get('passed') else '>'} {c.get('limit')})")
        else:
            bits.append(f"{c.get('name')} {mark}")
    verdict = "passed" if record.get("passed") else "FAILED"
    if record.get("accepted"):
        verdict += f" (accepted: {', '.join(map(str, record['accepted']))})"
    device = record.get("device") if isinstance(record.get("device"), dict) else {}
    seconds = record.get("seconds")
    took = f" in {seconds:.1f} s" if isinstance(seconds, (int, float)) else ""
    return f"  device check: {verdict}{took} on {device.get('name') or device.get('type')}: {', '.join(bits)}"


__all__ = ["ACCEPT_FLAG", "DeviceCheck", "DeviceCheckFailed", "PHILOX_WORDS", "BLOCK_SUMS", "ROW_INVARIANCE",
           "check_device", "skipped_check", "failure", "summary_line", "run_checks", "versions", "device_facts"]
