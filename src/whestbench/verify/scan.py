"""Read a dataset's rows for verify and compare: batch by batch, each column checked for its shape,
weights hashed (and compared with the ones their seed gives), everything else kept as arrays.

``scan_split`` reads one split into a ``SplitScan``; ``schema_problems`` says what is wrong with a
split's Arrow schema. Raises ``InvalidDatasetError`` (never a pyarrow error) on a file it cannot read.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from whestbench.compute.mlp import weights_for_seed
from whestbench.format.reader import DatasetDir, data_files
from whestbench.format.writer import row_bytes
from whestbench.format.schema import COLUMNS, N_USED_COLUMN, STDERR_COLUMN, DatasetMeta
from whestbench.format.shards import ShardSchema
from whestbench.errors import REDO, InvalidDatasetError
from whestbench.text import sanitize

_BATCH_BYTES = 64 * 1024**2  # rows read at a time: memory stays flat on multi-GB datasets


def weight_digest(w: np.ndarray) -> bytes:
    """An MLP's weights (depth, width, width) float32 as 16 bytes of blake2b: what a scan keeps of them."""
    return hashlib.blake2b(np.ascontiguousarray(w).tobytes(), digest_size=16).digest()


@dataclass
class SplitScan:
    """One split's rows, reduced to what the checks need (weights are hashed, not kept)."""

    name: str
    ids: np.ndarray  # (n,) int64
    names: list[str]
    seeds: list[int]
    weight_digests: list[bytes]
    sigma1: np.ndarray  # (n, w) float64: ‖W₁[:, j]‖ per MLP and neuron
    means: np.ndarray  # (n, depth, w) float32
    final: np.ndarray  # (n, w) float32
    avg_var: np.ndarray  # (n,) float64
    weight_mismatch: list[tuple[int, str]]  # (mlp_id, what differs) against the re-derived weights
    bad_breakdown: list[tuple[int, str]] = field(default_factory=list)  # (mlp_id, why) rows whose breakdown does not parse
    stderr: np.ndarray | None = None  # (n, depth, w) float32: all_layer_stderr, when the dataset has it
    n_used: np.ndarray | None = None  # (n,) int64: n_samples_used, when the dataset has it

    def rederived_weights(self, i: int, width: int, depth: int) -> np.ndarray | None:
        """Row ``i``'s weights re-derived from its seed, or None where they are not the stored ones (seed
        protocol 2.0, or altered weights: the weights check says so)."""
        w = weights_for_seed(int(self.seeds[i]), width, depth)
        return w if weight_digest(w) == self.weight_digests[i] else None


@dataclass
class DatasetScan:
    path: Path
    md: dict[str, Any]
    width: int
    depth: int
    n_samples: int
    splits: list[SplitScan]

    @property
    def is_multi(self) -> bool:
        return DatasetMeta.of(self.md).is_multi

    def rows(self) -> Iterator[tuple[SplitScan, int]]:
        for s in self.splits:
            for i in range(len(s.seeds)):
                yield s, i

    def samples(self, s: SplitScan, i: int) -> int:
        """The samples behind row ``i`` of ``s``: what it used when it stopped at a target, else ``n_samples``."""
        return int(s.n_used[i]) if s.n_used is not None else self.n_samples


class _ShapeError(InvalidDatasetError):
    pass


def arrow_storage(arr):
    """An Arrow column as one plain array: its chunks combined, an extension type's storage."""
    import pyarrow as pa

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    return arr


