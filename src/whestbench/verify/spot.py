"""``verify --spot-check K`` / ``K/mlp``: regenerate audit-trail segments from their samples and compare.

The choice (``spot_draw.draw_segments``) is K segments among every (split, MLP, segment) of the
dataset, or K of every MLP, drawn with a seed no one can predict (a fresh one each run, printed;
``--spot-seed S`` reproduces a run). A segment depends only on its MLP's seed, the recipe and its
sample range, so it is regenerated alone: pcg64 from the generator state stored at its start (and
the state it ends at must equal the next segment's stored state, exactly, on any BLAS: forged
states cannot stand for other samples); philox from its counter-based blocks (the unit that covers
it, as the bake cut it). Values are compared bit for bit when the arithmetic is the bake's (pcg64:
the same BLAS; philox: the same precision class), else within the precision gate. The check states
what its draw catches, for both threat models (``spot_draw.detection``).

The segments run as the bake's units do: on worker threads, one per core (``bake_workers``), BLAS at
one thread and torch at one intra-op thread per worker (``work.threads``): a segment costs 1/S of
its MLP's bake. Progress is reported as samples are drawn, not per segment.

A stopped spot check (a stop signal: exit 75; Ctrl-C: 130) resumes: each segment found matching is
added to a small record (``spot-<key>.json``) in the ``--recompute`` cache root, keyed by the
dataset's metadata digest (its checksums and ``plan_digest``: any re-signed change is another key),
the spot seed, the budget and the device; ``--spot-seed S`` with the same budget skips those
segments and says how many (the stop's message names S). A record whose key differs, that does
not parse, or that another user could write is ignored; the record is removed when the check
completes (pass or fail), so a later run regenerates every segment again.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Callable

import numpy as np

from whestbench import optional
from whestbench.atomic import read_regular, write_file_atomic
from whestbench.compute.estimation import Estimation, is_cv_block
from whestbench.compute.mlp import sample_weights, weights_for_seed
from whestbench.compute.pcg64 import Pcg64Stream, fused_pays
from whestbench.compute.philox import spec as philox
from whestbench.compute.precision import GATE_MAX_ABS, SEGMENT_GATE_ULPS, SEGMENT_VAR_RTOL
from whestbench.compute.seeds import spawn_streams
from whestbench.compute.segments import finish, segment_bounds
from whestbench.errors import BakeInterrupted, UsageError
from whestbench.events import Event, Progress
from whestbench.format.schema import DatasetMeta
from whestbench.format.trail import pcg64_state
from whestbench.verify.report import VerifyReport
from whestbench.verify.scan import DatasetScan
from whestbench.verify.recompute import not_trusted, pending, remember
from whestbench.verify.spot_draw import SpotBudget, detection, draw_segments, fresh_seed
from whestbench.work import executor, torch_env
from whestbench.work.controls import controls_for
from whestbench.work.ledger import identity_digest
from whestbench.work.machine import blas_info, whestbench_version
from whestbench.work.steps import Compute, UnitContext, UnitStopped, run_unit
from whestbench.work.threads import one_blas_thread, one_torch_thread, pin_torch_threads_here
from whestbench.work.units import Unit, WorkSpec

SHOWN = 12
"""Segments named in the check's line; the rest are counted (the seed reproduces the whole draw)."""


def trail_blocks(ds: DatasetScan) -> list[tuple[Any, dict, Path]]:
    """``(split scan, audit block, file)`` of every split that keeps a trail."""
    out = []
    for s in ds.splits:
        block = DatasetMeta(ds.md).block(s.name).get("audit")  # the split's block: a dict, the metadata validated
        if isinstance(block, dict) and "file" in block:
            out.append((s, block, ds.path / str(block["file"])))
    return out


