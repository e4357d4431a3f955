"""Atomic directory and file writes: build beside the target, fsync, rename. Done means renamed.

A directory is built in ``.<name>.staging-*`` beside its target. While it is being built it holds
a marker file (``STAGING_MARK``) naming the process and host that build it, so a later run can
tell a staging directory that a killed writer left behind (``remove_abandoned_staging``) from a
live writer's, and from a user's directory that merely has a similar name.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Iterator

STAGING_MARK = ".whest-staging"


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


def new_staging_dir(target: Path) -> Path:
    """A new, marked ``.<name>.staging-*`` directory beside ``target`` (created with its parents).

    Everything in it but ``STAGING_MARK`` is the caller's; the caller removes the directory, or
    ``staged_dir`` renames it, when done.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.staging-", dir=target.parent))
    try:
        os.chmod(staging, 0o777 & ~_umask())  # mkdtemp makes 0700; the dataset should get normal permissions
        mark = {"target": target.name, "pid": os.getpid(), "host": socket.gethostname()}
        (staging / STAGING_MARK).write_text(json.dumps(mark))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return staging


def remove_abandoned_staging(target: Path) -> list[Path]:
    """Delete the staging directories of ``target`` that a killed writer left beside it; return them.

    Only a ``.<name>.staging-*`` directory holding our marker for this ``target``, written by a
    process of this host that no longer runs, is deleted. A live writer's directory, another
    host's (a shared filesystem) and anything without the marker (a user's) are left alone.
    """
    target = Path(target)
    if not target.parent.is_dir():
        return []
    removed = []
    for p in sorted(target.parent.glob(f".{glob.escape(target.name)}.staging-*")):
        if not p.is_dir() or p.is_symlink() or not _abandoned(p / STAGING_MARK, target.name):
            continue
        shutil.rmtree(p, ignore_errors=True)
        removed.append(p)
    return removed


def _abandoned(mark: Path, name: str) -> bool:
    try:
        info = json.loads(mark.read_text())
        pid, host, target = info["pid"], info["host"], info["target"]
    except (OSError, ValueError, KeyError, TypeError):
        return False  # no marker, or not ours: never delete it
    if target != name or host != socket.gethostname() or not isinstance(pid, int) or pid <= 0:
        return False
    if pid == os.getpid():
        return False  # this process is building it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # EPERM: alive, another user's
        return False
    return False


@contextlib.contextmanager
def staged_dir(target: Path) -> Iterator[Path]:
    """Yield an empty staging directory beside ``target``; on success fsync it and rename it to
    ``target``. On any error the staging directory is removed and ``target`` never appears.

    Raises FileExistsError if ``target`` exists (checked before and again at the rename).
    """
    target = Path(target)
    if target.exists():
        raise FileExistsError(f"output already exists: {target}")
    staging = new_staging_dir(target)
    try:
        yield staging
        fsync_tree(staging)
        (staging / STAGING_MARK).unlink()
        fsync_dir(staging)
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
