"""Whether an output already holds this very result (a re-run is then a no-op): one test for all.

A requeued job, or a retried array task, re-runs a verb whose output is already in place (a verb's
output appears only complete: it is staged and renamed). ``completed(output, digest, legacy)`` is the
one answer, for bake requeues (``bake/plan.py``), merge and combine re-runs (here) and the recompute
cache (``verify/recompute.py``): the output's **completion marker** (``plan_digest`` in its
metadata.json, the digest of the identity of the plan that made it, as datatrove's completion
markers record a finished task) equals the digest of the plan asked for, **and** every file matches
its checksum. A dataset written before the marker (whestbench 0.16, earlier 0.17 bakes) has none:
``legacy(metadata)`` then compares its recorded facts as before.

What the marker digests: a bake's plan (``BakePlan.result_identity``); a merge, the markers of its
partials in range order (the merge of a bake's slices); a combine, each split's marker. A combine's
default split and prepared copies are options of the output, compared beside the marker.
Anything else at the output is refused as before (``already exists``). The caller that can see
``verify`` (cli/, verify/recompute.py) then re-checks the content: a re-signed output passes this test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from whestbench.errors import InvalidDatasetError
from whestbench.format.checksums import checksum_state
from whestbench.format.reader import DatasetDir, holds_dataset, open_dataset, read_metadata
from whestbench.format.schema import PLAN_DIGEST, DatasetMeta
from whestbench.work.ledger import identity_digest

_SAME_BAKE = ("split", "config", "n_samples", "width", "depth", "backend", "sampler", "estimator", "target_stderr",
              "seed_list_digest")


def marker(identity: Mapping[str, Any]) -> str:
    """The completion marker of a plan whose identity is ``identity``: ``"sha256:<hex>"``."""
    return "sha256:" + identity_digest(dict(identity))


def merged_marker(partials: Sequence[Mapping[str, Any]]) -> str | None:
    """The marker of the merge of ``partials`` (their metadata), or None when one has no marker."""
    digests = [m.get(PLAN_DIGEST) for m in sorted(partials, key=_range_start)]
    return marker({"merge": digests}) if digests and all(isinstance(d, str) for d in digests) else None


def combined_marker(inputs: Sequence[Mapping[str, Any]]) -> str | None:
    """The marker of the combination of ``inputs`` (their metadata), or None when one has no marker."""
    digests = {str(m.get("split")): m.get(PLAN_DIGEST) for m in inputs}
    return marker({"combine": digests}) if digests and all(isinstance(d, str) for d in digests.values()) else None


def _range_start(md: Mapping[str, Any]) -> int:
    rng = md.get("mlp_range")
    return rng[0] if isinstance(rng, list) and rng and isinstance(rng[0], int) else 0


def _read(path: str | Path) -> dict[str, Any] | None:
    """The metadata of ``path``, or None; an open ``DatasetDir`` keeps it for the verb that follows."""
    try:
        return path.metadata if isinstance(path, DatasetDir) else read_metadata(path)
    except (InvalidDatasetError, OSError):
        return None


def completed(output: str | Path, digest: str | None, legacy: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
    """The metadata of ``output`` when it holds the result of the plan whose marker is ``digest``,
    intact; else None. The test: the recorded marker equals ``digest`` (without one on either side,
    ``legacy(metadata)`` judges), and every listed file matches its checksum (a dataset with none
    is not vouched for)."""
    if not holds_dataset(output):
        return None
    handle = open_dataset(output)
    md = _read(handle)
    if md is None:
        return None
    recorded = md.get(PLAN_DIGEST)
    same = recorded == digest if recorded is not None and digest is not None else legacy(md)
    return md if same and checksum_state(handle).state == "ok" else None


def finished_merge(partials: Sequence[str | Path], output: str | Path) -> dict[str, Any] | None:
    """The output's metadata when it is the intact merge of exactly ``partials``, else None."""
    if not partials or not holds_dataset(output):
        return None
    mds = [_read(p) for p in partials]
    if any(m is None or not m.get("is_partial") for m in mds):
        return None

    def legacy(out: dict[str, Any]) -> bool:
        first = mds[0]
        created = [m["created_at_utc"] for m in mds if isinstance(m.get("created_at_utc"), str)]
        return (
            not out.get("is_partial")
            and out.get("partials_count") == len(mds)
            and out.get("n_mlps") == first.get("total_n_mlps")
            and all(out.get(k) == m.get(k) for m in mds for k in _SAME_BAKE)
            and (not created or out.get("created_at_utc") == min(created))
        )

    return completed(output, merged_marker(mds), legacy)


def finished_combine(inputs: Sequence[str | Path], output: str | Path, *, default_split: str | None,
                     prepared: bool) -> dict[str, Any] | None:
    """The output's metadata when it is the intact combination of exactly ``inputs``, else None."""
    if not inputs or not holds_dataset(output):
        return None
    mds = [_read(p) for p in inputs]
    if any(m is None or "splits" in m for m in mds):
        return None

    def legacy(out: dict[str, Any]) -> bool:
        splits = DatasetMeta.of(out).blocks
        if sorted(splits) != sorted(str(m.get("split")) for m in mds):
            return False
        for m in mds:
            entry = splits[m.get("split")]
            if not isinstance(entry, dict) or any(entry.get(k) != m.get(k) for k in
                                                  ("n_mlps", "config", "created_at_utc", "seed_list_digest")):
                return False
        return True

    done = completed(output, combined_marker(mds), legacy)
    if done is None or not DatasetMeta.of(done).is_multi:
        return None
    if default_split is not None and done.get("default_split") != default_split:
        return None
    if bool(done.get("prepared_splits")) != prepared:
        return None
    return done
