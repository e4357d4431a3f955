"""The inputs and the output of merge, combine-splits and prepare-arrow, checked before any work.

    output = claim_output(out, inputs)      # new, outside every input; a killed run's staging removed
    path, md = open_input(part)             # an existing dataset directory, metadata validated
    files = shard_files(path, name_of(path, md))
    check_files(path, md, files, md["n_mlps"])   # checksums, footers, schema, row count

A wrong path is the caller's to fix (``UsageError``, exit 2, before a byte is read or written);
damaged data is an ``InvalidDatasetError`` or ``MergeCorruptError`` (exit 1).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from whestbench.atomic import remove_abandoned_staging
from whestbench.format.checksums import checksum_state
from whestbench.format.reader import DATA_DIR, DatasetDir, data_files, is_shard_of, open_dataset
from whestbench.format.card_rules import PRESET_OWNS
from whestbench.format.schema import DEFAULT_CONFIG, DEFAULT_SPLIT, check_name, columns_for, is_positive_int
from whestbench.format.shards import ShardSchema
from whestbench.errors import (
    REDO,
    InvalidDatasetError,
    MergeCorruptError,
    MergeIncompatibleError,
)
from whestbench.events import Event, EventSink, ignore
from whestbench.paths import check_new_output, check_outside_inputs, input_dir
from whestbench.text import plural, show_value
from whestbench.verify.run import require_sound
from whestbench.verify.trail_contract import require_contract

__all__ = [
    "claim_output",
    "clean_abandoned_staging",
    "Input",
    "open_input",
    "name_of",
    "shard_files",
    "check_files",
    "check_inputs",
    "read_column",
    "require_same",
]


def claim_output(output: str | os.PathLike, inputs: Iterable[str | os.PathLike], *, on_event: EventSink = ignore) -> Path:
    """``output`` as a Path once it is shown to be a new directory outside every input; then the
    staging directories a killed earlier run of the same output left beside it are removed.

    Raises UsageError (``OutputExistsError`` when it exists) before anything is read or written.
    """
    out = check_new_output(output)
    check_outside_inputs(out, inputs)
    clean_abandoned_staging(out, on_event=on_event)
    return out


def clean_abandoned_staging(target: Path, *, on_event: EventSink = ignore) -> None:
    """Remove the staging directories a killed earlier write of ``target`` left (``atomic``), saying so."""
    removed = remove_abandoned_staging(target)
    if removed:
        names = ", ".join(p.name for p in removed)
        on_event(Event("note", message=f"removed {plural(len(removed), 'staging directory', 'staging directories')} "
                                        f"that an interrupted earlier run left beside {target}: {names}"))


def input_list(value: Any, what: str) -> list:
    """``value`` (one path or a list of paths) as a list; TypeError naming ``what`` for anything else
    (``combine_split_datasets(None)`` said "'NoneType' object is not iterable")."""
    if isinstance(value, (str, os.PathLike, DatasetDir)):
        return [value]
    if value is None or isinstance(value, (bytes, dict)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{what} must be a list of dataset directories; got {type(value).__name__}: {value!r}")
    return list(value)


SAME_RECIPE = ("schema_version", "format", "backend", "seed_protocol", "n_samples", "width", "depth")
"""whestbench 0.16's recipe keys, compared across merge's and combine's inputs before any is validated;
ours (sampler, estimator, target), which a 0.16 input lacks, are compared once validated."""


def open_inputs(paths: Sequence[Any], open_one: Callable[[DatasetDir], Input], *, fix: str) -> list[Input]:
    """Each of ``paths`` as the verb's ``open_one`` opens it (validated, accepted), once 0.16's recipe
    keys are shown equal: MergeIncompatibleError naming the first ``SAME_RECIPE`` key whose raw (not yet
    validated) value differs from the first input's, before any input is validated: an input hand-edited
    to another backend or format is an inconsistent input (whestbench 0.16's class, which its callers
    catch), not only an invalid one. Inputs whose metadata cannot be read are left to ``open_one``."""
    handles = [open_dataset(p) for p in paths]
    raw = []
    for h in handles:
        try:
            raw.append((h, h.metadata))  # always a dict (read_metadata refuses any other JSON)
        except (InvalidDatasetError, OSError):
            pass
    for h, md in raw[1:]:
        for key in SAME_RECIPE:
            require_same(h.path, md, raw[0][0].path, raw[0][1], key, fix)
    return [open_one(h) for h in handles]


def require_same(path: Path, md: dict[str, Any], first_path: Path, first: dict[str, Any], key: str, fix: str) -> None:
    """MergeIncompatibleError when the input at ``path`` has another ``key`` than the first input's
    (at ``first_path``), naming both values and ending with ``fix``."""
    if md.get(key) != first.get(key):
        raise MergeIncompatibleError(f"{key}={show_value(md.get(key))} != {show_value(first.get(key))} (from {first_path});",
                                     where=path, fix=fix)


class Input:
    """One input of a merge or a combine, opened (``open_input``) and accepted by its verb: its path,
    validated metadata, split (and config, a combine's), handle; its shards and seeds once ``check_inputs`` ran."""

    def __init__(self, path: Path, md: dict[str, Any], split: str, handle: DatasetDir, config: str | None = None):
        self.path, self.md, self.split, self.handle, self.config = path, md, split, handle, config
        self.files: list[Path] = []
        self.seeds: list[int] = []


def open_input(path: str | os.PathLike) -> tuple[Path, dict[str, Any]]:
    """``(path, metadata)`` of one input dataset directory, its metadata validated (partials allowed).
    Given a ``DatasetDir``, its metadata is the one it read (a re-run's check may have read it)."""
    p = input_dir(path)
    return p, open_dataset(path if isinstance(path, DatasetDir) else p).meta(allow_partial=True).md


def name_of(path: Path, md: dict[str, Any], what: str = "split") -> str:
    """The input's split name (``what="config"``: its config name), from its metadata (never from file
    names), checked loadable."""
    try:
        return check_name(md.get(what, DEFAULT_CONFIG if what == "config" else DEFAULT_SPLIT), what)
    except InvalidDatasetError as e:
        raise MergeIncompatibleError.from_error(e, where=path) from None


def shard_files(path: Path, split: str) -> list[Path]:
    """The split's shards in order; any other Parquet file under ``data/`` is refused.

    Guards against a missing shard (fewer rows) and a stray file from another bake or split
    (rows nobody declared), which 0.16 caught only as "expected one parquet file".
    """
    try:
        files = data_files(path, split)
    except InvalidDatasetError as e:
        raise MergeCorruptError.from_error(e) from None
    for p in sorted((path / DATA_DIR).rglob("*.parquet")):
        if p.parent != path / DATA_DIR or not is_shard_of(p.name, split):
            raise MergeCorruptError(f"{p.relative_to(path).as_posix()} is not a shard of split {split!r}; a dataset "
                                    "directory holds one split's shards only.", where=path,
                                    fix="Remove the stray file or re-bake the dataset.")
    return files


def check_files(
    path: Path | DatasetDir, md: dict[str, Any], files: Sequence[Path], n_rows: int, *, on_event: EventSink = ignore
) -> None:
    """Checksums (when recorded; stale ones are reported through ``on_event``), readable footers,
    the HF schema of (width, depth), the row count. A ``DatasetDir`` keeps the checksum state for
    the verify that follows (the files are hashed once)."""
    import pyarrow.parquet as pq

    state = checksum_state(path, md)
    state.raise_if_mismatch()
    if state.state == "stale":
        on_event(Event("warning", message=f"{path}: {state.detail}"))
    width, depth = md.get("width"), md.get("depth")
    if not all(is_positive_int(v) for v in (width, depth)):
        raise InvalidDatasetError(f"metadata.json needs positive integer 'width' and 'depth' (got {width!r}, {depth!r}); "
                                  "it was edited or is not a WhestBench dataset.", where=path, fix=REDO)
    expected = ShardSchema(width, depth, columns_for(md))
    rows = 0
    for f in files:
        try:
            meta = pq.ParquetFile(f).metadata
            schema = meta.schema.to_arrow_schema()
        except Exception as e:  # pyarrow raises ArrowInvalid, OSError or ArrowException by case
            raise MergeCorruptError(f"{f} is not a readable Parquet file (truncated or corrupt?): {e}.", fix=REDO) from e
        if expected.problems(schema, hf_metadata=False):
            raise MergeCorruptError(f"{f} does not have the WhestBench columns for width={width}, depth={depth} (found "
                                    f"{schema.names}, expected {list(columns_for(md))} with their types); the file does not "
                                    "belong to this dataset.", fix="Re-bake it.")
        rows += meta.num_rows
    if rows != n_rows:
        raise MergeCorruptError(f"its shards hold {rows} rows but metadata.json declares n_mlps={n_rows}; the files were "
                                "truncated or replaced.", where=path, fix=REDO)


def settle_cards(cards: Sequence[tuple[str, Any]], given: dict[str, str] | None = None) -> dict[str, str]:
    """The card of a dataset made of inputs whose metadata ``card`` blocks are ``cards`` (``(name,
    block)``, a missing block is the defaults): the inputs' own when they agree; ``given`` (the
    command's card flags) settles the fields they do not. MergeIncompatibleError, before any work,
    names the fields that differ (with each input's value) and the flags that settle them."""
    given = dict(given or {})
    blocks = [(name, dict(block) if isinstance(block, dict) else {}) for name, block in cards]
    # a preset given displaces the fields it brings, and those fields given displace a preset
    displaced = set(PRESET_OWNS) if "preset" in given else {"preset"} if set(PRESET_OWNS) & set(given) else set()
    out: dict[str, str] = {}
    differ = []
    for key in sorted({k for _, b in blocks for k in b} | set(given)):
        if key in given:
            out[key] = given[key]
            continue
        if key in displaced:
            continue
        values = [b.get(key) for _, b in blocks]
        if any(v != values[0] for v in values):
            each = ", ".join(f"{name}: {show_value(b[key]) if key in b else 'the default'}" for name, b in blocks)
            differ.append(f"{key} ({each})")
        elif values[0] is not None:
            out[key] = values[0]
    if differ:
        raise MergeIncompatibleError(f"the inputs' cards differ in {' and '.join(differ)}:",
                                     fix="pass --card FILE, --pretty-name, --license or --homepage to settle them.")
    return out


def check_inputs(inputs: Sequence[Input], what: str, across: Callable[[Sequence[Input]], None],
                 on_event: EventSink = ignore) -> None:
    """Each input's shards checked (``check_files``) and seeds read; ``across(inputs)`` checks what only all of
    them show (cheap); then each input's trail contract and verify's checks (``require_sound``): the
    one check of an input's own rows (mlp_id, seeds, names, weights) and numbers."""
    for i in inputs:
        i.files = shard_files(i.path, i.split)
        check_files(i.handle, i.md, i.files, i.md["n_mlps"], on_event=on_event)
        i.seeds = read_column(i.files, "mlp_seed")
    across(inputs)
    for i in inputs:
        require_contract(i.handle, what, MergeCorruptError)
    for i in inputs:
        require_sound(i.handle, what, MergeCorruptError, on_event=on_event)


def read_column(files: Sequence[Path], column: str) -> list:
    """One column of every shard, as Python values (``mlp_id``, ``mlp_seed``: a few bytes per MLP)."""
    import pyarrow.parquet as pq

    values: list = []
    for f in files:
        try:
            values.extend(pq.read_table(f, columns=[column]).column(0).to_pylist())
        except Exception as e:  # a corrupt page deep inside the file
            raise MergeCorruptError(f"cannot read column {column!r} ({e}); the file is corrupt.", where=f, fix=REDO) from e
    return values
