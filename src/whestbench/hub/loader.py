"""Load a WhestBench dataset (a local directory or a Hugging Face Hub repo) and read MLPs from it.

``load_dataset`` returns plain ``datasets`` objects, so everything the ``datasets`` library offers
works on them; the dataset's metadata travels beside them in a side table (``metadata(ds)``),
because a ``datasets.Dataset`` has no place for it that survives both libraries' versions.

    ds = load_dataset("./ground-truth")              # single split  -> Dataset
    ds = load_dataset("./combined", split="public")  # one of many   -> Dataset
    dd = load_dataset("./combined")                  # all splits    -> DatasetDict (sorted)
    ds = load_dataset("org/name", revision="v1")     # from the Hub (streaming=True allowed)
    for mlp in iter_mlps(ds): ...                    # MLP with float32 weights, name, seed

What a load checks: the metadata (``validate_metadata``: partials are refused with the merge
command), for local data the ``checksums`` block when present, the shard set, each shard's footer,
the columns and that the row count equals the declared ``n_mlps``. Loading never runs code from a
dataset: data goes through the built-in ``parquet`` builder. A split is always read from its Parquet
rows, never from a prepared Arrow copy (``prepared/<split>/``, kept for whestbench 0.16's loader):
a copy can disagree with the rows it stands for (``format/prepared.py`` checks that for verify), and
``datasets`` caches the Parquet as Arrow anyway, so repeat loads are memory-mapped.
"""

from __future__ import annotations

import copy
import glob
import logging
import operator
import os
import warnings
import weakref
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from whestbench.compute.mlp import MLP
from whestbench.compute.seed_protocol import SALT_ENV, seed_rule
from whestbench.format.card import configs_block, split_configs
from whestbench.hub.client import call, check_token, fetch_metadata
from whestbench.hub.ref import HubRef, resolve_source
from whestbench.format.reader import DATA_DIR, DatasetDir, open_dataset, data_files, parquet_footer
from whestbench.format.checksums import verify_checksums
from whestbench.format.schema import (COLUMNS, DEFAULT_CONFIG, DEFAULT_SPLIT, N_USED_COLUMN, DatasetMeta, check_name,
                                      protocol_version)
from whestbench.errors import REDO, InvalidDatasetError, MergeCorruptError, UsageError
from whestbench.values import is_int
from whestbench.hubenv import import_hub

__all__ = ["load_dataset", "metadata", "iter_mlps", "mlp_at", "mlp_from_row"]

log = logging.getLogger(__name__)

_MLP_COLUMNS = ["mlp_name", "mlp_seed", "weights"]
_TRUTH_COLUMNS = ["all_layer_means", "all_layer_stderr", N_USED_COLUMN]  # MLP.means, .stderr, .n_samples_used
_LOAD_IT = "Load WhestBench data with whestbench.load_dataset(...)."

# id(obj) -> metadata. A weakref finalizer drops the entry when the object dies, so an id is never
# reused while its entry is alive. (DatasetDict is an unhashable dict, hence ids, not weak keys.)
_ATTACHED: dict[int, dict[str, Any]] = {}


# --------------------------------------------------------------------------------------- loading


def load_dataset(
    path_or_repo: str | os.PathLike,
    *,
    revision: str | None = None,
    split: str | None = None,
    token: str | bool | None = None,
    streaming: bool = False,
):
    """Load a dataset directory or Hub repo as a ``datasets.Dataset`` or ``DatasetDict``.

    ``path_or_repo``: an existing local path is a directory; anything else is a Hub reference
    (``org/name``, ``org/name@rev``, ``hf://org/name[@rev]``: the grammar is in ``hub/ref.py``)
    — except a string that plainly is a path (``./x``, ``/x``, ``~/x``, or ``dir/x`` where ``dir``
    exists), which is reported as missing instead of being looked up on the Hub. ``revision`` and
    ``token`` only apply to the Hub. A Hub dataset's metadata and rows come from one commit (the
    revision is resolved first); network failures are retried as ``hub.client.call`` says, then raised
    as one ``HubError``.
    ``split``: for a single-split dataset it must be that split; for a multi-split dataset it picks
    one split (a ``Dataset``), and without it you get a ``DatasetDict`` of all splits.
    ``streaming=True`` (Hub only) returns an ``IterableDataset`` (or ``IterableDatasetDict``).
    """
    if split is not None and not isinstance(split, str):
        raise TypeError(f"split must be a split name (str); got {type(split).__name__}: {split!r}.")
    source = resolve_source(path_or_repo, revision)
    if isinstance(source, HubRef):
        check_token(token, allow_bool=True)
        return _load_hub(source, split=split, token=token, streaming=streaming)
    if streaming:
        raise UsageError("streaming=True is only supported for Hugging Face Hub repos, not local paths;",
                         fix=f"load {source} without streaming (local data is memory-mapped, not read into RAM).")
    return _load_local(source, split, path_or_repo if isinstance(path_or_repo, DatasetDir) else None)