def _read_record(path: Path, key: dict) -> dict[str, str]:
    """The segments a stopped run of the same check found matching (``"split/mlp_id/segment"`` → mode), or
    nothing when the record is absent, unreadable, untrusted or made for another key."""
    try:
        if not_trusted(path) or not_trusted(path.parent):
            return {}
        # one "split/mlp_id/segment": "mode" entry (~40 bytes) per segment a check draws: 64 MiB is 10**6 of them
        got = json.loads(read_regular(path, 64 << 20, "spot-check record"))
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(got, dict) or got.get("key") != key or not isinstance(got.get("matched"), dict):
        return {}
    return {str(n): str(m) for n, m in got["matched"].items()}


def _index(ds: DatasetScan, blocks) -> list[list[tuple[int, int, int, int]]]:
    """Every MLP's segments in the trail files, in the dataset's order: ``[(block, file row, split row,
    segment)]`` per MLP."""
    import pyarrow.parquet as pq

    mlps: dict[tuple[int, int], list] = {}
    for b, (s, _block, path) in enumerate(blocks):
        t = pq.read_table(str(path), columns=["mlp_id", "segment"])
        ids, segs = t.column("mlp_id").to_numpy(), t.column("segment").to_numpy()
        row_of = {int(m): r for r, m in enumerate(s.ids)}
        for i, (m, g) in enumerate(zip(ids, segs)):
            r = row_of[int(m)]
            mlps.setdefault((b, r), []).append((b, i, r, int(g)))
    return [mlps[key] for key in sorted(mlps)]


