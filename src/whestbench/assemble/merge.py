"""Merge partial datasets (``bake --slice K/N`` / ``--mlp-range``) into the one complete dataset.

    merge_datasets(["part-0", "part-1", "part-2"], output_dir="full")

A merge proves that the partials belong together before it writes a byte: same bake parameters
(``split``, ``schema_version``, ``seed_protocol``, ``backend``, ``n_samples``, ``width``,
``depth``, ``total_n_mlps``, ``config``, ``sampler``), the same whole-dataset seed list
(``seed_list_digest``, when the partials record one: whestbench 0.16 partials do not), ranges that
tile ``[0, total_n_mlps)`` exactly, intact files (``checksums``, readable Parquet of the right
schema and row count), and each partial passing verify (its rows' ``mlp_id``, seeds, names and
weights, checked there once: ``inputs.check_inputs``).

Rows are streamed shard by shard from the partials into the new shards (memory holds about one
row group), so the merged dataset equals a single-host bake of the same seeds on every column but
``sampling_budget_breakdown`` (measured times). The output is staged and renamed: a refusal or a
crash leaves nothing at ``output_dir``. What it raises: ``merge_datasets``.
"""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

from whestbench.atomic import staged_dir
from whestbench.compute.naming import unique_names
from whestbench.compute.seeds import estimator_seed, seed_list_digest
from whestbench.format import command
from whestbench.format.bakemeta import SAMPLES_USED, now_utc, samples_used_block
from whestbench.format.card_rules import CARD_KEY, given_card
from whestbench.assemble.inputs import (
    Input,
    check_inputs,
    input_list,
    claim_output,
    open_input,
    open_inputs,
    read_column,
    require_same,
    settle_cards,
    name_of,
)
from whestbench.format.checksums import CHECKSUMS, WRITTEN_FOR, dataset_checksums
from whestbench.format.reader import DATA_DIR, DatasetDir, shard_name
from whestbench.format.finished import merged_marker
from whestbench.format.schema import (
    DEVICE_CHECK_KEY,
    N_USED_COLUMN,
    PLAN_DIGEST,
    DatasetMeta,
    columns_for,
    device_check_state,
    make_features,
    protocol_version,
    validate_metadata,
)
from whestbench.format.trail import copy_trails
from whestbench.format.writer import (
    MAX_ROW_GROUP_BYTES,
    MAX_SHARD_BYTES,
    finish_dataset_dir,
    row_bytes,
    shard_plan,
)
from whestbench.errors import (
    REDO,
    MergeCorruptError,
    MergeIncompatibleError,
    MergeIncompleteError,
    MergeOverlapError,
)
from whestbench.events import Event, EventSink, Progress, ignore

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "merge_datasets",
    "merged_metadata",
    "hardware_fingerprints",
]

_REBAKE = "re-bake that slice with the same `whest dataset bake` command."
_PASS_PARTIALS = "pass the directories written by `whest dataset bake --slice K/N`."
_SAME_SEEDS = "bake every slice with the same --mlp-seeds file or --seed."
_ONE_BAKE = "partials must come from one bake command that differs only in --slice/--mlp-range and --output."


# ---------------------------------------------------------------------------------------------
# Merge


