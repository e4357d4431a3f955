"""Bake a dataset: plan it, execute its units, write the directory.

``bake(cfg)`` is the one entry point shared by the CLI, the Python API (``create_dataset``,
``create_dataset_torch``) and the launchers (torchrun, srun), on every backend:

1. **plan** — ``bake.plan.plan_bake``: every check before any work (values, output, device,
   seeds, what the bake needs from the machine);
2. **execute** — under the work directory's lock, the seeds are resolved, the ledger opened and
   an executor (``LocalExecutor``, or ``StoreExecutor`` as one rank of many) runs every unit not
   saved yet, checkpointing inside units;
3. **write** — each MLP's sums are read back from the ledger, finalized and streamed into the
   dataset directory, which appears atomically; then the work directory is removed.

Re-running the same call after a crash, a kill or a signal resumes from the work directory and
writes identical numeric columns.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import numpy as np

from whestbench.atomic import write_file_atomic
from whestbench.bake.plan import (BakeConfig, BakePlan, Done, check_bake_output, device_check_report, plan_bake,
                                  plan_targets, result_marker)
from whestbench.compute.estimation import CV_TARGET_RULE, EXCEED_PROBABILITY, MIN_RELIABLE_BATCHES, Estimation
from whestbench.compute.estimators import (chosen_stderr, cv_floor_samples, finalize_estimates, float32_target, layer1_means,
                                           meets_target, n_batches)
from whestbench.compute import jit
from whestbench.compute.mlp import weights_for_seed
from whestbench.compute.naming import mlp_name, unique_names
from whestbench.compute.seeds import estimator_seeds, seed_list_digest, validate_mlp_seeds
from whestbench.compute.segments import DEFAULT_SEGMENTS
from whestbench.compute.stats import LayerSums, avg_variance, finalize
from whestbench.errors import RESUME, InvalidDatasetError, WorkDirBusy
from whestbench.events import Event, EventSink, Progress, ignore
from whestbench.format import command
from whestbench.format.bakemeta import SAMPLES_USED, bake_metadata, samples_used_block
from whestbench.format.breakdown import breakdown_json, sampling_budget_breakdown
from whestbench.format.card import prepare as prepare_card
from whestbench.format.schema import DEFAULT_CONFIG, DEFAULT_SPLIT, N_USED_COLUMN, STDERR_COLUMN
from whestbench.format.trail import audit_block
from whestbench.format.writer import restore_card, update_card, write_dataset
from whestbench.text import sanitize
from whestbench.values import as_int
from whestbench.work import device_check as dc
from whestbench.work.distributed import store_executor
from whestbench.work.executor import Executor, LocalExecutor, bake_workers
from whestbench.work.ledger import Ledger, load_seeds, save_seeds
from whestbench.work import steps
from whestbench.work.steps import checkpoint_samples
from whestbench.work.threads import one_torch_thread
from whestbench.work.torch_env import torch_metadata
from whestbench.work.units import WorkSpec, mlp_totals, mlp_trail, units_of_mlp
from whestbench.work.workdir import PHASES, hold_lock, read_status, remove_unsaved, write_status

if TYPE_CHECKING:
    from whestbench.work.launch_env import DistEnv

__all__ = ["BakeConfig", "bake", "create_dataset", "api_config"]


def bake(
    request: BakeConfig | BakePlan | Done,
    *,
    on_event: EventSink | None = None,
    stop: threading.Event | None = None,
    dist_env: "DistEnv | None" = None,
    peer_timeout_s: float = 300.0,
    complete_ok: bool = True,
    confirm: Callable[[Any], str | None] | None = None,
) -> Path | None:
    """Bake ``request`` (a config, or what ``plan_bake`` made of one) and return the output path.

    With ``dist_env`` (several ranks) every rank computes units; rank 0 gathers, writes and returns
    the path, the other ranks return None. Raises BakeInterrupted (resumable) when ``stop`` is set.
    An output that already holds this very bake, complete (``Done``), is not baked again: its card is
    settled (``settle_complete``, which runs ``confirm``) and a note says so (its ``data["complete"]``); the path is
    returned (whestbench 0.16's ``create_dataset`` refuses any existing output: ``complete_ok=False``).
    """
    emit = on_event or ignore
    plan = request if isinstance(request, (BakePlan, Done)) else plan_bake(request, dist_env=dist_env)
    if isinstance(plan, Done):  # a re-run of a finished bake: nothing to compute
        if not complete_ok:
            check_bake_output(plan.output)  # raises whestbench 0.16's "already exists"
        card = settle_complete(plan.dataset, plan.metadata, plan.card, confirm=confirm)
        emit(Event("note", message=f"{plan.output} is already complete ({plan.summary()}): nothing to do; its "
                                   "content is not verified here (verify_dataset checks it)", data={"complete": plan, "card": card}))
        for line in card:  # the CLI prints them with the line above
            emit(Event("note", message=line, data={"card": line}))
        return plan.output
    for note in plan.notes:
        emit(Event("warning", message=note))
    distributed = dist_env is not None and dist_env.world_size > 1
    checked = check_device(plan, emit, dist_env.rank if distributed else 0)  # torch bakes; before any work
    if distributed:
        executor: Executor = store_executor.StoreExecutor(dist_env, workers=plan.workers or 1, peer_timeout_s=peer_timeout_s)
    else:
        executor = LocalExecutor(plan.workers)
    if distributed and dist_env.rank != 0:
        _load_kernels(plan, ignore)  # rank 0 says it if the cache is cold; one note, not one per rank
        with one_torch_thread(plan.compute.pins_torch_threads):
            executor.run(plan.job(None), on_event=emit, stop=stop)
        return None

    work = plan.work_dir
    fresh = not work.exists()
    try:
        with hold_lock(work, plan.config.bake_command or ""):
            keep_seeds(plan)
            if not distributed:  # other ranks wait for rank 0 under --peer-timeout: they plan per unit
                plan = plan_targets(plan, emit, stop, work)  # a target bake: every MLP's count, before any sampling
            emit(Event("plan", data={"plan": plan}))  # the CLI's Plan line
            ledger = Ledger(work, plan.spec.identity())
            _record_status(plan, dist_env)
            _prefetch_writer_imports()
            _load_kernels(plan, emit)
            with one_torch_thread(plan.compute.pins_torch_threads):
                executor.run(plan.job(ledger), on_event=emit, stop=stop)
            write_baked(plan, ledger, emit, device_check=checked)
            ledger.remove()
    except BaseException:
        remove_unsaved(work, fresh)  # refused before any state was saved: leave nothing
        raise
    return plan.config.output


def settle_complete(output: Any, md: dict[str, Any], card: dict[str, Any] | None, *,
                    confirm: Callable[[Any], str | None] | None = None) -> list[str]:
    """What a re-run does to an output that already holds its result (a bake's ``Done``, a merge or
    combine re-run): rewrite a README.md that is missing or lost its configs block; run ``confirm``
    (the first failed check, or None), raising InvalidDatasetError naming what failed; then record
    the card fields given to the re-run (``card``) that differ from the recorded ones (the card is no
    part of the numbers). Returns one line per change to the card."""
    restored = restore_card(output, md)
    failed = confirm(output) if confirm is not None else None
    if failed is not None:
        shown = sanitize(str(output))
        raise InvalidDatasetError(f"{shown} holds this result but fails verify: {failed};",
                                  fix=f"move it aside and re-run (`whest dataset verify {shown}` shows every check).")
    lines = ["card rewritten: README.md was missing or its configs block wrong"] if restored else []
    for field, (old, new) in update_card(output, md, card).items():
        was = "the default" if old is None else sanitize(repr(old))
        now = "removed (the new card fields replace it)" if new is None else sanitize(repr(new))
        lines.append(f"card updated: {field} {was} → {now} (README.md and metadata.json's card; the numbers are unchanged)")
    return lines


def _record_status(plan: BakePlan, dist_env: "DistEnv | None") -> None:
    """The plan's figures ``whest dataset status`` cannot read from the units: the planned samples
    (a target bake's pilot-planned total), the units and the workers."""

    planned = plan.spec.planned is not None or not plan.spec.estimation.has_target
    run = read_status(plan.work_dir).get("run")  # the phase this run reached (``workdir.record_phase``)
    write_status(plan.work_dir, {**({"run": run} if run is not None else {}),
        "planned_total": plan.planned_total if planned else None, "units_total": len(plan.spec.units()),
        "workers": bake_workers(plan.workers), "world_size": dist_env.world_size if dist_env else 1,
    })


def saved_samples(plan: BakePlan) -> int:
    """Samples a previous run of this very bake left in its work directory (finished units and
    checkpoints, each passing its checks), read without writing or locking anything: what a
    re-run will not compute again, for the plan line. 0 when there is none, or it cannot be read
    (the bake itself then says why)."""

    work, spec = plan.work_dir, plan.spec
    if work is None or work.is_symlink() or not work.is_dir() or not spec.seeds:  # no seeds: a rank other than 0
        return 0
    try:
        ledger = Ledger.peek(work, spec.identity())
        if ledger is None:
            return 0
        total = 0
        for u in spec.units():
            saved = ledger.saved(u.key)
            if saved is not None:
                kind, meta = saved
                total += int(meta["count"]) * u.mlp_count if kind == "unit" else checkpoint_samples(spec, u, meta)
        return total
    except Exception:  # noqa: BLE001 - a damaged work directory: the bake reports it by name
        return 0


def check_device(plan: BakePlan, emit: EventSink = ignore, rank: int = 0) -> dict[str, Any] | None:
    """A torch bake's device check (``work/device_check.py``) on the plan's own path, before any
    work: the ``device_check`` record for metadata.json (None off the torch backend). On a failure
    the record goes to ``device_check_report(output)`` and DeviceCheckFailed (exit 1) says so."""
    if plan.config.backend != "torch":
        return None

    if plan.config.skip_device_check:
        emit(Event("warning", message="device check skipped (--skip-device-check); metadata.json records the skip"))
        return dc.skipped_check(plan.compute).record()
    _load_kernels(plan, emit)  # compiled once here, so the check's time is the check's
    emit(Event("stage", message=PHASES["device-check"], data={"phase": "device-check"}))
    with one_torch_thread(plan.compute.pins_torch_threads):
        result = dc.check_device(plan.spec, plan.compute, accept_non_invariant=plan.config.accept_non_invariant)
    record = result.record()
    if result.refusals():
        report = None
        if plan.config.output is not None:
            path = device_check_report(plan.config.output, rank)
            doc = {"device_check": record, "bake_command": _bake_command(plan.config, plan.seed_source),
                   "kernel": plan.kernel_md, "sampler": plan.sampler_md}
            try:
                write_file_atomic(path, (json.dumps(doc, indent=2) + "\n").encode())
                report = str(path)
            except OSError as exc:
                report = f"not written ({exc.strerror or exc})"
        raise dc.failure(result, report)
    for c in result.checks:
        if c.name in result.accepted:
            emit(Event("warning", message=f"{c.name} failed and was accepted ({dc.ACCEPT_FLAG}): {c.detail}"))
    return record


def keep_seeds(plan: BakePlan) -> None:
    """Keep a bake's random seeds (drawn by ``plan_bake``) in its work directory, under its lock and before any
    unit, so a re-run of the same command resumes with them instead of starting a different dataset. Refuses
    (WorkDirBusy) when another run kept other seeds there after this one was planned."""
    if plan.seed_source.get("method") != "random":
        return
    seeds = list(plan.spec.seeds)
    kept = load_seeds(plan.work_dir, len(seeds), seed_list_digest, validate_mlp_seeds)
    if kept is None:
        save_seeds(plan.work_dir, seeds, seed_list_digest(seeds))
    elif kept != seeds:
        raise WorkDirBusy(f"another run of this bake kept its random seeds in {plan.work_dir} while this one was planning;",
                          fix=RESUME)


def _prefetch_writer_imports() -> None:
    """Import what writing needs (pyarrow ~0.2 s, faker ~0.3 s with its provider, the card's
    template ~0.1 s) on a background thread while the first units compute: the workers release the
    GIL in BLAS, numba and the samplers, so this start-up cost disappears from the wall time of
    short bakes."""

    def load() -> None:
        # While this (pure Python) import holds the GIL, a worker returning from BLAS waits up to
        # the switch interval for it, ~17 times per chunk: shorten the interval meanwhile.
        previous = sys.getswitchinterval()
        sys.setswitchinterval(1e-4)
        try:
            import pyarrow.parquet  # noqa: F401

            mlp_name(0)  # reads faker's en_US word lists
            prepare_card()
        except Exception:  # noqa: BLE001 - writing meets the same error on the main thread and reports it
            pass
        finally:
            sys.setswitchinterval(previous)

    threading.Thread(target=load, name="whest-prefetch", daemon=True).start()


KERNELS_SLOW_S = 1.0  # loading cached kernels takes ~0.1 s; compiling them (a cold cache) seconds
KERNELS_NOTE = ("compiling the CPU kernels for this machine (first run only: numba caches them for "
                "later runs; see docs/performance.md, \"Start-up\")")


def _load_kernels(plan: BakePlan, emit: EventSink) -> None:
    """Compile, or load from numba's cache, the kernels the units will call, before they start;
    when numba's cache lacks them (a cold cache: first run on a machine, or after an upgrade) say
    why the bake is quiet. A warm cache says nothing, however long loading takes on a loaded node;
    where the cache cannot be read, the note comes when loading takes over ``KERNELS_SLOW_S``."""

    module = steps.kernel_module(plan.spec, plan.compute)
    if module is None:
        return
    emit(Event("stage", message=PHASES["kernels"], data={"phase": "kernels"}))
    warm = jit.cache_is_warm(module)
    if warm is not None:
        if not warm:
            emit(Event("note", message=KERNELS_NOTE))
        module.load_kernels()
        return
    note = threading.Timer(KERNELS_SLOW_S, lambda: emit(Event("note", message=KERNELS_NOTE)))
    note.daemon = True
    note.start()
    try:
        module.load_kernels()
    finally:
        note.cancel()


# --- writing ------------------------------------------------------------------------------------


def _bake_command(cfg: BakeConfig, seed_source: dict[str, Any]) -> str:
    """The command this bake records: the one it was given, or the one that reproduces its numbers."""
    derived, torch, (start, end) = seed_source.get("method") == "derived", cfg.backend == "torch", cfg.range
    return cfg.bake_command or command.join(command.bake_argv([
        *command.BAKE_PREFIX,
        ("--n-mlps", cfg.n_mlps), ("--n-samples", cfg.n_samples), ("--width", cfg.width), ("--depth", cfg.depth),
        ("--seed", seed_source["root_seed"]) if derived else ("--mlp-seeds", cfg.seeds_file or "seeds.json"),
        ("--split", cfg.split), ("--config", cfg.config),
        ("--torch", torch), ("--device", torch and (cfg.device or "auto")),
        ("--gpu-kernel", torch and cfg.gpu_kernel != "torch" and cfg.gpu_kernel),
        # the device check's outcome is recorded beside this command, which must say how it was reached
        ("--skip-device-check", torch and cfg.skip_device_check),
        ("--accept-non-invariant", torch and cfg.accept_non_invariant),
        *cfg.estimation.flags(),
        ("--audit-segments", cfg.audit_segments != DEFAULT_SEGMENTS and cfg.audit_segments),
        ("--mlp-range", cfg.is_partial and f"{start}-{end - 1}"),
    ], cfg.output))


def write_baked(plan: BakePlan, ledger: Ledger, emit: EventSink = ignore, *,
                device_check: dict[str, Any] | None = None) -> None:
    """Read each MLP's sums back from ``ledger``, turn them into rows and write the dataset atomically
    (``device_check``: the record of the torch bake's device check)."""
    cfg, spec = plan.config, plan.spec
    start, end = cfg.range
    names = unique_names(estimator_seeds(spec.seeds[:end]), start, end)  # names of seeds[:end] only
    if plan.kernel_md is None:
        backend_fields, chunk, row_kind = None, plan.sampler_md["block_size"], "cpu"
    else:
        kernel = {k: v for k, v in plan.kernel_md.items() if k not in ("mlps_per_batch", "chunk_size")}
        chunk, row_kind = plan.kernel_md["chunk_size"], "torch"
        backend_fields = torch_metadata(plan.compute.device.split(":")[0], mlps_per_batch=plan.kernel_md["mlps_per_batch"],
                                        chunk_size=chunk, kernel=kernel)
    md = bake_metadata(
        split=cfg.split, config=cfg.config, n_rows=end - start, n_samples=cfg.n_samples, width=cfg.width,
        depth=cfg.depth, mlp_range=(start, end), total_n_mlps=cfg.n_mlps, sampler=plan.sampler_md,
        seed_list_digest=seed_list_digest(spec.seeds), seed_source=plan.seed_source,
        bake_command=_bake_command(cfg, plan.seed_source),
        backend=plan.backend, backend_fields=backend_fields, **spec.estimation.metadata(spec.cv_batch, spec.step_samples),
        card=cfg.card,
        device_check=device_check,
        plan_digest=result_marker(plan, spec.seeds, plan.seed_source),
        audit=_audit_block(spec, cfg.split),
    )
    emit(Event("writing", message=f"writing {cfg.output}", progress=Progress("rows", 0, end - start)))
    stops: dict[str, Any] = {}
    rows = _rows(spec, ledger, range(start, end), names, chunk, row_kind, emit, stops, md)
    write_dataset(cfg.output, cfg.split, rows, end - start, cfg.width, cfg.depth, md)
    emit(Event("done", message=f"wrote {cfg.output}", data={"output": str(cfg.output), **stops}))


def _audit_block(spec: WorkSpec, split: str) -> dict[str, Any] | None:
    if spec.audit_segments <= 0:
        return None
    return audit_block(split, spec.audit_segments, spec.cv_batch, spec.sampler == "philox",
                       spec.estimation.is_cv and spec.depth > 1, spec.sampler == "pcg64")


def _mlp_results(spec: WorkSpec, ledger: Ledger, indices: range) -> Iterator[tuple[int, LayerSums, float]]:
    """``(i, total sums, wall seconds)`` per MLP, each unit file read once (a batch holds several MLPs);
    the total's ``trail`` is the MLP's whole audit trail (``units.mlp_trail``)."""

    cache: dict[str, tuple[LayerSums, float]] = {}
    for i in indices:
        units = units_of_mlp(spec, i)
        for u in units:
            if u.key not in cache:
                cache[u.key] = ledger.load(u.key, lambda s, u=u: spec.check_result(u, s))
        results = {u.key: cache[u.key][0] for u in units}
        total = mlp_totals(spec, i, results)
        total = LayerSums.from_arrays(total.arrays(), total.count)  # a unit's own result keeps its unit trail
        total.trail = mlp_trail(spec, i, results)
        wall = sum(cache[u.key][1] / u.mlp_count for u in units)  # a unit's wall time is shared by its MLPs
        if units[-1].mlps[-1] == i:  # the last MLP of its batch: its units are not needed again
            for u in units:
                cache.pop(u.key, None)
        yield i, total, wall


def estimates(spec: WorkSpec, sums: LayerSums, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, np.ndarray]:
    """One MLP's numeric columns: ``(all_layer_means, final_means, avg_variance, all_layer_stderr)``.

    plain: the reference's rounding steps exactly (``stats.finalize``). control-variate: layer 1 is
    the exact mean, later layers the control-variate estimates. ``avg_variance`` keeps the
    reference's definition (the sample variance around the stored final means).
    """
    if not spec.estimation.is_cv:
        means, final, avg_var = finalize(sums)
        _, stderr = finalize_estimates(sums, spec.estimation.name)
    else:
        m64, stderr = finalize_estimates(sums, spec.estimation.name, n_batches(sums.count, spec.cv_batch),
                                         layer1_means(weights[0]))
        means = m64.astype(np.float32)
        final = means[-1].copy()
        avg_var = avg_variance(sums.sumsq[-1], sums.count, final)
    return means, final, avg_var, stderr.astype(np.float32)


def _rows(spec: WorkSpec, ledger: Ledger, indices: range, names: list[str], chunk: int, row_kind: str,
          emit: EventSink, stops: dict[str, Any], md: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The dataset's rows. ``stops`` (a target bake) receives how the MLPs stopped: ``early`` (before
    ``n_samples``), ``at_floor`` (at ``floor``: ``cv_floor_samples``, the fewest a control-variate
    target stops at; None otherwise, a plain bake may stop at the first step) and ``floor``. ``md``
    (the metadata the writer writes after the last row) gains a target bake's ``samples_used``."""

    total = len(indices)
    missed, worst = 0, 0.0  # MLPs that used the whole cap and still miss the target standard error
    ratios: list[float] = []  # each MLP's largest chosen standard error / E (NaN: too few samples)
    counts: list[int] = []
    est = spec.estimation
    floor = cv_floor_samples(spec.n_samples, spec.step_samples, spec.cv_batch) if est.has_target and est.is_cv else None
    early = at_floor = 0
    for n, ((i, sums, wall), name) in enumerate(zip(_mlp_results(spec, ledger, indices), names), 1):
        seed = spec.seeds[i]
        weights = weights_for_seed(seed, spec.width, spec.depth)
        means, final, avg_var, stderr = estimates(spec, sums, weights)
        row = {
            "mlp_id": i,
            "mlp_name": name,
            "mlp_seed": seed,
            "weights": weights,
            "all_layer_means": means,
            "final_means": final,
            "avg_variance": avg_var,
            "sampling_budget_breakdown": breakdown_json(
                sampling_budget_breakdown(sums.count, spec.width, spec.depth, chunk, wall_time_s=wall, row_kind=row_kind)
            ),
            STDERR_COLUMN: stderr,
        }
        if sums.trail is not None:  # to the side file (format/trail.py), not a column
            row["_trail"] = (sums.trail, spec.segments(i))
        if est.has_target:
            row[N_USED_COLUMN] = sums.count
            counts.append(sums.count)
            early += sums.count < spec.n_samples
            at_floor += floor is not None and sums.count == floor < spec.n_samples
            chosen = chosen_stderr(stderr, est.stderr_layer)
            largest = float(np.nanmax(chosen)) if np.isfinite(chosen).any() else float("nan")
            ratios.append(largest / est.target_stderr if est.target_stderr > 0 else float("nan"))
            # the pilot-planned rule fixes N before sampling and aims at "about E": an MLP that stopped
            # below the cap did what the rule planned, whatever its final error; only the cap can miss
            if sums.count >= spec.n_samples and not meets_target(stderr, float32_target(est.target_stderr),
                                                                  est.stderr_layer):
                missed += 1
                worst = max(worst, 0.0 if np.isnan(largest) else largest)
        # before the yield: the writer takes the last row and never resumes this generator
        emit(Event("progress", progress=Progress("rows", n, total)))
        if n == total and est.has_target:
            finite = np.array([r for r in ratios if np.isfinite(r)])
            ratio_md = ({"median": float(np.median(finite)), "largest": float(finite.max())} if finite.size else None)
            stops.update(early=early, at_floor=at_floor, floor=floor, stderr_ratio=ratio_md)
            md[SAMPLES_USED] = samples_used_block(counts, spec.n_samples)
            if ratio_md is not None:
                above = int(np.sum(finite > 1.0))
                promise = (f"the rule plans at most {EXCEED_PROBABILITY:.0%} of MLPs above E"
                           if est.target_rule == CV_TARGET_RULE else "the pilot-planned rule aims at about E")
                emit(Event("note", message=(
                    f"stored standard errors vs the target E={est.target_stderr:g}: median {ratio_md['median']:.2f}×, "
                    f"largest {ratio_md['largest']:.2f}×, {above} of {finite.size} MLP(s) above E ({promise}; "
                    "docs/error-bars.md)")))
            if floor is not None and at_floor == total:
                emit(Event("note", message=(
                    f"every MLP stopped at {floor:,} samples, the control-variate floor ({MIN_RELIABLE_BATCHES} batches, the "
                    f"fewest it is judged on): the floor, not the target standard error {est.target_stderr:g}, decided "
                    "every stop (the target was already met there).")))
        if n == total and missed:
            largest = f"largest {worst:.3g}" if worst else "too few samples for one"
            emit(Event("warning", message=(
                f"{missed} of {total} MLP(s) used all --n-samples {spec.n_samples:,} without reaching the target "
                f"standard error {est.target_stderr:g} ({largest}); they hold what the cap gave. Raise "
                "--n-samples to reach it (`whest dataset calibrate --target-stderr` projects what it needs).")))
        yield row


# --- the Python API -------------------------------------------------------------------------------


def create_dataset(
    n_mlps: int,
    n_samples: int,
    width: int,
    depth: int,
    *,
    mlp_seeds: Sequence[int] | None = None,
    output_path: str | Path,
    split: str = DEFAULT_SPLIT,
    config: str = DEFAULT_CONFIG,
    mlp_range: tuple[int, int] | None = None,
    seed: int | None = None,
    max_threads: int | None = None,
    progress: EventSink | None = None,
    estimator: str = "plain",
    target_stderr: float | None = None,
    stderr_layer: str = "last",
) -> Path:
    """Bake a dataset on the default CPU path (pcg64, whestbench 0.16's numbers) and return its path.

    whestbench 0.16's signature; ``mlp_range`` is half-open. ``progress`` receives ``whestbench.events.Event``s.
    """
    cfg = api_config(
        n_mlps, n_samples, width, depth, output_path=output_path, mlp_seeds=mlp_seeds, seed=seed,
        split=split, config=config, mlp_range=mlp_range, max_threads=max_threads,
        estimation=Estimation(estimator, target_stderr, stderr_layer),
    )
    return bake(cfg, on_event=legacy_progress(progress), complete_ok=False)  # 0.16: an existing output is an error


def legacy_progress(callback: Any) -> EventSink | None:
    """The ``progress=`` callback of the Python API, called with dicts as whestbench 0.16 called it
    (``phase``, ``completed``, ``total``, ``unit``), plus ours (``mlps_done``, ``mlps_total``,
    ``message``) and the typed ``event`` itself."""
    if callback is None:
        return None
    if not callable(callback):  # refused before any work (it failed mid-bake and left a work directory)
        raise TypeError(f"progress must be a callable (a function taking one dict) or None; got "
                        f"{type(callback).__name__}: {callback!r}")
    phases = {"progress": "sampling", "unit_done": "sampling", "checkpoint": "sampling"}

    def sink(event: Event) -> None:
        p = event.progress
        writing = p is not None and p.what == "rows"  # the writer's progress is not sampling
        phase = "writing" if writing else "planning" if p is not None and p.what == "pilots" else None
        info: dict[str, Any] = {"phase": phase or phases.get(event.kind, event.kind), "event": event}
        if event.message:
            info["message"] = event.message
        if p is not None:
            info.update(completed=p.done, total=p.total, unit=p.what, mlps_done=p.mlps_done, mlps_total=p.mlps_total)
        callback(info)

    return sink


def api_config(
    n_mlps: int,
    n_samples: int,
    width: int,
    depth: int,
    *,
    output_path: str | Path,
    mlp_seeds: Sequence[int] | None,
    seed: int | None,
    split: str,
    config: str,
    mlp_range: Sequence[int] | None,
    **backend: Any,
) -> BakeConfig:
    """The ``BakeConfig`` of a Python API call (``create_dataset``, ``create_dataset_torch``):
    arguments as whestbench 0.16 names them; ``backend`` holds the remaining ``BakeConfig`` fields.
    Integers may be numpy integers (``operator.index``; a bool stays refused by the checks that
    follow); ``output_path`` must be a path (TypeError naming it, before any work)."""
    try:
        output = Path(os.fspath(output_path))
    except TypeError:
        raise TypeError(f"output_path must be a path (str or os.PathLike); got {type(output_path).__name__}: "
                        f"{output_path!r}") from None
    return BakeConfig(
        n_mlps=as_int(n_mlps),
        n_samples=as_int(n_samples),
        width=as_int(width),
        depth=as_int(depth),
        output=output,
        mlp_seeds=tuple(mlp_seeds) if mlp_seeds is not None else None,
        seed=as_int(seed),
        split=split,
        config=config,
        mlp_range=tuple(as_int(v) for v in mlp_range) if mlp_range is not None else None,
        **backend,
    )

