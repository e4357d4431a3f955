"""``verify --spot-check K``: regenerate K audit-trail segments from their samples and compare.

The choice is ``random.Random(spot_seed).sample`` over every (split, MLP, segment) of the dataset,
printed. A segment depends only on its MLP's seed, the recipe and its sample range, so it is
regenerated alone: pcg64 from the generator state stored at its start (and the state it ends at
must equal the next segment's stored state, exactly, on any BLAS: forged states cannot stand for
other samples); philox from its counter-based blocks (the unit that covers it, as the bake cut it).
Values are compared bit for bit when the arithmetic is the bake's (pcg64: the same BLAS; philox: the
same precision class), else within the precision gate. A dataset with a fraction f of segments not
computed from their samples passes K checks with probability at most (1 − f)^K.

A stopped spot check resumes: each segment found matching is added to a small record
(``spot-<key>.json``) in the ``--recompute`` cache root, keyed by the dataset's metadata digest (its
checksums and ``plan_digest``: any re-signed change is another key), the spot seed, K and the device;
a re-run of the same command skips those segments and says how many. A record whose key differs, that
does not parse, or that another user could write is ignored; the record is removed when the check
completes (pass or fail), so a later run regenerates every segment again.
"""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import numpy as np

from whestbench.compute.estimation import Estimation, is_cv_block
from whestbench.compute.precision import GATE_MAX_ABS, SEGMENT_GATE_ULPS, SEGMENT_VAR_RTOL
from whestbench.compute.segments import segment_bounds
from whestbench.errors import BakeInterrupted, UsageError
from whestbench.format.schema import DatasetMeta
from whestbench.format.trail import pcg64_state
from whestbench.verify.report import VerifyReport
from whestbench.verify.scan import DatasetScan

def trail_blocks(ds: DatasetScan) -> list[tuple[Any, dict, Path]]:
    """``(split scan, audit block, file)`` of every split that keeps a trail."""
    out = []
    for s in ds.splits:
        block = DatasetMeta(ds.md).block(s.name).get("audit")  # the split's block: a dict, the metadata validated
        if isinstance(block, dict) and "file" in block:
            out.append((s, block, ds.path / str(block["file"])))
    return out


def _record_key(ds: DatasetScan, k: int, spot_seed: int, where: str) -> dict:
    from whestbench.work.ledger import identity_digest
    from whestbench.work.machine import whestbench_version

    return {"metadata_sha256": identity_digest(ds.md), "plan_digest": ds.md.get("plan_digest"), "spot_seed": int(spot_seed),
            "k": int(k), "device": where, "whestbench": whestbench_version()}


def _read_record(path: Path, key: dict) -> dict[str, str]:
    """The segments a stopped run of the same check found matching (``"split/mlp_id/segment"`` → mode), or
    nothing when the record is absent, unreadable, untrusted or made for another key."""
    import json

    from whestbench.atomic import read_regular
    from whestbench.verify.recompute import _not_trusted

    try:
        if _not_trusted(path) or _not_trusted(path.parent):
            return {}
        # one "split/mlp_id/segment": "mode" entry (~40 bytes) per segment a check draws: 64 MiB is 10**6 of them
        got = json.loads(read_regular(path, 64 << 20, "spot-check record"))
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(got, dict) or got.get("key") != key or not isinstance(got.get("matched"), dict):
        return {}
    return {str(n): str(m) for n, m in got["matched"].items()}