def merge_datasets(
    partials: Sequence[str | Path], *, output_dir: str | Path, on_event: EventSink = ignore,
    card: dict[str, str] | None = None,
) -> Path:
    """Validate ``partials`` and write the complete dataset at ``output_dir``; return its path.

    Raises UsageError (``OutputExistsError``, an output inside a partial: before any work),
    InputPathError, InvalidDatasetError, MergeIncompatibleError, MergeOverlapError,
    MergeIncompleteError or MergeCorruptError. ``on_event`` hears "start" once the paths are
    checked, notes (staging that a killed earlier merge left, now removed) and warnings (a
    partial's stale checksums). ``card``: card fields that settle partials whose cards differ
    (``--pretty-name``, ``--license``, ``--homepage``); else such partials are refused.
    """
    partials = input_list(partials, "partials")
    card = given_card(card)  # the CLI's card rules, before any work
    output = claim_output(output_dir, partials, on_event=on_event)
    on_event(Event("start", message=f"Merging {len(partials)} partials → {output}"))
    if not partials:
        raise MergeIncompatibleError("no partials to merge;", fix=_PASS_PARTIALS)
    on_event(Event("stage", message=f"opening the {len(partials)} partials: their metadata"))
    parts = open_inputs(partials, _open_partial, fix=_ONE_BAKE)
    _check_compatible(parts)
    settled = settle_cards([(str(p.path), p.md.get(CARD_KEY)) for p in parts], card)
    ordered = sorted(parts, key=lambda p: p.md["mlp_range"][0])
    _check_coverage(ordered)
    on_event(Event("stage", message="checking each partial's shards and their seeds"))
    check_inputs(ordered, "partial", lambda ordered: _check_seed_list(parts[0], ordered), on_event)

    first, files = parts[0].md, [f for p in ordered for f in p.files]
    md = merged_metadata([p.md for p in parts], output=output)
    _put(md, CARD_KEY, settled)  # the first partial's place when it had one
    if N_USED_COLUMN in columns_for(first):  # a target bake's: recomputed over every row, not the first partial's
        import pyarrow.parquet as pq

        counts = pq.read_table(files, columns=[N_USED_COLUMN])[N_USED_COLUMN]
        md[SAMPLES_USED] = samples_used_block(counts.to_numpy(), first["n_samples"])
    validate_metadata(md)
    with staged_dir(output) as stage:
        _copy_rows(stage, parts[0].split, files, first, on_event)
        if "audit" in first:  # the partials' audit trails, in MLP order (their mlp_ids are already absolute)
            (stage / first["audit"]["file"]).parent.mkdir(parents=True, exist_ok=True)
            copy_trails(stage / first["audit"]["file"], [p.path / first["audit"]["file"] for p in ordered])
        on_event(Event("stage", message="writing the metadata, the card and the checksums"))
        finish_dataset_dir(stage, md, dataset_checksums(stage))
    return output


def _open_partial(handle: DatasetDir) -> Input:
    p, md = open_input(handle)
    if not md.get("is_partial"):
        raise MergeIncompatibleError(f"{p} is a complete (non-partial) dataset; merge_datasets only accepts partials "
                                     "(is_partial=true).", fix="A complete dataset needs no merge.")
    if DatasetMeta.of(md).is_multi:
        raise MergeIncompatibleError(f"{p} is a multi-split dataset; merge takes single-split partials:",
                                     fix=_PASS_PARTIALS)
    # validate_metadata (open_input) already holds mlp_range to [start, end) within total_n_mlps
    total, rng, n = md["total_n_mlps"], md["mlp_range"], md.get("n_mlps")
    if n != rng[1] - rng[0]:
        raise MergeCorruptError(f"mlp_range={rng!r}, n_mlps={n!r} and total_n_mlps={total!r} do not describe a slice "
                                f"of the dataset (need 0 <= start < end <= total_n_mlps and n_mlps = end - start); "
                                "metadata.json was edited;", where=p, fix=_REBAKE)
    return Input(p, md, name_of(p, md), handle)


# Compared with the first partial, in this order (0.16's order, then ours). All must be equal. 0.16's
# recipe keys (``inputs.SAME_RECIPE``) are already equal: ``open_inputs`` compared them first.
_SAME_KEYS = ("seed", "total_n_mlps", "config")


def _check_compatible(parts: Sequence[Input]) -> None:
    first = parts[0]
    for part in parts[1:]:
        if part.split != first.split:
            raise MergeIncompatibleError(f"{part.path} has split {part.split!r}, expected {first.split!r} (from "
                                         f"{first.path});", fix="merge the partials of one split at a time.")
        for key in _SAME_KEYS:
            require_same(part.path, part.md, first.path, first.md, key, _ONE_BAKE)
        _same_seed_list(part, first)
        for key in ("sampler", "estimator", "target_stderr", "audit"):
            require_same(part.path, part.md, first.path, first.md, key, _ONE_BAKE)


