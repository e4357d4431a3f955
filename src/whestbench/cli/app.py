"""The ``whest`` entry point: the command groups, verb aliases and the error-to-exit-code policy.

The exit codes, the one-line errors (``WHEST_DEBUG=1`` for a scrubbed traceback first) and what
``main(argv)`` returns or raises are docs/cli.md's "Exit codes and errors"."""

from __future__ import annotations

import contextlib
import errno
import importlib
import os
import sys
import time
import warnings

import click

from whestbench.cli.common import err, flush_stdout, out, silence, stdout_reader_gone
from whestbench.errors import BakeInterrupted, SignalStop, UsageError, WhestError, render
from whestbench.cli.signals import STOP_CODES, stopped
from whestbench.text import format_traceback, one_line, sanitize, scrub

ALIASES = {"info": "inspect", "upload": "push", "download": "pull"}
VERBS = {
    "whest": {"doctor": "doctor"},
    "dataset": {"generate-seeds": "seeds", "bake": "bake", "status": "bake", "merge": "merge",
                "combine-splits": "merge", "prepare-arrow": "merge", "inspect": "inspect", "verify": "inspect",
                "push": "hub", "pull": "hub", "calibrate": "calibrate"},
}
"""Each group's verbs -> the module of ``whestbench.cli`` that defines it (in its ``COMMANDS``), imported
when the verb runs or its help is shown: a verb loads what it uses, and ``whest --help`` none of it."""
# click >= 8.2 raises this for a bare group (`whest`, `whest dataset`); older clicks print the help
# and raise Exit(0) instead, so an empty tuple (matches nothing) is the right fallback.
_NO_ARGS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


class LazyGroup(click.Group):
    """A group whose verbs (``VERBS[name]``) are loaded when they are asked for."""

    def list_commands(self, ctx):
        return sorted({*self.commands, *VERBS[self.name]})

    def get_command(self, ctx, name):
        if name not in self.commands:  # an unknown name loads them all: click suggests the nearest ("Did you mean")
            for module in {VERBS[self.name][name]} if name in VERBS[self.name] else set(VERBS[self.name].values()):
                for command in importlib.import_module(f"whestbench.cli.{module}").COMMANDS:
                    self.add_command(command)
        return super().get_command(ctx, name)


class AliasGroup(LazyGroup):
    def get_command(self, ctx, name):
        return super().get_command(ctx, ALIASES.get(name, name))

    def resolve_command(self, ctx, args):
        name, cmd, rest = super().resolve_command(ctx, args)
        return (cmd.name if cmd else name), cmd, rest


def _version_line() -> str:
    from whestbench.work.machine import whestbench_version  # not at the top: it imports numpy, which --help never needs

    return f"whest, version {whestbench_version()}"


