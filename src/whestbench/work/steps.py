"""Running one unit of work: the samplers' loops, with checkpoints inside the unit and a prompt stop.

``run_unit(spec, compute, unit, ctx)`` is the one pipeline step every executor calls (local
threads, torchrun/srun ranks, calibration). It sees only its unit: where it runs and who scheduled
it never change a bit of its result.

Checkpoints: a pcg64 unit is a whole MLP (up to hours at 10⁹ samples), a philox unit an aligned run
of canonical blocks. Every ``ctx.checkpoint_every`` seconds, and when a stop is requested, the unit
saves what it needs to continue — pcg64: the bit generator's state, the position and the fp64
partial sums; philox: the next block and the pairwise tree's pending subtrees — and a later run
continues from there with the same bits as an uninterrupted one.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import numpy as np

from whestbench.compute.seeds import spawn_streams
from whestbench.compute.segments import SegmentTrail, finish, trail_names
from whestbench.compute.stats import LayerSums
from whestbench.errors import DamagedRecord
from whestbench.work import CHECKPOINT_EVERY_S
from whestbench.work.controls import controls_for
from whestbench.work.records import RECOMPUTED
from whestbench.work.threads import pin_torch_threads_here
from whestbench.work.units import Unit, WorkSpec
from whestbench.compute.mlp import sample_weights
from whestbench.compute.pcg64 import Pcg64Stream, fused_pays
from whestbench.compute.philox import spec as philox
from whestbench.optional import engine_module, require

ENGINES = ("numpy", "numba", "torch", "cuda", "triton")
TRITON_GROUP_BLOCKS = 16  # canonical blocks per fused-kernel launch between checkpoint chances


@dataclass(frozen=True)
class Compute:
    """How units run (never what they compute): none of it changes a byte except through the
    arithmetic, which ``WorkSpec.arithmetic`` names."""

    engine: str = "numpy"
    """pcg64: "numpy". philox: "numpy" (the reference), "numba" (CPU), "torch" (any device: plain torch ops;
    MPS), "cuda" (the plain CUDA path, ``compute/philox/cuda_engine.py``), "triton" (a Triton kernel that
    draws, runs every layer and sums: the integer kernel for an ``OzakiConfig``, else the fused one)."""
    device: str = "cpu"
    """Resolved device: "cpu", "cuda:<i>" or "mps"."""
    step_rows: int | None = None
    """philox on torch: rows per step (a power of two); None for the engine's default. The cuda engine:
    every GEMM's row count (``cuda_engine.gemm_rows``, part of the arithmetic, never ``--chunk-size``)."""
    kernel_config: Any = None
    """triton: the kernel's ``OzakiConfig`` (``compute/philox/ozaki.py``) or ``KernelConfig`` (the fused kernel)."""
    pcg64_fused: bool | None = None
    """pcg64: run the fused (numba) kernels or the numpy passes (the same bits); None: as the bake's
    size decides (``_pcg64_fused``). Calibration sets it to the planned bake's choice, so the timed
    run times the kernels the bake will run."""

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"unknown engine {self.engine!r}; use one of {ENGINES}.")

    @property
    def pins_torch_threads(self) -> bool:
        """torch on the CPU runs one single-threaded caller per core (see ``threads.pin_torch_threads_here``)."""
        return self.engine in ("numba", "torch") and self.device == "cpu"


class UnitStopped(Exception):
    """A stop was requested while the unit ran; it saved a checkpoint (when it has somewhere to)."""


class Checkpoints(Protocol):
    """Where a unit's checkpoints live: ``work.ledger.Ledger`` (files) or, on a distributed peer,
    ``work.distributed``'s store-backed checkpoints (kept in rank 0's ledger)."""

    def load_checkpoint(self, key: str) -> tuple[dict, dict[str, np.ndarray]] | None: ...

    def save_checkpoint(self, key: str, state: dict, arrays: dict[str, np.ndarray]) -> None: ...

    def drop_checkpoint(self, key: str) -> None: ...

    def checkpoint_path(self, key: str) -> object:
        """Where the checkpoint is, for messages."""
        ...