def _same_seed_list(part: Input, first: Input) -> None:
    a, b = part.md.get("seed_list_digest"), first.md.get("seed_list_digest")
    if a == b:
        return
    if a is None or b is None:
        has, lacks = (part, first) if b is None else (first, part)
        raise MergeIncompatibleError(f"{has.path} records a seed_list_digest but {lacks.path} does not, so they cannot "
                                     "be shown to share one seed list;", fix="bake every slice with the same whestbench "
                                     "and the same --mlp-seeds file or --seed.")
    raise MergeIncompatibleError(f"partials were baked from different seed lists (seed_list_digest {b} in "
                                 f"{first.path}, {a} in {part.path});", fix=_SAME_SEEDS)


def _check_coverage(ordered: Sequence[Input]) -> None:
    expected, prev = 0, None
    for part in ordered:
        start, end = part.md["mlp_range"]
        if start < expected:
            raise MergeOverlapError(f"mlp_range starts at {start} but previous range ended at {expected} ({prev.path}); "
                                    f"MLPs [{start}, {min(end, expected)}) are in both.", where=part.path,
                                    fix="Pass each slice once.")
        if start > expected:
            raise _gap(expected, start)
        expected, prev = end, part
    total = ordered[0].md["total_n_mlps"]
    if expected != total:
        raise _gap(expected, total)


def _gap(start: int, end: int) -> MergeIncompleteError:
    return MergeIncompleteError(f"gap: no partial covers MLPs [{start}, {end});",
                                fix=f"bake them with --mlp-range {start}-{end - 1} (inclusive) and merge again.")


def _check_seed_list(first: Input, ordered: Sequence[Input]) -> None:
    """The merged ``mlp_seed`` column must be a valid seed list, and the one the partials name."""
    seeds = [s for part in ordered for s in part.seeds]
    seen: dict[int, int] = {}
    for i, s in enumerate(seeds):
        if s in seen:
            raise MergeIncompatibleError(f"mlp_seed {s} appears at MLPs {seen[s]} and {i}; the partials were baked "
                                         "from different seed lists.", fix="Bake every slice with the same --mlp-seeds file or --seed.")
        seen[s] = i
    want = first.md.get("seed_list_digest")
    if want is not None:
        got = seed_list_digest(seeds)
        if got != want:
            raise MergeCorruptError(f"the partials' mlp_seed columns hash to {got}, not to their seed_list_digest {want}: "
                                    "some rows were modified or come from another seed list;", fix=_REBAKE)
    _check_names(ordered, seeds)


def _check_names(ordered: Sequence[Input], seeds: list[int]) -> None:
    """The merged names are what the whole seed list gives (seed protocol 3.0: ``unique_names`` of the
    estimator seeds): a partial alone cannot check its ``-k`` uniqueness suffixes, the merge can."""
    if protocol_version(ordered[0].md) != "3.0":
        return  # 4.0 salts its names (not re-derivable here); 2.0 names come from the root seed
    want = unique_names([estimator_seed(s) for s in seeds])
    for part in ordered:  # they tile [0, total_n_mlps) (_check_coverage): a partial's row r is MLP start + r
        start = part.md["mlp_range"][0]
        for k, name in enumerate(read_column(part.files, "mlp_name"), start):
            if name != want[k]:
                raise MergeCorruptError(f"mlp_name of MLP {k} is {name!r}, but the whole seed list names it {want[k]!r} "
                                        f"(row {k - start} of that partial was edited);", where=part.path, fix=_REBAKE)


# ---------------------------------------------------------------------------------------------
# Metadata

_PER_PARTIAL = ("is_partial", "mlp_range", "total_n_mlps", "hardware", "created_at_utc", WRITTEN_FOR, CHECKSUMS,
                SAMPLES_USED)


_DEVICE_RANK = {"passed": 0, "accepted": 1, "skipped": 2}