def _load_local(root: Path, split: str | None, handle: DatasetDir | None = None):
    datasets = import_hub("datasets")

    handle = handle if handle is not None else open_dataset(root)  # read once; its checks share it
    meta = handle.meta()
    split = _pick_split(meta, split, where=str(root))
    verify_checksums(handle, meta.md, split=split if meta.is_multi else None)
    return _loaded(meta, split, lambda s: _local_parquet(root, s, meta.n_mlps(s), meta.columns),
                   datasets.DatasetDict)


def _pick_split(meta: DatasetMeta, split: str | None, *, where: str) -> str | None:
    """The split to load, refused if the dataset lacks it; None: every split of a multi-split dataset."""
    if meta.is_multi:
        if split is not None and split not in meta.blocks:
            raise InvalidDatasetError(f"split {split!r} not in {sorted(meta.blocks)};",
                                      fix="pass one of them as split=, or leave split out to get a DatasetDict of every split.")
        return split
    declared = meta.md.get("split") if isinstance(meta.md.get("split"), str) else None
    if split is None:
        return declared or DEFAULT_SPLIT
    if declared is not None and split != declared:
        raise InvalidDatasetError(f"split {split!r} is not in {where}: it has one split, {declared!r}.",
                                  fix=f"Pass split={declared!r} or leave split out.")
    return split


def _loaded(meta: DatasetMeta, split: str | None, load: Callable[[str], Any], dict_type: type):
    """``load(split)`` carrying its metadata view, or (``split`` None) every split's in a ``dict_type``
    carrying the full metadata: what local and Hub loads return alike."""
    if split is not None:
        ds = load(split)
        _attach(ds, meta.entry(split) if meta.is_multi else meta.md)
        return ds
    dd = dict_type({s: load(s) for s in sorted(meta.blocks)})
    for s in dd:
        _attach(dd[s], meta.entry(s))
    _attach(dd, meta.md)
    return dd


def _local_parquet(root: Path, split: str, n_mlps: Any, columns: tuple[str, ...] = COLUMNS):
    """One split from its Parquet shards, after checking the shard set, footers, columns and rows.
    ``columns``: what the metadata says the shards hold (``schema.columns_for``): 0.16's eight, and
    ours where the metadata records an estimator or a target."""
    datasets = import_hub("datasets")
    import pyarrow as pa
    DatasetGenerationError = import_hub("datasets.exceptions").DatasetGenerationError

    check_name(split)  # the datasets library refuses hyphenated split names
    files = data_files(root, split)
    rows = 0
    for f in files:
        footer = parquet_footer(f)
        missing = [c for c in columns if c not in footer.schema.to_arrow_schema().names]
        if missing:
            ours = [c for c in missing if c not in COLUMNS]
            why = ("metadata.json records the estimator or target that writes them" if len(ours) == len(missing)
                   else "it is not a WhestBench schema 3.0 shard")
            raise InvalidDatasetError(f"{f} lacks the column(s) {missing}; {why}.", fix=REDO)
        rows += footer.num_rows
    _check_rows(rows, n_mlps, f"{root / DATA_DIR}/{split}-*.parquet")
    try:
        # The built-in parquet builder: one or many shards, no code from the dataset, and an
        # Arrow cache in the HF cache (keyed by path, size and mtime) that later loads memory-map.
        # data_files are glob patterns to `datasets`: escape paths like "runs[1]/set*".
        return datasets.load_dataset(
            "parquet", data_files={split: [glob.escape(str(f)) for f in files]}, split=split
        )
    except (pa.ArrowException, DatasetGenerationError) as e:
        raise InvalidDatasetError(f"split {split!r} of {root} could not be read (truncated or corrupt Parquet?): {e}.",
                                  fix=REDO) from e


