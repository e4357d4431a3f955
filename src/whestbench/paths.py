"""Every check of a local path a command is given, made before any work starts.

**Outputs** (``check_new_output``, ``check_outside_inputs``): every verb that writes a new
directory (bake, merge, combine-splits, pull) calls ``check_new_output`` first, and the verbs that
read inputs call ``check_outside_inputs`` too, so a refusal costs seconds, not the hours of work
before the final rename, and never leaves anything behind. What is refused, and why:

- a path that exists, including a dangling symlink (the final rename would fail on it after the
  work, and every re-run would fail the same way);
- ``""``, ``.``, ``./``, ``/`` and other paths with no new final name (the directory exists, or
  the rename target is not a directory entry we can create);
- a name that is not valid UTF-8 (pyarrow and the Hub reject it after the work);
- a name too long for the staging directory built beside it (``.<name>.staging-<12 hex>`` must fit
  255 bytes: a 240-character ``--output`` failed with errno 36 after the work and left its work
  directory), a parent that is a file, a parent we cannot write;
- an output equal to or inside one of the command's inputs (writing into ``part-0/data`` corrupts
  the input that is being read).

**Output files** (``check_output_file``): every flag that names a file to write (``doctor --json``,
``inspect --plot``, a bake's device-check report) is checked the same way before any work.

**Inputs**: ``input_dir`` (merge, combine-splits, prepare-arrow: ``InputPathError``),
``existing_dir`` (verify's DIR and --against: ``UsageError``) and ``local_dataset_dir`` (load,
inspect, push: ``DatasetSourceError``). Each keeps the wording its verb has always printed. An empty
path is refused by each (``Path("")`` is the current directory: ``verify ''`` verified it).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Iterable

from whestbench.errors import DatasetSourceError, InputPathError, OutputExistsError, UsageError
from whestbench.text import sanitize


def _not_utf8(text: str) -> str | None:
    """None if ``text`` is valid UTF-8, else ``text`` shown with its undecodable bytes escaped."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(text).decode("utf-8", "backslashreplace")
    return None


_PASS_DIR = "pass the directory holding metadata.json."
_PASS_DATASET = "pass a dataset directory (holding metadata.json and data/)."
_UTF8 = "(datasets and pyarrow need UTF-8 paths)"
_NAME_MAX = 255  # bytes per path component on ext4, xfs, btrfs, zfs, apfs
_STAGING_EXTRA = 22  # atomic.new_staging_dir's ".<name>.staging-<12 hex>" (a bake's "<name>.whest-work": 11)


