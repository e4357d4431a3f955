"""Checks on a directory a command is about to create (``--output``), made before any work starts.

Every verb that writes a new directory (bake, merge, combine-splits, pull) calls
``check_new_output`` first, and the verbs that read inputs call ``check_outside_inputs`` too, so a
refusal costs seconds, not the hours of work before the final rename, and never leaves anything
behind. What is refused, and why:

- a path that exists, including a dangling symlink (the final rename would fail on it after the
  work, and every re-run would fail the same way);
- ``""``, ``.``, ``./``, ``/`` and other paths with no new final name (the directory exists, or
  the rename target is not a directory entry we can create);
- a name that is not valid UTF-8 (pyarrow and the Hub reject it after the work);
- a name longer than the filesystem allows, a parent that is a file, a parent we cannot write;
- an output equal to or inside one of the command's inputs (writing into ``part-0/data`` corrupts
  the input that is being read).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from whestbench.errors import OutputExistsError, UsageError

_NAME_MAX = 255  # bytes per path component on ext4, xfs, btrfs, zfs, apfs


def check_new_output(path: str | os.PathLike, *, flag: str = "--output") -> Path:
    """``path`` as a Path if a new directory can be created there, else UsageError naming the fix."""
    text = os.fspath(path)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    stripped = text.strip()
    p = Path(text)
    if not stripped or p.name in ("", ".", "..") or stripped.rstrip("/") in ("", ".", ".."):
        raise UsageError(
            f"{flag} {text!r} names no new directory; give the path of a directory to create, "
            "for example ./my-dataset."
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(text).decode("utf-8", "backslashreplace")
        raise UsageError(
            f"{flag} '{shown}' is not valid UTF-8 (datasets, pyarrow and the Hub need UTF-8 names); "
            "choose a name of UTF-8 characters."
        ) from None
    if len(p.name.encode("utf-8")) > _NAME_MAX:
        raise UsageError(f"{flag}: the name {p.name[:40]!r}... is longer than {_NAME_MAX} bytes; choose a shorter name.")
    if os.path.islink(p) and not p.exists():
        raise OutputExistsError(
            f"{flag} {text} is a symlink to {os.readlink(p)!r}, which does not exist; remove the "
            "link or choose another path (the output directory must be new)."
        )
    if os.path.lexists(p):
        raise OutputExistsError(f"{flag} {text} already exists; choose a new directory or remove it first.")
    ancestor = p.absolute().parent
    while not ancestor.exists():
        if os.path.lexists(ancestor):  # a dangling symlink on the way
            raise UsageError(f"{flag} {text}: {ancestor} is a dangling symlink; fix or remove it.")
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise UsageError(f"{flag} {text}: {ancestor} is a file, not a directory; choose another path.")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {text}: no permission to create directories in {ancestor}; choose another path.")
    return p


def check_outside_inputs(output: str | os.PathLike, inputs: Iterable[str | os.PathLike], *, flag: str = "--output") -> None:
    """UsageError if ``output`` is one of ``inputs`` or lies inside one (symlinks resolved)."""
    out = Path(output).resolve()
    for given in inputs:
        inp = Path(given).resolve()
        if out == inp or inp in out.parents:
            raise UsageError(
                f"{flag} {output} is inside the input {given}; writing there would change the input "
                "while it is read. Choose an output outside every input."
            )