def _check_rows(rows: int, n_mlps: Any, where: str) -> None:
    if is_int(n_mlps) and rows != n_mlps:
        raise MergeCorruptError(f"{where} holds {rows} rows but metadata.json says n_mlps={n_mlps}: the data was "
                                "modified or truncated.", fix=REDO)


def _load_hub(ref: HubRef, *, split: str | None, token: Any, streaming: bool):
    datasets = import_hub("datasets")

    remote = fetch_metadata(ref, token=token, what=f"loading {ref.uri}")
    meta = DatasetMeta.validated(remote.metadata)
    md = meta.md
    # the rows come from the commit the metadata came from (a branch may move in between)
    pinned = HubRef(ref.repo_id, remote.commit or ref.revision)
    kw: dict[str, Any] = {"revision": pinned.revision, "token": token, "streaming": streaming}
    if int(datasets.__version__.split(".")[0]) < 4:
        kw["trust_remote_code"] = False  # datasets 2.x/3.x can run a loading script shipped in a repo; never let it
    where = f"hf://{ref.repo_id}"

    def load(s: str):
        ds = _hub_split(pinned, md, s, kw) if meta.is_multi else _hub_load(pinned, _config_of(md, s), s, kw)
        if not streaming:
            _check_rows(len(ds), meta.n_mlps(s), f"{where} split {s!r}")
        return ds

    return _loaded(meta, _pick_split(meta, split, where=where), load,
                   datasets.IterableDatasetDict if streaming else datasets.DatasetDict)


def _hub_load(ref: HubRef, name: str | None, split: str, kw: dict[str, Any]):
    """``datasets.load_dataset`` of one split, under the Hub retry policy (other failures pass through)."""
    args = (ref.repo_id,) if name is None else (ref.repo_id, name)
    return call(lambda: import_hub("datasets").load_dataset(*args, split=split, **kw), what=f"loading {ref.uri}",
                ref=ref, token=kw.get("token"), translate=False)


def _config_of(md: Mapping[str, Any], split: str) -> str | None:
    """The config that holds ``split`` on the Hub; None where the card has no config but ``default``
    (``datasets`` then loads the repo's one config)."""
    if all(c["config_name"] == DEFAULT_CONFIG for c in configs_block(dict(md))):
        return None
    return split_configs(dict(md))[split]


def _hub_split(ref: HubRef, md: Mapping[str, Any], split: str, kw: dict[str, Any]):
    """One split of a multi-split Hub repo through the card's config manifest (``card.split_configs``,
    the one split-to-config rule). Older cards list every split under ``default``, so a failed config
    lookup falls back to the repo's default config.
    """
    config = _config_of(md, split)
    if config is not None:
        try:
            return _hub_load(ref, config, split, kw)
        except (ValueError, KeyError, FileNotFoundError) as e:
            log.debug("config %r of hf://%s has no split %r (%s); trying the default", config, ref.repo_id, split, e)
    return _hub_load(ref, None, split, kw)  # outside the handler: the first failure is not chained to it


# ------------------------------------------------------------------------------------- metadata


def _attach(obj: Any, md: Mapping[str, Any]) -> None:
    key = id(obj)
    if key not in _ATTACHED:
        weakref.finalize(obj, _ATTACHED.pop, key, None)
    _ATTACHED[key] = copy.deepcopy(dict(md))


def _is_dict(ds: Any) -> bool:
    datasets = import_hub("datasets")

    return isinstance(ds, (datasets.DatasetDict, datasets.IterableDatasetDict))