def merged_metadata(mds: Sequence[dict[str, Any]], *, output: str | Path) -> dict[str, Any]:
    """The complete dataset's metadata from its partials' (given in input order).

    Key order as whestbench 0.16 writes it: the first partial's keys minus the per-partial ones,
    ``n_mlps`` = the total in place, then ``created_at_utc`` (earliest), ``merged_at_utc``,
    ``hardware_fingerprints``, ``partials_count``. Ours kept: ``sampler``, ``seed_list_digest``,
    ``seed_source``, ``bake_command`` (rewritten for the whole dataset), ``blas`` (when every
    partial used the same), ``device_check`` (the worst partial's: skipped, then accepted, then
    passed, with that partial's ``bake_command``). The writer appends ``checksums``.
    """
    first = mds[0]
    md = {k: copy.deepcopy(v) for k, v in first.items() if k not in _PER_PARTIAL}
    md["n_mlps"] = first["total_n_mlps"]
    if "blas" in md and any(m.get("blas") != first.get("blas") for m in mds):
        del md["blas"]  # per host: each hardware_fingerprints entry carries its own
    # the worst device check (skipped > accepted > passed; max keeps the first of equals), with its bake_command
    worst = max(mds, key=lambda m: _DEVICE_RANK.get(device_check_state(m.get(DEVICE_CHECK_KEY)), -1))
    if worst is not first:
        md[DEVICE_CHECK_KEY] = copy.deepcopy(worst[DEVICE_CHECK_KEY])
        if "bake_command" in worst:
            md["bake_command"] = copy.deepcopy(worst["bake_command"])
    if "bake_command" in md:  # the whole dataset's: no slice flags, --output the merged directory; as recorded (text or list)
        argv = command.parse(md["bake_command"])
        argv = argv and command.bake_argv(argv, output, drop=command.RANGE_FLAGS)
        _put(md, "bake_command", argv if isinstance(md["bake_command"], list) else argv and command.join(argv))
    created = [m["created_at_utc"] for m in mds if isinstance(m.get("created_at_utc"), str)]
    if created:
        md["created_at_utc"] = min(created)
    md["merged_at_utc"] = now_utc()
    ordered = sorted(mds, key=lambda m: m["mlp_range"][0])
    md["hardware_fingerprints"] = hardware_fingerprints(ordered)
    md["partials_count"] = len(mds)
    _put(md, PLAN_DIGEST, merged_marker(mds))  # in the first partial's place; none unless every partial has one
    return md


def _put(md: dict[str, Any], key: str, value: Any) -> None:
    """``md[key] = value`` (in the key's place when it has one); no ``key`` when ``value`` is empty or None."""
    if value:
        md[key] = value
    else:
        md.pop(key, None)


_HOST_SIGNATURE = ("cuda_device_name", "cuda_device_capability", "torch_version", "device", "python_version",
                   "numpy_version", "whestbench_version", "flopscope_version")
_DETERMINISM_FLAGS = ("torch_use_deterministic_algorithms", "cudnn_deterministic", "cublas_workspace_config")


