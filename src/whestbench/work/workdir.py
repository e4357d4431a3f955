"""The work directory itself: where it lies beside an output, the checks before a bake writes into it, its lock.

What ``<output>.whest-work/`` holds: ``work.ledger``'s docstring. The lock: ``hold_lock``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from whestbench.atomic import read_regular, write_file_atomic
from whestbench.errors import UsageError, WorkDirBusy
from whestbench.text import sanitize

WORK_SUFFIX = ".whest-work"
ELSEWHERE = "choose another --output."


def work_dir_for(output: Path) -> Path:
    """``<output>.whest-work``: beside the output, so a re-run of the same command finds it."""
    output = Path(output)
    return output.with_name(output.name + WORK_SUFFIX)


LOCK_FILE, PLAN_FILE, SEEDS_FILE, STATUS_FILE, UNITS_DIR = "lock", "plan.json", "auto-seeds.json", "status.json", "units"
PILOTS_FILE = "pilots.json"
# What each work file can hold, read through ``atomic.read_regular`` with these caps (a file beyond its
# cap is not one a bake wrote: refused before it is read, never allocated):
PLAN_MAX_BYTES = 1 << 20
"""plan.json: one identity of about 15 keys, ~1 KiB in every bake (a thousand times that)."""
LOCK_MAX_BYTES = 4 << 20
"""lock: pid, host, start time and the bake's command line, which the kernel caps at ARG_MAX (2 MiB on Linux)."""
STATUS_MAX_BYTES = 64 << 20
"""status.json: the planned figures and one ~150-byte heartbeat entry per rank (400,000 ranks fit)."""
MAX_WORLD = 1 << 20
"""The most ranks a status.json may claim (``whest dataset status`` lists the ranks never seen: a record
claiming a billion built a billion-item list); far above any torchrun or SLURM job."""
_ENTRIES = {LOCK_FILE: "file", PLAN_FILE: "file", SEEDS_FILE: "file", STATUS_FILE: "file", PILOTS_FILE: "file",
            UNITS_DIR: "directory"}
"""What a work directory holds (besides the ``.NAME.*.tmp`` files of an interrupted atomic write)."""


def check_work_dir(root: Path) -> None:
    """Refuse, before any work, a work directory a bake cannot safely write (UsageError naming the fix).

    Guards against writing through a symlink (dangling or not: the lock, plan and units would land
    among someone else's files, and opening ``lock`` would truncate whatever it points to), a file
    where the directory goes, an existing directory that is not a work directory of ours (it holds
    other files), and a damaged one (``lock`` or ``plan.json`` a directory, ``units`` a file, one
    of them a symlink, a FIFO or a device): each would otherwise fail with a raw ``[Errno 17]``/``[Errno 21]``/
    ``[Errno 22]``, or block on the FIFO.
    """
    root = Path(root)
    if os.path.islink(root):
        raise UsageError(f"the work directory {root} is a symlink (to {os.readlink(root)!r}); a bake keeps its work "
                         "files in a directory of its own beside --output:", fix=f"remove the link ({root}) or {ELSEWHERE}")
    if not os.path.lexists(root):
        return
    if not root.is_dir():
        raise UsageError(f"{root}, where the bake keeps its work files, is a file, not a work directory;",
                         fix=f"remove it or {ELSEWHERE}")
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        kind = _ENTRIES.get(entry.name)
        if kind is None:
            if entry.name.startswith(".") and entry.name.endswith(".tmp") and entry.is_file(follow_symlinks=False):
                continue  # an atomic write that was interrupted
            raise UsageError(f"{root} exists and is not a whestbench work directory (it holds {entry.name!r}); a bake "
                             "would write its lock, plan and units among those files:", fix=f"move {root} away or {ELSEWHERE}")
        is_dir, regular = entry.is_dir(follow_symlinks=False), entry.is_file(follow_symlinks=False)
        if entry.is_symlink() or (is_dir if kind == "file" else not is_dir) or (kind == "file" and not regular):
            what = ("a symlink" if entry.is_symlink() else "a directory" if is_dir else "a file" if regular
                    else "a FIFO, device or socket")
            raise UsageError(f"the work directory is damaged: {root / entry.name} is {what}, not the {kind} a bake keeps "
                             "there;", fix=f"remove {root / entry.name} and re-run the same command (the rest of {root} is kept).")