def spot_check(ds: DatasetScan, report: VerifyReport, budget: SpotBudget | int | str, spot_seed: int | None,
               device: str | None, stop: threading.Event | None = None, on_event=None, record_root: Path | None = None,
               workers: int | None = None) -> int:
    """Regenerate the segments ``budget`` draws with ``spot_seed`` (None: a fresh seed) and add the
    ``spot-check`` check; return the seed. ``on_event`` hears a ``start`` event, the seed (a note)
    and ``progress`` in samples as they are drawn; ``stop`` ends it within a sampler step
    (BakeInterrupted, exit 75; Ctrl-C 130). With ``record_root`` (the recompute cache root; None for
    ``--no-cache``) the segments found matching are recorded there as they pass and a re-run with the
    same seed and budget skips them (module docstring). ``workers``: threads (default one per core)."""
    budget = SpotBudget.parse(budget)
    if device not in (None, "cpu"):
        device = torch_env.resolve_device(device)  # a device this machine lacks is refused here, before any work
    blocks = trail_blocks(ds)
    if not blocks:
        raise UsageError("the dataset has no audit trail to spot-check;", fix="use --recompute K.")
    where = "cpu" if device in (None, "cpu") else device
    draw_key = {"draw": "spot-check", "metadata_sha256": identity_digest(ds.md), "budget": str(budget), "device": where}
    keep, kept = pending(record_root if spot_seed is None else None, draw_key)  # a stopped run's draw, continued
    seed = int(spot_seed) if spot_seed is not None else kept if kept is not None else fresh_seed()
    mlps = _index(ds, blocks)
    counts = [len(m) for m in mlps]
    picks = [mlps[m][g] for m, g in draw_segments(counts, budget, seed)]
    det = detection(counts, budget)
    labels = [(f"{blocks[b][0].name}:" if ds.is_multi else "") + f"{int(blocks[b][0].ids[r])}/{g}" for b, _, r, g in picks]
    names = ", ".join(labels[:SHOWN]) + (f", … and {len(labels) - SHOWN} more" if len(labels) > SHOWN else "")
    samplers = {DatasetMeta(ds.md).sampler(blocks[b][0].name).get("name") for b, _, _, _ in picks}
    if where != "cpu" and samplers == {"pcg64"}:  # said "regenerated on cuda" of numpy's CPU arithmetic
        where = f"cpu (the pcg64 sampler runs on the CPU only; --device {device} applies to Philox segments)"
    sizes = []
    for b, i, r, g in picks:
        s_, block, _ = blocks[b]
        bounds = segment_bounds(ds.samples(s_, r), int(block["step_samples"]), int(block["segments"]), bool(block["aligned"]))
        sizes.append(bounds[g][1] - bounds[g][0] if g < len(bounds) else 0)
    names_of = [f"{blocks[b][0].name}/{int(blocks[b][0].ids[r])}/{g}" for b, _, r, g in picks]
    key = None if record_root is None else {  # what a stopped run's record must have been made for
        "metadata_sha256": identity_digest(ds.md), "plan_digest": ds.md.get("plan_digest"), "spot_seed": seed,
        "budget": str(budget), "device": where, "whestbench": whestbench_version()}
    record = Path(record_root) / ("spot-" + identity_digest(key)[:16] + ".json") if key is not None else None
    matched = {n: m for n, m in _read_record(record, key).items() if n in names_of} if record is not None else {}
    resumed = len(matched)
    modes: set[str] = set(matched.values())
    problems: list[tuple[int, str]] = []
    total = sum(sizes)
    flops = 2 * ds.width * ds.width * ds.depth
    lock = threading.Lock()
    state = {"covered": sum(size for size, n in zip(sizes, names_of) if n in matched), "done": resumed}
    emit = on_event or (lambda event: None)
    stop = stop if stop is not None else threading.Event()

    def progress() -> Progress:
        return Progress("samples", min(state["covered"], total), total, flops_per_item=flops, phase="spot check")

    def on_samples(n: int) -> None:
        with lock:  # emitted under the lock: the workers' counts reach the display in order
            state["covered"] += n
            emit(Event("progress", progress=progress()))

    emit(Event("note", message=f"spot check: {len(picks)} segment(s) ({_budget_words(budget)}) drawn with --spot-seed "
                               f"{seed}" + (f"; {resumed} already checked by the stopped run" if resumed else "")
                               + (" (the draw of the run stopped earlier)" if kept is not None and spot_seed is None else "")))
    remember(keep, draw_key, seed)
    emit(Event("start", progress=progress()))  # the stop signals now ask the segments to stop (exit 75)
    computes: dict[str, Any] = {}

    def work(j: int) -> None:
        if stop.is_set():
            return
        b, i, r, g = picks[j]
        s, block, path = blocks[b]
        stored, nxt = _rows(path, i)
        why, mode = _one(ds, s, block, r, g, stored, nxt, device, computes, on_samples, stop)
        with lock:
            modes.add(mode)
            state["done"] += 1
            if why:
                problems.append((j, f"mlp_id {int(s.ids[r])} segment {g}: {why}"))
            elif record is not None:
                matched[names_of[j]] = mode
                record.parent.mkdir(parents=True, exist_ok=True)
                write_file_atomic(record, json.dumps({"key": key, "matched": matched}, sort_keys=True).encode())

    todo = [j for j, n in enumerate(names_of) if n not in matched]
    pin = "philox" in samplers and where == "cpu"
    code = 0
    if todo:
        n_workers = executor.bake_workers(workers if where == "cpu" or "pcg64" in samplers else 1, len(todo))
        with one_blas_thread(), one_torch_thread(pin), \
                ThreadPoolExecutor(max_workers=n_workers, thread_name_prefix="whest-spot") as pool:
            futures = [pool.submit(_guarded, work, j, stop) for j in todo]
            try:
                _wait_awake(futures)
            except KeyboardInterrupt:  # Ctrl-C: the segments in flight stop at their next step
                stop.set()
                wait(futures)
                code = 130
            for f in futures:
                if f.done() and f.exception() is not None and not isinstance(f.exception(), UnitStopped):
                    stop.set()
                    wait(futures)
                    raise f.exception()
    if code or (stop.is_set() and state["done"] < len(picks)):
        again = (f"re-run the same command to check the rest (it continues this draw; elsewhere, or with --no-cache: "
                 f"--spot-check {budget} --spot-seed {seed})")
        kept = (f"; the {len(matched)} found matching are recorded in {record}: {again}" if matched and record is not None
                else f"; {again}")
        raise BakeInterrupted(f"spot-check stopped: {state['done']} of {len(picks)} segments done{kept}.",
                              exit_code=code or 75)
    for done_with in (record, keep):
        if done_with is not None:
            done_with.unlink(missing_ok=True)  # the check is complete: a later run draws and regenerates afresh
    note = f" (resumed: {resumed} of {len(picks)} segments already checked)" if resumed else ""
    drew = f"{len(picks)} segment(s) ({_budget_words(budget)}) drawn at random with --spot-seed {seed}"
    if problems:
        report.check("spot-check", False, f"{drew} (mlp_id/segment {names}){note}; "
                     + "; ".join(p for _, p in sorted(problems)[:3]))
        return seed
    report.check("spot-check", True, (  # what the draw catches, both threat models (spot_draw.Detection)
        f"{drew} (mlp_id/segment {names}) regenerated on {where} ({'/'.join(sorted(modes))}): all match{note}; "
        f"this draw ({det.drawn} of {det.total:,} segments in {det.mlps:,} MLP{'' if det.mlps == 1 else 's'}) catches "
        f"one bad segment in every MLP with probability {det.every:.3g}, and {det.q} forged "
        f"segment{'s' if det.q != 1 else ''} in one MLP of {det.mlps:,} with probability {det.one:.3g}"))
    return seed