def checkpoint_samples(spec: WorkSpec, unit: Unit, meta: dict) -> int:
    """The samples (over all of the unit's MLPs) a checkpoint's ``meta`` covers."""
    return int(meta["position" if spec.sampler == "pcg64" else "samples"]) * unit.mlp_count


@dataclass
class UnitContext:
    """What a running unit may do besides computing: report samples, checkpoint, notice a stop."""

    on_samples: Callable[[int], None] = lambda n: None
    """Called with the samples (over all of the unit's MLPs) computed since the last call."""
    on_resumed: Callable[[int], None] = lambda n: None
    """Called once with the samples a checkpoint already covered."""
    on_checkpoint: Callable[[], None] = lambda: None
    on_note: Callable[[str], None] = lambda text: None
    stop: threading.Event = field(default_factory=threading.Event)
    checkpoints: Checkpoints | None = None
    """Where checkpoints go: the ledger, or (a distributed peer) rank 0 through the store; None: no
    checkpoints (calibration)."""
    checkpoint_every: float = CHECKPOINT_EVERY_S
    arithmetic: threading.Event | None = None
    """Set while the bake's fixed arithmetic holds (BLAS at one thread, ``threads.one_blas_thread``);
    None: not watched. A unit saves nothing computed once it is cleared."""

    def arithmetic_held(self) -> bool:
        return self.arithmetic is None or self.arithmetic.is_set()

    def __post_init__(self) -> None:
        self._last = time.monotonic()

    def resume(self, key: str) -> tuple[dict, dict[str, np.ndarray]] | None:
        if self.checkpoints is None:
            return None
        try:
            saved = self.checkpoints.load_checkpoint(key)
            if saved is not None:
                # a record can pass its checksum and still hold what no sampling gives (forged, or a
                # bug): checked as unit files are, so a bad one is recomputed, never carried forward
                bad = [name for name, a in saved[1].items() if a.dtype.kind == "f" and not np.all(np.isfinite(a))]
                if bad:
                    raise DamagedRecord(f"{', '.join(bad)} hold{'s' if len(bad) == 1 else ''} non-finite values",
                                        fix=RECOMPUTED)
            return saved
        except (DamagedRecord, OSError) as e:
            why = getattr(e, "problem", None) or e
            self.on_note(f"checkpoint {self.checkpoints.checkpoint_path(key)} failed its check ({why}); restarting unit {key}")
            self.checkpoints.drop_checkpoint(key)
            return None

    def after_step(self, key: str, state: Callable[[], tuple[dict, dict[str, np.ndarray]]]) -> None:
        """Checkpoint when due; on a stop request checkpoint and raise UnitStopped. When the bake's
        fixed arithmetic was lifted during the step (a bake ending on an error while this unit still
        ran), the step's sums are not the bake's: stop without saving them (the last checkpoint stays)."""
        if not self.arithmetic_held():
            raise UnitStopped(key)
        stopping = self.stop.is_set()
        now = time.monotonic()
        if self.checkpoints is not None and (stopping or now - self._last >= self.checkpoint_every):
            meta, arrays = state()
            self.checkpoints.save_checkpoint(key, meta, arrays)
            self._last = time.monotonic()
            self.on_checkpoint()
        if stopping:
            raise UnitStopped(key)


def run_unit(spec: WorkSpec, compute: Compute, unit: Unit, ctx: UnitContext | None = None) -> LayerSums:
    """Compute ``unit`` of ``spec`` (continuing from its checkpoint if it has one). UnitStopped when
    the bake's fixed arithmetic was lifted before it finished: its result is not the bake's."""
    ctx = ctx or UnitContext()
    sums = _run_pcg64(spec, compute, unit, ctx) if spec.sampler == "pcg64" else _run_philox(spec, compute, unit, ctx)
    if not ctx.arithmetic_held():
        raise UnitStopped(unit.key)
    return sums