def check_new_output(path: str | os.PathLike, *, flag: str = "--output") -> Path:
    """``path`` as a Path if a new directory can be created there, else UsageError naming the fix."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise UsageError(f"{flag} must be a path (a str or os.PathLike); got {type(path).__name__};",
                         fix="pass the path of a directory to create.")
    text = os.fspath(path)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    stripped = text.strip()
    p = Path(text)
    if not stripped or p.name in ("", ".", "..") or stripped.rstrip("/") in ("", ".", ".."):
        raise UsageError(f"{flag} {text!r} names no new directory;",
                         fix="give the path of a directory to create, for example ./my-dataset.")
    shown = _not_utf8(text)
    if shown is not None:
        raise UsageError(f"{flag} '{shown}' is not valid UTF-8 (datasets, pyarrow and the Hub need UTF-8 names);",
                         fix="choose a name of UTF-8 characters.")
    if len(p.name.encode("utf-8")) + _STAGING_EXTRA > _NAME_MAX:
        raise UsageError(f"the name {p.name[:40]!r}... is {len(p.name.encode('utf-8'))} bytes; at most "
                         f"{_NAME_MAX - _STAGING_EXTRA} leave room for the staging directory built beside it "
                         f"(.<name>.staging-<12 hex>, {_NAME_MAX} bytes at most);", where=flag,
                         fix="choose a shorter name.")
    if os.path.islink(p) and not p.exists():
        raise OutputExistsError(f"{flag} {text} is a symlink to {os.readlink(p)!r}, which does not exist;",
                                fix="remove the link or choose another path (the output directory must be new).")
    if os.path.lexists(p):
        raise OutputExistsError(f"{flag} {text} already exists;", fix="choose a new directory or remove it first.")
    ancestor = p.absolute().parent
    while not ancestor.exists():
        if os.path.lexists(ancestor):  # a dangling symlink on the way
            raise UsageError(f"{ancestor} is a dangling symlink;", where=f"{flag} {text}", fix="fix or remove it.")
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise UsageError(f"{ancestor} is a file, not a directory;", where=f"{flag} {text}", fix="choose another path.")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise UsageError(f"no permission to create directories in {ancestor};", where=f"{flag} {text}",
                         fix="choose another path.")
    return p


_TMP_EXTRA = 18  # write_file_atomic's temp name: ".<name>.<12 hex>.tmp" (without its random part's slack)


def file_kind(mode: int) -> str:
    """What a path that is not a regular file is, for a message: ``"a FIFO (named pipe)"``, ``"a directory"``..."""
    return ("a directory" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
            else "a character device" if stat.S_ISCHR(mode) else "a block device" if stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")


def check_output_file(path: str | os.PathLike, flag: str) -> Path:
    """``path`` as a Path if a file can be written there atomically (a new name, or an existing
    regular file it replaces), else UsageError naming the fix; for every file-output flag (``doctor
    --json``, ``inspect --plot``, a bake's device-check report), before any work. Refused: ``''`` and
    names of no file, a non-UTF-8 name, a name too long for the temp file beside it, an existing
    target that is not a regular file after following links (a directory, FIFO, device or socket:
    ``--json /dev/full`` run as root replaced the device node), a dangling symlink, and a missing or
    unwritable parent."""
    text = os.fspath(path)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    p = Path(text)
    if not text.strip() or text.endswith(("/", os.sep)) or p.name in ("", ".", ".."):
        raise UsageError(f"{flag} {text!r} names no file;", fix="give the path of a file to write, for example ./report.json.")
    shown = _not_utf8(text)
    if shown is not None:
        raise UsageError(f"{flag} '{shown}' is not valid UTF-8;", fix="choose a name of UTF-8 characters.")
    if len(p.name.encode("utf-8")) + _TMP_EXTRA > _NAME_MAX:
        raise UsageError(f"the name {p.name[:40]!r}... is too long (at most {_NAME_MAX - _TMP_EXTRA} bytes, room for "
                         "the temp file it is written through);", where=flag, fix="choose a shorter name.")
    if os.path.islink(p) and not p.exists():
        raise UsageError(f"{flag} {text} is a symlink to {os.readlink(p)!r}, which does not exist;",
                         fix="remove the link or choose another path.")
    if os.path.lexists(p):
        mode = os.stat(p).st_mode
        if not stat.S_ISREG(mode):
            raise UsageError(f"{flag} {text} is {file_kind(mode)}, not a regular file;", fix="name a regular file or "
                             "a new file (it is written whole and renamed into place, which would replace it).")
    parent = p.absolute().parent
    if not parent.is_dir():
        raise UsageError(f"directory {parent} does not exist;", where=f"{flag} {text}", fix="create it first.")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"no permission to write in {parent};", where=f"{flag} {text}", fix="choose another path.")
    return p


def check_outside_inputs(output: str | os.PathLike, inputs: Iterable[str | os.PathLike], *, flag: str = "--output") -> None:
    """UsageError if ``output`` is one of ``inputs`` or lies inside one (symlinks resolved)."""
    out = Path(output).resolve()
    for given in inputs:
        if _empty(given):
            raise InputPathError("an empty path names no dataset directory;", fix=_PASS_DIR)
        inp = Path(given).resolve()
        if out == inp or inp in out.parents:
            raise UsageError(f"{flag} {output} is inside the input {given}; writing there would change the input "
                             "while it is read.", fix="Choose an output outside every input.")


def _empty(path: object) -> bool:
    """Whether ``path`` is an empty (or blank) string: ``Path("")`` reads as the current directory."""
    return isinstance(path, (str, bytes)) and not os.fsdecode(path).strip()


def input_dir(path: str | os.PathLike, *, what: str = "dataset directory") -> Path:
    """``path`` as a Path if it names an existing directory with a UTF-8 name, else InputPathError."""
    text = os.fsdecode(path)
    if not text.strip():
        raise InputPathError(f"an empty path names no {what};", fix=_PASS_DIR)
    shown = _not_utf8(text)
    if shown is not None:
        raise InputPathError(f"{shown} is not a valid UTF-8 path {_UTF8};", fix="rename the directory.")
    p = Path(text)
    if os.path.islink(p) and not p.exists():
        raise InputPathError(f"{p} is a symlink to {os.readlink(p)!r}, which does not exist;", fix=f"pass a {what}.")
    if not p.exists():
        raise InputPathError(f"{p} does not exist;", fix=f"pass a {what} (the directory holding metadata.json).")
    if not p.is_dir():
        raise InputPathError(f"{p} is a file, not a {what};", fix=_PASS_DIR)
    return p


def existing_dir(path: str | os.PathLike, what: str) -> None:
    """UsageError unless ``path`` is an existing directory with a UTF-8 name (verify's DIR and --against)."""
    if _empty(path):
        raise UsageError(f"{what} is an empty path;", fix=_PASS_DATASET)
    path = Path(path)
    shown = _not_utf8(os.fsdecode(path))
    if shown is not None:  # pyarrow and datasets fail on it later as an "unreadable footer"
        raise UsageError(f"{what} '{shown}' is not valid UTF-8 {_UTF8};", fix="rename the directory.")
    if not path.exists():
        raise UsageError(f"{what} {path} does not exist;", fix=_PASS_DATASET)
    if not path.is_dir():
        raise UsageError(f"{what} {path} is a file;", fix="pass the dataset directory that holds metadata.json and data/.")


def local_dataset_dir(path: str | os.PathLike) -> Path:
    """``path`` if it exists, else DatasetSourceError naming it (load, inspect and push say the same)."""
    if _empty(path):
        raise DatasetSourceError("an empty path names no dataset directory;",
                                 fix="pass the directory holding metadata.json, or a Hub repo id such as 'org/name'.")
    path = Path(path).expanduser()
    shown = _not_utf8(os.fsdecode(path))
    if shown is not None:  # pyarrow and datasets fail on it later as an "unreadable footer"
        raise DatasetSourceError(f"'{shown}' is not a valid UTF-8 path {_UTF8};", fix="rename the directory.")
    if not path.exists():
        raise DatasetSourceError(f"no such dataset directory: {sanitize(str(path))}.", fix="Check the path; to use a "
                                 "dataset on the Hugging Face Hub pass a repo id such as 'org/name'.")
    return path