def _budget_words(budget: SpotBudget) -> str:
    return f"--spot-check {budget}: {budget.k} of every MLP" if budget.per_mlp else f"--spot-check {budget}"


def _guarded(work: Callable[[int], None], j: int, stop: threading.Event) -> None:
    try:
        work(j)
    except UnitStopped:
        pass
    except BaseException:
        stop.set()  # the other segments stop too
        raise


def _wait_awake(futures: list) -> None:
    """Wait for ``futures``, the main thread waking every 0.2 s to run a signal's handler
    (``work.executor._wait_awake``: a stop reaches the segments within a step)."""
    while True:
        done, running = wait(futures, timeout=0.2, return_when=FIRST_EXCEPTION)
        if not running or any(f.exception() is not None for f in done):
            return


def _rows(path: Path, i: int) -> tuple[dict, dict | None]:
    """File rows ``i`` and ``i + 1`` (None past the end) as dicts."""
    import pyarrow.parquet as pq

    f = pq.ParquetFile(str(path))
    start = 0
    got = []
    for gi in range(f.num_row_groups):
        n = f.metadata.row_group(gi).num_rows
        if start + n > i:
            got += f.read_row_group(gi).slice(i - start, 2).to_pylist()
            if len(got) < 2 and gi + 1 < f.num_row_groups:
                got += f.read_row_group(gi + 1).slice(0, 1).to_pylist()
            break
        start += n
    return got[0], (got[1] if len(got) > 1 else None)


