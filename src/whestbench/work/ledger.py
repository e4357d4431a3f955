"""The resume ledger in a bake's work directory: its plan, seeds, finished units and checkpoints.

Layout of ``<output>.whest-work/`` (where it lies and its lock: ``work.workdir``)::

    lock                     who holds the bake (pid, host, start); an flock while it runs
    plan.json                the WorkSpec identity and its digest (a resume must match it)
    auto-seeds.json          random seeds a bake drew (so a re-run resumes with the same ones)
    status.json              what the bake planned (planned samples, units, workers), for ``whest dataset status``
    pilots.json              a target bake's pilot-planned samples per MLP (a resume reads them, not the pilots again)
    units/<key>.unit         a finished unit's sums (a checked record: ``work.records``)
    units/<key>.ckpt         a unit's progress inside itself (sampler state + partial sums)

Every file is written to a temp name, fsynced and renamed, so after a crash it is either wholly
there or absent. Every file also carries what it belongs to and a checksum, and is checked when
read: a unit or checkpoint file that is damaged, edited, truncated, swapped with another unit's, or
from another bake is reported in one line and recomputed; a damaged plan or seeds file is refused
with the file named and the fix. Nothing read from here is trusted without those checks.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from whestbench.atomic import fsync_dir, read_regular, remove_abandoned_staging, write_file_atomic
from whestbench.compute.segments import SegmentTrail
from whestbench.compute.stats import LayerSums
from whestbench.errors import DamagedRecord, DamagedWorkFile, FileTooLarge, LedgerMismatch, UsageError
from whestbench.work.records import RECOMPUTED, decode_record, encode_record
from whestbench.work.units import Unit
from whestbench.work.workdir import PILOTS_FILE, PLAN_FILE, PLAN_MAX_BYTES, SEEDS_FILE, UNITS_DIR, output_for

PLAN_FORMAT = "whestbench-plan/2"
SEEDS_FORMAT = "whestbench-seeds/1"


# ------------------------------------------------------------------------------------ seeds


def save_seeds(root: Path, seeds: list[int], digest: str) -> None:
    """Keep a bake's random seeds, before its plan: a crash between the two must not leave a plan
    whose seeds a re-run cannot recover (it would draw new ones and be refused as another bake)."""
    root.mkdir(parents=True, exist_ok=True)
    blob = json.dumps({"format": SEEDS_FORMAT, "seed_list_digest": digest, "seeds": seeds})
    write_file_atomic(root / SEEDS_FILE, blob.encode())


def load_seeds(root: Path, n_mlps: int, digest_of: Callable[[list[int]], str],
               validate: Callable[[list[int], int], list[int]]) -> list[int] | None:
    """The seeds a previous run of this bake drew, or None if it drew none. A file that fails its
    checks is refused (DamagedWorkFile): resuming with other seeds would mix two datasets."""
    path = root / SEEDS_FILE
    if not path.exists():
        if (root / PLAN_FILE).exists():  # a bake of random seeds whose seed file was deleted
            raise DamagedWorkFile(f"the seed file {path} is missing: {root} holds a saved bake (plan.json) but not the "
                                  "random seeds it drew, so its units cannot be used.", fix="If that bake was given "
                                  f"--mlp-seeds or --seed, re-run it with them; otherwise remove {root} to start over "
                                  "with new random seeds.")
        return None
    fix = (f"remove {root} to start over with new random seeds (its saved units belong to the old ones), "
           "or pass --mlp-seeds FILE / --seed S.")
    try:
        # each seed is below 2**63: at most 19 digits and ", "; then the format tag and the digest
        data = json.loads(read_regular(path, 24 * n_mlps + 4096, "seed file of this bake"))
        seeds, digest = data["seeds"], data["seed_list_digest"]
        if data.get("format") != SEEDS_FORMAT or not isinstance(seeds, list):
            raise ValueError("unknown format")
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
        raise DamagedWorkFile(f"work file {path} is unreadable or damaged ({_why(e)});", fix=fix) from None
    try:
        seeds = validate(seeds, len(seeds))
    except UsageError as e:
        raise DamagedWorkFile(f"work file {path} holds an invalid seed list ({e});", fix=fix) from None
    if digest_of(seeds) != digest:
        raise DamagedWorkFile(f"work file {path} was edited or damaged (its seeds do not match their digest);", fix=fix)
    if len(seeds) != n_mlps:
        raise LedgerMismatch(f"work directory {root} holds a bake of {len(seeds)} MLPs, not {n_mlps};",
                             fix=f"re-run the original command to resume it, or remove {root} to start over.")
    return seeds


def _why(e: BaseException) -> str:
    """Why a work file could not be read, short: the cap it broke, the system's reason (``not a regular
    file``: a FIFO or a device put there), else the error's class."""
    if isinstance(e, FileTooLarge):
        return str(e)
    return getattr(e, "strerror", None) or type(e).__name__