def _version_option(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``whest --version``: the version line, then the run ends (``main`` raises ``SystemExit(0)``)."""
    if value and not ctx.resilient_parsing:
        click.echo(_version_line())
        ctx.exit(0)


@click.group("whest", cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_version_option,
              help="Show the version and exit.")
def cli() -> None:
    """whest — bake, verify and publish WhestBench ground-truth datasets."""


@cli.command("version")
def version() -> None:
    """Print the version (what `whest --version` prints)."""
    click.echo(_version_line())


@cli.group(cls=AliasGroup)
def dataset() -> None:
    """Bake, merge, combine, inspect, verify and publish datasets."""


@contextlib.contextmanager
def _warnings_as_lines():
    """Python warnings raised under a verb (stale checksums, say) as one ``warning:`` line each."""
    def show(message, category, filename, lineno, file=None, line=None):
        err.print(f"warning: {one_line(sanitize(message))}", markup=False, emoji=False)

    previous = warnings.showwarning
    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code; never prints a traceback unless debugging.

    Raises ``SystemExit(0)`` after printing the help or the version, and ``SystemExit(2)`` after
    printing a command-line parser error (as whestbench 0.16's argparse ``main`` did)."""
    debug = os.environ.get("WHEST_DEBUG", "").lower() not in ("", "0", "false", "no")
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        # make_context + invoke (not cli.main) so that the help's and version's Exit reach us
        with _warnings_as_lines(), cli.make_context("whest", args) as ctx:
            cli.invoke(ctx)
        return 0
    except _NO_ARGS_HELP as exc:  # a bare group: its help, as for --help
        out.print(exc.ctx.get_help(), markup=False)
        raise SystemExit(0) from None
    except click.exceptions.Exit as exc:  # --help, --version
        raise SystemExit(exc.exit_code) from None
    except click.UsageError as exc:  # the parser refused the command line
        cmd = exc.ctx.command_path if exc.ctx else "whest"
        err.print(f"error: {exc.format_message()} (see `{cmd} --help`)", markup=False)
        raise SystemExit(2) from None
    except (SignalStop, click.Abort, KeyboardInterrupt) as exc:  # a signal or Ctrl-C before a verb took it over
        message, code = stopped(exc, args)
        err.print(message, markup=False)
        return code
    except UsageError as exc:
        if debug:
            _print_traceback(exc)
        err.print(f"error: {_error_text(exc)}", markup=False)
        return 2
    except Exception as exc:  # every other failure: one line, exit 1
        if stdout_reader_gone(exc):  # `whest ... | head`: a closed stdout is no error (click.echo's writes)
            silence(sys.stdout)
            return 0
        if debug:
            _print_traceback(exc)
        if isinstance(exc, BakeInterrupted):
            line = _error_text(exc)
            if line.startswith("stopped:"):  # after units ran: stamped like the progress lines before it
                line = f"[{time.strftime('%H:%M:%S')}] {line}"
            err.print(line, markup=False)
            return exc.exit_code
        found = _resource_error(exc)
        if found is not None:
            kind, path = found
            target = args[args.index("--output") + 1] if "--output" in args[:-1] else None
            where = (f" writing {sanitize(str(path))}" if path else
                     f" under --output {sanitize(target)}" if target else "")
            resumable = "bake" in args[:3] or "--recompute" in args  # verify --recompute bakes too
            kept = ("a re-run resumes from the units and checkpoints already saved" if resumable
                    else "nothing was left half-written")
            other = " (or choose another --output)" if target else ""
            what = {
                "disk": f"no space left on the device{where}: free space{other}",
                "fsize": f"File too large: the file-size limit (ulimit -f) stopped the write{where}: raise it "
                         "(ulimit -f unlimited)",
                "perm": f"the system refused the write{where} (operation not permitted: an immutable or read-only "
                        f"file or directory, see lsattr): make it writable{other}",
                "memory": "out of memory or address space (ulimit -v) while mapping or allocating data: raise the "
                          "limit or free memory",
            }[kind]
            err.print(f"error: {what} and re-run the same command; {kept}.", markup=False)
            return 1
        if isinstance(exc, (ValueError, OSError, RuntimeError, ImportError)):
            err.print(f"error: {_error_text(exc)}", markup=False)
        else:
            err.print(f"error: {type(exc).__name__}: {_error_text(exc)} (set WHEST_DEBUG=1 for a traceback)", markup=False)
        return 1


def _error_text(exc: BaseException) -> str:
    """What an error line says: ``errors.render``'s words (a ``WhestError``'s from its fields) as one
    line safe for a terminal, secrets scrubbed."""
    return one_line(sanitize(scrub(render(exc))))


def _resource_error(exc: BaseException) -> tuple[str, str] | None:
    """``(kind, path)`` when ``exc`` (or what it wraps: its causes, pyarrow's "[errno N]" text,
    ``datasets``' DatasetGenerationError) is a resource the system ran out of or refused: "disk" (a
    full disk or quota), "fsize" (``ulimit -f``), "perm" (EPERM: an immutable file or directory),
    "memory" (MemoryError, ArrowMemoryError, "failed to map segment": ``ulimit -v``); ``path`` is the
    file named, '' when unnamed. None for anything else."""
    codes = {errno.ENOSPC: "disk", errno.EDQUOT: "disk", errno.EFBIG: "fsize", errno.EPERM: "perm",
             errno.ENOMEM: "memory"}
    texts = (("[errno 28]", "disk"), ("no space left on device", "disk"), ("[errno 27]", "fsize"),
             ("file too large", "fsize"), ("failed to map segment", "memory"), ("[errno 12]", "memory"))
    if isinstance(exc, WhestError):  # our own errors already say what happened and what to do
        return None
    seen = 0
    while exc is not None and seen < 8:
        text = str(exc).lower()
        # a copy's error names the source first and the file written second (shutil's sendfile copy)
        path = str(getattr(exc, "filename2", None) or getattr(exc, "filename", None) or "")
        if isinstance(exc, MemoryError) or type(exc).__name__ == "ArrowMemoryError":
            return "memory", ""
        if isinstance(exc, OSError) and exc.errno in codes:
            return codes[exc.errno], path
        for needle, kind in texts:
            if needle in text:
                return kind, path
        exc, seen = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__), seen + 1
    return None


def run() -> None:
    """The process entry point (``whest``, ``whestbench``, ``python -m whestbench``): ``main``, then exit.

    A distributed rank that leaves on an error may still have a unit thread inside a kernel or a
    store call after its bounded wait (``work.distributed.epoch.join_all``). Letting the interpreter shut
    down under it aborts the process (exit -6, "terminate called without an active exception") and
    hides the exit code, so such a process flushes its output and leaves at once: its dataset, ledger
    and messages are already written."""
    try:
        code = main()
    except SystemExit as exc:  # the help, the version, a parser error: the code is all that is left
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    try:
        flush_stdout()
    except OSError as exc:  # a failed write to stdout (a full disk, a file too large): one line, exit 1
        err.print(f"error: writing to stdout failed: {exc.strerror or exc}", markup=False)
        code = code or 1
    dist = sys.modules.get("whestbench.work.distributed.store_executor")
    # A stopped command (a signal, Ctrl-C) has saved what it keeps and said so: it leaves at once,
    # without waiting for the interpreter to tear down (an import still running on a helper thread
    # can hold that up for a second). So does a rank with a thread still in a store call.
    if code in STOP_CODES or (dist is not None and dist.lingering_threads()):
        try:
            sys.stderr.flush()
        except OSError:
            pass
        os._exit(code)
    sys.exit(code)


def _print_traceback(exc: BaseException) -> None:
    """WHEST_DEBUG: the traceback, every chained exception included, with tokens and escape codes removed."""
    err.print(format_traceback(exc).rstrip("\n"), markup=False, highlight=False, emoji=False)


if __name__ == "__main__":  # pragma: no cover
    run()
