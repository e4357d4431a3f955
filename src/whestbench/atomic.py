"""Atomic directory and file writes: build beside the target, fsync, rename. Done means renamed."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def fsync_tree(root: Path) -> None:
    """fsync every file and directory under ``root`` (so a rename publishes durable content)."""
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            fd = os.open(os.path.join(dirpath, f), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(dirpath))


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def staged_dir(target: Path) -> Iterator[Path]:
    """Yield an empty staging directory beside ``target``; on success fsync it and rename it to
    ``target``. On any error the staging directory is removed and ``target`` never appears.

    Raises FileExistsError if ``target`` exists (checked before and again at the rename).
    """
    target = Path(target)
    if target.exists():
        raise FileExistsError(f"output already exists: {target}")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.staging-", dir=target.parent))
    os.chmod(staging, 0o777 & ~_umask())  # mkdtemp makes 0700; the dataset should get normal permissions
    try:
        yield staging
        fsync_tree(staging)
        if target.exists():
            raise FileExistsError(f"output already exists: {target}")
        os.rename(staging, target)
        fsync_dir(target.parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def write_file_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temp file in the same directory, fsync, rename."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; the file should get normal permissions
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