def spot_check(ds: DatasetScan, report: VerifyReport, k: int, spot_seed: int, device: str | None,
               stop: threading.Event | None = None, on_event=None, record_root: Path | None = None) -> None:
    """Regenerate ``k`` segments chosen with ``spot_seed`` and add the ``spot-check`` check. ``on_event``
    hears a ``progress`` event per segment (in samples: a segment's cost is its samples); ``stop``
    ends it between segments (BakeInterrupted, exit 75). With ``record_root`` (the recompute cache
    root; None for ``--no-cache``) the segments found matching are recorded there as they pass and a
    re-run skips them (module docstring)."""
    import pyarrow.parquet as pq

    from whestbench.events import Event, Progress
    from whestbench.work.ledger import identity_digest

    if device not in (None, "cpu"):
        from whestbench.work.torch_env import resolve_device

        device = resolve_device(device)  # a device this machine lacks is refused here, before any work
    blocks = trail_blocks(ds)
    if not blocks:
        raise UsageError("the dataset has no audit trail to spot-check; use --recompute K.")
    index = []  # (block number, file row, row of the split, segment)
    for b, (s, block, path) in enumerate(blocks):
        t = pq.read_table(str(path), columns=["mlp_id", "segment"])
        ids, segs = t.column("mlp_id").to_numpy(), t.column("segment").to_numpy()
        row_of = {int(m): r for r, m in enumerate(s.ids)}
        index += [(b, i, row_of[int(m)], int(g)) for i, (m, g) in enumerate(zip(ids, segs))]
    chosen = sorted(random.Random(spot_seed).sample(range(len(index)), min(k, len(index))))
    picks = [index[c] for c in chosen]
    multi = ds.is_multi
    names = ", ".join((f"{blocks[b][0].name}:" if multi else "") + f"{int(blocks[b][0].ids[r])}/{g}" for b, _, r, g in picks)
    problems: list[str] = []
    modes: set[str] = set()
    where = "cpu" if device in (None, "cpu") else device
    if where != "cpu" and all(DatasetMeta(ds.md).sampler(blocks[b][0].name).get("name") == "pcg64"
                              for b, _, _, _ in picks):  # said "regenerated on cuda" of numpy's CPU arithmetic
        where = f"cpu (the pcg64 sampler runs on the CPU only; --device {device} applies to Philox segments)"
    sizes = []
    for b, i, r, g in picks:
        s_, block, _ = blocks[b]
        n = ds.samples(s_, r)
        bounds = segment_bounds(n, int(block["step_samples"]), int(block["segments"]), bool(block["aligned"]))
        sizes.append(bounds[g][1] - bounds[g][0] if g < len(bounds) else 0)
    names_of = [f"{blocks[b][0].name}/{int(blocks[b][0].ids[r])}/{g}" for b, _, r, g in picks]
    key = _record_key(ds, len(picks), spot_seed, where) if record_root is not None else None
    record = Path(record_root) / ("spot-" + identity_digest(key)[:16] + ".json") if key is not None else None
    matched = {n: m for n, m in _read_record(record, key).items() if n in names_of} if record is not None else {}
    resumed, checked = len(matched), 0
    modes.update(matched.values())
    total = sum(sizes)
    covered = sum(size for size, n in zip(sizes, names_of) if n in matched)
    flops = 2 * ds.width * ds.width * ds.depth
    if on_event is not None:
        on_event(Event("progress", progress=Progress("samples", covered, total, flops_per_item=flops)))
    for done, (b, i, r, g) in enumerate(picks):
        if names_of[done] in matched:
            continue
        if stop is not None and stop.is_set():
            n_done = resumed + checked
            kept = (f"; the {len(matched)} found matching are recorded in {record}: re-run the same command to check "
                    "the rest" if matched else "; re-run the same command to check them all")
            raise BakeInterrupted(f"spot-check stopped: {n_done} of {len(picks)} segments done{kept}.", exit_code=75)
        s, block, path = blocks[b]
        stored, nxt = _rows(path, i)
        why, mode = _one(ds, s, block, r, g, stored, nxt, device)
        modes.add(mode)
        checked += 1
        if why:
            problems.append(f"mlp_id {int(s.ids[r])} segment {g}: {why}")
        elif record is not None:
            import json

            from whestbench.atomic import write_file_atomic

            matched[names_of[done]] = mode
            record.parent.mkdir(parents=True, exist_ok=True)
            write_file_atomic(record, json.dumps({"key": key, "matched": matched}, sort_keys=True).encode())
        covered += sizes[done]
        if on_event is not None:
            on_event(Event("progress", progress=Progress("samples", covered, total, flops_per_item=flops)))
    if record is not None:
        record.unlink(missing_ok=True)  # the check is complete: a later run regenerates every segment
    note = f" (resumed: {resumed} of {len(picks)} segments already checked)" if resumed else ""
    if problems:
        report.check("spot-check", False, f"{len(picks)} segment(s) chosen with --spot-seed {spot_seed} "
                     f"(mlp_id/segment {names}){note}; " + "; ".join(problems[:3]))
        return
    per_mlp = max(1, round(len(index) / len({(b, r) for b, _, r, _ in index})))  # segments of a typical MLP
    report.check("spot-check", True, (
        f"{len(picks)} segment(s) chosen at random with --spot-seed {spot_seed} (mlp_id/segment {names}) regenerated "
        f"on {where} ({'/'.join(sorted(modes))}): all match{note}; a dataset with a fraction f of segments not computed from "
        f"their samples passes with probability ≤ (1−f)^{len(picks)} — ({per_mlp - 1}/{per_mlp})^{len(picks)} = "
        f"{(1 - 1 / per_mlp) ** len(picks):.3g} at f = 1/{per_mlp} (one segment per MLP)"))


def _rows(path: Path, i: int) -> tuple[dict, dict | None]:
    """File rows ``i`` and ``i + 1`` (None past the end) as dicts."""
    import pyarrow.parquet as pq

    f = pq.ParquetFile(str(path))
    start = 0
    got = []
    for gi in range(f.num_row_groups):
        n = f.metadata.row_group(gi).num_rows
        if start + n > i:
            t = f.read_row_group(gi)
            got += t.slice(i - start, 2).to_pylist()
            if len(got) < 2 and gi + 1 < f.num_row_groups:
                got += f.read_row_group(gi + 1).slice(0, 1).to_pylist()
            break
        start += n
    return got[0], (got[1] if len(got) > 1 else None)


