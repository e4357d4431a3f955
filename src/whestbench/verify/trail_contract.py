"""The audit trail against what the metadata promises: the first check verify, merge and combine-splits make.

The trail's own checks (``verify/trail.py``) rebuild the stored numbers from whatever segments the file
holds; a forger who drops the control-variate columns, collapses an MLP to one segment or removes the
trail altogether, and re-signs, would leave them nothing to compare. So before any of them, each
split's trail is held to the recipe the metadata records (``trail_contract``), one function for all
three verbs (``contract_checks``):

- **the recipe** (``bake_command``, when recorded): its ``--n-samples``, ``--width``, ``--depth``,
  ``--n-mlps``, estimator, target, sampler (``--torch``/``--device``) and ``--audit-segments`` (default
  32) are the metadata's;
- **the audit block**: a known ``version``; ``values`` the columns this estimator and sampler keep
  (``format.trail.trail_values``: control variates theirs, plain theirs, pcg64 its states); the
  recipe's step and alignment; ``segments`` the recipe's S and never below ``MIN_SEGMENTS``;
- **the file**: present, its columns exactly the ranges and those values, stamped with the block's
  version and the dataset's shape; every MLP of the split in order, once; and each MLP's segments
  exactly the ones a bake of its N makes (``segment_bounds(N, step, S, aligned)``): contiguous,
  covering ``[0, N)``, never fewer.

A split whose recipe keeps a trail (a recorded ``bake_command`` without ``--audit-segments 0``) but that
has none fails. One baked without a trail (whestbench 0.16, ``--audit-segments 0``, no recorded
command) passes, and the verdict says what could not be checked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whestbench.compute.estimation import is_cv_block
from whestbench.compute.estimators import trail_step
from whestbench.compute.segments import DEFAULT_SEGMENTS, MAX_SEGMENTS, MIN_SEGMENTS, segment_bounds
from whestbench.errors import REDO, InvalidDatasetError
from whestbench.format import command
from whestbench.format.checksums import checksum_state
from whestbench.format.reader import DatasetDir, data_files
from whestbench.format.schema import N_USED_COLUMN, DatasetMeta, infer_sampler
from whestbench.format.trail import AUDIT_VERSIONS, RANGE_COLUMNS, TrailLayout, audit_path, trail_values
from whestbench.text import sanitize, show_value
from whestbench.values import count_of, is_int

NO_TRAIL = ("the means, standard errors and sample counts are not checked against an audit trail, and "
            "--spot-check cannot run")
MAX_NAMED = 3  # problems named in one verdict
STALE = ("the checksums are stale (a whestbench 0.16 merge of trail-carrying partials keeps the audit block but not the "
         "trail of every partial)")  # 0.16.2's merge carries the block, not the file


@dataclass(frozen=True)
class Verdict:
    """One split's contract: ``ok``; ``kind`` "checked" (the trail meets it), "none" (no trail, and the
    recipe keeps none: ``detail`` says what is not checked), "stale" (0.16.2's merge kept the block, not
    the file) or "failed"; ``detail`` one line."""

    split: str
    ok: bool
    kind: str
    detail: str


def recipe_segments(argv: list[str] | None) -> int | None:
    """The S of a recorded bake command (``--audit-segments``, 32 when not given); None when there is no
    recorded command or its value is not a count."""
    if argv is None:
        return None
    given = command.flag_value(argv, "--audit-segments")
    return DEFAULT_SEGMENTS if given is None else count_of(given)


def recipe_problems(entry: dict[str, Any], argv: list[str] | None) -> list[str]:
    """Where a split's recorded ``bake_command`` (``argv``, parsed) says another recipe than its metadata."""
    if argv is None:
        return []
    problems = []
    partial = bool(entry.get("is_partial"))
    want_counts = {"--n-samples": entry.get("n_samples"), "--width": entry.get("width"), "--depth": entry.get("depth"),
                   "--n-mlps": entry.get("total_n_mlps") if partial else entry.get("n_mlps")}
    for flag, want in want_counts.items():
        given = command.flag_value(argv, flag)
        if given is not None and count_of(given) != want:
            problems.append(f"bake_command says {flag} {sanitize(given)[:30]}, the metadata {show_value(want, max_len=30)}")
    est = entry.get("estimator")
    name = est.get("name") if isinstance(est, dict) else "plain"
    given = command.flag_value(argv, "--estimator") or "plain"
    if given != name:
        problems.append(f"bake_command says --estimator {sanitize(given)[:30]}, the metadata {show_value(name, max_len=30)}")
    target = entry.get("target_stderr")
    value = target.get("value") if isinstance(target, dict) else None
    given = command.flag_value(argv, "--target-stderr")
    try:
        same = (given is None and value is None) or (given is not None and value is not None
                                                     and math.isclose(float(given), float(value), rel_tol=1e-12))
    except (TypeError, ValueError):
        same = False
    if not same:
        problems.append(f"bake_command says --target-stderr {sanitize(str(given))[:30]}, the metadata "
                        f"{show_value(value, max_len=30)}")
    torch = "--torch" in argv or command.flag_value(argv, "--device") is not None
    sampler = infer_sampler(entry)
    if torch != (sampler == "philox"):
        problems.append(f"bake_command {'runs' if torch else 'does not run'} the torch backend, but the metadata's "
                        f"sampler is {sanitize(str(sampler))}")
    s = recipe_segments(argv)
    block = entry.get("audit")
    if s is None:
        problems.append("bake_command's --audit-segments is not a count")
    elif s == 0 and block is not None:
        problems.append("bake_command says --audit-segments 0 (no trail), but the metadata has an audit block")
    elif s > 0 and isinstance(block, dict) and block.get("segments") != s:
        problems.append(f"bake_command makes {s} audit segment(s) per MLP, the metadata's audit block says "
                        f"{show_value(block.get('segments'), max_len=30)}")
    return problems


