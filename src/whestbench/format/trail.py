"""The audit trail's side file ``audit/<split>.parquet`` (docs/format.md, "Audit trail").

One row per (MLP, segment), sorted, in row groups of at most ``GROUP_MLPS`` MLPs, so readers stream
it one MLP at a time (10⁴ MLPs at 256×8 are gigabytes). Columns: ``mlp_id``, ``segment``,
``sample_start``, ``sample_end``, ``means`` and ``var`` (every layer, (layer, neuron) row-major), under
control variates ``cv_means`` and ``cv_var`` (layers 2.. only: layer 1 is exact), and for pcg64
``pcg64_state`` (JSON of the bit generator's state at the segment's start). It lives outside ``data/``,
so whestbench 0.16.2 and plain ``datasets`` never read it; the checksums list it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from whestbench.compute.segments import MAX_SEGMENTS, SegmentTrail
from whestbench.format.reader import AUDIT_DIR
from whestbench.text import show_value
from whestbench.values import is_int

AUDIT_VERSION = "1"
AUDIT_VERSIONS = ("1",)
"""The trail versions this whestbench reads; another is refused, never read as if it were one of these."""
GROUP_MLPS = 64
RANGE_COLUMNS = ("mlp_id", "segment", "sample_start", "sample_end")
_FLOATS = ("means", "var", "cv_means", "cv_var")  # the value columns of float32 lists (cv_*: layers 2..)


def pcg64_state(text: Any, where: str = "a segment") -> dict[str, Any]:
    """A segment's ``pcg64_state`` (JSON text) as numpy's PCG64 takes it, checked: ValueError naming
    ``where`` unless it is a PCG64 state (128-bit ``state`` and ``inc``, ``has_uint32`` 0 or 1, a 32-bit
    ``uinteger``). A trail edited to ``{}``, ``null``, ``-5`` or ``1e400`` reached numpy in
    ``--spot-check`` ("TypeError: state must be a dict")."""
    try:
        state = json.loads(text)
    except (TypeError, ValueError, RecursionError):
        raise ValueError(f"{where}'s pcg64_state is not JSON") from None
    inner = state.get("state") if isinstance(state, dict) else None
    if not (isinstance(state, dict) and state.get("bit_generator") == "PCG64" and isinstance(inner, dict)
            and all(is_int(inner.get(k), 0, 2**128 - 1) for k in ("state", "inc"))
            and is_int(state.get("has_uint32"), 0, 1) and is_int(state.get("uinteger"), 0, 2**32 - 1)):
        raise ValueError(f"{where}'s pcg64_state {show_value(state, max_len=60)} is not a PCG64 generator state")
    return state


def audit_path(split: str) -> str:
    """The side file's path relative to the dataset directory."""
    return f"{AUDIT_DIR}/{split}.parquet"


def audit_block(split: str, segments: int, step_samples: int, aligned: bool, cv: bool, pcg64: bool) -> dict[str, Any]:
    """The metadata ``audit`` block of a bake that keeps a trail."""
    return {"version": AUDIT_VERSION, "segments": int(segments), "step_samples": int(step_samples),
            "aligned": bool(aligned), "file": audit_path(split), "values": trail_values(cv, pcg64)}


def trail_values(cv: bool, pcg64: bool) -> list[str]:
    """The value columns a trail of this recipe holds, in the file's order (after ``RANGE_COLUMNS``):
    ``means`` and ``var``; ``cv_means`` and ``cv_var`` when ``cv`` (control variates on MLPs with layers
    past the first, which is exact); ``pcg64_state`` for the pcg64 sampler. The metadata's
    ``audit.values`` lists the same."""
    return ["means", "var"] + (["cv_means", "cv_var"] if cv else []) + (["pcg64_state"] if pcg64 else [])


def trail_bytes(depth: int, width: int, segments: int, cv: bool, pcg64: bool) -> int:
    """The bytes one MLP's trail takes in ``audit/<split>.parquet`` (``_schema``'s columns, float32 values
    do not compress): per segment its ids and sample range, ``means`` and ``var`` of every layer, the
    control-variate pair of layers 2.. and pcg64's state (~190 bytes of JSON)."""
    values = 2 * depth * width + (2 * (depth - 1) * width if cv and depth > 1 else 0)
    return segments * (24 + 4 * values + (190 if pcg64 else 0))