def record_cap(identity: dict[str, Any], key: str) -> int:
    """The most bytes a unit or checkpoint file of unit ``key`` of the bake ``identity`` can hold: per MLP
    of the unit, its sums (4 arrays of depth × width float64), a philox checkpoint's two pairwise trees (at
    most 64 levels of 4·depth × width float64 each) and the trail's values (4 arrays of segments × depth ×
    width float32), twice over, plus 16 MiB of header (the generator states). A file beyond it is not one
    this bake wrote; it is refused before it is read (a 5 GB sparse unit file took 3.9 GB in ``status``)."""
    dims = [identity.get(k) for k in ("depth", "width", "audit_segments")]
    unit = Unit.from_key(key)
    if not all(isinstance(v, int) and 0 <= v <= 1 << 30 for v in dims) or unit is None:
        return 1 << 30  # an identity without the figures: a plan no bake of ours wrote is refused before
    depth, width, segments = dims
    per_mlp = depth * width * (4 * 8 + 2 * 64 * 4 * 8 + 4 * 4 * max(segments, 1))
    return 16 * 2**20 + 2 * unit.mlp_count * per_mlp


# ------------------------------------------------------------------------------------ pilots

PILOTS_FORMAT = "whestbench-pilots/1"


def _pilots_digest(plan_digest: str, counts: list[int]) -> str:
    return hashlib.sha256(json.dumps({"plan": plan_digest, "counts": counts}).encode()).hexdigest()


def save_pilots(root: Path, plan_digest: str, counts: list[int]) -> None:
    """Keep a target bake's pilot-planned counts (one per MLP of its range), bound to its plan's
    identity digest, so a resume reads them instead of running every MLP's pilot again."""
    blob = {"format": PILOTS_FORMAT, "plan_digest": plan_digest, "counts": counts,
            "digest": _pilots_digest(plan_digest, counts)}
    write_file_atomic(Path(root) / PILOTS_FILE, json.dumps(blob).encode())


def load_pilots(root: Path, plan_digest: str, n: int, cap: int) -> list[int] | None:
    """The counts ``save_pilots`` kept for this very bake (``plan_digest``), checked: ``n`` ints in
    1..``cap`` under their digest. None when there are none, or they are another bake's, damaged or
    unreadable (the pilots then run again: they are deterministic, so nothing else changes)."""
    path = Path(root) / PILOTS_FILE
    try:
        data = json.loads(read_regular(path, 24 * n + 4096, "pilots file of this bake"))
        counts = data["counts"]
        if (data.get("format") != PILOTS_FORMAT or data.get("plan_digest") != plan_digest or not isinstance(counts, list)
                or len(counts) != n or data.get("digest") != _pilots_digest(plan_digest, counts)):
            return None
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None
    if not all(type(c) is int and 1 <= c <= cap for c in counts):
        return None
    return counts


# ------------------------------------------------------------------------------------ the ledger


def identity_diff(a: dict[str, Any], b: dict[str, Any], label_a: str, label_b: str) -> str:
    """The keys where two identities differ, each with both values: ``"width (saved 8, now 16)"``."""
    return ", ".join(f"{k} ({label_a} {a.get(k)!r}, {label_b} {b.get(k)!r})" for k in sorted(set(a) | set(b))
                     if a.get(k) != b.get(k))


