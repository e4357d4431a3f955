"""Whether an output already holds the result of this very merge or combine-splits (a re-run is then a no-op).

A requeued job, or a retried array task, re-runs a verb whose output is already in place (a verb's
output appears only complete: it is staged and renamed). Such a re-run succeeds without work when
the output is intact (every file matches its checksum) and was made from the same inputs: the
same bake's partials (seed list, shape, sampler, estimator, and the partials' earliest
``created_at_utc``, which the merged metadata keeps), or the same splits (each split's rows count,
config, seed list and ``created_at_utc``), the same default split and the same prepared copies.
Anything else at the output is refused as before (``already exists``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from whestbench.format.schema import DatasetMeta
from whestbench.errors import InvalidDatasetError

_SAME_BAKE = ("split", "config", "n_samples", "width", "depth", "backend", "sampler", "estimator", "target_stderr",
              "seed_list_digest")


def _read(path: str | Path) -> dict[str, Any] | None:
    """The metadata of ``path``, or None; an open ``DatasetDir`` keeps it for the verb that follows."""
    from whestbench.format.reader import DatasetDir, read_metadata

    try:
        return path.metadata if isinstance(path, DatasetDir) else read_metadata(path)
    except (InvalidDatasetError, OSError):
        return None


def _intact(output: Path, md: Mapping[str, Any]) -> bool:
    from whestbench.format.reader import checksum_state

    return checksum_state(output, md).state == "ok"


def _holds_a_dataset(output: str | Path) -> bool:
    p = Path(output)
    return not p.is_symlink() and (p / "metadata.json").is_file()


def finished_merge(partials: Sequence[str | Path], output: str | Path) -> dict[str, Any] | None:
    """The output's metadata when it is the intact merge of exactly ``partials``, else None."""
    if not partials or not _holds_a_dataset(output):
        return None
    out = _read(output)
    mds = [_read(p) for p in partials]
    if out is None or any(m is None or not m.get("is_partial") for m in mds):
        return None
    first = mds[0]
    created = [m["created_at_utc"] for m in mds if isinstance(m.get("created_at_utc"), str)]
    same = (
        not out.get("is_partial")
        and out.get("partials_count") == len(mds)
        and out.get("n_mlps") == first.get("total_n_mlps")
        and all(out.get(k) == m.get(k) for m in mds for k in _SAME_BAKE)
        and (not created or out.get("created_at_utc") == min(created))
    )
    return out if same and _intact(Path(output), out) else None


def finished_combine(inputs: Sequence[str | Path], output: str | Path, *, default_split: str | None,
                     prepared: bool) -> dict[str, Any] | None:
    """The output's metadata when it is the intact combination of exactly ``inputs``, else None."""
    if not inputs or not _holds_a_dataset(output):
        return None
    out = _read(output)
    mds = [_read(p) for p in inputs]
    if out is None or not DatasetMeta.of(out).is_multi or any(m is None or "splits" in m for m in mds):
        return None
    splits = DatasetMeta.of(out).blocks
    if sorted(splits) != sorted(str(m.get("split")) for m in mds):
        return None
    for m in mds:
        entry = splits[m.get("split")]
        if not isinstance(entry, dict) or any(entry.get(k) != m.get(k) for k in
                                              ("n_mlps", "config", "created_at_utc", "seed_list_digest")):
            return None
    if default_split is not None and out.get("default_split") != default_split:
        return None
    if bool(out.get("prepared_splits")) != prepared:
        return None
    return out if _intact(Path(output), out) else None