def _schema(depth: int, width: int, cv: bool, pcg64: bool):
    import pyarrow as pa

    fields = [pa.field("mlp_id", pa.int32()), pa.field("segment", pa.int32()),  # RANGE_COLUMNS
              pa.field("sample_start", pa.int64()), pa.field("sample_end", pa.int64()),
              pa.field("means", pa.list_(pa.float32(), depth * width)),
              pa.field("var", pa.list_(pa.float32(), depth * width))]
    if cv and depth > 1:
        fields += [pa.field("cv_means", pa.list_(pa.float32(), (depth - 1) * width)),
                   pa.field("cv_var", pa.list_(pa.float32(), (depth - 1) * width))]
    if pcg64:
        fields.append(pa.field("pcg64_state", pa.string()))
    meta = {"whestbench_audit": json.dumps({"version": AUDIT_VERSION, "depth": depth, "width": width})}
    return pa.schema(fields, metadata=meta)


class TrailWriter:
    """Writes ``audit/<split>.parquet`` one MLP at a time (``add``), then ``close``."""

    def __init__(self, path: Path, depth: int, width: int, cv: bool, pcg64: bool):
        import pyarrow.parquet as pq

        self.depth, self.width, self.cv, self.pcg64 = depth, width, cv, pcg64
        self.schema = _schema(depth, width, cv, pcg64)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._writer = pq.ParquetWriter(str(path), self.schema, compression="zstd", use_dictionary=["mlp_id"],
                                        write_statistics=False)
        self._pending: list = []

    def add(self, mlp_id: int, trail: SegmentTrail, bounds: list[tuple[int, int]]) -> None:
        import pyarrow as pa

        def buf(kind, values: np.ndarray):  # from the buffer: pa.array(ndarray) would import pandas (~0.15 s)
            return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(np.ascontiguousarray(values))])

        n = len(bounds)
        cols: dict[str, Any] = {
            "mlp_id": buf(pa.int32(), np.full(n, mlp_id, dtype=np.int32)),
            "segment": buf(pa.int32(), np.arange(n, dtype=np.int32)),
            "sample_start": buf(pa.int64(), np.array([s for s, _ in bounds], dtype=np.int64)),
            "sample_end": buf(pa.int64(), np.array([e for _, e in bounds], dtype=np.int64)),
        }
        for name in _FLOATS:
            if self.schema.get_field_index(name) < 0:
                continue
            v = np.asarray(trail.values[name], dtype=np.float32)
            if name.startswith("cv_"):
                v = v[:, 1:]
            flat = np.ascontiguousarray(v.reshape(n, -1))
            cols[name] = pa.FixedSizeListArray.from_arrays(buf(pa.float32(), flat.reshape(-1)), flat.shape[1])
        if self.pcg64:
            data = [json.dumps(s, sort_keys=True).encode() for s in trail.states]
            offsets = np.zeros(n + 1, dtype=np.int32)
            np.cumsum([len(d) for d in data], out=offsets[1:])
            cols["pcg64_state"] = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets),
                                                                          pa.py_buffer(b"".join(data))])
        self._pending.append(pa.Table.from_arrays([cols[f.name] for f in self.schema], schema=self.schema))
        if len(self._pending) >= GROUP_MLPS:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if self._pending:
            self._writer.write_table(pa.concat_tables(self._pending))
            self._pending = []

    def close(self) -> None:
        self._flush()
        self._writer.close()


class TrailRecord:
    """One MLP's trail as read back: ``bounds`` (n, 2) int64, ``values`` name -> (n, depth, width) f32
    (``cv_*`` with a zero layer 1), ``states`` (pcg64) or None."""

    def __init__(self, mlp_id: int, segments: np.ndarray, bounds: np.ndarray, values: dict[str, np.ndarray],
                 states: list | None):
        self.mlp_id, self.segments, self.bounds, self.values, self.states = mlp_id, segments, bounds, values, states

    @property
    def sizes(self) -> np.ndarray:
        return (self.bounds[:, 1] - self.bounds[:, 0]).astype(np.float64)