def _block_problems(block: Any, split: str, entry: dict[str, Any], recipe_s: int | None) -> tuple[list[str], dict]:
    """What is wrong with a split's ``audit`` block, and the recipe facts (step, S, aligned, values)."""
    if not isinstance(block, dict):
        return [f"the audit block is {show_value(block, max_len=40)}, not an object"], {}
    problems = []
    sampler = infer_sampler(entry)
    depth = entry.get("depth")
    cv = is_cv_block(entry.get("estimator")) and is_int(depth, 2)
    values = trail_values(cv, sampler == "pcg64")
    sampler_block = entry.get("sampler") if isinstance(entry.get("sampler"), dict) else {}
    block_size = sampler_block.get("block_size")
    step = trail_step(sampler, block_size) if is_int(block_size, 1) else None
    facts = {"values": values, "step": step, "aligned": sampler == "philox", "segments": block.get("segments")}
    version = block.get("version")
    if version not in AUDIT_VERSIONS:
        problems.append(f"audit.version {show_value(version, max_len=30)} is not one this whestbench reads "
                        f"({', '.join(AUDIT_VERSIONS)}): upgrade whestbench, or re-bake")
    if block.get("values") != values:
        problems.append(f"audit.values {show_value(block.get('values'), max_len=80)} are not the {', '.join(values)} a "
                        f"{'control-variate' if cv else 'plain'} {sanitize(str(sampler))} bake keeps")
    if block.get("file") != audit_path(split):
        problems.append(f"audit.file {show_value(block.get('file'), max_len=60)} is not {audit_path(split)}")
    if step is None or block.get("step_samples") != step:
        problems.append(f"audit.step_samples {show_value(block.get('step_samples'), max_len=30)} is not the "
                        f"{sanitize(str(sampler))} step {step}")
    if block.get("aligned") is not facts["aligned"]:
        problems.append(f"audit.aligned {show_value(block.get('aligned'), max_len=30)} is not what the "
                        f"{sanitize(str(sampler))} sampler's segments are ({str(facts['aligned']).lower()})")
    s = block.get("segments")
    if not is_int(s, MIN_SEGMENTS, MAX_SEGMENTS):
        problems.append(f"audit.segments {show_value(s, max_len=30)} is not a count from {MIN_SEGMENTS} to {MAX_SEGMENTS} "
                        "(a bake never keeps fewer)")
    elif recipe_s is not None and s != recipe_s:
        problems.append(f"audit.segments {s} is not the {recipe_s} of the recorded bake_command")
    return problems, facts


