"""Build ``metadata.json`` for a bake (key order as whestbench 0.16 writes it, then our additions)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from whestbench.compute.seeds import PROTOCOL_V3
from whestbench.work.machine import blas_info, hardware_fingerprint, package_version, whestbench_version
from whestbench.format.schema import BACKEND_CPU, FORMAT, PLAN_DIGEST, SCHEMA_VERSION


SAMPLES_USED = "samples_used"
"""A target bake's metadata block: the samples its MLPs used (``samples_used_block``); the
``n_samples`` key is the cap."""


def samples_used_block(counts, cap: int) -> dict[str, Any]:
    """``{min, median, max, total, at_cap}`` of a target bake's per-MLP counts (``n_samples_used``)."""
    import numpy as np

    c = np.asarray(counts, dtype=np.int64)
    if c.size == 0:
        return {"min": 0, "median": 0, "max": 0, "total": 0, "at_cap": 0}
    median = float(np.median(c))
    return {"min": int(c.min()), "median": int(median) if median.is_integer() else median, "max": int(c.max()),
            "total": int(c.sum()), "at_cap": int((c >= cap).sum())}


def now_utc() -> str:
    return datetime.now(timezone.utc).isoformat()


def bake_metadata(
    *,
    split: str,
    config: str,
    n_rows: int,
    n_samples: int,
    width: int,
    depth: int,
    mlp_range: tuple[int, int],
    total_n_mlps: int,
    sampler: dict[str, Any],
    seed_list_digest: str,
    seed_source: dict[str, Any],
    bake_command: str | None,
    backend: str = BACKEND_CPU,
    backend_fields: dict[str, Any] | None = None,
    estimator: dict[str, Any] | None = None,
    target_stderr: dict[str, Any] | None = None,
    card: dict[str, str] | None = None,
    device_check: dict[str, Any] | None = None,
    plan_digest: str | None = None,
    audit: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Metadata of a bake. A range short of ``[0, total_n_mlps)`` makes it a partial.

    Keys whestbench 0.16 reads come first in its order; ours (``sampler``, ``seed_list_digest``,
    ``seed_source``, ``blas``, ``bake_command``, ``card``, ``plan_digest``: the completion marker,
    ``format/finished.py``) follow; partial keys go last, as in 0.16;
    the writer appends ``checksums``.
    """
    md: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "format": FORMAT,
        "backend": backend,
        "seed_protocol": dict(PROTOCOL_V3),
        "created_at_utc": now_utc(),
        "split": split,
        "config": config,
        "n_mlps": n_rows,
        "n_samples": n_samples,
        "width": width,
        "depth": depth,
        "hardware": hardware_fingerprint(),
        "whestbench_version": whestbench_version(),
        "flopscope_version": package_version("flopscope"),
    }
    md.update(backend_fields or {})
    if device_check is not None:  # torch bakes: what the device check found (work/device_check.py)
        md["device_check"] = device_check
    md["sampler"] = sampler
    if audit:  # the audit trail's block (format/trail.py)
        md["audit"] = audit
    if estimator:
        md["estimator"] = estimator
    if target_stderr:
        md["target_stderr"] = target_stderr
    md["seed_list_digest"] = seed_list_digest
    md["seed_source"] = seed_source
    if backend == BACKEND_CPU:
        md["blas"] = blas_info()
    if bake_command:
        md["bake_command"] = bake_command
    if card:
        md["card"] = dict(card)  # the card's title, license, homepage as the bake was given them
    if plan_digest:
        md[PLAN_DIGEST] = plan_digest
    if tuple(mlp_range) != (0, total_n_mlps):
        md.update(is_partial=True, mlp_range=list(mlp_range), total_n_mlps=total_n_mlps)
    return md