def _values(row: dict, width: int) -> dict[str, np.ndarray]:
    return {name: np.asarray(row[name], dtype=np.float32).reshape(-1, width)
            for name in ("means", "var", "cv_means", "cv_var") if row.get(name) is not None}


def _one(ds: DatasetScan, s, block: dict, r: int, g: int, stored: dict, nxt: dict | None, device: str | None
         ) -> tuple[str | None, str]:
    from whestbench.compute.mlp import weights_for_seed
    from whestbench.work.controls import controls_for

    level = DatasetMeta(ds.md).entry(s.name)  # the split's keys over the top level's
    cv = is_cv_block(level.get("estimator"))
    seed = int(s.seeds[r])
    n = ds.samples(s, r)
    segments, step, aligned = int(block["segments"]), int(block["step_samples"]), bool(block["aligned"])
    bounds = segment_bounds(n, step, segments, aligned)
    if g >= len(bounds) or (int(stored["sample_start"]), int(stored["sample_end"])) != bounds[g]:
        return "its sample range is not the segment's of this MLP (the trail check names why)", "-"
    depth, width = ds.depth, ds.width
    want = _values(stored, width)
    sampler = (level.get("sampler") or {}).get("name")
    if sampler == "pcg64":
        from whestbench.compute.pcg64 import Pcg64Stream, fused_pays
        from whestbench.compute.seeds import spawn_streams
        from whestbench.work.machine import blas_info
        from whestbench.work.threads import one_blas_thread

        weights = weights_for_seed(seed, width, depth)
        with one_blas_thread():
            controls = controls_for(seed, weights) if cv and depth > 1 else None
            start, end = bounds[g]
            stream = Pcg64Stream(weights, spawn_streams(seed)[1], n, fused=fused_pays(1, end - start, width, depth),
                                 controls=controls, segments=bounds)
            try:
                stream.seek(g, pcg64_state(stored["pcg64_state"], f"segment {g}"))
            except ValueError as e:
                return str(e), "-"
            while stream.position < end:
                stream.step()
        got = {k: v.reshape(-1, width) for k, v in stream.segment_values(g).items()}
        if nxt is not None and int(nxt["segment"]) == g + 1 and stream.rng.bit_generator.state != _state_or_none(nxt):
            return "the generator's state at the segment's end is not the next segment's stored state", "chain"
        bits = isinstance(ds.md.get("blas"), dict) and ds.md.get("blas") == blas_info()
    else:
        got, bits = _philox(ds, level, seed, n, bounds, g, segments, cv, device)
    if cv and depth > 1:
        got = {k: (v[1:] if k.startswith("cv_") else v) for k, v in got.items()}  # the file keeps layers 2..
    return _compare(want, got, bits, width), ("bits" if bits else "gate")


def _state_or_none(row: dict) -> dict | None:
    """The next segment's stored generator state, or None when it is no PCG64 state (then it is no match)."""
    try:
        return pcg64_state(row.get("pcg64_state"))
    except ValueError:
        return None


def _philox(ds: DatasetScan, level: dict, seed: int, n: int, bounds, g: int, segments: int, cv: bool,
            device: str | None) -> tuple[dict[str, np.ndarray], bool]:
    from whestbench.work.steps import Compute, run_unit
    from whestbench.work.units import Unit, WorkSpec

    sampler = level.get("sampler") or {}
    bs = int(sampler["block_size"])
    start, end = bounds[g]
    seg_len = bounds[0][1] - bounds[0][0]
    b0, b1 = start // bs, -(-end // bs)
    unit_blocks = max(1, 2 * seg_len // bs)
    unit_blocks = 1 << max(unit_blocks - 1, 0).bit_length()
    est = Estimation.from_metadata(level)
    spec = WorkSpec(seeds=(seed,), n_samples=n, width=ds.width, depth=ds.depth, mlp_range=(0, 1), sampler="philox",
                    block_size=bs, unit_blocks=unit_blocks, audit_segments=segments,
                    estimation=Estimation(est.name))
    kernel = level.get("kernel") or {}
    local = device or "cpu"  # spot_check resolved it
    try:
        import torch

        from whestbench.compute.philox.numba_engine import resolve_engine
        from whestbench.work.torch_env import kernel_identity

        compute = Compute(resolve_engine("auto", torch.device(local)), local)
        bits = kernel.get("precision_class") == kernel_identity(local, compute.engine, ds.width)["precision_class"]
    except ImportError:
        compute, bits = Compute("numba", "cpu"), False
    result = run_unit(spec, compute, Unit(0, b0, b1, 1))
    trail = result.trail.mlp(0)
    k = g - trail.first
    return {name: v[k].reshape(-1, ds.width) for name, v in trail.values.items()}, bits


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
