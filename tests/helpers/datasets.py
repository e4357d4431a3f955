"""Datasets the tests share, and tampering with one on disk.

- ``stopped_after_first_unit(cfg)``: ``bake(cfg)`` in this process, stopped once its first unit is done.
- ``base_metadata(**extra)``: a single-split dataset's metadata.json, the least a reader takes, with ``extra``.
- ``made_once(tmp_path_factory, name, make)``: a folder baked once per test run, shared by the xdist workers.
- ``make_merge_inputs(root, **shape)``: the inputs the merge and combine-splits tests share; at
  ``TINY_SHAPE`` they are conftest's session-wide ``tiny`` bakes.
- ``edit_metadata(d, **changes)``: rewrite ``d/metadata.json`` with ``changes`` (a value of None removes the
  key); returns the new metadata.
- ``no_output(out)``: neither ``out`` nor a staging directory of it (``.<name>.*``) exists.
- ``resign(d, md)``: ``md`` written as ``d``'s metadata.json with checksums bound anew over ``d``'s files.
- ``tampered_copy(src, dst, mask=0xFF)``: a copy of ``src`` with one byte in the middle of its first shard
  flipped (the checksums no longer match); returns the copy and that shard.
- ``write_keeping_trail(...)``: rows rewritten through the writer with an existing audit trail file carried.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import threading
from pathlib import Path
from typing import Callable

import pytest

from whestbench.bake.pipeline import BakeConfig, bake, create_dataset
from whestbench.errors import BakeInterrupted
from whestbench.format.checksums import bind_checksums, dataset_checksums
from whestbench.format.writer import finish_dataset_dir, write_dataset

TINY_SHAPE = dict(n_samples=2000, width=8, depth=2)  # big enough for the inputs check merge and combine make
TINY_PUBLIC = dict(n_mlps=2, seed=3, **TINY_SHAPE)  # how ``tiny["public"]`` was baked
SMALL = dict(n_mlps=3, n_samples=4000, width=16, depth=3, seed=1)  # how conftest's ``small_bake`` was baked


def base_metadata(**extra) -> dict:
    md = {
        "schema_version": "3.0",
        "format": "hf-datasets-parquet",
        "backend": "flopscope",
        "seed_protocol": {"name": "whestbench_explicit_per_mlp_seeds", "version": "3.0"},
        "created_at_utc": "2026-01-01T00:00:00+00:00",
        "split": "public",
        "config": "default",
        "n_mlps": 4,
        "n_samples": 100,
        "width": 8,
        "depth": 2,
    }
    md.update(extra)
    return md


def stopped_after_first_unit(cfg: BakeConfig) -> tuple[list, BakeInterrupted]:
    """``bake(cfg)`` asked to stop as its first unit is done (the stop a signal handler makes): every event
    the bake sent, and the ``BakeInterrupted`` it raised (a bake that finishes fails the test)."""
    stop, events = threading.Event(), []

    def on_event(event):
        events.append(event)
        if event.kind == "unit_done":
            stop.set()

    with pytest.raises(BakeInterrupted) as info:
        bake(cfg, on_event=on_event, stop=stop)
    return events, info.value


def made_once(tmp_path_factory, name: str, make: Callable[[Path], object]) -> Path:
    """A folder ``make(folder)`` fills once per test run: under pytest-xdist the workers share it (the
    first to ask makes it, under a lock beside their temp folders; the others wait and reuse it), so
    it must never be written to afterwards."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        root = tmp_path_factory.mktemp(name)
        make(root)
        return root
    shared = tmp_path_factory.getbasetemp().parent  # this run's folder, above each worker's own
    root, done = shared / name, shared / f"{name}.done"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir()
            make(root)
            done.touch()
    return root


def make_merge_inputs(root: Path, **shape) -> dict:
    """Two slices ``p0``, ``p1`` of one 4-MLP bake (``--seed 3``) and two one-split datasets, ``public`` (2 MLPs,
    ``--seed 3``: the MLPs of ``p0``) and ``holdout`` (``--seed 4``, config ``holdout``), baked under ``root``
    at ``shape``: ``{"root", "parts":
    [two slices], "splits": [public, holdout]}`` (strings, as a command's arguments) and each as a path
    (``"p0"``, ``"p1"``, ``"public"``, ``"holdout"``)."""
    for k, r in enumerate([(0, 2), (2, 4)]):
        create_dataset(4, seed=3, mlp_range=r, output_path=root / f"p{k}", **shape)
    create_dataset(output_path=root / "public", **{**TINY_PUBLIC, **shape})
    create_dataset(2, seed=4, split="holdout", config="holdout", output_path=root / "holdout", **shape)
    return merge_inputs_at(root)


def merge_inputs_at(root: Path) -> dict:
    """What ``make_merge_inputs(root)`` returns, for a ``root`` it filled before."""
    named = {name: root / name for name in ("p0", "p1", "public", "holdout")}
    return {"root": root, "parts": [str(named["p0"]), str(named["p1"])],
            "splits": [str(named["public"]), str(named["holdout"])], **named}


def edit_metadata(d: Path, **changes) -> dict:
    md = json.loads((Path(d) / "metadata.json").read_text())
    for key, value in changes.items():
        if value is None:
            md.pop(key, None)
        else:
            md[key] = value
    (Path(d) / "metadata.json").write_text(json.dumps(md, indent=2))
    return md


def no_output(out: Path) -> None:
    assert not out.exists()
    assert not [p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")], "staging left behind"


def resign(d: Path, md: dict) -> Path:
    """``md`` written as ``d``'s metadata.json with its checksums bound anew over the files ``d`` holds now:
    an edit re-signed as a careful forger (or an old bake) leaves it, so only the content checks can
    notice it."""
    bind_checksums(md, dataset_checksums(d))
    (Path(d) / "metadata.json").write_text(json.dumps(md, indent=2))
    return Path(d)


def tampered_copy(src: Path, dst: Path, mask: int = 0xFF) -> tuple[Path, Path]:
    shutil.copytree(src, dst)
    shard = next((Path(dst) / "data").glob("*.parquet"))
    blob = bytearray(shard.read_bytes())
    blob[len(blob) // 2] ^= mask
    shard.write_bytes(bytes(blob))
    return Path(dst), shard


def write_keeping_trail(dst: Path, split: str, rows: list, width: int, depth: int, md: dict, trail: Path) -> Path:
    """``write_dataset`` of ``rows`` (which hold no ``_trail``) with the audit trail file ``trail`` copied in as
    ``md``'s side file (a dataset's own trail, or an edited one), then the checksums bound over both."""
    write_dataset(dst, split, rows, len(rows), width, depth, {k: v for k, v in md.items() if k != "audit"})
    side = Path(dst) / md["audit"]["file"]
    side.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(trail, side)
    finish_dataset_dir(Path(dst), md, dataset_checksums(dst))
    return Path(dst)