def _rows(handle: DatasetDir, split: str) -> tuple[list[int], list[int] | None]:
    """The split's mlp_id column and its ``n_samples_used`` (None when it has none), read from the shards."""
    import pyarrow.parquet as pq

    ids: list[int] = []
    used: list[int] | None = None
    for shard in data_files(handle, split):
        f = pq.ParquetFile(shard)
        cols = ["mlp_id"] + ([N_USED_COLUMN] if N_USED_COLUMN in f.schema_arrow.names else [])
        t = f.read(columns=cols)
        ids += [int(v) for v in t.column("mlp_id").to_pylist()]
        if N_USED_COLUMN in cols:
            used = (used or []) + [int(v) for v in t.column(N_USED_COLUMN).to_pylist()]
    return ids, used


def _file_problems(path: Path, facts: dict, entry: dict[str, Any], ids: list[int], counts: list[int]) -> list[str]:
    """What is wrong with the trail file itself: its columns, its stamp, its MLPs and their segments."""
    try:
        layout = TrailLayout(path)
    except (OSError, ValueError) as e:
        return [f"{path.name} is not a readable Parquet file ({type(e).__name__}: {sanitize(str(e))[:80]})"]
    want = list(RANGE_COLUMNS) + facts["values"]
    if layout.columns != want:
        missing = [c for c in want if c not in layout.columns]
        extra = [c for c in layout.columns if c not in want]
        what = "; ".join(([f"lacks {', '.join(missing)}"] if missing else [])
                         + ([f"holds {', '.join(sanitize(c)[:40] for c in extra[:5])} besides"] if extra else [])) \
            or "holds them in another order"
        return [f"{path.name} {what}: a trail of this recipe holds the columns {', '.join(want)}"]
    stamp = layout.stamp or {}
    if (stamp.get("version"), stamp.get("depth"), stamp.get("width")) != (entry.get("audit", {}).get("version"),
                                                                          entry.get("depth"), entry.get("width")):
        return [f"its whestbench_audit stamp {show_value(layout.stamp, max_len=60)} is not version "
                f"{entry['audit'].get('version')} at depth {entry.get('depth')}, width {entry.get('width')}"]
    problems: list[str] = []
    k = 0
    try:
        for k_seen, (mlp, seg, bounds) in enumerate(layout.ranges()):
            k = k_seen + 1
            if k_seen >= len(ids):
                problems.append(f"holds more MLPs than the split's {len(ids)} rows (mlp_id {mlp} has no row)")
                break
            if mlp != ids[k_seen]:
                problems.append(f"its MLP {k_seen} is mlp_id {mlp}, the split's row {k_seen} is mlp_id {ids[k_seen]} "
                                "(an MLP missing, repeated or out of order)")
                break
            why = _segments_problem(seg, bounds, counts[k_seen], facts)
            if why:
                problems.append(f"mlp_id {mlp}: {why}")
                if len(problems) >= MAX_NAMED:
                    break
    except (OSError, ValueError, TypeError) as e:
        return problems + [f"{path.name} is unreadable ({type(e).__name__}: {sanitize(str(e))[:80]})"]
    if not problems and k < len(ids):
        problems.append(f"holds {k} MLP(s); the split has {len(ids)} rows (mlp_id {ids[k]} and after have no trail)")
    return problems


def _segments_problem(seg, bounds, n: int, facts: dict) -> str | None:
    """Why an MLP's segment ranges are not the ones a bake of its ``n`` samples makes (None when they are)."""
    want = segment_bounds(n, facts["step"], facts["segments"], facts["aligned"])
    got = [(int(a), int(b)) for a, b in bounds]
    if got == want and [int(v) for v in seg] == list(range(len(got))):
        return None
    if [int(v) for v in seg] != list(range(len(got))):
        return f"its segments are numbered {show_value([int(v) for v in seg][:6], max_len=40)}…, not 0, 1, 2, …"
    for i in range(1, len(got)):
        if got[i][0] != got[i - 1][1]:
            return f"segment {i} starts at sample {got[i][0]:,}, segment {i - 1} ends at {got[i - 1][1]:,} (not contiguous)"
    if not got or got[0][0] != 0 or got[-1][1] != n:
        span = f"[{got[0][0]:,}, {got[-1][1]:,})" if got else "nothing"
        return f"its segments cover {span}, not the [0, {n:,}) of its {n:,} samples"
    return (f"{len(got)} segment(s), but a bake of {n:,} samples at step {facts['step']:,} with S = {facts['segments']} "
            f"makes {len(want)}" + (" (never fewer)" if len(got) < len(want) else ""))


