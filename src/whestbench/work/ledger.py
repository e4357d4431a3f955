"""The resume ledger: one file per finished unit in a work directory beside the output.

Layout: ``<work>/plan.json`` (the WorkSpec identity) and ``<work>/units/<unit.key>.npz`` (sums,
sumsq, count, wall seconds). Each unit file is written to a temp name, fsynced, then renamed, so
after a crash at any moment a unit is either wholly there or absent. Re-running the same bake reads
what is there and computes the rest; a different bake pointed at the same work directory is refused.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from whestbench.atomic import fsync_dir, write_file_atomic
from whestbench.compute.stats import LayerSums
from whestbench.errors import UsageError


def sums_to_bytes(sums: LayerSums, wall_s: float) -> bytes:
    """A unit's result as a small self-describing blob (npz: sums, sumsq, count, wall seconds)."""
    buf = io.BytesIO()
    np.savez(buf, sums=sums.sums, sumsq=sums.sumsq, count=np.int64(sums.count), wall_s=np.float64(wall_s))
    return buf.getvalue()


def sums_from_bytes(blob: bytes) -> tuple[LayerSums, float]:
    with np.load(io.BytesIO(blob)) as z:
        return (
            LayerSums(sums=z["sums"].copy(), sumsq=z["sumsq"].copy(), count=int(z["count"])),
            float(z["wall_s"]),
        )


class LedgerMismatch(UsageError):
    """The work directory belongs to a different bake (other seeds, sizes, sampler or range)."""


WORK_SUFFIX = ".whest-work"


def work_dir_for(output: Path) -> Path:
    """``<output>.whest-work``: beside the output, so a re-run of the same command finds it."""
    output = Path(output)
    return output.with_name(output.name + WORK_SUFFIX)


def remove_stale_staging(work_dir: Path) -> list[Path]:
    """Delete the staging directories a killed writer of this bake's output left behind.

    ``whestbench.atomic.staged_dir`` builds the output as ``.<name>.staging-*`` beside it and
    renames it when complete; a SIGKILL (or power loss) mid-write leaves that directory. It is
    only ours to delete while the bake is unfinished, i.e. while its work directory exists.
    """
    work_dir = Path(work_dir)
    if not work_dir.name.endswith(WORK_SUFFIX):
        return []
    name = work_dir.name[: -len(WORK_SUFFIX)]
    stale = sorted(p for p in work_dir.parent.glob(f".{name}.staging-*") if p.is_dir())
    for p in stale:
        shutil.rmtree(p, ignore_errors=True)
    return stale


class Ledger:
    def __init__(self, root: Path, identity: dict[str, Any]):
        self.root = Path(root)
        self.units_dir = self.root / "units"
        self.identity = identity
        plan = self.root / "plan.json"
        if plan.exists():
            stored = json.loads(plan.read_text())
            if stored != identity:
                diff = ", ".join(
                    f"{k} (saved {stored.get(k)!r}, now {identity.get(k)!r})"
                    for k in sorted(set(stored) | set(identity))
                    if stored.get(k) != identity.get(k)
                )
                raise LedgerMismatch(
                    f"work directory {self.root} holds results of a different bake (differs in: {diff}); "
                    f"re-run the original command to resume it, or delete {self.root} to start over."
                )
            remove_stale_staging(self.root)  # resuming: a previous run may have died mid-write
        else:
            self.units_dir.mkdir(parents=True, exist_ok=True)
            fsync_dir(self.root.parent)
            write_file_atomic(plan, json.dumps(identity, indent=2, sort_keys=True).encode())
        self.units_dir.mkdir(parents=True, exist_ok=True)

    def load_done(self) -> dict[str, tuple[LayerSums, float]]:
        """Every unit saved so far: key -> (sums, wall seconds). Ignores temp files of a crash."""
        return {path.stem: sums_from_bytes(path.read_bytes()) for path in sorted(self.units_dir.glob("*.npz"))}

    def save(self, key: str, sums: LayerSums, wall_s: float) -> None:
        write_file_atomic(self.units_dir / f"{key}.npz", sums_to_bytes(sums, wall_s))

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