STATUS_FORMAT = "whestbench-status/1"


_status_lock = threading.Lock()  # one read-modify-write of status.json at a time in this process


def write_status(root: Path, doc: dict[str, Any]) -> None:
    """``root/status.json``: what a bake planned (its planned samples, units and workers), written
    once its units are about to start, and what the bake holding the lock is doing (``run``:
    ``record_phase``), for ``whest dataset status`` (which trusts nothing else in it: the units and
    checkpoints are read and checked themselves)."""
    write_file_atomic(Path(root) / STATUS_FILE, (json.dumps({"format": STATUS_FORMAT, **doc}, indent=1) + "\n").encode())


def update_status(root: Path, fields: dict[str, Any]) -> None:
    """``root/status.json`` with ``fields`` set and the rest as it was (a missing or unreadable one:
    ``fields`` alone)."""
    with _status_lock:
        write_status(root, {**read_status(root), **fields})


PHASES = {
    "starting": "starting: reading the flags, checking the output, importing the backend",
    "probe": "timing probe: timing this bake's own loop for the time estimate",
    "device-check": "device check: checking the torch device before any work",
    "pilots": "pilots: planning each MLP's samples for the target standard error",
    "kernels": "loading the compiled kernels (compiling them on a cold cache)",
    "resume": "resuming: reading and checking the units an earlier run saved",
    "sampling": "sampling",
    "writing": "writing the dataset",
}
"""The phases of a bake as ``status.json``'s ``run.phase`` records them, with what each is for a person;
all but the last two are its start-up (no sample of the dataset is drawn yet)."""
STARTING_PHASES = frozenset(PHASES) - {"sampling", "writing"}


def record_phase(root: Path | None, phase: str) -> None:
    """``status.json``'s ``run``: the phase the bake holding ``root`` has reached (``PHASES``), since
    when, and its pid, so ``whest dataset status`` answers from the command's first moment. A
    report only: a work directory that is gone (the bake finished) or unwritable is left alone."""
    if root is None or not Path(root).is_dir():
        return
    with contextlib.suppress(OSError):
        update_status(root, {"run": {"phase": phase, "since_utc": utc_text(time.time()), "pid": os.getpid()}})


def read_status(root: Path) -> dict[str, Any]:
    """``root/status.json`` without its format tag; ``{}`` when it is missing, unreadable or not ours."""
    doc = read_json(Path(root) / STATUS_FILE, STATUS_MAX_BYTES)
    if not isinstance(doc, dict) or doc.get("format") != STATUS_FORMAT:
        return {}
    return {k: v for k, v in doc.items() if k != "format"}


def read_json(path: Path, max_bytes: int) -> Any:
    """``path``'s JSON (at most ``max_bytes``), or None when it is missing, unreadable or larger."""
    try:
        return json.loads(read_regular(path, max_bytes, "work file"))
    except (OSError, ValueError, RecursionError):
        return None


