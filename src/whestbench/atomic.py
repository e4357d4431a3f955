"""Atomic directory and file writes: build beside the target, fsync, rename. Done means renamed.

A directory is built in ``.<name>.staging-*`` beside its target. While it is being built it holds
a marker file (``STAGING_MARK``) naming the process and host that build it, so a later run can
tell a staging directory that a killed writer left behind (``remove_abandoned_staging``) from a
live writer's, and from a user's directory that merely has a similar name.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import json
import os
import shutil
import stat
from pathlib import Path
from typing import Iterator

from whestbench.errors import FileTooLarge
from whestbench.text import format_bytes, sanitize

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
        info = json.loads(read_regular(mark, 64 << 10, "staging marker"))  # a target name, a pid and a host
        pid, host, target = info["pid"], info["host"], info["target"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
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


def read_regular(path: str | os.PathLike, max_bytes: int, what: str = "file", *, streams: bool = False) -> bytes:
    """The bytes of ``path`` if it is a regular file (links followed) of at most ``max_bytes``; else OSError
    (EINVAL for a FIFO, device or socket) or ``FileTooLarge`` (an OSError too), which the callers treat as
    an unreadable file. The one reader of every file a command reads whole (work files, card files,
    metadata.json, a token file): a work file replaced by a FIFO blocked the reader forever, one replaced
    by a link to /dev/zero read until the memory ran out, and a 5 GB sparse unit file took 3.9 GB of RSS
    in ``status``. Each caller passes the cap of what it reads, with the reason beside it. ``what``
    names the file in the refusal. ``streams``: a pipe or a character device is read too, up to the cap
    (``--token-file <(pass hf)`` is a pipe; ``--token-file /dev/zero`` read without end)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens without waiting for a writer
    try:
        size = os.fstat(fd)
        stream = streams and (stat.S_ISFIFO(size.st_mode) or stat.S_ISCHR(size.st_mode))
        if not stat.S_ISREG(size.st_mode) and not stream:
            raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
        if size.st_size > max_bytes and not stream:
            raise too_large(path, size.st_size, max_bytes, what)
        os.set_blocking(fd, True)
        chunks, total = [], 0
        while chunk := os.read(fd, min(1 << 20, max_bytes + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:  # it grew while we read, or a stream went on
                raise too_large(path, total, max_bytes, what, at_least=stream)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_stream(stream, max_bytes: int, what: str, name: str = "standard input") -> bytes:
    """At most ``max_bytes`` from a stream (standard input; bytes, or text as UTF-8), else ``FileTooLarge``."""
    data = stream.read(max_bytes + 1)
    data = data.encode("utf-8") if isinstance(data, str) else data
    if len(data) > max_bytes:
        raise too_large(name, len(data), max_bytes, what, at_least=True)
    return data


def too_large(path: object, size: int, cap: int, what: str, at_least: bool = False):
    """The ``FileTooLarge`` for a file that holds more than any ``what`` can; its reader adds the fix
    (``from_error``), which differs from file to file."""
    shown = sanitize(os.fspath(path) if isinstance(path, os.PathLike) else str(path))
    size_text = "holds more than" if at_least else f"is {format_bytes(size)}, more than"
    return FileTooLarge(f"{shown} {size_text} any {what} holds ({format_bytes(cap)} at most), so it is not one (or it "
                        "was damaged).", fix=None)
