"""Shared CLI pieces: flag parsers, consoles, a closed stdout, seeds files, and the line of a re-run
that finds its output complete. The error-to-exit-code mapping is ``cli/app.py``'s."""

from __future__ import annotations

import errno
import json
import os
import re
import select
import sys
from pathlib import Path

import click
from rich.console import Console

from whestbench.atomic import read_regular
from whestbench.bake.pipeline import settle_complete
from whestbench.errors import FileTooLarge, UsageError, WorkFailed
from whestbench.paths import file_kind
from whestbench.text import format_bytes, sanitize, scrub
from whestbench.values import count_of, is_positive_number
from whestbench.verify.run import confirm_complete, failure_line
from whestbench.work.distributed.store_executor import check_peer_timeout
from whestbench.work.machine import machine_memory

# --- writing to stdout: the one place (a reader that went away; a write that failed) ---------------


class _Console(Console):
    """A console whose reader may go away (``whest dataset verify DS | head -1``): it falls silent
    and the verb carries on to its own exit code. rich's default dup2s /dev/null onto stdout (even
    for the stderr console) and raises ``SystemExit(1)``, which stopped a bake before it baked."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        silence(self.file)

    def print(self, *objects, **kwargs) -> None:
        """Every line the CLI prints passes ``text.scrub``: tokens and URL credentials never reach a terminal."""
        super().print(*(scrub(o) if isinstance(o, str) else o for o in objects), **kwargs)


def silence(stream) -> None:
    """Point ``stream``'s descriptor at /dev/null: later writes, and the interpreter's final flush of
    what is still buffered, succeed instead of failing again ("Exception ignored", exit 120)."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # a captured stream (tests): nothing to point
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def stdout_reader_gone(exc: BaseException) -> bool:
    """Whether ``exc`` is a write to a stdout whose reader has gone (``| head``): EPIPE, and fd 1 is
    itself broken (poll reports POLLERR). A broken socket's EPIPE (push, pull) is a real error, and
    so is any other failed write to stdout (EFBIG, ENOSPC): exit 1 with one line, as ever."""
    if not (isinstance(exc, OSError) and exc.errno == errno.EPIPE):
        return False
    try:
        poller = select.poll()
        poller.register(1, select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return False


def flush_stdout() -> None:
    """Flush what is buffered for stdout at the end of a command; a reader that went away is no error
    (the exit code stays the verb's), any other failure propagates."""
    try:
        sys.stdout.flush()
    except OSError as exc:
        if not stdout_reader_gone(exc):
            raise
        silence(sys.stdout)


def write_stdout(data: bytes, what: str) -> None:
    """Write ``data`` (``what`` it is, for the message) to stdout, all of it or an error: Python's
    buffered stdout drops the rest after a short write (20,000 bytes under ``ulimit -f 1`` gave exit 0
    and a 1,024-byte file), so this writes fd 1 in a loop and raises WorkFailed (exit 1, one line) on a
    short or failed write. A reader that went away (``| head``) is no error, as everywhere."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # a captured stream (tests): write it there
        sys.stdout.write(data.decode("utf-8"))
        sys.stdout.flush()
        return
    view = memoryview(data)
    try:
        sys.stdout.flush()  # what an earlier print left buffered goes first
        while view:
            n = os.write(fd, view)
            if n <= 0:
                raise OSError(errno.EIO, "the write made no progress")
            view = view[n:]
    except OSError as exc:
        if stdout_reader_gone(exc):
            silence(sys.stdout)
            return
        why = {errno.EFBIG: "the file-size limit (ulimit -f) stopped it", errno.ENOSPC: "no space left on the device",
               errno.EDQUOT: "the disk quota is exhausted"}.get(exc.errno, exc.strerror or str(exc))
        written = len(data) - len(view)
        raise WorkFailed(f"could not write {what} to standard output after {written:,} of {len(data):,} bytes "
                         f"({why}); the output is incomplete:", fix="free room and run the command again") from None


out = _Console(highlight=False, soft_wrap=True)
err = _Console(stderr=True, highlight=False, soft_wrap=True)

class NonEmptyPath(click.Path):
    """``click.Path`` refusing an empty argument at parse time (exit 2): ``Path("")`` is the current
    directory, so ``status ''`` and ``verify ''`` read the directory the shell was in."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value.strip():
            self.fail("is an empty path; name a directory.", param, ctx)
        return super().convert(value, param, ctx)


DIR_ARG = NonEmptyPath(path_type=Path)
"""A directory a verb reads (its argument, ``--against``); a new ``--output`` is ``paths.check_new_output``'s."""

def parse_count(text: str, flag: str) -> int:
    """``1000000000``, ``1_000_000_000`` and ``1e9`` all mean 10**9 (``values.count_of``); a non-integral value is refused."""
    value = count_of(text)
    if value is None:
        raise UsageError(f"{flag} must be a whole number such as 1000000, 1_000_000 or 1e6; got {text!r}.",
                         fix="Write it with digits, underscores or an integral power of ten.")
    return value


class Count(click.ParamType):
    name = "N"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        try:
            return parse_count(value, "/".join(param.opts) if param else "value")
        except UsageError as exc:
            self.fail(str(exc), param, ctx)  # parse_count names the flag and the value as given


COUNT = Count()


class Seconds(click.ParamType):
    """A positive, finite number of seconds (``nan``, ``inf``, 0 and negatives are refused at parse
    time), and at least ``minimum`` where a smaller interval only costs (``why`` says what)."""

    name = "SECONDS"

    def __init__(self, minimum: float = 0.0, why: str = "") -> None:
        self.minimum, self.why = minimum, why

    def convert(self, value, param, ctx):
        try:
            v = float(value)
        except (TypeError, ValueError):
            self.fail(f"must be a number of seconds such as 60 or 0.5; got {value!r}.", param, ctx)
        if not is_positive_number(v):
            self.fail(f"must be a positive, finite number of seconds; got {value!r}.", param, ctx)
        if v < self.minimum:
            self.fail(f"must be at least {self.minimum:g} seconds ({self.why}); got {value!r}.", param, ctx)
        return v


MIN_INTERVAL_S = 0.05
"""The floor of ``--log-every`` and ``--checkpoint-every``: 1e-9 printed 11,605 lines in a 3-second
bake and checkpointed after every step. (Tests run small bakes at 0.05 s.)"""
LOG_SECONDS = Seconds(MIN_INTERVAL_S, "more often floods the log")
CHECKPOINT_SECONDS = Seconds(MIN_INTERVAL_S, "more often spends the bake's time on writing checkpoints")


class PeerTimeout(Seconds):
    """``--peer-timeout``: seconds, bounded at parse time to what the protocol and the store accept."""

    def convert(self, value, param, ctx):
        v = super().convert(value, param, ctx)
        why = check_peer_timeout(v)
        if why:
            self.fail(f"{why}; got {value!r}.", param, ctx)
        return v


PEER_TIMEOUT = PeerTimeout()


def parse_slice(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not m:
        raise UsageError(f"--slice must be K/N with 0 <= K < N (for example 0/4); got {text!r}.",
                         fix="Pass two whole numbers separated by '/'.")
    k, n = int(m.group(1)), int(m.group(2))
    if not 0 <= k < n:
        raise UsageError(f"--slice K/N needs 0 <= K < N (slices are numbered from 0); got {text!r}.",
                         fix="The last of N slices is N-1/N.")
    return k, n


def parse_mlp_range(text: str) -> tuple[int, int]:
    """CLI ``START-END`` (inclusive) to a half-open ``(start, end + 1)``."""
    m = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*", text or "")
    if not m:
        raise UsageError(f"--mlp-range must be START-END, inclusive (for example 0-249); got {text!r}.",
                         fix="Pass two whole numbers separated by '-'.")
    start, end = int(m.group(1)), int(m.group(2))
    if end < start:
        raise UsageError(f"--mlp-range END must be >= START (both inclusive); got {text!r}.", fix="Swap them.")
    return start, end + 1


def read_seeds_file(path: str) -> list:
    """The JSON array in ``path`` (not yet validated as seeds); UsageError naming the fix otherwise.

    Guards against a missing or unreadable file, invalid JSON, a document nested so deep that the
    parser recurses out of stack, and integers too long to convert (Python refuses > 4300 digits)."""
    p = Path(path)
    if not p.is_file():  # decided without opening it: a FIFO never blocks, a device is never read
        if not os.path.lexists(p) or (os.path.islink(p) and not p.exists()):
            raise UsageError(f"--mlp-seeds file {path!r} not found;",
                             fix=f"create it with `whest dataset generate-seeds --n-mlps N > {path}`.")
        raise UsageError(f"--mlp-seeds {path!r} is {file_kind(os.stat(p).st_mode)};", fix="pass a JSON file of seeds (from "
                         "`whest dataset generate-seeds --n-mlps N`, saved to a regular file).")
    total, _ = machine_memory()
    if total is not None and p.stat().st_size * 8 > total:  # a parsed seed costs ~5x its JSON text
        raise UsageError(f"--mlp-seeds file {path!r} is {format_bytes(p.stat().st_size)}: parsing it needs more memory "
                         f"than this machine's {format_bytes(total)};", fix="bake from a shorter list, or use --seed S.")
    try:
        # the cap: this machine's memory / 8 (as above), else what MAX_MLPS seeds spell (20 bytes each)
        data = json.loads(read_regular(p, total // 8 if total else 2**31 * 20, "seed file").decode("utf-8"))
    except FileTooLarge as exc:
        raise UsageError.from_error(exc, where="--mlp-seeds", fix="Bake from a shorter list, or use --seed S.") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"--mlp-seeds file {path!r} is not valid JSON ({exc});",
                         fix="it must hold a JSON array of ints.") from None
    except RecursionError:
        raise UsageError(f"--mlp-seeds file {path!r} is nested too deeply to be a seed list;",
                         fix="it must hold a flat JSON array of ints.") from None
    except ValueError as exc:  # e.g. an integer literal of thousands of digits
        raise UsageError(f"--mlp-seeds file {path!r} holds a value that is not a usable seed ({str(exc).split(':')[0]});",
                         fix="seeds are ints in [0, 2**63).") from None
    if not isinstance(data, list):
        raise UsageError(f"--mlp-seeds file {path!r} must contain a JSON array of ints; got {type(data).__name__}.",
                         fix="Save the output of `whest dataset generate-seeds --n-mlps N` there.")
    return data


def torch_knobs(use_torch: bool, device: str | None, mlps_per_batch: int | None, chunk_size: int | None
                ) -> tuple[bool, int | None, int | None]:
    """``(torch backend?, mlps_per_batch, chunk_size)``: the one rule of ``bake`` and ``calibrate``.

    ``--torch`` or ``--device`` choose the torch backend; its tuning knobs ``--mlps-per-batch`` and
    ``--chunk-size`` do not: on the CPU path they are ignored, with a note (docs/cli.md)."""
    torch_backend = use_torch or device is not None
    if not torch_backend and (mlps_per_batch is not None or chunk_size is not None):
        flags = " and ".join(f for f, v in (("--mlps-per-batch", mlps_per_batch), ("--chunk-size", chunk_size)) if v is not None)
        err.print(f"note: {flags} ignored: the CPU path's chunking is fixed by bit-identity with whestbench 0.16 "
                  "(they tune the --torch backend).", markup=False)
        return False, None, None
    return torch_backend, mlps_per_batch, chunk_size


def already_complete(output, md: dict, line: str, card: dict | None = None) -> None:
    """A merge or combine-splits re-run found ``output`` holding its result (``format/finished.py``:
    the completion marker and checksums, which a re-signed output also passes): settle it as a bake's
    re-run is settled (``pipeline.settle_complete``: the card, verify's integrity checks and the
    statistics without the audit pilot, the card fields given to the re-run) and print ``line``."""
    print_complete(line, output, settle_complete(output, md, card, confirm=failed_check))


def failed_check(output) -> str | None:
    """The first check ``output`` fails (verify's integrity and the statistics without the audit
    pilot: ``verify.run.confirm_complete``), or None when it passes."""
    report = confirm_complete(output)
    return None if report.ok else failure_line(report)


def print_complete(line: str, output, card_lines: list[str]) -> None:
    """The lines of a re-run that found ``output`` complete and verified (``line`` says what it holds),
    then what changed on its card."""
    shown = sanitize(str(output))
    out.print(line.replace(" is already complete", " is already complete and verified", 1), markup=False)
    out.print(f"  verified: integrity and the statistics without the audit pilot (`whest dataset verify {shown}` adds the "
              "pilot's checks)", markup=False)
    for text in card_lines:
        out.print(f"  {text}", markup=False)