def _dense(arr, inner: tuple[int, ...], column: str, ids: np.ndarray) -> np.ndarray:
    """A list-of-lists Arrow column as a ``(rows, *inner)`` array; raises _ShapeError on ragged rows."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = arrow_storage(arr)
    n = len(arr)
    want = "x".join(map(str, inner))
    for level, size in enumerate(inner):
        if arr.null_count:
            raise _ShapeError(f"{column} has null entries (expected {want} per row)")
        if pa.types.is_fixed_size_list(arr.type):
            if arr.type.list_size != size:
                raise _ShapeError(f"{column} has fixed-size lists of {arr.type.list_size} at depth {level}; expected {size} ({want} per row)")
        elif pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
            lengths = pc.list_value_length(arr).to_numpy(zero_copy_only=False)
            if lengths.size and not np.all(lengths == size):
                bad = int(np.argmax(lengths != size))
                row = bad // (len(lengths) // n) if n else bad
                raise _ShapeError(f"{column} of mlp_id {int(ids[row]) if row < len(ids) else row} has length "
                                  f"{int(lengths[bad])} at depth {level}; expected {size} ({want} per row)")
        else:
            raise _ShapeError(f"{column} is {arr.type}; expected nested lists of {want} floats")
        arr = arr.flatten()
    if arr.null_count:
        raise _ShapeError(f"{column} has null values")
    return arr.to_numpy(zero_copy_only=False).reshape((n, *inner))


def scan_split(path: "Path | DatasetDir", split: str, width: int, depth: int, *, rederive: bool,
               columns: tuple[str, ...] = COLUMNS) -> SplitScan:
    """Read ``split`` batch by batch; with ``rederive`` compare each MLP's weights with its seed's.
    ``columns``: the dataset's columns (``schema.columns_for``): its stderr and sample counts are
    read when it has them."""
    import pyarrow.parquet as pq

    batch_rows = max(1, _BATCH_BYTES // row_bytes(width, depth))
    ids, names, seeds, digests, sig, means, final, avg, mismatch = [], [], [], [], [], [], [], [], []
    stderr, n_used, bad_breakdown = [], [], []
    wanted = [*COLUMNS, *(c for c in (STDERR_COLUMN, N_USED_COLUMN) if c in columns)]
    for shard in data_files(path, split):
        try:
            for batch in pq.ParquetFile(shard).iter_batches(batch_size=batch_rows, columns=wanted):
                b_ids = np.asarray(batch.column("mlp_id").to_numpy(zero_copy_only=False), dtype=np.int64)
                b_seeds = [int(v) for v in batch.column("mlp_seed").to_pylist()]
                w = _dense(batch.column("weights"), (depth, width, width), "weights", b_ids).astype(np.float32, copy=False)
                m = _dense(batch.column("all_layer_means"), (depth, width), "all_layer_means", b_ids)
                f = _dense(batch.column("final_means"), (width,), "final_means", b_ids)
                for k, seed in enumerate(b_seeds):
                    wk = np.ascontiguousarray(w[k])  # (depth, width, width)
                    digests.append(weight_digest(wk))
                    if rederive:
                        ref = weights_for_seed(seed, width, depth)
                        if not np.array_equal(wk.view(np.uint32), ref.view(np.uint32)):
                            diff = np.argwhere(wk.view(np.uint32) != ref.view(np.uint32))
                            layer, i, j = (int(v) for v in diff[0])
                            mismatch.append((int(b_ids[k]), f"{len(diff)} value(s) differ, first weights[{layer}][{i}][{j}]"))
                sig.append(np.sqrt(np.sum(w[:, 0].astype(np.float64) ** 2, axis=1)))  # (rows, width)
                for k, text in enumerate(batch.column("sampling_budget_breakdown").to_pylist()):
                    why = _breakdown_problem(text)
                    if why:
                        bad_breakdown.append((int(b_ids[k]), why))
                ids.append(b_ids)
                names.extend(str(v) for v in batch.column("mlp_name").to_pylist())
                seeds.extend(b_seeds)
                means.append(m.astype(np.float32, copy=False))
                final.append(f.astype(np.float32, copy=False))
                avg.append(np.asarray(batch.column("avg_variance").to_numpy(zero_copy_only=False), dtype=np.float64))
                if STDERR_COLUMN in wanted:
                    stderr.append(_dense(batch.column(STDERR_COLUMN), (depth, width), STDERR_COLUMN, b_ids).astype(np.float32))
                if N_USED_COLUMN in wanted:
                    n_used.append(np.asarray(batch.column(N_USED_COLUMN).to_numpy(zero_copy_only=False), dtype=np.int64))
        except InvalidDatasetError:
            raise
        except Exception as e:  # pyarrow raises ArrowInvalid, OSError or ArrowException for a corrupt file
            raise InvalidDatasetError(f"{shard.name} is not a readable Parquet file (truncated or corrupt?): {e}.",
                                      fix=REDO) from e

    def cat(parts, shape, dtype):
        return np.concatenate(parts) if parts else np.zeros(shape, dtype)

    return SplitScan(
        name=split,
        ids=cat(ids, (0,), np.int64),
        names=names,
        seeds=seeds,
        weight_digests=digests,
        sigma1=cat(sig, (0, width), np.float64),
        means=cat(means, (0, depth, width), np.float32),
        final=cat(final, (0, width), np.float32),
        avg_var=cat(avg, (0,), np.float64),
        weight_mismatch=mismatch,
        bad_breakdown=bad_breakdown,
        stderr=cat(stderr, (0, depth, width), np.float32) if STDERR_COLUMN in wanted else None,
        n_used=cat(n_used, (0,), np.int64) if N_USED_COLUMN in wanted else None,
    )


def _breakdown_problem(text: Any) -> str:
    """Why a row's ``sampling_budget_breakdown`` is not the JSON object bakes write ("" when it is)."""
    if not isinstance(text, str):
        return "null" if text is None else f"a {type(text).__name__}, not a JSON string"
    try:
        value = json.loads(text)
    except ValueError:
        return f"not JSON ({sanitize(text[:30])!r})"
    except RecursionError:
        return "JSON nested too deeply"
    return "" if isinstance(value, dict) else f"JSON {type(value).__name__}, not an object"


def schema_problems(path: "Path | DatasetDir", split: str, width: int, depth: int, columns: tuple[str, ...] = COLUMNS) -> list[str]:
    """What is wrong with the Arrow schema of ``split``'s shards (empty when nothing is): ``format.shards``'s check."""
    import pyarrow.parquet as pq

    expected = ShardSchema(width, depth, columns)
    problems = []
    for shard in data_files(path, split):
        try:
            schema = pq.read_schema(shard)
        except Exception as e:  # corrupt footer
            problems.append(f"{shard.name}: unreadable footer ({e})")
            continue
        problems += [f"{shard.name}: {p}" for p in expected.problems(schema)]
    return problems
