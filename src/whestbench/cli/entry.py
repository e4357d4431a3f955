"""The process entry point (``whest``, ``whestbench``, ``python -m whestbench``): signals first, then the CLI.

SIGTERM and SIGUSR1 (SLURM's pre-timeout signal) get a handler before anything heavy is imported,
so a signal that arrives during start-up ends the command with the documented exit code and advice
instead of the interpreter's default death; so does Ctrl-C. A verb that runs long replaces the
handler with its own (a bake checkpoints and stops).
"""

from __future__ import annotations

import signal
import sys

from whestbench.errors import SignalStop

RETRY = "re-run the same command to resume or start again"


def _stop(signum, _frame) -> None:
    raise SignalStop(signum)


def stopped(exc: BaseException, args: list[str]) -> tuple[str, int]:
    """``(message, exit code)`` for a signal or Ctrl-C that ended a command before it could handle it.

    A bake exits 75 (resumable: nothing is lost, re-run it); other verbs 128+signal (130 for
    Ctrl-C), and their outputs are atomic, so nothing is left half-written.
    """
    if isinstance(exc, SignalStop):
        name, code = exc.name, 128 + exc.signum
    else:
        name, code = "Ctrl-C", 130
    if "bake" in args[:3]:
        return (f"received {name} during start-up: nothing was computed yet; re-run the same command to resume.",
                75 if isinstance(exc, SignalStop) else 130)
    return f"error: interrupted ({name}); nothing was left half-written: {RETRY}.", code


def run() -> None:
    for sig in (signal.SIGTERM, getattr(signal, "SIGUSR1", None)):
        if sig is not None:
            signal.signal(sig, _stop)
    try:
        from whestbench.cli.app import run as run_cli
    except (SignalStop, KeyboardInterrupt) as exc:
        message, code = stopped(exc, sys.argv[1:])
        print(message, file=sys.stderr, flush=True)
        sys.exit(code)
    run_cli()
