"""Where a bake stands, read from its output and work directory without writing or locking anything
(``whest dataset status OUTPUT``): complete, running, stopped, or nothing there.

Every unit and checkpoint file is decoded and checked against the work directory's plan (never
trusted unread, as a resume reads them); a damaged one is counted apart, as a re-run would redo it."""

from __future__ import annotations

import calendar
import os
import time
from pathlib import Path
from typing import Any

from whestbench.errors import DamagedRecord, DamagedWorkFile, UsageError
from whestbench.format.reader import METADATA_FILE, METADATA_MAX_BYTES
from whestbench.text import format_count, format_duration, sanitize, show_value
from whestbench.values import is_int
from whestbench.work.executor import bake_workers
from whestbench.work.ledger import Ledger, read_plan
from whestbench.work.units import Unit
from whestbench.work.workdir import (LOCK_FILE, LOCK_MAX_BYTES, MAX_WORLD, PHASES, PLAN_FILE, STARTING_PHASES, UNITS_DIR,
                                     WORK_SUFFIX, is_locked, lock_holder, output_for, read_json, read_status, utc_text,
                                     work_dir_for)

def bake_status(path: str | os.PathLike) -> dict[str, Any]:
    """A bake's state as a JSON-ready dict; ``path`` is its ``--output`` or its work directory.

    ``state``: "complete" (the output is written and no work directory is left), "starting" (a bake
    holds the work directory's lock and is in its start-up: checks, imports, timing probe, device
    check, pilots, kernels; ``phase`` says which, since when), "running" (a bake holding the lock
    draws samples or writes), "stopped" (a work directory no bake holds: a re-run resumes it;
    ``last_phase``: where it stopped). UsageError for a path that is neither a dataset nor a bake's work directory."""
    if isinstance(path, str) and not path.strip():
        raise UsageError("an empty path names no bake;", fix="pass the --output of a bake (or its .whest-work directory).")
    path = Path(path)
    if not path.name:  # ".", "..": the directory itself, by its real name
        path = Path(os.path.abspath(path))
    if not path.name:
        raise UsageError(f"{path} is no bake's output (a bake's --output is a directory with a name);",
                         fix="pass the --output of a bake.")
    if path.name.endswith(WORK_SUFFIX) and output_for(path) is not None:
        work, output = path, output_for(path)
    else:
        output, work = path, work_dir_for(path)
    doc: dict[str, Any] = {"output": str(output), "work_dir": str(work)}
    if not work.is_dir() or work.is_symlink():
        if (output / METADATA_FILE).is_file():
            return {**doc, "state": "complete", **_complete(output)}
        raise UsageError(f"{path} is neither a dataset nor a bake's output or work directory ({work} does not exist);",
                         fix="pass the --output of a bake.")
    locked = is_locked(work)
    lock = read_json(work / LOCK_FILE, LOCK_MAX_BYTES)
    phase = _phase(read_status(work))
    if phase and locked and isinstance(lock, dict) and phase["pid"] != lock.get("pid"):
        phase = None  # recorded by an earlier run: the holder now (a Python API bake) records none
    doc["state"] = ("starting" if phase and phase["phase"] in STARTING_PHASES else "running") if locked else "stopped"
    if phase:
        doc["phase" if locked else "last_phase"] = phase
    if isinstance(lock, dict):
        doc["holder" if locked else "last_run"] = {k: lock.get(k) for k in ("pid", "host", "started", "command")}
    plan_file = work / PLAN_FILE
    if not os.path.lexists(plan_file):
        doc["plan"] = None
        doc["note"] = ("no plan.json yet: the bake is in its start-up, before its units" if locked else
                       "no plan.json: the bake stopped in its start-up, before any unit; a re-run starts it")
        return doc
    try:  # read and checked as a resume reads it: a damaged one is said to be damaged, never "not started"
        identity = read_plan(plan_file)
        _check_identity(identity, plan_file)
    except DamagedWorkFile as e:
        doc["plan"] = None
        doc["damaged_plan"] = str(e)
        return doc
    doc["plan"] = {k: identity.get(k) for k in ("n_mlps", "n_samples", "width", "depth", "mlp_range", "sampler",
                                                 "estimator", "target_stderr")}
    doc.update(_units(work, identity))
    return doc


