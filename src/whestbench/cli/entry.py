"""The process entry point (``whest``, ``whestbench``, ``python -m whestbench``): signals first, then the CLI.

SIGTERM and SIGUSR1 (SLURM's pre-timeout signal) get a handler before anything heavy is imported,
so a signal that arrives during start-up ends the command with the documented exit code and advice
instead of the interpreter's default death; so does Ctrl-C. A verb that runs long replaces the
handler with its own (a bake checkpoints and stops).

A stop raised as an exception can be lost on its way out: raised while the main thread runs Python
code called back from C (numba loading its cached kernels calls back into Python), Python cannot
deliver it and prints "Exception ignored in ..." with a traceback; raised inside a library's bare
``except:``, it is dropped. So every stop raised before a bake's units start is also kept in
``pending`` (``swallowed_stops``, installed as ``sys.unraisablehook``, silences the traceback), and
``raise_pending`` raises it again at the next point where stopping is clean (a bake checks before
its units start). A stop that does get out ends the process, so a kept copy is never raised twice.
"""

from __future__ import annotations

import os
import signal
import sys

RESUME = "re-run the same command to resume"
RETRY = "re-run the same command to resume or start again"
pending: list[int] = []
"""Signals whose stop was raised before a bake's units started, kept in case it was swallowed on the
way out (see the module docstring)."""


def stop_now(signum: int) -> None:
    """Raise the stop for ``signum``, keeping it in ``pending`` too (see the module docstring)."""
    from whestbench.errors import SignalStop

    pending.append(signum)
    raise SignalStop(signum)


def _stop(signum, _frame) -> None:
    stop_now(signum)


def _is_stop(exc: BaseException) -> bool:
    return isinstance(exc, KeyboardInterrupt) or type(exc).__name__ == "SignalStop"


def swallowed_stops(hook_args) -> None:
    """``sys.unraisablehook``: keep a stop (a signal's SignalStop, Ctrl-C's KeyboardInterrupt) that
    could not propagate in ``pending``, silently; anything else goes to Python's default hook."""
    exc = hook_args.exc_value
    if _is_stop(exc) and not isinstance(exc, KeyboardInterrupt):
        if exc.signum not in pending:  # ``stop_now`` kept it already
            pending.append(exc.signum)
    elif isinstance(exc, KeyboardInterrupt):
        pending.append(signal.SIGINT)
    elif sys.is_finalizing() and not os.environ.get("WHEST_DEBUG"):
        # A finaliser failing while the interpreter shuts down (llvmlite's, when a stop interrupted
        # numba loading its kernels): the command has already said how it ended; this is noise.
        return
    else:
        sys.__unraisablehook__(hook_args)


def raise_pending() -> None:
    """Raise the first kept stop that was swallowed on its way out, if any."""
    if pending:
        signum = pending.pop(0)
        pending.clear()
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        from whestbench.errors import SignalStop

        raise SignalStop(signum)


def stopped(exc: BaseException, args: list[str]) -> tuple[str, int]:
    """``(message, exit code)`` for a signal or Ctrl-C that ended a command before it could handle it.

    A bake exits 75 (resumable: nothing is lost, re-run it); other verbs 128+signal (130 for
    Ctrl-C), and their outputs are atomic, so nothing is left half-written.
    """
    signalled = not isinstance(exc, KeyboardInterrupt)
    if signalled:
        name, code = exc.name, 128 + exc.signum
    else:
        name, code = "Ctrl-C", 130
    if "bake" in args[:3]:
        return (f"received {name} before the bake started: nothing was computed yet; {RESUME}.",
                75 if signalled else 130)
    return f"error: interrupted ({name}); nothing was left half-written: {RETRY}.", code


def run() -> None:
    """The process entry point. From its first line a signal or Ctrl-C ends the command with one
    line and its exit code (this module imports nothing but ``os``, ``signal`` and ``sys``, which
    the interpreter has loaded already, so the window before this line is as short as it can be)."""
    try:
        sys.unraisablehook = swallowed_stops
        for sig in (signal.SIGTERM, getattr(signal, "SIGUSR1", None)):
            if sig is not None:
                signal.signal(sig, _stop)
        from whestbench.cli.app import run as run_cli
    except BaseException as exc:
        if not _is_stop(exc):
            raise
        interrupted(exc)
    run_cli()


def interrupted(exc: BaseException) -> None:
    """End the process for a stop that arrived before the CLI took over: one line, its exit code."""
    try:
        message, code = stopped(exc, sys.argv[1:])
    except BaseException:  # noqa: BLE001 - a second stop while wording the first: still one line
        message, code = f"error: interrupted; nothing was left half-written: {RETRY}.", 130
    print(message, file=sys.stderr, flush=True)
    os._exit(code)