def trail_contract(handle: DatasetDir, checksums: str) -> list[Verdict]:
    """Each split's verdict (``checksums``: the dataset's checksum state, ``checksums.checksum_state``).
    Never raises on a broken dataset: a verdict names what is wrong and the fix."""
    return [_verdict(handle, split, checksums) for split in DatasetMeta.of(handle.metadata).splits]


def _verdict(handle: DatasetDir, split: str, checksums: str) -> Verdict:
    meta = DatasetMeta.of(handle.metadata)
    entry = meta.entry(split)
    argv = command.parse_bake(entry.get("bake_command"))
    problems = recipe_problems(entry, argv)
    block = meta.block(split).get("audit") if isinstance(meta.block(split), dict) else None
    recipe_s = recipe_segments(argv)
    path = handle.path / audit_path(split)
    if block is None:
        if recipe_s:  # a recorded command that keeps a trail
            problems.append(f"the recorded bake_command keeps an audit trail (--audit-segments {recipe_s}), but the "
                            "metadata has no audit block" + (f" ({audit_path(split)} is there)" if path.exists() else
                                                             f" and {audit_path(split)} is missing"))
        if problems:
            return _failed(split, problems)
        why = ("baked with --audit-segments 0" if recipe_s == 0 else "no bake_command is recorded (whestbench 0.16, "
               "or an older bake)")
        return Verdict(split, True, "none", f"no audit trail ({why}): {NO_TRAIL}")
    more, facts = _block_problems(block, split, entry, recipe_s)
    if problems + more:
        return _failed(split, problems + more)
    if checksums == "stale":
        return Verdict(split, True, "stale", f"{STALE}: the file is not checked")
    if not path.is_file():
        return _failed(split, [f"{audit_path(split)} is missing: the metadata's audit block promises it"])
    try:
        ids, used = _rows(handle, split)
    except (OSError, ValueError, TypeError, InvalidDatasetError) as e:
        return _failed(split, [f"the split's rows are unreadable ({type(e).__name__}: {sanitize(str(e))[:80]})"])
    n = entry.get("n_samples")
    counts = used if used is not None else [n if is_int(n, 1) else 0] * len(ids)
    problems = _file_problems(path, facts, entry, ids, counts)
    if problems:
        return _failed(split, problems)
    return Verdict(split, True, "checked", (
        f"audit.version {block['version']}, columns {', '.join(facts['values'])}; {len(ids):,} MLP(s) in order, each "
        f"with the segments a bake of its N makes (step {facts['step']:,}, S = {facts['segments']}"
        f"{', aligned' if facts['aligned'] else ''}): contiguous, covering [0, N)"
        + ("" if argv is None else "; bake_command agrees with the metadata")))


def _failed(split: str, problems: list[str]) -> Verdict:
    more = f"; and {len(problems) - MAX_NAMED} more" if len(problems) > MAX_NAMED else ""
    return Verdict(split, False, "failed", "; ".join(problems[:MAX_NAMED]) + more + f". {REDO}")


def require_contract(handle: DatasetDir, what: str, error: type[InvalidDatasetError]) -> None:
    """Raise ``error`` naming ``handle``'s path and its first split whose trail breaks the contract: merge
    and combine-splits call this on every input before they write (and sign) anything."""
    for v in trail_contract(handle, checksum_state(handle).state):
        if not v.ok:
            where = f" split {v.split!r}" if DatasetMeta.of(handle.metadata).is_multi else ""
            raise error(f"{what} {sanitize(str(handle.path))}{where} fails the trail contract: {v.detail}")
