"""The checked record: the bytes of a finished unit or checkpoint file, and of a checkpoint sent between ranks.

A record is ``MAGIC``, an 8-byte little-endian header length, a JSON header (kind, unit key, plan
digest, meta, array names/dtypes/shapes), the arrays' raw bytes, and the sha256 of everything
before it. Decoding checks each of those, so a file or message that is damaged, edited, truncated,
swapped with another unit's, or from another bake is refused (DamagedRecord) and never trusted.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

from whestbench.errors import DamagedRecord

RECOMPUTED = "the unit goes on from its last sound state (from its start if it has none)."
"""A damaged record's fix (``DamagedRecord.fix``): whoever reads one computes again; notes show its ``problem``."""

MAGIC = b"WHESTREC1\n"
_DTYPES = {"<f8", "<i8", "<u4", "<f4", "|b1"}  # what a record may hold; nothing that unpickles
_DIGEST = 32


def encode_record(kind: str, key: str, plan: str, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> bytes:
    """A checked record: what it is (kind, unit key, plan digest), free-form meta, named arrays."""
    layout, blobs = [], []
    for name, arr in arrays.items():
        arr = np.ascontiguousarray(arr)
        arr = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
        layout.append([name, arr.dtype.str, list(arr.shape)])
        blobs.append(arr.tobytes())
    header = json.dumps({"kind": kind, "key": key, "plan": plan, "meta": meta, "arrays": layout}).encode()
    body = MAGIC + len(header).to_bytes(8, "little") + header + b"".join(blobs)
    return body + hashlib.sha256(body).digest()


def decode_record(blob: bytes, *, kind: str, key: str, plan: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``(meta, arrays)`` of a record that passes every check, else DamagedRecord saying which failed."""
    if len(blob) < len(MAGIC) + 8 + _DIGEST:
        raise DamagedRecord(f"{len(blob)} bytes, too short to be a work record (truncated or empty)", fix=RECOMPUTED)
    if not blob.startswith(MAGIC):
        raise DamagedRecord("not a whestbench work record (wrong header)", fix=RECOMPUTED)
    body, digest = blob[:-_DIGEST], blob[-_DIGEST:]
    if hashlib.sha256(body).digest() != digest:
        raise DamagedRecord("checksum mismatch (truncated, edited or corrupted)", fix=RECOMPUTED)
    n = int.from_bytes(body[len(MAGIC) : len(MAGIC) + 8], "little")
    start = len(MAGIC) + 8
    try:
        header = json.loads(body[start : start + n].decode())
        got = (header["kind"], header["key"], header["plan"])
        layout, meta = header["arrays"], header["meta"]
    except (ValueError, KeyError, TypeError) as e:
        raise DamagedRecord(f"unreadable header ({e})", fix=RECOMPUTED) from None
    if got[0] != kind:
        raise DamagedRecord(f"holds a {got[0]!r} record, expected {kind!r}", fix=RECOMPUTED)
    if got[1] != key:
        raise DamagedRecord(f"holds unit {got[1]}, not {key} (renamed or swapped)", fix=RECOMPUTED)
    if got[2] != plan:
        raise DamagedRecord("belongs to another bake plan", fix=RECOMPUTED)
    arrays: dict[str, np.ndarray] = {}
    offset = start + n
    try:
        for name, dtype, shape in layout:
            if dtype not in _DTYPES:
                raise DamagedRecord(f"array {name!r} has dtype {dtype!r}", fix=RECOMPUTED)
            size = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            if size < 0 or offset + size > len(body):
                raise DamagedRecord(f"array {name!r} runs past the end of the file", fix=RECOMPUTED)
            arrays[name] = np.frombuffer(body, dtype=dtype, count=size // np.dtype(dtype).itemsize, offset=offset).reshape(shape).copy()
            offset += size
    except (TypeError, ValueError) as e:
        if isinstance(e, DamagedRecord):
            raise
        raise DamagedRecord(f"bad array layout ({e})", fix=RECOMPUTED) from None
    if offset != len(body):
        raise DamagedRecord("trailing bytes after the arrays", fix=RECOMPUTED)
    return meta, arrays