def hardware_fingerprints(mds: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Partials grouped by a coarse host signature, in order of first appearance (whestbench 0.16's
    collapse: GPU, torch, device, Python, numpy, versions, determinism flags; plus our BLAS).

    Drivers, kernels and host names may vary inside a group: they are listed, not split on.
    ``mlp_count`` counts partials (0.16's name for it). Empty values are dropped.
    """
    groups: dict[str, dict[str, Any]] = {}
    for md in mds:
        hw = md.get("hardware") if isinstance(md.get("hardware"), dict) else {}
        bc = md.get("bake_config") if isinstance(md.get("bake_config"), dict) else {}
        cap = md.get("cuda_device_capability")
        fields = {k: md.get(k) for k in ("cuda_device_name", "cuda_device_capability", "torch_version", "device")}
        fields["cuda_device_capability"] = list(cap) if isinstance(cap, (list, tuple)) else None
        fields.update((k, hw.get(k)) for k in ("cpu_brand", "cpu_count_logical", "ram_total_bytes", "python_version",
                                                "numpy_version", "os"))
        fields.update(whestbench_version=md.get("whestbench_version"),  # in this order: the metadata's key order
                      flopscope_version=md.get("flopscope_version", hw.get("flopscope_version")),
                      blas=md.get("blas"), bake_config=md.get("bake_config"))
        signature = json.dumps([fields[k] for k in _HOST_SIGNATURE] + [bc.get(k) for k in _DETERMINISM_FLAGS]
                               + [fields["blas"]], sort_keys=True)
        group = groups.setdefault(signature, {
            **fields,
            "mlp_count": 0,
            "drivers_seen": set(),
            "kernels_seen": set(),
            "representative_hostnames": [],
        })
        group["mlp_count"] += 1
        if md.get("cuda_driver_version") is not None:
            group["drivers_seen"].add(str(md["cuda_driver_version"]))
        if hw.get("os_release") is not None:
            group["kernels_seen"].add(str(hw["os_release"]))
        host = hw.get("hostname")
        names = group["representative_hostnames"]
        if host is not None and host not in names and len(names) < 3:
            names.append(host)
    for group in groups.values():
        group["drivers_seen"], group["kernels_seen"] = sorted(group["drivers_seen"]), sorted(group["kernels_seen"])
    return [{k: v for k, v in group.items() if v is not None and v != []} for group in groups.values()]


# ---------------------------------------------------------------------------------------------
# Rows


def _copy_rows(stage: Path, split: str, files: Sequence[Path], md: dict[str, Any], on_event: EventSink) -> None:
    """Stream the rows of ``files`` (in order) into new shards laid out as the writer lays out a
    bake of ``md``'s ``total_n_mlps`` rows and columns (same shard plan, row groups, schema and
    compression); ``on_event`` hears ``Progress("rows", ...)`` after each row group."""
    import pyarrow.parquet as pq

    n_rows, width, depth = md["total_n_mlps"], md["width"], md["depth"]
    schema = make_features(width, depth, columns_for(md)).arrow_schema
    plan = shard_plan(n_rows, width, depth, MAX_SHARD_BYTES)
    group_rows = max(1, MAX_ROW_GROUP_BYTES // row_bytes(width, depth))
    sizes = [[min(group_rows, count - k) for k in range(0, count, group_rows)] for count in plan]  # per shard
    groups = _cut(_tables(files, group_rows, schema), [n for shard in sizes for n in shard])
    data = stage / DATA_DIR
    data.mkdir(parents=True, exist_ok=True)
    done = 0
    on_event(Event("progress", progress=Progress("rows", 0, n_rows)))
    for i, shard in enumerate(sizes):
        with pq.ParquetWriter(data / shard_name(split, i, len(plan)), schema, compression="snappy") as writer:
            for table in itertools.islice(groups, len(shard)):
                writer.write_table(table, row_group_size=table.num_rows)
                done += table.num_rows
                on_event(Event("progress", progress=Progress("rows", done, n_rows)))


def _tables(files: Sequence[Path], batch_rows: int, schema: "pa.Schema") -> Iterator["pa.Table"]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    for f in files:
        try:
            for batch in pq.ParquetFile(f).iter_batches(batch_size=batch_rows):
                yield pa.Table.from_batches([batch]).cast(schema)
        except Exception as e:  # a corrupt page found only now, while copying
            raise MergeCorruptError(f"cannot read its rows ({e}); the file is corrupt.", where=f, fix=_REBAKE) from e


def _cut(tables: Iterator["pa.Table"], sizes: Sequence[int]) -> Iterator["pa.Table"]:
    """Tables of exactly ``sizes`` rows, in order, cut from the stream ``tables``."""
    import pyarrow as pa

    pending: list["pa.Table"] = []
    rows = 0
    for n in sizes:
        while rows < n:
            table = next(tables, None)
            if table is None:
                raise MergeCorruptError("the partials hold fewer rows than their metadata declares.", fix=REDO)
            pending.append(table)
            rows += table.num_rows
        joined = pa.concat_tables(pending)
        rest = joined.slice(n)
        pending, rows = [rest] if rest.num_rows else [], rest.num_rows
        yield joined.slice(0, n)
