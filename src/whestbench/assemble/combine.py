"""Combine single-split datasets into one multi-split dataset; add prepared Arrow copies of splits.

    combine_split_datasets(["public", "holdout"], output_dir="combined")   # default_split: auto
    prepare_arrow("combined")                                              # (re)build prepared/

Combining checks that the inputs can live in one dataset: complete (not partial) single-split
datasets with distinct, loadable split names (from metadata, never from file names; hyphens are
refused because ``datasets`` cannot load them), the same ``schema_version``, ``format``,
``backend``, ``n_samples``, ``width``, ``depth`` and ``seed_protocol``, intact files, and **no
seed shared between splits** (a holdout that repeats a public MLP is no holdout).

The layout written is docs/format.md's (each input's shards copied byte for byte, ``prepared/<split>/``
unless skipped); ``checksums`` lists every file under ``data/`` and ``prepared/`` (never a hidden
staging path). A prepared copy is for whestbench 0.16's loader (ours reads the Parquet rows); each is
compared with its rows bit for bit before it is put in place.

Wrong paths are refused before any work (``inputs``). A killed earlier run's staging (``.<out>.staging-*``
beside the output, ``prepared/.<split>.staging-*`` inside the dataset) is removed by the next run.
"""

from __future__ import annotations

import contextlib
import copy
import os
import shutil
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from whestbench.atomic import fsync_dir, fsync_tree, new_staging_dir, staged_dir, read_regular, write_file_atomic
from whestbench.format.card import render_card
from whestbench.format.card_rules import CARD_KEY, given_card
from whestbench.assemble.inputs import (
    SAME_RECIPE,
    Input,
    check_inputs,
    input_list,
    claim_output,
    clean_abandoned_staging,
    open_input,
    open_inputs,
    require_same,
    settle_cards,
    name_of,
)
from whestbench.format.prepared import compare
from whestbench.format.reader import (
    CARD_FILE,
    DATA_DIR,
    METADATA_FILE,
    METADATA_MAX_BYTES,
    PREPARED_DIR,
    DatasetDir,
    data_files,
    metadata_bytes,
    read_metadata,
    shard_glob,
)
from whestbench.format.checksums import CHECKSUMS, WRITTEN_FOR, bind_checksums, dataset_checksums, verify_checksums
from whestbench.format.finished import combined_marker
from whestbench.format.schema import DEFAULT_CONFIG, PLAN_DIGEST, DatasetMeta, validate_metadata
from whestbench.format.writer import finish_dataset_dir
from whestbench.errors import (
    DefaultSplitError,
    InputPathError,
    InvalidDatasetError,
    MergeCorruptError,
    MergeIncompatibleError,
    OutputExistsError,
)
from whestbench.events import Event, EventSink, Progress, ignore
from whestbench.paths import input_dir
from whestbench.hubenv import import_hub
from whestbench.work.machine import hardware_fingerprint

__all__ = [
    "combine_split_datasets",
    "combined_metadata",
    "prepare_arrow",
    "build_prepared_split",
    "write_prepared_arrow_split",
    "build_prepared_splits_for_directory",
]

PREPARED_FORMAT = "save_to_disk"

# Must be equal across the splits of one dataset (compared with the first input, in this order), each
# with its re-bake hint; 0.16's recipe keys (``inputs.SAME_RECIPE``) are compared first, by ``open_inputs``.
_REBAKE_HINT = {"estimator": "with the same --estimator (see metadata.json's estimator block)",
                "target_stderr": "with the same --target-stderr and --stderr-layer (or neither)"}
_SHARED_BY_SPLITS = ("schema, backend, seed protocol, --n-samples, --width, --depth, --estimator and "
                     "--target-stderr/--stderr-layer")
# Our per-split provenance, carried into ``splits[name]`` after 0.16's keys.
_SPLIT_EXTRAS = ("sampler", "seed_list_digest", "bake_command", "device_check", "samples_used", "audit")


