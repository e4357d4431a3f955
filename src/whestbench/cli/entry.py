"""The process entry point (``whest``, ``whestbench``, ``python -m whestbench``): signals first, then
the CLI. What a stop does, and why stops are kept: ``cli/signals.py``."""

from __future__ import annotations

import signal
import sys

from whestbench.cli.signals import STOPS, interrupted, is_stop, stop_now, swallowed_stops


def run() -> None:
    """The process entry point. From its first line a signal or Ctrl-C ends the command with one
    line and its exit code (why this module and ``cli.signals`` import so little: ``cli/signals.py``)."""
    try:
        sys.unraisablehook = swallowed_stops
        for sig in STOPS:
            signal.signal(sig, stop_now)
        from whestbench.cli.app import run as run_cli
    except BaseException as exc:
        if not is_stop(exc):
            raise
        interrupted(exc)
    run_cli()