def _one(ds: DatasetScan, s, block: dict, r: int, g: int, stored: dict, nxt: dict | None, device: str | None,
         computes: dict | None = None, on_samples: Callable[[int], None] | None = None,
         stop: threading.Event | None = None) -> tuple[str | None, str]:
    """Regenerate segment ``g`` of row ``r`` and compare it with ``stored``: ``(why it differs or None,
    "bits" | "gate" | "chain" | "-")``. Runs on a worker thread under the bake's thread limits; raises
    UnitStopped when ``stop`` is set between two sampler steps."""
    computes = {} if computes is None else computes
    on_samples = on_samples or (lambda n: None)
    stop = stop if stop is not None else threading.Event()
    level = DatasetMeta(ds.md).entry(s.name)  # the split's keys over the top level's
    cv = is_cv_block(level.get("estimator"))
    seed = int(s.seeds[r])
    n = ds.samples(s, r)
    segments, step, aligned = int(block["segments"]), int(block["step_samples"]), bool(block["aligned"])
    bounds = segment_bounds(n, step, segments, aligned)
    if g >= len(bounds) or (int(stored["sample_start"]), int(stored["sample_end"])) != bounds[g]:
        return "its sample range is not the segment's of this MLP (the trail check names why)", "-"
    depth, width = ds.depth, ds.width
    want = {name: np.asarray(stored[name], dtype=np.float32).reshape(-1, width)
            for name in ("means", "var", "cv_means", "cv_var") if stored.get(name) is not None}
    sampler = (level.get("sampler") or {}).get("name")
    if sampler == "pcg64":
        weights = weights_for_seed(seed, width, depth)
        controls = controls_for(seed, weights) if cv and depth > 1 else None
        start, end = bounds[g]
        # the fused (numba) kernels where the bake ran them: the same bits either way, their speed where it pays
        stream = Pcg64Stream(weights, spawn_streams(seed)[1], n, fused=fused_pays(1, n, width, depth),
                             controls=controls, segments=bounds)
        try:
            stream.seek(g, pcg64_state(stored["pcg64_state"], f"segment {g}"))
        except ValueError as e:
            return str(e), "-"
        while stream.position < end:
            if stop.is_set():
                raise UnitStopped(f"segment {g}")
            on_samples(stream.step())
        got = {k: v.reshape(-1, width) for k, v in stream.segment_values(g).items()}
        if nxt is not None and int(nxt["segment"]) == g + 1 and stream.rng.bit_generator.state != _state_or_none(nxt):
            return "the generator's state at the segment's end is not the next segment's stored state", "chain"
        bits = isinstance(ds.md.get("blas"), dict) and ds.md.get("blas") == blas_info()
    else:
        got, bits = _philox(ds, level, seed, n, bounds, g, segments, device, computes, on_samples, stop)
    if cv and depth > 1:
        got = {k: (v[1:] if k.startswith("cv_") else v) for k, v in got.items()}  # the file keeps layers 2..
    return _compare(want, got, bits, width), ("bits" if bits else "gate")


def _state_or_none(row: dict) -> dict | None:
    """The next segment's stored generator state, or None when it is no PCG64 state (then it is no match)."""
    try:
        return pcg64_state(row.get("pcg64_state"))
    except ValueError:
        return None


def _compute(ds: DatasetScan, level: dict, device: str | None, computes: dict):
    """``(Compute, bits)`` for philox segments on ``device``: the engine the bake's CPU or device path runs,
    and whether its precision class is the bake's (then the values must match bit for bit). Made once
    per check (``computes`` holds it; the workers share it)."""
    local = device or "cpu"  # spot_check resolved it
    kernel = level.get("kernel") or {}
    cache_key = (local, str(kernel.get("precision_class")))
    if cache_key not in computes:
        try:
            torch = optional.require("torch", needed_for="a philox segment")
            engine = optional.engine_module("numba").resolve_engine("auto", torch.device(local))
            compute = Compute(engine, local)
            bits = kernel.get("precision_class") == torch_env.kernel_identity(local, compute.engine, ds.width)["precision_class"]
        except ImportError:
            compute, bits = Compute("numba", "cpu"), False
        computes.setdefault(cache_key, (compute, bits))
    return computes[cache_key]