def identity_digest(identity: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def unit_record(key: str, digest: str, sums: LayerSums, wall_s: float) -> bytes:
    """A finished unit as a checked record: the ledger's ``units/<key>.unit``, and what a rank posts to rank 0."""
    meta, arrays = {"count": int(sums.count), "wall_s": float(wall_s)}, sums.arrays()
    if sums.trail is not None:  # the audit trail's segments (compute.segments), arrays prefixed trail_
        trail_meta, trail_arrays = sums.trail.record()
        meta.update(trail_meta)
        arrays = {**arrays, **trail_arrays}
    return encode_record("unit", key, digest, meta, arrays)


def read_unit_record(blob: bytes, key: str, digest: str, check: Callable[[LayerSums], str | None] | None = None
                     ) -> tuple[LayerSums, float]:
    """``unit_record``'s ``(sums, wall_s)``, checked (DamagedRecord if it fails)."""
    meta, arrays = decode_record(blob, kind="unit", key=key, plan=digest)
    try:
        sums = LayerSums.from_arrays(arrays, int(meta["count"]))
        sums.trail = SegmentTrail.from_record(meta, arrays)
        wall = float(meta["wall_s"])
    except (KeyError, TypeError, ValueError) as e:
        raise DamagedRecord(f"missing field ({e})", fix=RECOMPUTED) from None
    why = check(sums) if check is not None else None
    if why:
        raise DamagedRecord(why, fix=RECOMPUTED)
    return sums, wall


def read_plan(path: Path) -> dict[str, Any]:
    """The identity a work directory's ``plan.json`` holds, checked (format, digest); DamagedWorkFile naming
    the file and the fix otherwise."""
    fix = f"remove {Path(path).parent} to start over (its saved units cannot be trusted without their plan)."
    try:
        data = json.loads(read_regular(path, PLAN_MAX_BYTES, "plan.json"))
        identity, digest = data["identity"], data["digest"]
        if data.get("format") != PLAN_FORMAT or not isinstance(identity, dict):
            raise ValueError("unknown format")
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
        raise DamagedWorkFile(f"work file {path} is unreadable, damaged or from another whestbench version "
                              f"({_why(e)});", fix=fix) from None
    if identity_digest(identity) != digest:
        raise DamagedWorkFile(f"work file {path} was edited or damaged (checksum mismatch);", fix=fix)
    return identity


class Ledger:
    """A bake's finished units and checkpoints in ``root`` (the work directory), for one identity.

    Opening it writes ``plan.json`` for a new bake, or checks it for a resumed one: a different
    bake is refused (LedgerMismatch, naming the fields), a damaged plan too (DamagedWorkFile).
    """

    def __init__(self, root: Path, identity: dict[str, Any]):
        self.root = Path(root)
        self.units_dir = self.root / UNITS_DIR
        self.identity = identity
        self.digest = identity_digest(identity)
        plan = self.root / PLAN_FILE
        if plan.exists():
            stored = read_plan(plan)
            if stored != identity:
                diff = identity_diff(stored, identity, "saved", "now")
                raise LedgerMismatch(f"work directory {self.root} holds results of a different bake (differs in: {diff});",
                                     fix=f"re-run the original command to resume it, or delete {self.root} to start over.")
            # resuming: a previous run may have died mid-write, leaving its marked staging directory
            if output_for(self.root) is not None:
                remove_abandoned_staging(output_for(self.root))
        else:
            self.units_dir.mkdir(parents=True, exist_ok=True)
            fsync_dir(self.root.parent)
            blob = {"format": PLAN_FORMAT, "digest": self.digest, "identity": identity}
            write_file_atomic(plan, json.dumps(blob, indent=2, sort_keys=True).encode())
        self.units_dir.mkdir(parents=True, exist_ok=True)

    @classmethod
    def peek(cls, root: Path, identity: dict[str, Any]) -> "Ledger | None":
        """The ledger a previous run of the bake ``identity`` left in ``root``, opened read-only (nothing
        is written, no lock is taken), or None when ``root`` holds no plan or another bake's.
        DamagedWorkFile for a damaged plan."""
        root = Path(root)
        plan = root / PLAN_FILE
        if root.is_symlink() or not plan.is_file():
            return None
        ledger = cls.__new__(cls)
        ledger.root, ledger.units_dir, ledger.identity = root, root / UNITS_DIR, identity
        ledger.digest = identity_digest(identity)
        return ledger if read_plan(plan) == identity else None

    def saved(self, key: str) -> tuple[str, dict[str, Any]] | None:
        """What is saved for unit ``key``: ``("unit", meta)`` when it finished, ``("checkpoint", meta)``
        when it stopped inside, None when nothing is. DamagedRecord when the file fails its checks."""
        for kind, path in (("unit", self.unit_path(key)), ("checkpoint", self.checkpoint_path(key))):
            if path.is_file():
                blob = read_regular(path, record_cap(self.identity, key), f"{kind} file of this bake")
                meta, _ = decode_record(blob, kind=kind, key=key, plan=self.digest)
                return kind, meta
        return None

    # --- finished units

    def unit_path(self, key: str) -> Path:
        return self.units_dir / f"{key}.unit"

    def save(self, key: str, sums: LayerSums, wall_s: float) -> None:
        write_file_atomic(self.unit_path(key), unit_record(key, self.digest, sums, wall_s))

    def load(self, key: str, check: Callable[[LayerSums], str | None] | None = None) -> tuple[LayerSums, float]:
        """One finished unit, checked (DamagedRecord if it fails; FileNotFoundError if absent)."""
        blob = read_regular(self.unit_path(key), record_cap(self.identity, key), "unit file of this bake")
        return read_unit_record(blob, key, self.digest, check)

    def scan(self, keys: Iterable[str], check: Callable[[str, LayerSums], str | None] | None = None
             ) -> tuple[dict[str, int], list[tuple[Path, str]]]:
        """Which of ``keys`` are finished and pass their checks, and ``(file, reason)`` for each that
        does not. Failed files are renamed ``*.damaged`` (kept for a look, never read again)."""
        done: dict[str, int] = {}
        damaged: list[tuple[Path, str]] = []
        for key in keys:
            path = self.unit_path(key)
            if not path.exists():
                continue
            try:
                sums, _ = self.load(key, (lambda s, k=key: check(k, s)) if check else None)
                done[key] = sums.count
            except (DamagedRecord, OSError) as e:
                damaged.append((path, getattr(e, "problem", None) or str(e)))
                with contextlib.suppress(OSError):
                    os.replace(path, path.with_suffix(".damaged"))
        return done, damaged

    # --- checkpoints inside a unit

    def checkpoint_path(self, key: str) -> Path:
        return self.units_dir / f"{key}.ckpt"

    def save_checkpoint(self, key: str, state: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        write_file_atomic(self.checkpoint_path(key), encode_record("checkpoint", key, self.digest, state, arrays))

    def load_checkpoint(self, key: str) -> tuple[dict[str, Any], dict[str, np.ndarray]] | None:
        """The unit's last checkpoint, or None (none saved). DamagedRecord if it fails its checks."""
        blob = self.checkpoint_record(key)
        return None if blob is None else decode_record(blob, kind="checkpoint", key=key, plan=self.digest)

    def checkpoint_record(self, key: str) -> bytes | None:
        """The checkpoint file's bytes as saved (a checked record), or None; for handing to another rank."""
        try:
            return read_regular(self.checkpoint_path(key), record_cap(self.identity, key), "checkpoint file of this bake")
        except FileNotFoundError:
            return None

    def keep_checkpoint_record(self, key: str, blob: bytes) -> dict[str, Any]:
        """Save a checkpoint record made elsewhere (another rank) after checking it belongs to this
        bake and unit; returns its meta. DamagedRecord if it fails a check (nothing is written)."""
        meta, _ = decode_record(blob, kind="checkpoint", key=key, plan=self.digest)
        write_file_atomic(self.checkpoint_path(key), blob)
        return meta

    def drop_checkpoint(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.checkpoint_path(key).unlink()

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
