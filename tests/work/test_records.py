"""The checked record (unit and checkpoint files, checkpoints sent between ranks): only plain arrays."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from whestbench.work.records import DamagedRecord, decode_record, encode_record


def test_records_refuse_what_could_unpickle():
    blob = encode_record("unit", "k", "p", {}, {"x": np.zeros(2)})
    bad = blob.replace(b'"<f8"', b'"|O8"')
    body = bad[:-32]
    with pytest.raises(DamagedRecord, match="dtype"):
        decode_record(body + hashlib.sha256(body).digest(), kind="unit", key="k", plan="p")