def metadata(ds: Any, *, split: str | None = None) -> dict[str, Any]:
    """The metadata of a dataset returned by ``load_dataset`` (a copy: editing it changes nothing).

    A single split's ``Dataset`` carries its own view (for a multi-split dataset: the top-level
    keys plus that split's entry). A ``DatasetDict`` carries the full metadata, or one split's
    view with ``split=``. Objects derived later (``select``, ``map``, ...) carry none.
    """
    if split is not None and not _is_dict(ds):
        raise TypeError("metadata(ds, split=...) is for a DatasetDict; this is a single split already, so "
                        "call metadata(ds) without split=.")
    md = _ATTACHED.get(id(ds))
    if md is None:
        raise InvalidDatasetError(f"no metadata is attached to this {type(ds).__name__};",
                                  fix="did you load it via whestbench.load_dataset(...)? (Objects made from it by select, "
                                      "map, filter or shuffle start without metadata: keep the loaded one to ask.)")
    if split is None:
        return copy.deepcopy(md)
    meta = DatasetMeta.of(md)
    if split not in meta.blocks:
        raise InvalidDatasetError(f"split {split!r} not in {sorted(meta.blocks)}.", fix="Pass one of them as split=.")
    return meta.entry(split)


# ----------------------------------------------------------------------------------------- MLPs


def iter_mlps(ds: Any) -> Iterator[MLP]:
    """Every row of one split as an ``MLP``, in row order (works on streaming datasets too)."""
    rows, seed_of, md = _split_rows(ds, "iter_mlps")
    return (_row_to_mlp(row, seed_of, md) for row in rows)


def _split_rows(ds: Any, fn: str) -> tuple[Any, Callable[[int], int], dict[str, Any] | None]:
    """The rows of one split (numpy for a ``Dataset``), its ``mlp_seed -> MLP.seed`` rule and its attached
    metadata, for ``fn`` (``iter_mlps``, ``mlp_at``); a ``DatasetDict`` is refused."""
    if _is_dict(ds):
        raise TypeError(_dict_message(fn, ds))
    md = _ATTACHED.get(id(ds))
    rows = ds
    if isinstance(ds, import_hub("datasets").Dataset):  # its MLP columns as numpy (weights as one array, not lists)
        missing = [c for c in _MLP_COLUMNS if c not in ds.column_names]
        if missing:
            raise InvalidDatasetError(f"this Dataset has no {missing} column(s); it is not a WhestBench dataset split.",
                                      fix=_LOAD_IT)
        rows = ds.select_columns(_MLP_COLUMNS + [c for c in _TRUTH_COLUMNS if c in ds.column_names]).with_format("numpy")
    if md is None:
        warnings.warn("no whestbench metadata is attached to this dataset, so mlp_seed is taken as the estimator seed "
                      "(seed_protocol 2.0); for a 3.0 or 4.0 dataset that is wrong. Iterate the object returned by "
                      "whestbench.load_dataset, or call mlp_from_row(row, metadata).",
                      UserWarning, stacklevel=3)  # the caller of iter_mlps or mlp_at
    return rows, _seed_rule(md if md is not None else "2.0"), md


def mlp_at(ds: Any, i: int) -> MLP:
    """Row ``i`` (negative counts from the end) of one split as an ``MLP``."""
    if _is_dict(ds):
        raise TypeError(_dict_message("mlp_at", ds))
    if isinstance(ds, import_hub("datasets").IterableDataset):
        raise TypeError("mlp_at needs random access, which a streaming IterableDataset does not have; use "
                        "iter_mlps(ds), or load without streaming=True.")
    i = operator.index(i)
    n = len(ds)
    if not -n <= i < n:
        raise IndexError(f"mlp_at index {i} is out of range for a split of {n} MLPs.")
    rows, seed_of, md = _split_rows(ds, "mlp_at")
    return _row_to_mlp(rows[i % n], seed_of, md)