def _phase(recorded: dict[str, Any]) -> dict[str, Any] | None:
    """status.json's ``run`` (``workdir.record_phase``): the phase a bake reached, what it is for a
    person, since when (UTC) and how long ago; None when there is none or it holds no phase a bake writes."""
    run = recorded.get("run")
    if not isinstance(run, dict) or run.get("phase") not in PHASES or _seconds_ago(run.get("since_utc")) is None:
        return None
    return {"phase": run["phase"], "what": PHASES[run["phase"]], "since_utc": run["since_utc"],
            "seconds_ago": _seconds_ago(run["since_utc"]), "pid": run.get("pid") if is_int(run.get("pid")) else None}


def _seconds_ago(stamp: Any) -> float | None:
    """How long before now a recorded UTC ``stamp`` (``2026-01-02T03:04:05Z``) was; None for no such stamp."""
    try:
        return max(0.0, round(time.time() - calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")), 1))
    except (TypeError, ValueError):
        return None


def _check_identity(identity: dict[str, Any], path: Path) -> None:
    """DamagedWorkFile unless the plan's figures are what a bake writes (positive ints, a range inside
    the MLPs): a plan.json edited and re-signed with ``"n_samples": "20000"`` printed "Cannot specify ','
    with 's'." (a re-run refuses it as another bake)."""
    for key in ("n_mlps", "n_samples", "width", "depth"):
        if not is_int(identity.get(key), 1):
            raise DamagedWorkFile(f"work file {path} holds {key} {show_value(identity.get(key), max_len=40)}, which no "
                                  "bake writes;", fix=f"remove {path.parent} to start over (a re-run refuses it too).")
    rng = identity.get("mlp_range")
    if rng is not None and not (isinstance(rng, list) and len(rng) == 2 and is_int(rng[0], 0)
                                and is_int(rng[1], rng[0] + 1, identity["n_mlps"])):
        raise DamagedWorkFile(f"work file {path} holds mlp_range {show_value(rng, max_len=40)}, which no bake writes;",
                              fix=f"remove {path.parent} to start over.")


def _complete(output: Path) -> dict[str, Any]:
    """A complete dataset's shape; a multi-split one (combine-splits) also per split (``splits``:
    name -> MLPs, samples, and the samples each MLP used where a target decided)."""
    md = read_json(output / METADATA_FILE, METADATA_MAX_BYTES)
    md = md if isinstance(md, dict) else {}
    out = {"n_mlps": md.get("n_mlps"), "n_samples": md.get("n_samples"), "width": md.get("width"),
           "depth": md.get("depth"), "redo": "nothing"}
    if isinstance(md.get("samples_used"), dict):
        out["samples_used"] = md["samples_used"]
    splits = md.get("splits")
    if isinstance(splits, dict):
        out["splits"] = {}
        for name, block in splits.items():
            block = block if isinstance(block, dict) else {}
            entry = {k: block.get(k, md.get(k)) for k in ("n_mlps", "n_samples", "width", "depth")}
            if isinstance(block.get("samples_used"), dict):
                entry["samples_used"] = block["samples_used"]
            out["splits"][str(name)] = entry
        counts = [e["n_mlps"] for e in out["splits"].values()]
        out["n_mlps"] = sum(counts) if all(is_int(c, 0) for c in counts) else None
        for key in ("width", "depth"):  # shared by the splits of one dataset
            values = {e[key] for e in out["splits"].values() if is_int(e[key], 1)}
            out[key] = values.pop() if len(values) == 1 else None
    return out


def _shape_line(entry: dict[str, Any]) -> str:
    """``4 MLPs, 1,000,000 samples each, width 8, depth 3`` of a dataset or one of its splits."""
    used = entry.get("samples_used")
    if isinstance(used, dict) and used.get("min") != used.get("max"):
        each = f"{format_count(used.get('min'))}–{format_count(used.get('max'))} samples each"
    else:
        each = f"{format_count((used if isinstance(used, dict) else {}).get('min') or entry.get('n_samples') or 0)} samples each"
    return f"{_mlps(entry.get('n_mlps'))}, {each}, width {entry.get('width')}, depth {entry.get('depth')}"


def _mlps(n: Any) -> str:
    """``1 MLP``, ``4 MLPs`` (a count the file did not give as a number keeps the plural)."""
    return f"{format_count(n)} MLP{'' if n == 1 and is_int(n, 1) else 's'}"


def _units(work: Path, identity: dict[str, Any]) -> dict[str, Any]:
    """Units finished, checkpoints, samples saved, damaged files and the last run's rate."""
    try:
        ledger = Ledger.peek(work, identity)
    except DamagedWorkFile as e:
        return {"damaged_plan": str(e)}
    start, end = identity.get("mlp_range") or [0, identity.get("n_mlps") or 0]
    n_samples = identity["n_samples"]  # a positive int: _check_identity
    target = identity.get("target_stderr")
    units_done = checkpoints = saved = damaged = 0
    counted_s = wall_s = 0.0
    mlps_done: set[int] = set()
    last_write = None
    names = sorted(p.name for p in (work / UNITS_DIR).glob("*")) if (work / UNITS_DIR).is_dir() else []
    for name in names:
        key, _, kind = name.rpartition(".")
        unit = Unit.from_key(key)
        if unit is None or kind not in ("unit", "ckpt") or ledger is None:
            continue
        mlp, count = unit.mlp_index, unit.mlp_count
        try:
            found = ledger.saved(key)
        except (DamagedRecord, OSError, ValueError):
            damaged += 1
            continue
        if found is None or (found[0] == "unit") != (kind == "unit"):
            continue  # the unit file wins over a stale checkpoint of the same unit
        meta = found[1]
        done = meta.get("count") if kind == "unit" else meta.get("position", meta.get("samples"))
        wall = meta.get("wall_s", 0.0) if kind == "unit" else 0.0
        if not is_int(done, 0, n_samples) or not (isinstance(wall, (int, float)) and 0 <= wall < float("inf")):
            damaged += 1  # a record that passes its checksum but holds no figures a bake writes
            continue
        mtime = (work / UNITS_DIR / name).stat().st_mtime
        last_write = max(last_write or mtime, mtime)
        if kind == "unit":
            units_done += 1
            n = done * count
            saved += n
            counted_s, wall_s = counted_s + n, wall_s + float(wall)
            if unit.block_end is None:
                mlps_done.add(mlp)
        else:
            checkpoints += 1
            saved += done * count
    n_mlps = max(0, int(end) - int(start))
    sampler = identity.get("sampler")
    recorded = read_status(work)  # the bake's plan figures (whestbench since issue 28)
    units_total = recorded.get("units_total")
    if not isinstance(units_total, int):
        units_total = n_mlps if sampler == "pcg64" or target else None  # philox without a target: cut by schedule
    cap_total = n_mlps * n_samples
    planned = recorded.get("planned_total")
    total = planned if isinstance(planned, int) else (None if target else cap_total)
    workers = recorded.get("workers") if isinstance(recorded.get("workers"), int) else None
    out: dict[str, Any] = {
        "units_done": units_done, "units_total": units_total, "checkpoints": checkpoints, "damaged_files": damaged,
        "samples_saved": saved, "samples_total": total,
        "samples_total_is": ("planned by the pilots" if target else "MLPs × n_samples") if total is not None else
                           "unknown (a target bake of a whestbench without status.json, or too big to plan up front)",
        "samples_cap": cap_total,
        "last_write_utc": utc_text(last_write) if last_write else None,
    }
    ranks = _ranks(recorded)
    # bounded before anything is built from it: a status.json claiming 10**9 ranks built a 10**9-item list
    world_size = recorded.get("world_size") if is_int(recorded.get("world_size"), 1, MAX_WORLD) else None
    if ranks or (world_size or 1) > 1:
        out["world_size"] = world_size
        out["ranks"] = ranks
        out["ranks_recorded_utc"] = recorded.get("ranks_recorded_utc")
        seen = {r["rank"] for r in ranks}
        # ranks rank 0 never heard from in the record: none can be named before its first record
        out["ranks_never_seen"] = ([r for r in range(world_size) if r not in seen]
                                   if world_size and recorded.get("ranks_recorded_utc") else [])
    if ledger is None:
        out["note"] = "the work directory's plan is not this bake's identity: a re-run starts over"
    per_worker = counted_s / wall_s if wall_s > 0 else None
    out["rate_samples_per_s_per_worker"] = per_worker
    world = max(1, world_size or 1)
    if per_worker and total is not None:
        n = bake_workers(workers)
        where = f"{n} workers (the bake's)" if workers else f"{n} workers (this machine's cores)"
        if world > 1:  # every rank runs the same command: rank 0's workers on each rank
            where = f"{n} workers × {world} ranks (rank 0's workers on every rank)"
        workers = n * world
        out["projected_left_s"] = max(0, total - saved) / (per_worker * workers)
        out["projected_at"] = f"the last run's rate per worker × {where}"
    if units_total is not None:
        out["redo"] = (f"{units_total - units_done} of {units_total} units"
                       + (f", {checkpoints} of them from a checkpoint" if checkpoints else ""))
    return out


def _ranks(recorded: dict[str, Any]) -> list[dict[str, Any]]:
    """A distributed bake's ranks as rank 0 last recorded them (status.json ``ranks``): each rank's
    host and pid (from its heartbeat; None from a whestbench that did not record them), last
    heartbeat (UTC) and how long before now it was; [] for a single process or an unreadable record."""
    ranks = recorded.get("ranks")
    if not isinstance(ranks, dict):
        return []
    out = []
    for rank, entry in ranks.items():
        stamp = entry.get("last_heartbeat_utc") if isinstance(entry, dict) else None
        if not (isinstance(rank, str) and rank.isdigit() and isinstance(stamp, str)) or _seconds_ago(stamp) is None:
            continue
        host, pid, ended = entry.get("host"), entry.get("pid"), entry.get("ended")
        out.append({"rank": int(rank), "host": host if isinstance(host, str) and host else None,
                    "pid": pid if is_int(pid) else None, "last_heartbeat_utc": stamp,
                    "seconds_ago": _seconds_ago(stamp), "epoch": entry.get("epoch"),
                    "ended": ended if ended in RANK_ENDINGS else None})
    return sorted(out, key=lambda r: r["rank"])


RANK_ENDINGS = {
    "done": "rank 0, the bake completed",
    "stopped": "rank 0, stopped with its units checkpointed",
    "failed": "rank 0, failed",
    "acknowledged": "left with the bake, acknowledging its end",
    "no-goodbye": "never acknowledged the end: killed, lost or cut off (it was last alive at its last heartbeat)",
}
"""How each rank left, as rank 0 recorded it when it left (``work.distributed.store.RankBook.finish``)."""


def _rank_lines(doc: dict[str, Any]) -> list[str]:
    """The ranks of a distributed bake, one a line: host, pid and last heartbeat of each rank seen,
    and "never seen" for each rank of the world that rank 0 never heard from."""
    world = doc.get("world_size")
    if not doc.get("ranks_recorded_utc"):
        return [f"  ranks: none recorded yet{f' (world size {world})' if world else ''}; rank 0 records them "
                "every few seconds once its units start"]
    lines = [f"  ranks{f' (world size {world})' if world else ''}, as rank 0 last recorded them at "
             f"{doc['ranks_recorded_utc']}:"]
    rows = [(r["rank"], f"on {sanitize(str(r['host'] or 'an unrecorded host'))}"
             + (f" (pid {r['pid']})" if r.get("pid") is not None else "")
             + f", last heartbeat {r['last_heartbeat_utc']} ({r['seconds_ago']:.0f} s ago)"
             + (f"; {RANK_ENDINGS[r['ended']]}" if r.get("ended") else "")) for r in doc["ranks"]]
    rows += [(r, "never seen") for r in doc.get("ranks_never_seen") or []]
    lines += [f"    rank {rank}: {text}" for rank, text in sorted(rows)]
    return lines


def status_lines(doc: dict[str, Any]) -> list[str]:
    """``bake_status``'s answer for a person, one fact a line."""
    lines = [f"{doc['output']}: {doc['state']}"]
    if doc["state"] == "complete":
        splits = doc.get("splits")
        if isinstance(splits, dict):
            lines.append(f"  {len(splits)} splits, {format_count(doc.get('n_mlps'))} MLPs in all; a re-run redoes nothing")
            lines += [f"    {name}: {_shape_line(entry)}" for name, entry in splits.items()]
        else:
            lines.append(f"  {_shape_line(doc)}; a re-run redoes nothing")
        return _shown(lines)
    who = doc.get("holder") or doc.get("last_run")
    if who:
        label = "held by" if doc["state"] in ("running", "starting") else "last run"
        lines.append(f"  {label}: {lock_holder(who)}")
    phase = doc.get("phase") or doc.get("last_phase")
    if phase:
        label = "now" if doc.get("phase") else "last phase"
        lines.append(f"  {label}: {phase['what']}, since {phase['since_utc']} ({phase['seconds_ago']:.0f} s ago)")
    plan = doc.get("plan")
    if plan:
        target = plan.get("target_stderr")
        lines.append(f"  plan: {_mlps(plan.get('n_mlps'))} (range {plan.get('mlp_range')}), "
                     f"{'up to ' if target else ''}{format_count(plan.get('n_samples') or 0)} samples each, width "
                     f"{plan.get('width')}, depth {plan.get('depth')}, sampler {plan.get('sampler')}"
                     + (f", target standard error {target}" if target else ""))
    if "units_done" in doc:
        total = doc.get("units_total")
        lines.append(f"  units finished: {doc['units_done']}" + (f" of {total}" if total is not None else "")
                     + f"; checkpoints: {doc['checkpoints']}; samples saved: {format_count(doc['samples_saved'])}"
                     + (f" of {format_count(doc['samples_total'])}" if doc.get("samples_total") else ""))
        if doc.get("damaged_files"):
            lines.append(f"  damaged files (a re-run recomputes them): {doc['damaged_files']}")
        if "ranks" in doc:
            lines.extend(_rank_lines(doc))
        if doc.get("last_write_utc"):
            lines.append(f"  last unit or checkpoint written: {doc['last_write_utc']}")
        if doc.get("projected_left_s") is not None:
            lines.append(f"  projected time left: {format_duration(doc['projected_left_s'])} at {doc['projected_at']}")
        if doc.get("redo"):
            lines.append(f"  a re-run of the same command redoes: {doc['redo']}")
    for key in ("note", "damaged_plan"):
        if doc.get(key):
            lines.append(f"  {doc[key]}")
    return _shown(lines)


def _shown(lines: list[str]) -> list[str]:
    """Each line safe for a terminal: every field in them came from a file (the lock's host, pid and start,
    the plan, status.json, metadata.json), whose escape codes ``status`` printed raw."""
    return [sanitize(line.replace("\n", " ").replace("\r", " ").replace("\t", " "), 2000) for line in lines]
