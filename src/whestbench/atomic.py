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
from pathlib import Path
from typing import Iterator

STAGING_MARK = ".whest-staging"


def _create(make, parent: Path, prefix: str, suffix: str = ""):
    """``make(path)`` on a fresh random name in ``parent``; retried on the (unlikely) name collision.

    Files and directories are created with modes 0666/0777, which the kernel masks with the
    process umask: the result has the user's normal permissions. The umask itself is never read or
    set here: ``os.umask`` can only be read by setting it, and doing that from worker threads races
    (two threads reading at once leave it at 0: every file created afterwards world-writable).
    """
    import secrets  # here, like socket below: the CLI loads this module at start-up and needs them only to write

    for _ in range(100):
        path = parent / f"{prefix}{secrets.token_hex(6)}{suffix}"
        try:
            return path, make(path)
        except FileExistsError:
            continue
    raise FileExistsError(f"could not create a unique temporary name in {parent}")


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
    staging, _ = _create(lambda p: os.mkdir(p, 0o777), target.parent, f".{target.name}.staging-")
    import socket

    try:
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
    import socket

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


def _require_replaceable(path: Path) -> None:
    """Raise IsADirectoryError / OSError unless ``path`` is new or a regular file (links followed), just
    before the rename: a FIFO or device node put there after the flags were checked is never replaced."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.islink(path):
            raise OSError(f"refusing to write {path}: it is a dangling symlink") from None
        return
    if not stat.S_ISREG(mode):
        raise OSError(f"refusing to write {path}: it exists and is not a regular file (a directory, FIFO, device or "
                      "socket); name a regular file or a new file")


def write_file_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temp file in the same directory, fsync, rename; ``path`` must
    be new or a regular file (checked again just before the rename)."""
    path = Path(path)
    tmp, fd = _create(lambda p: os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), path.parent,
                      f".{path.name}.", ".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        _require_replaceable(path)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def read_regular(path: str | os.PathLike) -> bytes:
    """The bytes of ``path`` if it is a regular file (links followed), else OSError (EINVAL), which
    the callers already treat as an unreadable work file: a work file replaced by a FIFO blocked the
    reader forever, and one replaced by a link to /dev/zero read until the memory ran out."""
    import errno
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens without waiting for a writer
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
        os.set_blocking(fd, True)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