def kernel_module(spec: WorkSpec, compute: Compute):
    """The module of the numba kernels this bake's units will call (None: they call none)."""
    if spec.sampler == "pcg64":
        return engine_module("fused") if _pcg64_fused(spec, compute) else None
    return engine_module("numba_kernels") if compute.engine == "numba" else None


def _pcg64_fused(spec: WorkSpec, compute: Compute | None = None) -> bool:
    """Whether this bake's pcg64 units run the fused (numba) kernels: only bakes big enough to repay
    numba's start-up (or as ``compute.pcg64_fused`` says); the plain numpy passes give the same bits."""
    if compute is not None and compute.pcg64_fused is not None:
        return compute.pcg64_fused and spec.width > 1
    start, end = spec.mlp_range
    return fused_pays(end - start, spec.n_samples, spec.width, spec.depth)


def _run_pcg64(spec: WorkSpec, compute: Compute, unit: Unit, ctx: UnitContext) -> LayerSums:
    seed = spec.seeds[unit.mlp_index]
    weight_ss, sample_ss, _ = spawn_streams(seed)
    weights = sample_weights(weight_ss, spec.width, spec.depth)
    controls = controls_for(seed, weights) if spec.estimation.is_cv else None
    fused = _pcg64_fused(spec, compute)
    n = spec.planned_samples(unit.mlp_index)  # with a target: what the MLP's pilot plans, fixed before sampling
    segments = spec.segments(unit.mlp_index)
    stream = Pcg64Stream(weights, sample_ss, n, fused=fused, controls=controls, segments=segments)
    saved = ctx.resume(unit.key)
    if saved is not None:
        try:
            stream.restore(*saved)
            ctx.on_resumed(stream.position)
            ctx.on_note(f"resuming unit {unit.key} from its checkpoint at {stream.position:,} of {n:,} samples")
        except (ValueError, KeyError, TypeError) as e:
            ctx.on_note(f"checkpoint of unit {unit.key} does not fit this bake ({e}); restarting the unit")
            stream = Pcg64Stream(weights, sample_ss, n, fused=fused, controls=controls, segments=segments)
    while not stream.done:
        ctx.on_samples(stream.step())
        if stream.done:
            break
        ctx.after_step(unit.key, stream.state)
    return stream.result()