def utc_text(t: float) -> str:
    """A wall-clock time as status.json and ``whest dataset status`` write it: 2026-11-27T14:40:56Z."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def output_for(work_dir: Path) -> Path | None:
    """The output a work directory belongs to (``work_dir_for`` reversed); None for another name."""
    name = Path(work_dir).name
    if not name.endswith(WORK_SUFFIX) or name == WORK_SUFFIX:
        return None
    return Path(work_dir).with_name(name[: -len(WORK_SUFFIX)])


_held: set[str] = set()  # the work directories whose lock this process holds (``hold_lock``)


@contextlib.contextmanager
def hold_lock(root: Path, command: str = "") -> Iterator[None]:
    """Hold ``root/lock`` (an exclusive flock) for the duration; another holder means WorkDirBusy.

    The kernel drops an flock when its process dies, so a killed bake never blocks the next one.
    The file's text (pid, host, start, command) is what a refused bake reports. Re-entrant in one
    process: a lock this process holds already (``hold_early``) is held on, not taken again.
    """
    import fcntl

    key = os.path.realpath(root)
    if key in _held:
        yield
        return
    root.mkdir(parents=True, exist_ok=True)
    path = root / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise WorkDirBusy(f"another bake holds {root} ({lock_holder(read_json(path, LOCK_MAX_BYTES))});",
                              fix=f"wait for it to finish. If no such process is running (a stale lock on a network "
                                  f"filesystem), remove {path} and re-run.") from None
        os.ftruncate(fd, 0)
        text = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                           "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "command": command})
        os.write(fd, text.encode())
        _held.add(key)
        try:
            yield
        finally:
            _held.discard(key)
    finally:
        os.close(fd)  # releases the flock


@contextlib.contextmanager
def hold_early(output: Path, command: str = "") -> Iterator[Path | None]:
    """Hold the work directory of a bake of ``output`` from the command's first moment, its phase
    recorded as "starting", so ``whest dataset status`` answers while the bake imports, checks, probes,
    compiles and runs its pilots (the bake's own ``hold_lock`` then holds on to it). Yields the work
    directory, or None where the bake's own checks decide (an output that exists, a work directory
    they refuse or another bake holds, a parent directory that does not exist). On the way out, a
    work directory made here that holds nothing saved (no plan, no seeds: the bake was refused or
    stopped in its start-up) is removed: a refused bake leaves nothing."""
    held = None
    try:
        output = Path(output)
        work = work_dir_for(output)  # ValueError for ".", "/" and "": no name, refused by the bake's checks
        check_work_dir(work)
        usable = output.name not in ("", ".", "..") and not os.path.lexists(output) and output.absolute().parent.is_dir()
    except (UsageError, OSError, ValueError):
        usable = False
    if usable:  # then work_dir_for returned
        made = not os.path.lexists(work)
        held = contextlib.ExitStack()
        try:
            work.mkdir(exist_ok=True)
            held.enter_context(hold_lock(work, command))
        except (WorkDirBusy, OSError):
            held.close()
            remove_unsaved(work, made)
            held = None
    if held is None:
        yield None
        return
    try:
        record_phase(work, "starting")
        yield work
    finally:
        held.close()
        remove_unsaved(work, made)  # a finished bake removed it; one refused or stopped in its start-up saved nothing


def remove_unsaved(work: Path, made: bool) -> None:
    """Remove ``work`` when this process made it and nothing was saved in it (no plan, no seeds)."""
    with contextlib.suppress(OSError):  # a name the system refuses (too long): nothing was made
        if made and work.is_dir() and not work.is_symlink() and not (work / PLAN_FILE).exists() \
                and not (work / SEEDS_FILE).exists():
            shutil.rmtree(work, ignore_errors=True)


def lock_holder(info: Any) -> str:
    """``pid 4034 on host vm, started 2026-11-24 07:56:46 UTC`` from a lock file's JSON (``?`` for what is
    missing). Each field is shown as text from a file is: control characters removed, cut to 80 characters
    (a lock file's host held escape codes that ``status`` printed raw)."""
    info = info if isinstance(info, dict) else {}

    def field(key: str) -> str:
        value = info.get(key)
        return "?" if value is None else sanitize(str(value), 80)

    return f"pid {field('pid')} on host {field('host')}, started {field('started')}"


def is_locked(root: Path) -> bool:
    """Whether a bake holds ``root``'s lock now (``hold_lock``'s exclusive flock): a shared try-lock fails,
    and is released at once (``whest dataset status`` reads without locking anything)."""
    import fcntl

    try:
        fd = os.open(Path(root) / LOCK_FILE, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO planted there must not block
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # releases a shared lock taken
    return False