def iter_trail(path: Path, depth: int, width: int) -> Iterator[TrailRecord]:
    """Each MLP's trail in file order, one row group in memory at a time. ValueError on a file whose
    columns or shapes are not a trail's."""
    import pyarrow.parquet as pq

    f = pq.ParquetFile(str(path))
    names = set(f.schema_arrow.names)
    _require(names, (*RANGE_COLUMNS, "means", "var"))
    layers = {name: depth - name.startswith("cv_") for name in _FLOATS if name in names}  # cv_*: no layer 1
    # each value column a fixed list of (layers × width) floats, checked before a row group is read
    for name, n in layers.items():
        kind = f.schema_arrow.field(name).type
        if getattr(kind, "list_size", None) != n * width:
            raise ValueError(f"its column {name!r} is {kind}, not a fixed list of {n * width} floats")
    for t in _row_groups(f):
        ids = t.column("mlp_id").to_numpy()
        cols = {name: t.column(name).combine_chunks().flatten().to_numpy(zero_copy_only=False)
                .reshape(len(ids), n, width) for name, n in layers.items()}
        seg = t.column("segment").to_numpy()
        b = np.stack([t.column("sample_start").to_numpy(), t.column("sample_end").to_numpy()], axis=1)
        states = t.column("pcg64_state").to_pylist() if "pcg64_state" in names else None
        for s, e in _runs(ids):
            values = {name: np.concatenate([np.zeros((e - s, 1, width), dtype=v.dtype), v[s:e]], axis=1)
                      if name.startswith("cv_") else v[s:e] for name, v in cols.items()}
            yield TrailRecord(int(ids[s]), seg[s:e], b[s:e], values, None if states is None else
                              [pcg64_state(x, f"mlp_id {int(ids[s])} segment {int(g)}")
                               for x, g in zip(states[s:e], seg[s:e])])


def copy_trails(dest: Path, sources: list[Path]) -> None:
    """One trail file of the rows of ``sources`` in order (their mlp_ids already absolute)."""
    import pyarrow.parquet as pq

    first = pq.ParquetFile(str(sources[0]))
    writer = pq.ParquetWriter(str(dest), first.schema_arrow, compression="zstd")
    try:
        for src in sources:
            f = pq.ParquetFile(str(src))
            if not f.schema_arrow.equals(first.schema_arrow, check_metadata=True):
                raise ValueError(f"{src} is a trail of another shape")
            for g in range(f.num_row_groups):
                writer.write_table(f.read_row_group(g))
    finally:
        writer.close()


class TrailLayout:
    """What a trail file says about itself without its values: ``columns`` (names, in order), ``stamp``
    (its Parquet ``whestbench_audit`` metadata, parsed; None when absent or not JSON), and ``ranges()``
    each MLP's ``(mlp_id, segments, bounds)`` in file order, read from the four ``RANGE_COLUMNS`` only,
    one row group at a time. Raises ValueError (or OSError) on a file that is not Parquet."""

    def __init__(self, path: Path):
        import pyarrow.parquet as pq

        self._file = pq.ParquetFile(str(path))
        self.columns = list(self._file.schema_arrow.names)
        raw = (self._file.schema_arrow.metadata or {}).get(b"whestbench_audit")
        try:
            stamp = json.loads(raw) if raw is not None else None
        except (ValueError, RecursionError):
            stamp = None
        self.stamp = stamp if isinstance(stamp, dict) else None

    def ranges(self) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        _require(self.columns, RANGE_COLUMNS)
        for t in _row_groups(self._file, list(RANGE_COLUMNS)):
            ids = t.column("mlp_id").to_numpy(zero_copy_only=False)
            seg = t.column("segment").to_numpy(zero_copy_only=False)
            b = np.stack([t.column("sample_start").to_numpy(zero_copy_only=False),
                          t.column("sample_end").to_numpy(zero_copy_only=False)], axis=1)
            if len(ids) and (np.any(np.isnan(ids.astype(np.float64))) or np.any(np.isnan(b.astype(np.float64)))):
                raise ValueError("holds null mlp_id or sample ranges")
            for s, e in _runs(ids):
                yield int(ids[s]), seg[s:e], b[s:e]


def _require(names: Any, columns: Any) -> None:
    missing = next((c for c in columns if c not in names), None)
    if missing is not None:
        raise ValueError(f"lacks the column {missing!r}")


def _row_groups(f: Any, columns: list[str] | None = None) -> Iterator[Any]:
    """``f``'s row groups, each bounded before it is read: the writer's hold ``GROUP_MLPS`` MLPs of at most
    ``MAX_SEGMENTS`` segments."""
    for g in range(f.num_row_groups):
        rows = f.metadata.row_group(g).num_rows
        if rows > GROUP_MLPS * MAX_SEGMENTS:
            raise ValueError(f"its row group {g} holds {rows:,} rows; a trail's hold at most {GROUP_MLPS * MAX_SEGMENTS:,}")
        yield f.read_row_group(g, columns=columns)


def _runs(ids: np.ndarray) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each run of one mlp_id in ``ids``."""
    cuts = np.flatnonzero(np.diff(ids)) + 1
    return zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [len(ids)]]))