def _run_philox(spec: WorkSpec, compute: Compute, unit: Unit, ctx: UnitContext) -> LayerSums:
    """A batch of MLPs over an aligned block range, block by block (the fused kernel: groups of
    blocks), each block's batches pushed into the pairwise tree as they come."""
    weights, keys, controls = [], [], []
    for i in unit.mlps:
        weight_ss, sample_ss, _ = spawn_streams(spec.seeds[i])
        weights.append(sample_weights(weight_ss, spec.width, spec.depth))
        keys.append(philox.philox_key(sample_ss))
        if spec.estimation.is_cv:
            controls.append(controls_for(spec.seeds[i], weights[-1]))
    w_batch = np.stack(weights)  # (B, depth, width, width)
    key_arr = np.array(keys, dtype=np.uint32)  # (B, 2)
    blocks = _block_runner(spec, compute, w_batch, key_arr, controls or None)
    step = getattr(blocks, "blocks_per_call", 1)  # the device engines run groups of blocks per call

    tree, b, done_samples = philox.PairwiseStack(), unit.block_start, 0
    block_end = unit.block_end
    if spec.estimation.has_target:  # one MLP per unit, from block 0: stop where its pilot plans
        planned = spec.planned_samples(unit.mlps[0])
        if planned < spec.n_samples:
            block_end = min(block_end, planned // spec.block_size)
    # the audit trail: segments inside this unit are summed apart in a second tree (segment_samples each)
    held = spec.unit_segments(unit)
    bounds = spec.segments(unit.mlps[0])
    seg_len = bounds[0][1] - bounds[0][0] if held else 0
    if held and compute.engine == "triton" and seg_len % spec.block_size:
        raise ValueError(f"the fused kernel cannot cut inside a block: audit segments of {seg_len} samples")
    names = trail_names(spec.estimation.is_cv)
    trail = {k: np.zeros((unit.mlp_count, len(held), spec.depth, spec.width), dtype=np.float32) for k in names}
    seg_tree, seg_next = philox.PairwiseStack(), 0  # seg_next: segments of this unit finished
    saved = ctx.resume(unit.key)
    if saved is not None:
        try:
            meta, arrays = saved
            b, done_samples = int(meta["next_block"]), int(meta["samples"])
            levels = [int(v) for v in meta["levels"]]
            if not unit.block_start <= b <= block_end:
                raise ValueError(f"next block {b} outside the unit")
            tree = philox.PairwiseStack.from_state(levels, [arrays[f"level{i}"] for i in range(len(levels))])
            if held:
                seg_levels, seg_next = [int(v) for v in meta["seg_levels"]], int(meta["seg_next"])
                seg_tree = philox.PairwiseStack.from_state(seg_levels, [arrays[f"seg_level{i}"] for i in range(len(seg_levels))])
                for k in names:
                    if arrays[f"trail_{k}"].shape != trail[k].shape:
                        raise ValueError(f"trail {k} has the wrong shape")
                    trail[k] = np.array(arrays[f"trail_{k}"], dtype=np.float32)
            ctx.on_resumed(done_samples * unit.mlp_count)
            ctx.on_note(f"resuming unit {unit.key} from its checkpoint at {done_samples:,} of "
                        f"{spec.unit_samples(unit):,} samples")
        except (ValueError, KeyError, TypeError) as e:
            ctx.on_note(f"checkpoint of unit {unit.key} does not fit this bake ({e}); restarting the unit")
            tree, b, done_samples = philox.PairwiseStack(), unit.block_start, 0
            seg_tree, seg_next = philox.PairwiseStack(), 0
            trail = {k: np.zeros_like(v) for k, v in trail.items()}

    def state() -> tuple[dict, dict[str, np.ndarray]]:
        levels, values = tree.state()
        meta = {"next_block": b, "samples": done_samples, "levels": levels}
        arrays = {f"level{i}": np.asarray(v) for i, v in enumerate(values)}
        if held:
            seg_levels, seg_values = seg_tree.state()
            meta.update(seg_levels=seg_levels, seg_next=seg_next)
            arrays.update({f"seg_level{i}": np.asarray(v) for i, v in enumerate(seg_values)})
            arrays.update({f"trail_{k}": v.copy() for k, v in trail.items()})
        return meta, arrays

    unit_start = unit.block_start * spec.block_size
    while b < block_end:
        e = min(b + step, block_end)
        if held and compute.engine == "triton":  # the fused kernel sums the whole call: never past a segment's end
            e = min(e, ((b * spec.block_size) // seg_len + 1) * seg_len // spec.block_size)
        packed, counts = blocks(b, e)  # (B, parts, rows, w) fp64 and the samples of each part
        pos = unit_start + done_samples
        for k, c in enumerate(counts):
            tree.push(packed[:, k], philox.level_of(int(c)))
            if held:
                seg_tree.push(packed[:, k], philox.level_of(int(c)))
                pos += int(c)
                if pos % seg_len == 0 or pos == bounds[-1][1]:
                    for name, v in finish(np.asarray(seg_tree.value()), bounds[held.start + seg_next][1]
                                          - bounds[held.start + seg_next][0], spec.depth).items():
                        trail[name][:, seg_next] = v
                    seg_tree, seg_next = philox.PairwiseStack(), seg_next + 1
        count = int(np.sum(counts))
        b, done_samples = e, done_samples + count
        ctx.on_samples(count * unit.mlp_count)
        if b >= block_end:
            break
        ctx.after_step(unit.key, state)
    total = np.asarray(tree.value())
    out = LayerSums.stack([philox.unpack(total[j], done_samples, spec.depth) for j in range(unit.mlp_count)])
    if held:
        out.trail = SegmentTrail(held.start, trail)
    return out


def _whole_block_parts(spec: WorkSpec) -> bool:
    """Whether a unit's parts may be whole blocks rather than batches: no audit segment ends inside a
    block (the control-variate rows, which need every batch, are the caller's test). A target bake's
    segments follow its pilot's plan, so it keeps batches."""
    if not spec.audit_segments:
        return True
    if spec.estimation.has_target:
        return False
    bounds = spec.segments(spec.mlp_range[0])  # the same for every MLP without a target
    return not bounds or (bounds[0][1] - bounds[0][0]) % spec.block_size == 0


def _block_runner(spec: WorkSpec, compute: Compute, w_batch: np.ndarray, keys: np.ndarray, controls):
    """``run(b0, b1) -> (packed (B, parts, rows, w) fp64, samples of each part)`` for the aligned
    blocks ``[b0, b1)``: the parts are batches (the cuda engine: blocks where no part needs batches,
    ``_whole_block_parts``; the fused kernel: the whole range, plain sums only)."""
    n, bs, depth = spec.n_samples, spec.block_size, spec.depth

    def packed(raw: np.ndarray, counts: np.ndarray) -> np.ndarray:  # raw (B, nb, 2d+1, w)
        if controls is None:
            return philox.batch_packed(raw, counts, depth)
        return np.stack([philox.batch_packed(raw[j], counts, depth, controls[j]) for j in range(len(raw))])

    if compute.engine == "numpy":

        def run(b0: int, b1: int):
            assert b1 == b0 + 1
            parts = [philox.block_batches(w, (int(k[0]), int(k[1])), b0, n, block_size=bs) for w, k in zip(w_batch, keys)]
            counts = parts[0][1]
            return packed(np.stack([raw for raw, _ in parts]), counts), counts

        return run
    if compute.pins_torch_threads:
        pin_torch_threads_here()
    if compute.engine == "triton":
        range_sums = engine_module("ozaki").range_sums_for(compute.kernel_config)

        def run(b0: int, b1: int):
            sums = range_sums(w_batch, keys, (b0, b1), n, block_size=bs, device=compute.device,
                              config=compute.kernel_config)
            return np.stack([philox.pack(s) for s in sums])[:, None], np.array([sums[0].count])

        run.blocks_per_call = TRITON_GROUP_BLOCKS  # type: ignore[attr-defined]
        return run
    if compute.engine == "cuda":  # one wait for the device per call of several blocks
        engine = engine_module("cuda").CudaEngine(w_batch, keys, compute.device, rows=compute.step_rows, block_size=bs,
                            z2sq=controls is not None)
        per_block = controls is None and _whole_block_parts(spec)

        def run(b0: int, b1: int):
            raw, counts = engine.batches_host(b0, b1, n, per_block=per_block)
            return packed(raw, counts), counts

        run.blocks_per_call = engine.blocks_per_call  # type: ignore[attr-defined]
        return run
    torch, block_batches_torch = require("torch"), engine_module("torch").block_batches_torch
    w_dev = torch.as_tensor(w_batch, device=torch.device(compute.device))  # moved once, reused per block

    def run(b0: int, b1: int):
        assert b1 == b0 + 1
        raw, counts = block_batches_torch(w_dev, keys, b0, n, compute.device, chunk_size=compute.step_rows,
                                          block_size=bs, engine=compute.engine, z2sq=controls is not None)
        return packed(raw, counts), counts

    return run