def combine_split_datasets(
    inputs: Sequence[str | Path],
    *,
    output_dir: str | Path,
    default_split: str | None = None,
    write_prepared_arrow: bool = True,
    on_event: EventSink = ignore,
    card: dict[str, str] | None = None,
) -> Path:
    """Write the multi-split dataset made of ``inputs`` (one single-split dataset each) at ``output_dir``.

    ``default_split``: the split ``load_dataset(repo)`` returns; when None and exactly one input
    has config ``default``, that input's split. Raises UsageError (``OutputExistsError``, an
    output inside an input, ``DefaultSplitError``: before any work), InputPathError,
    InvalidDatasetError, MergeIncompatibleError or MergeCorruptError; nothing is left at
    ``output_dir`` on failure. ``on_event`` hears notes (a killed earlier run's staging, removed)
    and warnings (an input's stale checksums). ``card``: card fields (``--pretty-name``,
    ``--license``, ``--homepage``); the inputs' own card is kept where they agree, and where they
    differ ``card`` must settle it (else MergeIncompatibleError, before any work).
    """
    inputs = input_list(inputs, "inputs (one per split)")
    card = given_card(card)  # the CLI's card rules, before any work
    output = claim_output(output_dir, inputs, on_event=on_event)
    if not inputs:
        raise MergeIncompatibleError("no datasets to combine;", fix="pass one single-split dataset directory per split.")
    on_event(Event("stage", message=f"opening the {len(inputs)} inputs: their metadata"))
    splits = open_inputs(inputs, _open_split, fix=f"the splits of one dataset must share {_SHARED_BY_SPLITS}.")
    seen: dict[str, Path] = {}
    for s in splits:
        if s.split in seen:
            raise MergeIncompatibleError(f"duplicate split name {s.split!r} across inputs ({seen[s.split]} and {s.path});",
                                         fix="each input must be a different split (re-bake one with another --split).")
        seen[s.split] = s.path
    if default_split is not None and default_split not in seen:
        raise DefaultSplitError(f"default split {default_split!r} is not one of the input splits ({', '.join(seen)});",
                                fix="pass one of those, or leave it out.")
    first = splits[0]
    for s in splits[1:]:
        for key, hint in _REBAKE_HINT.items():
            require_same(s.path, s.md, first.path, first.md, key,
                         f"the splits of one dataset must share {_SHARED_BY_SPLITS}. Re-bake that split {hint}.")
    settled = settle_cards([(str(s.path), s.md.get(CARD_KEY)) for s in splits], card)
    on_event(Event("stage", message="checking each input's shards and reading its seeds"))
    check_inputs(splits, "input", lambda splits: _check_independent(splits, on_event), on_event)

    if default_split is None:
        defaults = [s.split for s in splits if s.config == DEFAULT_CONFIG]
        default_split = defaults[0] if len(defaults) == 1 else None
    md = combined_metadata([(s.split, s.config, s.md) for s in splits], default_split=default_split)
    if settled:
        md[CARD_KEY] = settled
    with staged_dir(output) as stage:
        data = stage / DATA_DIR
        data.mkdir()
        files = [f for s in splits for f in s.files]
        total, copied = sum(f.stat().st_size for f in files), 0
        on_event(Event("progress", progress=Progress("bytes", 0, total)))
        for f in files:
            shutil.copyfile(f, data / f.name)
            copied += f.stat().st_size
            on_event(Event("progress", progress=Progress("bytes", copied, total)))
        for s in splits:  # each split's audit trail (format/trail.py), under its own name
            if "audit" in s.md:
                rel = s.md["audit"]["file"]
                (stage / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(s.path / rel, stage / rel)
        if write_prepared_arrow:
            build_prepared_splits_for_directory(stage, [s.split for s in splits], md, on_event)
        validate_metadata(md)
        on_event(Event("stage", message="writing the metadata, the card and the checksums"))
        finish_dataset_dir(stage, md, dataset_checksums(stage))
    return output


def _open_split(handle: DatasetDir) -> Input:
    p, md = open_input(handle)
    if md.get("is_partial"):
        raise MergeIncompatibleError(f"is a partial dataset (mlp_range={md.get('mlp_range')}, total_n_mlps="
                                     f"{md.get('total_n_mlps')});", where=p, fix="run `whest dataset merge` on its "
                                     "partials first and combine the merged dataset.")
    if DatasetMeta.of(md).is_multi:
        raise MergeIncompatibleError(f"{p} is already a multi-split dataset; combine takes single-split datasets "
                                     "(one directory per split):", fix="pass the single-split datasets it was made of.")
    return Input(p, md, name_of(p, md), handle, name_of(p, md, "config"))


def _check_independent(splits: Sequence[Input], on_event: EventSink) -> None:
    on_event(Event("stage", message="checking that no MLP seed is shared between splits"))
    owner: dict[int, Input] = {}
    for s in splits:
        for seed in s.seeds:
            other = owner.setdefault(seed, s)
            if other is not s:
                raise MergeIncompatibleError(f"splits {other.split!r} ({other.path}) and {s.split!r} ({s.path}) share "
                                             f"mlp_seed {seed}; splits must be independent:",
                                             fix="bake each split from its own seed file.")


def combined_metadata(
    inputs: Sequence[tuple[str, str, Mapping[str, Any]]], *, default_split: str | None = None
) -> dict[str, Any]:
    """The multi-split metadata for ``(split, config, metadata)`` inputs, in whestbench 0.16's key order.

    Top level: the first input's ``SAME_RECIPE``, ``created_at_utc`` the earliest, ``hardware`` this (the
    combining) host. Each ``splits[name]``: ``n_mlps``, ``created_at_utc``, ``config``, ``seed`` (protocol
    2.0), ``hardware_fingerprints`` (a merged input's own, else ``[hardware]``), then ours (``_SPLIT_EXTRAS``).
    """
    first = inputs[0][2]
    md: dict[str, Any] = {k: copy.deepcopy(first[k]) for k in SAME_RECIPE if k in first}  # what every split shares
    created = [m["created_at_utc"] for _, _, m in inputs if isinstance(m.get("created_at_utc"), str)]
    if created:
        md["created_at_utc"] = min(created)
    md["hardware"] = hardware_fingerprint()
    md["splits"] = {}
    for split, config, m in inputs:
        entry: dict[str, Any] = {"n_mlps": m["n_mlps"]}
        if "created_at_utc" in m:
            entry["created_at_utc"] = m["created_at_utc"]
        entry["config"] = config
        if "seed" in m:
            entry["seed"] = m["seed"]
        if isinstance(m.get("hardware_fingerprints"), list):
            entry["hardware_fingerprints"] = copy.deepcopy(m["hardware_fingerprints"])
        elif isinstance(m.get("hardware"), dict):
            entry["hardware_fingerprints"] = [copy.deepcopy(m["hardware"])]
        entry.update({key: copy.deepcopy(m[key]) for key in _SPLIT_EXTRAS if key in m})
        md["splits"][split] = entry
    if default_split is not None:
        md["default_split"] = default_split
    # ours: every split's (equal by the checks above)
    md.update({key: copy.deepcopy(first[key]) for key in ("estimator", "target_stderr") if key in first})
    done = combined_marker([{**m, "split": split} for split, _, m in inputs])  # none unless every input has one
    if done is not None:
        md[PLAN_DIGEST] = done
    return md


# ---------------------------------------------------------------------------------------------
# Prepared Arrow


def prepare_arrow(directory: str | Path, *, on_event: EventSink = ignore) -> list[str]:
    """(Re)build ``prepared/<split>/`` for every split of a multi-split dataset; return the split names.

    Crash-safe in three atomic steps: metadata.json first stops naming the old copies (a reader
    meanwhile loads Parquet), each split's copy is then built beside its target and renamed into
    place, and metadata.json (``prepared_splits``; ``checksums`` when the dataset has them) and
    README.md are rewritten last; a failure before any copy was replaced (a full disk, ``ulimit -f``)
    names the old copies again. Idempotent; the staging a killed earlier run left in
    ``prepared/`` is removed first (``on_event`` hears a note). A single-split dataset is
    refused: it loads from Parquet directly.
    """
    root = input_dir(directory, what="multi-split dataset directory")
    md = read_metadata(root)
    if "splits" not in md:
        raise InvalidDatasetError("prepare-arrow is only meaningful for multi-split datasets (no 'splits' block found "
                                  f"in {root / METADATA_FILE});",
                                  fix="a single-split dataset loads from its Parquet directly.")
    validate_metadata(md)
    names = DatasetMeta.of(md).splits
    _check_prepared_inside(root)
    for name in names:
        verify_checksums(root, md, split=name)  # never publish a prepared copy of tampered data
    for name in names:
        clean_abandoned_staging(root / PREPARED_DIR / name, on_event=on_event)
    has_checksums = isinstance(md.get(CHECKSUMS), dict)
    if has_checksums:
        md[CHECKSUMS] = {k: v for k, v in md[CHECKSUMS].items() if not k.startswith(PREPARED_DIR + "/")}
    original = read_regular(root / METADATA_FILE, METADATA_MAX_BYTES, "metadata.json")
    if "prepared_splits" in md or has_checksums:
        interim = {k: v for k, v in md.items() if k != "prepared_splits"}
        _rewrite(root / METADATA_FILE, metadata_bytes(interim))
    built: list[str] = []
    try:
        build_prepared_splits_for_directory(root, names, md, on_event, built=built)
    except BaseException:
        if not built:  # failed (a full disk, ulimit -f) before any copy was replaced: the old ones stand, named again
            with contextlib.suppress(OSError):
                _rewrite(root / METADATA_FILE, original)
        raise
    if has_checksums:
        fresh = {k: v for k, v in dataset_checksums(root).items() if k.startswith(PREPARED_DIR + "/")}
        bind_checksums(md, {**md[CHECKSUMS], **fresh})
    validate_metadata(md)
    _rewrite(root / METADATA_FILE, metadata_bytes(md))
    _rewrite(root / CARD_FILE, render_card(md).encode())
    return names


def _check_prepared_inside(root: Path) -> None:
    """InputPathError (exit 2, before any work) when ``prepared/`` is a symlink or not a directory: the
    copies are built beside their target and renamed into it, so a link to a directory elsewhere had
    them written (and that directory's entries replaced) outside the dataset."""
    prepared = root / PREPARED_DIR
    if prepared.is_symlink():
        raise InputPathError(f"{prepared} is a symlink (to {os.readlink(prepared)!r}); prepare-arrow writes the prepared "
                             "copies inside the dataset only:", fix="remove the link and re-run.")
    if prepared.exists() and not prepared.is_dir():
        raise InputPathError(f"{prepared} is not a directory;", fix="move it aside and re-run.")


def _rewrite(path: Path, data: bytes) -> None:
    """Replace ``path`` atomically, keeping its permissions (a new file gets ``write_file_atomic``'s)."""
    mode = path.stat().st_mode & 0o7777 if path.exists() else None
    write_file_atomic(path, data)
    if mode is not None:
        os.chmod(path, mode)


def build_prepared_splits_for_directory(
    dataset_dir: str | Path, splits: Sequence[str], metadata: dict[str, Any], on_event: EventSink = ignore,
    built: list[str] | None = None,
) -> dict[str, dict[str, str]]:
    """Build ``prepared/<split>`` for each of ``splits`` from its shards and set
    ``metadata["prepared_splits"]`` (replaced in place, kept before ``checksums``); return it.
    ``on_event`` hears ``Progress("splits")`` in the phase "building the prepared Arrow copies";
    ``built`` collects the splits whose copy is in place (what a failure part-way has replaced)."""
    root = Path(dataset_dir)
    prepared: dict[str, dict[str, str]] = {}
    phase = "building the prepared Arrow copies"
    on_event(Event("progress", progress=Progress("splits", 0, len(splits), phase=phase)))
    for done, name in enumerate(splits, 1):
        try:
            files = data_files(root, name)
        except InvalidDatasetError as e:
            raise MergeCorruptError.from_error(e) from None
        build_prepared_split(files, root / PREPARED_DIR / name, split=name)
        if built is not None:
            built.append(name)
        prepared[name] = {"path": f"{PREPARED_DIR}/{name}", "format": PREPARED_FORMAT}
        on_event(Event("progress", progress=Progress("splits", done, len(splits), phase=phase)))
    metadata["prepared_splits"] = prepared
    for key in (WRITTEN_FOR, CHECKSUMS):  # stay last
        if key in metadata:
            metadata[key] = metadata.pop(key)
    return prepared


def build_prepared_split(files: Sequence[Path], target: Path, *, split: str) -> Path:
    """``Dataset.from_parquet(files).save_to_disk`` into ``target``, staged beside it, compared bit for
    bit with ``files`` (``format/prepared.compare``) and renamed (an existing ``target`` is replaced
    only once the new copy is complete and right).

    The ``datasets`` cache goes to a scratch directory that is removed afterwards, so nothing
    accumulates in ``~/.cache/huggingface``.
    """
    datasets = import_hub("datasets")

    target = Path(target)
    work = new_staging_dir(target)
    try:
        built = work / "out"
        with _quiet_datasets():
            ds = datasets.Dataset.from_parquet(
                [str(f) for f in files],
                split=datasets.NamedSplit(split),
                cache_dir=str(work / "cache"),
            )
            ds.save_to_disk(str(built))
        del ds
        verdict = compare(built, files, what=f"the new prepared copy of {split!r}", rows=shard_glob(split))
        if not verdict.ok:  # never put a copy in place that says other numbers than its rows
            raise MergeCorruptError(f"{verdict.detail}; nothing was replaced.", fix="Re-run the command.")
        fsync_tree(built)
        if target.exists():
            os.rename(target, work / "old")
        os.rename(built, target)
        fsync_dir(target.parent)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def write_prepared_arrow_split(parquet_files: str | Path | Sequence[str | Path], output_dir: str | Path, *, split: str) -> Path:
    """whestbench 0.16's name: one split's prepared copy at ``output_dir``, which must not exist."""
    output = Path(output_dir)
    if output.exists():
        raise OutputExistsError(f"prepared Arrow output already exists: {output};", fix="remove it first.")
    files = [parquet_files] if isinstance(parquet_files, (str, Path)) else list(parquet_files)
    return build_prepared_split([Path(f) for f in files], output, split=split)


@contextlib.contextmanager
def _quiet_datasets() -> Iterator[None]:
    """No ``datasets`` progress bars while we build (the CLI prints its own lines)."""
    datasets = import_hub("datasets")

    was_disabled = datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if not was_disabled:
            datasets.enable_progress_bars()
