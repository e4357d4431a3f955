"""A shard's Arrow schema against the one its metadata promises: the one check of verify (``verify/scan.py``),
merge/combine/prepare-arrow (``assemble/inputs.py``) and push (``hub/push.py``). Each reads the footer and
treats an unreadable one its own way. A list's child name ("item" or "element": writers differ) does not
count; an extension type stored only as field metadata (not registered where read) counts as that type."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from whestbench.format.schema import COLUMNS, make_features
from whestbench.hubenv import import_hub

if TYPE_CHECKING:
    import pyarrow as pa


class ShardSchema:
    """The schema of a ``width`` x ``depth`` dataset's shards of ``columns`` (``schema.columns_for``)."""

    def __init__(self, width: int, depth: int, columns: tuple[str, ...] = COLUMNS):
        self.width, self.depth, self.columns = width, depth, tuple(columns)
        self.features = make_features(width, depth, self.columns)  # also registers Array2D/3D with pyarrow
        self.arrow = self.features.arrow_schema

    def problems(self, schema: "pa.Schema", *, hf_metadata: bool = True) -> list[str]:
        """What is wrong with one shard's ``schema`` (empty: nothing): other columns (then only that), a column
        of another type, and with ``hf_metadata`` the 'huggingface' features metadata ``datasets`` reads."""
        if list(schema.names) != list(self.columns):
            return [f"columns {schema.names}, expected {list(self.columns)}"]
        problems = []
        for name in self.columns:
            got, want = (_type_sig(f.type, f.metadata) for f in (schema.field(name), self.arrow.field(name)))
            if got != want:
                problems.append(f"{name} is {_sig_text(got)}, expected {_sig_text(want)}")
        if not hf_metadata:
            return problems
        hf = (schema.metadata or {}).get(b"huggingface")
        if hf is None:
            return problems + ["no 'huggingface' features metadata (datasets would infer other types)"]
        try:
            declared = import_hub("datasets").Features.from_dict(json.loads(hf)["info"]["features"])
        except Exception as e:  # malformed JSON or an unknown feature type
            return problems + [f"unreadable 'huggingface' features metadata ({e})"]
        if declared != self.features:
            problems.append(f"'huggingface' features metadata differs from width={self.width} depth={self.depth}")
        return problems


def _type_sig(t, field_metadata: dict | None = None) -> Any:
    """An Arrow type with list child names ignored ("item" and "element" are the same column); an extension
    type stored only as its field's metadata counts as that type."""
    import pyarrow as pa

    if not isinstance(t, pa.ExtensionType) and field_metadata and b"ARROW:extension:name" in field_metadata:
        return ("ext", field_metadata[b"ARROW:extension:name"].decode(),
                json.loads(field_metadata.get(b"ARROW:extension:metadata", b"null")), _type_sig(t))
    if isinstance(t, pa.ExtensionType):
        return ("ext", t.extension_name, json.loads(t.__arrow_ext_serialize__()), _type_sig(t.storage_type))
    if pa.types.is_fixed_size_list(t):
        return ("fixed_size_list", t.list_size, _type_sig(t.value_type))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return ("list", _type_sig(t.value_type))
    return str(t)


def _sig_text(sig: Any) -> str:
    """A type signature as a reader wants it: ``Array3D[3, 16, 16] float32``, ``fixed_size_list<float>[16]``."""
    if isinstance(sig, tuple) and sig[0] == "ext":
        name = str(sig[1]).rsplit(".", 1)[-1].replace("ExtensionType", "")
        shape, dtype = (sig[2] + [None, None])[:2] if isinstance(sig[2], list) else (sig[2], None)
        return f"{name}{list(shape) if isinstance(shape, list) else shape} {dtype}"
    if isinstance(sig, tuple) and sig[0] == "fixed_size_list":
        return f"fixed_size_list<{_sig_text(sig[2])}>[{sig[1]}]"
    if isinstance(sig, tuple) and sig[0] == "list":
        return f"list<{_sig_text(sig[1])}>"
    return str(sig)