def _philox(ds: DatasetScan, level: dict, seed: int, n: int, bounds, g: int, segments: int, device: str | None,
            computes: dict, on_samples: Callable[[int], None], stop: threading.Event) -> tuple[dict[str, np.ndarray], bool]:
    sampler = level.get("sampler") or {}
    bs = int(sampler["block_size"])
    est = Estimation.from_metadata(level)
    compute, bits = _compute(ds, level, device, computes)
    if compute.engine in ("numba", "torch"):  # the segment's own batches, not the blocks around it
        return _philox_batches(ds, seed, n, bounds[g], bs, est.is_cv, compute, on_samples, stop), bits
    start, end = bounds[g]
    seg_len = bounds[0][1] - bounds[0][0]
    b0, b1 = start // bs, -(-end // bs)
    unit_blocks = max(1, 2 * seg_len // bs)
    unit_blocks = 1 << max(unit_blocks - 1, 0).bit_length()
    spec = WorkSpec(seeds=(seed,), n_samples=n, width=ds.width, depth=ds.depth, mlp_range=(0, 1), sampler="philox",
                    block_size=bs, unit_blocks=unit_blocks, audit_segments=segments,
                    estimation=Estimation(est.name))
    result = run_unit(spec, compute, Unit(0, b0, b1, 1), UnitContext(on_samples=on_samples, stop=stop))
    trail = result.trail.mlp(0)
    k = g - trail.first
    return {name: v[k].reshape(-1, ds.width) for name, v in trail.values.items()}, bits


def _philox_batches(ds: DatasetScan, seed: int, n: int, bound: tuple[int, int], bs: int, cv: bool, compute,
                    on_samples: Callable[[int], None], stop: threading.Event) -> dict[str, np.ndarray]:
    """One segment's values from its own batches (``block_batches_torch``'s ``span``), summed as the bake's
    unit sums a segment (``work.steps._run_philox``: its parts pushed into a tree of their own, then
    ``finish``): a segment costs its samples, not the blocks that hold it."""
    torch = optional.require("torch", needed_for="a philox segment")
    block_batches_torch = optional.engine_module("torch").block_batches_torch
    if compute.pins_torch_threads:
        pin_torch_threads_here()
    weight_ss, sample_ss, _ = spawn_streams(seed)
    weights = sample_weights(weight_ss, ds.width, ds.depth)
    controls = controls_for(seed, weights) if cv else None
    keys = np.array([philox.philox_key(sample_ss)], dtype=np.uint32)
    w_dev = torch.as_tensor(weights[None], device=torch.device(compute.device))
    start, end = bound
    tree = philox.PairwiseStack()
    for b in range(start // bs, -(-end // bs)):
        if stop.is_set():
            raise UnitStopped(f"segment at {start}")
        raw, counts = block_batches_torch(w_dev, keys, b, n, compute.device, chunk_size=compute.step_rows,
                                          block_size=bs, engine=compute.engine, z2sq=controls is not None,
                                          span=(start, end))
        packed = philox.batch_packed(raw[0], counts, ds.depth, controls)[None]  # (1, parts, rows, w)
        for k, c in enumerate(counts):
            tree.push(packed[:, k], philox.level_of(int(c)))
        on_samples(int(np.sum(counts)))
    return {name: v[0].reshape(-1, ds.width) for name, v in finish(np.asarray(tree.value()), end - start, ds.depth).items()}


def _compare(want: dict[str, np.ndarray], got: dict[str, np.ndarray], bits: bool, width: int) -> str | None:
    for name, w in want.items():
        v = got[name]
        if v.shape != w.shape:
            return f"{name} has shape {w.shape}, regenerated {v.shape}"
        if bits:
            bad = v.view(np.uint32) != w.view(np.uint32)
        elif name.endswith("var"):
            bad = np.abs(v.astype(np.float64) - w) > SEGMENT_VAR_RTOL * np.abs(w.astype(np.float64)) + GATE_MAX_ABS
        else:
            ulp = np.spacing(np.maximum(np.abs(w), np.abs(v))).astype(np.float64)
            bad = np.abs(v.astype(np.float64) - w) > GATE_MAX_ABS + SEGMENT_GATE_ULPS * ulp
        if bad.any():
            row, j = map(int, np.argwhere(bad)[0])
            layer = row + (1 if name.startswith("cv_") else 0)
            return (f"{name} layer {layer + 1} neuron {j}: stored {float(w[row, j]):.9g}, regenerated "
                    f"{float(v[row, j]):.9g} ({int(bad.sum())} value(s) differ{'' if bits else ' beyond the gate'})")
    return None
