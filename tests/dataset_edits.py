"""Helpers the tests share to tamper with a dataset on disk, and to check a refused command left nothing.

- ``edit_metadata(d, **changes)``: rewrite ``d/metadata.json`` with ``changes`` (a value of None removes the
  key); returns the new metadata.
- ``no_output(out)``: neither ``out`` nor a staging directory of it (``.<name>.*``) exists.
- ``free_port()``: a TCP port free on 127.0.0.1 now (for a torchrun rendezvous).
- ``write_keeping_trail(...)``: rows rewritten through the writer with an existing audit trail file carried.
"""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

from whestbench.format.checksums import dataset_checksums
from whestbench.format.writer import finish_dataset_dir, write_dataset


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


def write_keeping_trail(dst: Path, split: str, rows: list, width: int, depth: int, md: dict, trail: Path) -> Path:
    """``write_dataset`` of ``rows`` (which hold no ``_trail``) with the audit trail file ``trail`` copied in as
    ``md``'s side file (a dataset's own trail, or an edited one), then the checksums bound over both."""
    write_dataset(dst, split, rows, len(rows), width, depth, {k: v for k, v in md.items() if k != "audit"})
    side = Path(dst) / md["audit"]["file"]
    side.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(trail, side)
    finish_dataset_dir(Path(dst), md, dataset_checksums(dst))
    return Path(dst)
