"""Helpers the tests share to tamper with a dataset on disk, and to check a refused command left nothing.

- ``edit_metadata(d, **changes)``: rewrite ``d/metadata.json`` with ``changes`` (a value of None removes the
  key); returns the new metadata.
- ``no_output(out)``: neither ``out`` nor a staging directory of it (``.<name>.*``) exists.
- ``free_port()``: a TCP port free on 127.0.0.1 now (for a torchrun rendezvous).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
