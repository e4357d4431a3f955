"""Verify a dataset: its integrity, and every stored number against an independent computation.

``verify_dataset(dir)`` returns a ``VerifyReport``: a list of named checks, each passed or failed
with a one-line detail. Nothing raises on a broken dataset; a failed check says what is wrong.
What each check catches and misses is tabled in docs/cli.md ("What verify proves"). Integrity is
checked here (the rows read by ``scan``, the trail's contract by ``trail_contract``, the card by
``card_check``), then the statistics (``statistics``: layer 1's closed form; ``plausibility``: a fresh
pilot of every MLP), the audit trail (``trail``), and as asked ``--against`` (``compare``),
``--spot-check`` (``spot``) and ``--recompute`` (``recompute``: K MLPs baked again, then compared).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

from whestbench.compute.audit import P_OVERALL, t_quantile
from whestbench.compute.estimation import is_cv_block
from whestbench.compute.estimators import n_batches
from whestbench.compute.naming import mlp_name, unique_names
from whestbench.compute.seeds import SEED_LIMIT, derived_seeds, estimator_seed, seed_list_digest
from whestbench.format.prepared import prepared_verdict
from whestbench.format.checksums import checksum_state
from whestbench.format.reader import DatasetDir, open_dataset
from whestbench.format.schema import (
    DEVICE_CHECK_KEY,
    device_check_state,
    is_positive_int,
    positive_int,
    DatasetMeta,
    columns_for,
    protocol_version,
)
from whestbench.verify import recompute as recompute_mod
from whestbench.verify.compare import compare_with
from whestbench.verify.card_check import card_verdict
from whestbench.verify.config import VerifyConfig
from whestbench.verify.recompute import check_root, choose, default_cache, pending, recipe, remember, resume_with
from whestbench.verify.report import Check, VerifyReport
from whestbench.verify.scan import DatasetScan, SplitScan, scan_split, schema_problems
from whestbench.verify.spot import spot_check as run_spot_check
from whestbench.verify.statistics import run_statistics
from whestbench.verify.trail import check_trail
from whestbench.verify.trail_contract import trail_contract
from whestbench.errors import BakeInterrupted, InvalidDatasetError, UsageError
from whestbench.events import Event
from whestbench.paths import existing_dir
from whestbench.text import sanitize
from whestbench.work.ledger import identity_digest


# ----------------------------------------------------------------------------------------------
# Public entry point


def verify_dataset(
    directory: str | Path | DatasetDir,
    config: VerifyConfig | None = None,
    *,
    on_check: Callable[[Check], None] | None = None,
    on_event=None,
    stop=None,
    **options: Any,
) -> VerifyReport:
    """Run every check on the dataset at ``directory``, and those ``config`` asks for (a ``VerifyConfig``,
    or its fields as keyword ``options``: ``verify_dataset(d, against=d2, n_check=5)``).

    ``on_check`` sees each check as it completes (the CLI prints it); ``on_event`` hears the progress
    of the pilots and of a recompute's or spot check's bake, which ``stop`` interrupts (resumable).
    Raises UsageError only for requests that cannot name a dataset (a path that does not exist, a
    non-positive ``n_check``). ``directory`` may be an open ``DatasetDir``: what it has read
    (metadata, checksum state) is not read again.
    """
    cfg = VerifyConfig.of(config, options)
    if isinstance(directory, str):
        existing_dir(directory, "DIR")  # before Path("") reads as the current directory
    handle = open_dataset(directory)
    directory = handle.path
    existing_dir(directory, "DIR")
    against, recompute, spot_check, device, cache = cfg.against, cfg.recompute, cfg.spot_check, cfg.device, cfg.cache
    if against is not None:
        existing_dir(against, "--against")
    recompute_root = cfg.recompute_root
    if recompute is not None or (spot_check is not None and cache):  # the cache root, checked before any check
        recompute_root = check_root(recompute_root if recompute_root is not None else default_cache(),
                                    [directory] + ([against] if against is not None else []))
    if recompute is not None:  # a recipe that cannot be recomputed here is a usage error, before any check
        try:
            recipe(handle.metadata, device)
        except UsageError:
            raise
        except (InvalidDatasetError, KeyError, TypeError, ValueError):
            pass  # the metadata check reports a broken dataset
    if spot_check is not None and not _has_trail(handle):
        raise UsageError(f"{directory} has no audit trail (baked with --audit-segments 0, or by another version);",
                         fix="use --recompute K instead of --spot-check.")
    report = VerifyReport(directory, against, on_check=on_check)

    def stage(text: str) -> None:  # a stretch without counts: the log's timer line names it (cli/progress)
        if on_event is not None:
            on_event(Event("stage", message=text))

    stage("integrity: metadata, checksums, schema, seeds, weights re-derived from the seeds")
    ds = _integrity(handle, report)
    if ds is None:
        return report
    stage("statistics: the estimator, layer 1 against its exact means, the stored standard errors")
    run_statistics(ds, report, n_check=cfg.n_check, z_max=cfg.z_max, sample_mlps=cfg.sample_mlps,
                   sample_seed=cfg.sample_seed, pilot=cfg.pilot, on_event=on_event)
    if _has_trail(handle):
        stage("audit trail: every segment's sums against the stored means")
    check_trail(ds, report, checksum_state(handle).state)  # the audit trail: every row, no extra compute
    if "trail" in report.coverage:  # what the trail contract could not check: said after what was checked
        report.coverage["trail"] = report.coverage.pop("trail")
    if against is not None:
        stage(f"comparing every numeric column with --against {sanitize(str(against))}")
        compare_with(ds, against, report, n_check=cfg.n_check, z_max=cfg.z_max)
    if spot_check is not None:  # after the checks a stop ends at once: from here a stop is resumable work's (exit 75)
        if any(c.name.endswith(("trail", "trail contract")) and not c.ok for c in report.checks):
            report.skip("spot-check", "not run: the trail itself failed its check")
        else:
            resumable = cache and checksum_state(handle).state == "ok"  # a record is keyed by signed contents
            run_spot_check(ds, report, spot_check, cfg.spot_seed, device, stop, on_event,
                           record_root=recompute_root if resumable else None)
    if recompute is not None:
        if report.failures:  # a recompute of a damaged dataset costs a bake and proves nothing more
            report.skip("recompute", f"not run: {len(report.failures)} check(s) failed already "
                        f"({', '.join(c.name for c in report.failures)}); fix or re-bake the dataset first")
        else:
            _recompute(ds, report, recompute, cfg.recompute_seed, device, recompute_root, on_event, stop, cache)
    return report


def _recompute(ds: DatasetScan, report: VerifyReport, k: int, seed: int | None, device: str | None,
               root: Path, on_event, stop, cache: bool) -> None:
    key = {"draw": "recompute", "metadata_sha256": identity_digest(ds.md), "k": int(k), "device": device}
    keep, kept = pending(root if cache and seed is None else None, key)  # a stopped run's draw, continued
    rows, seed = choose(list(ds.rows()), k, kept if seed is None else seed)
    if not rows:
        report.skip("recompute", "the dataset has no rows")
        return
    rec = recipe(ds.md, device)
    seeds = [int(s.seeds[i]) for s, i in rows]
    ids = ", ".join((f"{s.name}:" if ds.is_multi else "") + str(int(s.ids[i])) for s, i in rows)
    report.coverage["recompute"] = f"mlp_id {ids} (random, --recompute-seed {seed})"
    how = rec["backend"] + (f" on {rec['device']}" if rec["device"] else "")
    n_rows = sum(len(s.seeds) for s in ds.splits)
    report.check("recompute", True, f"{len(rows)} MLP(s) drawn at random with --recompute-seed {seed}: mlp_id {ids} "
                 f"(one faulty MLP of {n_rows:,} is among them with probability {len(rows) / n_rows:.3g}); "
                 f"baked again with the dataset's recipe ({how}, {rec['estimator']}, n_samples={rec['n_samples']:,}"
                 + (f", target {rec['target_stderr']:g}" if rec["target_stderr"] else "") + ")")
    if kept is not None:
        report.check("recompute: draw", True, f"continues the draw of the run stopped earlier (--recompute-seed {seed})")
    remember(keep, key, seed)
    with contextlib.ExitStack() as stack:
        if not cache:  # --no-cache: a bake of its own, removed after
            root.mkdir(parents=True, exist_ok=True)
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=".no-cache-", dir=root,
                                                                        ignore_cleanup_errors=True)))
        try:
            path = recompute_mod.recompute(ds.md, seeds, device=device, root=root, on_event=on_event, stop=stop,
                             confirm=confirm_complete if cache else None)
        except BakeInterrupted as e:  # resumed by the same draw: name its seed
            raise BakeInterrupted(resume_with(str(e), f"--recompute {k} --recompute-seed {seed}"),
                                  exit_code=e.exit_code) from None
        if keep is not None:
            keep.unlink(missing_ok=True)  # complete: the next run draws afresh
        if isinstance(path, DatasetDir):  # reused, not baked: say so, and how to bake afresh
            report.check("recompute: cache", True, f"reused the bake cached at {path} (its completion marker, "
                         "checksums, integrity and pilot-free statistics pass; --no-cache bakes afresh)")
        compare_with(ds, path, report, n_check=None, z_max=None, name="recompute")


def _has_trail(handle: DatasetDir) -> bool:
    """Whether the metadata (any value: verify asks before validating it) names an audit trail; an
    unreadable one counts as having one (the metadata check reports it)."""
    try:
        md = handle.metadata
    except (InvalidDatasetError, OSError, ValueError):
        return True
    if not isinstance(md, dict):
        return md is None
    splits = md.get("splits") if isinstance(md.get("splits"), dict) else {}
    return "audit" in md or any(isinstance(v, dict) and "audit" in v for v in splits.values())


# ----------------------------------------------------------------------------------------------
# 1. Integrity


def _integrity(handle: DatasetDir, report: VerifyReport) -> DatasetScan | None:
    path = handle.path
    try:
        meta = handle.meta(allow_partial=True)
    except InvalidDatasetError as e:
        report.check("metadata", False, f"{e} (no further checks possible)")
        return None
    md = meta.md
    dims = {k: positive_int(md, k) for k in ("width", "depth", "n_samples")}
    bad = [k for k, v in dims.items() if v is None]
    if bad:
        report.check("metadata", False, f"{', '.join(bad)} missing or not a positive integer (no further checks possible)")
        return None
    width, depth, n_samples = dims["width"], dims["depth"], dims["n_samples"]
    version = protocol_version(md)
    splits = meta.splits
    shape = f"width={width} depth={depth} n_samples={n_samples:,}, seed protocol {version}"
    if md.get("is_partial"):
        start, end, _ = meta.declared_rows(splits[0])
        report.check("metadata", True, f"valid PARTIAL dataset: MLPs [{start}, {end}) of {md.get('total_n_mlps')} "
                     f"({shape}); merge the partials (`whest dataset merge`) before loading")
    else:
        kind = f"{len(splits)} splits ({', '.join(splits)})" if meta.is_multi else f"split {splits[0]!r}"
        report.check("metadata", True, f"valid, {kind}, {shape}")

    state = checksum_state(handle)
    if state.state in ("absent", "stale"):
        report.skip("checksums", f"{state.detail}; integrity rests on the content checks below")
    else:
        report.check("checksums", state.state == "ok", state.detail if state.state == "ok" else f"MISMATCH: {state.detail}")
    _trail_contract(handle, report, state.state)

    ds = DatasetScan(path, md, width, depth, n_samples, [])
    columns = columns_for(md)
    for split in splits:
        prefix = f"{split}: " if meta.is_multi else ""
        try:
            problems = schema_problems(handle, split, width, depth, columns)
        except InvalidDatasetError as e:
            report.check(f"{prefix}files", False, str(e))
            continue
        if problems:
            report.fail(f"{prefix}schema", problems, 3)
            continue
        report.check(f"{prefix}schema", True,
                     f"{len(columns)} columns with the Arrow/HF types of width={width} depth={depth}")
        rederive = version in ("3.0", "4.0")
        try:
            s = scan_split(handle, split, width, depth, rederive=rederive, columns=columns)
        except InvalidDatasetError as e:
            report.check(f"{prefix}rows", False, str(e))
            continue
        report.check(f"{prefix}rows", True, f"{len(s.seeds)} rows read: weights {depth}x{width}x{width}, means {depth}x{width}")
        _rows_checks(ds, s, report, prefix, version)
        ds.splits.append(s)
    for split in splits:
        verdict = prepared_verdict(handle, md, split)
        if verdict is not None:
            report.check(f"{split}: prepared", verdict.ok, verdict.detail)
    report.check("card", *card_verdict(handle, md))
    n_rows = sum(len(s.seeds) for s in ds.splits)
    report.coverage["integrity"] = f"every row ({n_rows:,} MLP{'s' if n_rows != 1 else ''})"
    _device_check(meta, report)
    return ds if ds.splits else None


def _trail_contract(handle: DatasetDir, report: VerifyReport, checksums: str) -> None:
    """Each split's trail against what its metadata promises (``trail_contract``), before any other
    content check: the checks that read the trail (``trail``, ``--spot-check``) trust only a trail
    that meets it. A split without a trail, whose recipe keeps none, is named in the OK line."""
    verdicts = trail_contract(handle, checksums)
    multi = len(verdicts) > 1 or DatasetMeta.of(handle.metadata).is_multi
    for v in verdicts:
        name = f"{v.split}: trail contract" if multi else "trail contract"
        if v.kind in ("none", "stale"):
            report.skip(name, v.detail)
        else:
            report.check(name, v.ok, v.detail)
    none = [v for v in verdicts if v.kind == "none"]
    if none:
        which = "" if len(none) == len(verdicts) and not multi else f" in {', '.join(v.split for v in none)}"
        report.coverage["trail"] = f"none{which}: {none[0].detail.split(': ', 1)[-1]}"


def _device_check(meta: DatasetMeta, report: VerifyReport) -> None:
    """A torch bake's device check, as recorded (``validate_metadata`` has judged the block already):
    passed, or skipped / a failure accepted at bake time, which push refuses without a flag."""
    blocks = {(f"{s}: " if meta.is_multi else ""): meta.block(s).get(DEVICE_CHECK_KEY) for s in meta.splits}
    for prefix, block in blocks.items():
        state = device_check_state(block)
        if state is None:
            continue
        device = block.get("device") if isinstance(block.get("device"), dict) else {}
        on = sanitize(str(device.get("name") or device.get("type") or "an unnamed device"))
        if state == "passed":
            report.check(f"{prefix}device check", True, f"passed on {on} ({len(block['checks'])} checks)")
        else:
            what = ("SKIPPED at bake (--skip-device-check)" if state == "skipped" else
                    f"{', '.join(block['accepted'])} FAILED on {on}, ACCEPTED at bake (--accept-non-invariant)")
            report.skip(f"{prefix}device check", f"{what}: nothing vouches that the device computed the "
                        "specification; push needs --allow-unchecked-device")


def _seed_list_checks(md: dict[str, Any], s: SplitScan, report: VerifyReport, prefix: str) -> None:
    """The rows are the seed list the bake recorded, in order: its ``seed_list_digest`` (complete
    datasets: a partial's covers the whole list) and, for seeds derived from a root seed, the
    derivation itself. Catches rows substituted, reordered or dropped with the counts edited to match."""
    meta = DatasetMeta(md)
    level = meta.block(s.name)  # a dict: the metadata validated
    problems = []
    digest = level.get("seed_list_digest")
    if digest is not None and not md.get("is_partial"):
        got = seed_list_digest(s.seeds)
        if got != digest:
            problems.append(f"the mlp_seed column hashes to {got[:19]}…, not to the recorded seed_list_digest "
                            f"{sanitize(str(digest))[:19]}… (rows substituted, reordered or dropped)")
    source = level.get("seed_source")
    if isinstance(source, dict) and source.get("method") == "derived" and isinstance(source.get("root_seed"), int):
        start, end, _ = meta.declared_rows(s.name)
        total = md.get("total_n_mlps") if md.get("is_partial") else end
        if isinstance(total, int) and 0 <= start <= end <= total <= 2**31 and end - start == len(s.seeds):
            want = derived_seeds(source["root_seed"], total)[start:end]
            if [int(v) for v in s.seeds] != want:
                k = next(i for i, (a, b) in enumerate(zip(s.seeds, want)) if int(a) != b)
                problems.append(f"mlp_id {int(s.ids[k])}'s mlp_seed {int(s.seeds[k])} is not the seed --seed "
                                f"{source['root_seed']} derives there ({want[k]})")
    what = [w for w, on in (("seed_list_digest", digest is not None and not md.get("is_partial")),
                            ("the seeds its recorded root seed derives", isinstance(source, dict)
                             and source.get("method") == "derived")) if on]
    if problems:
        report.check(f"{prefix}seed list", False, "; ".join(problems))
    elif what:
        report.check(f"{prefix}seed list", True, f"the mlp_seed column matches its {' and '.join(what)}")


def _rows_checks(ds: DatasetScan, s: SplitScan, report: VerifyReport, prefix: str, version: str) -> None:
    md = ds.md
    start, end, n_mlps = DatasetMeta(md).declared_rows(s.name)
    # the declared range, built only when it can hold these rows (a forged n_mlps of 10**20 must not allocate it)
    expected = (np.arange(start, end, dtype=np.int64) if 0 <= end - start == len(s.ids) else np.full(1, -1, np.int64))
    same = np.array_equal(s.ids, expected)
    report.check(f"{prefix}mlp_id", same, f"{len(s.ids)} rows, mlp_id {start}..{end - 1} as declared" if same else
                 f"{len(s.ids)} rows with mlp_id {s.ids[:5].tolist()}{'...' if len(s.ids) > 5 else ''}; metadata "
                 f"declares [{start}, {end}) (n_mlps={n_mlps})")

    seen: dict[int, int] = {}
    dup = out_of_range = None
    for i, v in enumerate(s.seeds):
        if out_of_range is None and not 0 <= v < SEED_LIMIT:
            out_of_range = (i, v)
        if v in seen and dup is None:
            dup = (seen[v], i, v)
        seen.setdefault(v, i)
    what = []
    if dup:
        what.append(f"rows {dup[0]} and {dup[1]} share mlp_seed {dup[2]}")
    if out_of_range:
        what.append(f"row {out_of_range[0]} has mlp_seed {out_of_range[1]} outside [0, 2**63)")
    report.check(f"{prefix}mlp_seed", not what, "; ".join(what) or f"{len(s.seeds)} distinct int63 seeds")
    _seed_list_checks(md, s, report, prefix)

    if version == "4.0":
        report.skip(f"{prefix}mlp_name", "seed protocol 4.0 derives names with a secret salt; not re-derived")
    else:
        # 3.0: the name seed is the estimator seed derived from mlp_seed; 2.0: mlp_seed is that seed.
        name_seeds = [estimator_seed(v) for v in s.seeds] if version == "3.0" else list(s.seeds)
        if not md.get("is_partial"):
            want = unique_names(name_seeds)
            bad = [(i, got, w) for i, (got, w) in enumerate(zip(s.names, want)) if got != w]
            detail = f"{len(want)} names = unique_names(estimator seeds)"
        else:
            # Uniqueness suffixes depend on the whole dataset's seed list, which a partial lacks.
            bad = []
            for i, (got, v) in enumerate(zip(s.names, name_seeds)):
                base = mlp_name(v)
                if got != base and not (got.startswith(base + "-") and got[len(base) + 1:].isdigit()):
                    bad.append((i, got, base))
            detail = f"{len(s.names)} names match their seeds (partial: '-k' suffixes not checkable without the whole seed list)"
        if bad:
            i, got, w = bad[0]
            detail = f"{len(bad)} name(s) differ from the seeds', first mlp_id {int(s.ids[i])}: {got!r} != {w!r}"
        report.check(f"{prefix}mlp_name", not bad, detail)

    if version in ("3.0", "4.0"):
        bad = s.weight_mismatch
        report.check(f"{prefix}weights", not bad, f"{len(bad)} MLP(s) differ from the weights their mlp_seed gives; "
                     f"first mlp_id {bad[0][0]}: {bad[0][1]}" if bad else
                     f"all {len(s.seeds)} byte-identical to weights re-derived from mlp_seed")
    else:
        report.skip(f"{prefix}weights", "seed protocol 2.0 derives weights from the dataset's root seed; not re-derived")

    # Sample means of post-ReLU values are >= 0; a control-variate estimate of a nearly dead neuron
    # may dip below 0, but not by more than a few of its standard errors: Student's t on the MLP's
    # batches − 1 degrees of freedom at the one-sided Bonferroni tail over the split's neurons
    # (at least 6 standard errors, the limit before issue 29; 9.2 at 32 batches and 10⁴ neurons).
    cv = is_cv_block(ds.md.get("estimator"))
    neg = _negative_limits(ds, s) if cv and s.stderr is not None else None
    floor = -neg[:, None, None] * s.stderr.astype(np.float64) - 1e-12 if neg is not None else 0.0
    bad_means = ~np.isfinite(s.means) | (s.means < floor)
    bad_var = ~np.isfinite(s.avg_var)
    what = []
    if bad_means.any():
        r, layer, j = (int(v) for v in np.argwhere(bad_means)[0])
        what.append(f"{int(bad_means.sum())} mean(s) non-finite or negative, first mlp_id {int(s.ids[r])} layer {layer + 1} neuron {j}: {s.means[r, layer, j]}")
    if bad_var.any():
        r = int(np.argmax(bad_var))
        what.append(f"avg_variance of mlp_id {int(s.ids[r])} is {s.avg_var[r]}")
    if not np.isfinite(s.final).all():
        what.append("final_means has non-finite values")
    lo, hi = (float(neg.min()), float(neg.max())) if neg is not None and neg.size else (6.0, 6.0)
    report.check(f"{prefix}finite", not what, "; ".join(what) or "all means finite and >= 0 (post-ReLU)" + (
                 f" within {lo:.3g}-{hi:.3g} standard errors (Student's t on the batches, Bonferroni p=1e-06)"
                 if neg is not None else "") + ", avg_variance finite")

    bad = s.bad_breakdown
    report.check(f"{prefix}breakdown", not bad, f"{len(bad)} row(s) whose sampling_budget_breakdown is not a JSON "
                 f"object, first mlp_id {bad[0][0]}: {bad[0][1]}" if bad else
                 f"sampling_budget_breakdown parses as a JSON object in all {len(s.seeds)} rows")

    differs = np.flatnonzero(np.any(s.final.view(np.uint32) != s.means[:, -1].view(np.uint32), axis=1))  # rows
    report.check(f"{prefix}final_means", not differs.size, f"final_means != all_layer_means[-1] for mlp_id "
                 f"{int(s.ids[differs[0]])}" if differs.size else "final_means == all_layer_means[-1] bit for bit")


def confirm_complete(path: str | Path | DatasetDir) -> VerifyReport:
    """The check of an output a re-run finds already complete (a requeued bake, merge or combine; a
    cached recompute): integrity and the statistics without the audit pilot. A re-signed output passes
    the completion test (its marker and checksums); this sees what those cannot, short of the pilot."""
    return verify_dataset(path, pilot=False)


def failure_line(report: VerifyReport) -> str:
    """``"<first failed check>: <its detail> (and N more failed check(s))"``, for one line of error."""
    bad = report.failures
    more = f" (and {len(bad) - 1} more failed check(s))" if len(bad) > 1 else ""
    return f"{bad[0].name}: {bad[0].detail}{more}"


def require_sound(path: str | Path | DatasetDir, what: str, error: type[InvalidDatasetError] = InvalidDatasetError,
                  on_event=None) -> None:
    """Raise ``error`` naming ``path`` and its first failed check when ``verify`` (integrity and the
    per-MLP statistics) fails it: merge and combine-splits call this on each input before writing,
    so a damaged input is refused instead of re-signed with fresh checksums. ``on_event`` hears its
    progress (the per-MLP pilots), in the phase ``verifying <what> <path>``."""
    sink = None
    if on_event is not None:
        phase = f"verifying {what} {sanitize(str(getattr(path, 'path', path)))}"

        def sink(event):
            if event.progress is not None:
                event = dataclasses.replace(event, progress=dataclasses.replace(event.progress, phase=phase))
            if event.kind == "stage":
                event = dataclasses.replace(event, message=f"{phase}: {event.message}")
            on_event(event)

    report = verify_dataset(path, on_event=sink)
    if report.ok:
        return
    raise error(f"{what} {sanitize(str(path))} fails verify: {failure_line(report)}. Re-bake it, or run "
                f"`whest dataset verify {sanitize(str(path))}` for every check.")


def _negative_limits(ds: DatasetScan, s: SplitScan) -> np.ndarray:
    """(MLPs,) how many of its standard errors a control-variate mean may lie below 0: Student's t on
    the MLP's batches − 1 degrees of freedom at the one-sided tail ``P_OVERALL / neurons`` (at least 6)."""
    batch = DatasetMeta.of(ds.md).estimator.get("batch_samples")
    tail = P_OVERALL / max(1, len(s.ids) * ds.depth * ds.width)
    limit = functools.lru_cache(maxsize=None)(lambda dof: max(6.0, t_quantile(1.0 - tail, dof) if dof >= 1 else 6.0))
    counts = s.n_used if s.n_used is not None else [ds.n_samples] * len(s.ids)
    return np.array([limit(n_batches(int(n), batch) - 1 if is_positive_int(batch) and int(n) >= 1 else 0) for n in counts],
                    dtype=np.float64)
