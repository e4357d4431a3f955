"""``verify --recompute K``: bake K of a dataset's MLPs again with its own recipe, and compare.

A pilot sees an error of ~0.07 standard deviations of a neuron, which at N = 10⁹ is thousands of
the stored standard errors; only a full recomputation sees a 5-standard-error error there. This
module turns a dataset's metadata into the bake that reproduces K of its rows — the same seeds,
sampler, estimator, ``n_samples`` (the cap of a target bake, with its target) — and runs it through
the bake's own machinery (plan, units, checkpoints, resume). The rows a bake writes depend only on
each MLP's seed and the recipe, never on the other seeds of the list, so K rows baked alone are
those K rows of the original. ``verify`` then compares them as strictly as the two bakes allow
(``compare.compare_mode``: bits, the precision gate, float32 rounding, or statistics).

The recomputation lives in a cache directory named by the recipe and seeds (``recompute_dir``), so
an interrupted ``verify --recompute`` resumes, and a repeated one reuses the finished bake when it
passes the bake's own completion test (its marker and checksums: ``format/finished.completed``).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any, Callable

from whestbench.atomic import read_regular, write_file_atomic
from whestbench.bake.pipeline import bake
from whestbench.bake.plan import BakeConfig, Done, plan_bake
from whestbench.compute.estimation import ESTIMATOR_VERSION, TARGET_RULE, Estimation, is_cv_block
from whestbench.compute.pcg64 import SAMPLER_VERSION as PCG64_VERSION
from whestbench.compute.philox.spec import SAMPLER_VERSION as PHILOX_VERSION
from whestbench.errors import RESUME, OutputExistsError, UsageError
from whestbench.format.schema import DatasetMeta, infer_sampler
from whestbench.paths import check_outside_inputs
from whestbench.verify.spot_draw import draw_rows, fresh_seed
from whestbench.work.ledger import identity_digest
from whestbench.work.machine import whestbench_version


def choose(rows: list, k: int, seed: int | None) -> tuple[list, int]:
    """``(the rows to bake again, the seed)``: ``k`` rows drawn with ``seed`` (None: a fresh one, printed by
    the caller), uniform without replacement and independent for each ``k`` (``spot_draw.draw_rows``)."""
    seed = fresh_seed() if seed is None else int(seed)
    return [rows[i] for i in draw_rows(len(rows), k, seed)], seed


def pending(root: Path | None, key: dict[str, Any]) -> tuple[Path | None, int | None]:
    """``(the file that keeps a fresh draw's seed until its work completes, the seed it holds or None)``.
    A stopped ``--recompute`` or ``--spot-check`` run without a seed drew one; the re-run of the same
    command finds it here and continues that draw (its work is cached under it). ``key``: what the draw is
    for (the dataset's metadata digest, the budget, the device); a file for another key, unreadable, or
    writable by another user is not taken. None and None without a cache root (``--no-cache``)."""
    if root is None:
        return None, None
    path = Path(root) / ("pending-" + identity_digest(key)[:16] + ".json")
    try:
        if not_trusted(path) or not_trusted(path.parent):
            return path, None
        got = json.loads(read_regular(path, 64 << 10, "pending draw"))
        seed = got.get("seed") if isinstance(got, dict) and got.get("key") == key else None
        return path, (seed if isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0 else None)
    except (OSError, ValueError, RecursionError):
        return path, None


def remember(path: Path | None, key: dict[str, Any], seed: int) -> None:
    """Keep ``seed`` in ``path`` (``pending``) while its work runs."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file_atomic(path, json.dumps({"key": key, "seed": int(seed)}, sort_keys=True).encode())


def resume_with(message: str, flags: str) -> str:
    """A stopped bake's ``stopped: ...; re-run the same command to resume.`` for a run whose draw was
    fresh: the re-run must name the seed, or it draws other MLPs (or segments)."""
    return message.replace(RESUME, f"re-run the same command to resume (it continues the same draw; elsewhere, "
                                    f"or with --no-cache: {flags})")


def recipe(md: dict[str, Any], device: str | None) -> dict[str, Any]:
    """The bake arguments that reproduce the dataset's numbers (besides the seeds)."""
    sampler = infer_sampler(md)
    est = DatasetMeta.of(md).estimator
    target = md.get("target_stderr") if isinstance(md.get("target_stderr"), dict) else None
    out: dict[str, Any] = {  # read as recorded: verify asks for the recipe before the metadata is validated
        "n_samples": int(md["n_samples"]), "width": int(md["width"]), "depth": int(md["depth"]),
        "estimator": est.get("name", "plain"),
        "target_stderr": float(target["value"]) if target else None,
        "stderr_layer": target["layer"] if target else "last",
    }
    if target and is_cv_block(est) and target.get("rule") == TARGET_RULE:  # a control-variate bake of the older rule
        out["target_rule"] = TARGET_RULE
    if sampler == "philox":
        out |= {"backend": "torch", "device": device or "cpu"}
    else:
        if device not in (None, "cpu"):
            raise UsageError(f"--device {device} recomputes philox datasets only; this one was sampled with {sampler}, "
                             "which runs on the CPU path:", fix="leave --device out.")
        out |= {"backend": "cpu", "device": None}
    return out


def check_root(root: Path, inputs: list[Path]) -> Path:
    """``root`` (``--recompute-dir``) if a recompute may keep its bakes there, else UsageError before
    any check: a file, a dangling symlink, or a directory inside a dataset it reads (it would write
    Parquet under that dataset's ``data/``, and the next verify would fail its checksums)."""
    if not str(root).strip() or str(root) in (".", "./"):  # Path('') is '.': the cache went into the current directory
        raise UsageError(f"--recompute-dir {str(root)!r} names no directory of its own (it is the current directory);",
                         fix="pass a directory for the recompute cache (created if missing), or --no-cache.")
    if os.path.islink(root) and not root.exists():
        raise UsageError(f"--recompute-dir {root} is a symlink to {os.readlink(root)!r}, which does not exist;",
                         fix=_PASS_DIR)
    if root.exists() and not root.is_dir():
        raise UsageError(f"--recompute-dir {root} is a file;", fix=_PASS_DIR)
    check_outside_inputs(root, inputs, flag="--recompute-dir")
    if root.is_dir():
        problem = not_trusted(root)
        if problem:
            raise UsageError(f"--recompute-dir {root} {problem}: another user could plant a bake there that verify "
                             "would trust;", fix="pass a directory only you can write (or --no-cache).")
    return root


_PASS_DIR = "pass a directory (created if missing)."


def not_trusted(path: Path) -> str | None:
    """Why a cache directory or entry cannot be trusted (another user may write it), or None. A forged
    bake can pass every check a reuse makes (damage the pilot-free checks cannot see, re-signed), so
    the cache is only as trusted as whoever can write it: its owner, alone."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return "is a symlink"
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        return f"belongs to another user (uid {st.st_uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "is writable by its group or by everyone"
    return None


def default_cache() -> Path:
    base = os.environ.get("WHEST_RECOMPUTE_DIR")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "whestbench" / "recompute"


def recompute_dir(root: Path, rec: dict[str, Any], seeds: list[int]) -> Path:
    """Where the recomputation of ``seeds`` under ``rec`` lives (the same request, the same folder)."""
    versions = {"whestbench": whestbench_version(), "estimator": ESTIMATOR_VERSION, "pcg64": PCG64_VERSION, "philox": PHILOX_VERSION}
    key = {"recipe": rec, "seeds": [int(s) for s in seeds], "versions": versions}
    return root / ("recompute-" + identity_digest(key)[:16])


def recompute(md: dict[str, Any], seeds: list[int], *, device: str | None, root: Path | None = None,
              on_event=None, stop=None, confirm: Callable[[Any], Any] | None = None) -> Any:
    """Bake ``seeds`` with ``md``'s recipe (resuming or reusing earlier work) and return the dataset: the
    path it baked, or the ``DatasetDir`` a reuse opened (path-like; the caller tells the two apart).

    A cached bake is reused when it passes the bake's completion test (this recipe's marker, every
    file matching its checksum) and ``confirm(path).ok`` (``run.confirm_complete``: integrity and
    the statistics without the audit pilot); otherwise it is baked again."""
    rec = recipe(md, device)
    out = recompute_dir(root or default_cache(), rec, seeds)
    out.parent.mkdir(parents=True, exist_ok=True)
    cfg = BakeConfig(
        n_mlps=len(seeds), n_samples=rec["n_samples"], width=rec["width"], depth=rec["depth"], output=out,
        mlp_seeds=tuple(int(s) for s in seeds), backend=rec["backend"], device=rec["device"],
        estimation=Estimation(rec["estimator"], rec["target_stderr"], rec["stderr_layer"], rec.get("target_rule")),
    )
    if out.is_symlink():  # an entry is a directory this user made, never a link to one: bake it again
        out.unlink()
    elif out.exists() and not_trusted(out):
        raise UsageError(f"the cached bake {out} {not_trusted(out)}:", fix="remove it, or pass --no-cache.")
    try:
        plan = plan_bake(cfg)
    except OutputExistsError:  # another bake, or one whose files no longer match their checksums
        plan = None
    if isinstance(plan, Done):  # finished earlier: this plan's completion marker, every file intact (format/finished.py)
        if confirm is None or confirm(plan.dataset).ok:
            return plan.dataset  # the handle the test and the check read: compare reads nothing again
        plan = None
    if plan is None:  # bake it again
        if out.is_symlink():
            out.unlink()  # never follow a link into a tree to delete
        else:
            shutil.rmtree(out)
        plan = plan_bake(cfg)
    bake(plan, on_event=on_event, stop=stop)
    return out