def mlp_from_row(row: Mapping[str, Any], md_or_protocol: Mapping[str, Any] | str | None = None) -> MLP:
    """An ``MLP`` from one dataset row (a dict with ``weights``, ``mlp_name``, ``mlp_seed``).

    ``md_or_protocol``: the dataset's metadata (``metadata(ds)``), or a seed-protocol version
    (``"3.0"``: ``MLP.seed`` is derived from ``mlp_seed``; ``"2.0"``: it is ``mlp_seed`` itself;
    ``"4.0"`` needs the metadata, which says where its salt is). None means ``"2.0"``, as in
    whestbench 0.16. With metadata, the weights' shape is checked against its width and depth.
    """
    md = md_or_protocol if isinstance(md_or_protocol, Mapping) else None
    return _row_to_mlp(row, _seed_rule(md_or_protocol if md_or_protocol is not None else "2.0"), md)


def _row_to_mlp(row: Mapping[str, Any], seed_of: Callable[[int], int], md: Mapping[str, Any] | None) -> MLP:
    missing = [c for c in _MLP_COLUMNS if c not in row]
    if missing:
        raise InvalidDatasetError(f"row has no {missing} column(s); it is not a WhestBench dataset row.", fix=_LOAD_IT)
    w = np.asarray(row["weights"], dtype=np.float32)  # (depth, width, width)
    if w.ndim != 3 or w.shape[0] == 0:
        raise InvalidDatasetError(f"row {row['mlp_name']!s}: weights have shape {w.shape}; expected (depth, width, width).",
                                  fix=REDO)
    if md is not None and isinstance(md.get("width"), int) and isinstance(md.get("depth"), int):
        want = (md["depth"], md["width"], md["width"])
        if w.shape != want:
            raise InvalidDatasetError(f"row {row['mlp_name']!s}: weights have shape {w.shape} but metadata says "
                                      f"depth={md['depth']}, width={md['width']}.", fix=REDO)
    mlp = MLP(
        weights=[np.array(layer, dtype=np.float32) for layer in w],  # own, writable copies
        width=int(w.shape[1]),
        depth=int(w.shape[0]),
        name=str(row["mlp_name"]),
        seed=seed_of(int(row["mlp_seed"])),
        means=_truth(row, "all_layer_means", w.shape[:2]),
        stderr=_truth(row, "all_layer_stderr", w.shape[:2]),
        n_samples_used=_samples_used(row, md),
    )
    mlp.validate()
    return mlp


def _truth(row: Mapping[str, Any], column: str, shape: tuple[int, int]) -> np.ndarray | None:
    """A (depth, width) float32 column of ``row`` as an array, or None when the row lacks it."""
    if column not in row or row[column] is None:
        return None
    values = np.asarray(row[column], dtype=np.float32)
    return values.reshape(shape) if values.size == shape[0] * shape[1] else None


def _samples_used(row: Mapping[str, Any], md: Mapping[str, Any] | None) -> int | None:
    """The samples this row's means averaged: its ``n_samples_used`` (a target bake), else the metadata's
    ``n_samples`` (a fixed-N bake: every MLP used it; a target bake's is only the cap); None when unknown."""
    if row.get(N_USED_COLUMN) is not None:
        return int(row[N_USED_COLUMN])
    if md is None or isinstance(md.get("target_stderr"), Mapping) or not is_int(md.get("n_samples")):
        return None
    return int(md["n_samples"])


def _seed_rule(md_or_protocol: Mapping[str, Any] | str) -> Callable[[int], int]:
    """``mlp_seed -> MLP.seed`` for a dataset's seed protocol (rules: ``compute/seed_protocol.py``).

    The environment is read here, not there: a 4.0 dataset whose salt is withheld takes it from
    ``WHEST_SEED_SALT``.
    """
    if isinstance(md_or_protocol, Mapping):
        version = protocol_version(dict(md_or_protocol))
        sp = md_or_protocol.get("seed_protocol")
    else:
        version, sp = str(md_or_protocol), None
    return seed_rule(version, sp if isinstance(sp, Mapping) else None, env_salt=os.environ.get(SALT_ENV))


def _dict_message(fn: str, ds: Any) -> str:
    names = sorted(ds.keys())
    first = names[0] if names else "public"
    return (f"{fn} needs one split, but got a {type(ds).__name__} with splits {names}; "
            f"use {fn}(ds[{first!r}]{', i' if fn == 'mlp_at' else ''}) or load_dataset(..., split={first!r}).")
