"""Every signal and Ctrl-C the CLI handles, in one place: the stops raised before a verb takes over
(``stop_now``, ``stopped``, ``interrupted``), the stops kept in case they are swallowed on their way
out (``pending``), and a bake's own handling once it runs (``StopSignals``).

The stop signals (``STOPS``) are SIGTERM, SIGUSR1 (SLURM's pre-timeout signal), SIGHUP (a closed
terminal or a dropped ssh session) and SIGQUIT (Ctrl-\\); they get a handler before anything heavy is imported
(``cli/entry.py``), so a signal that arrives during start-up ends the command with the documented
exit code and advice instead of the interpreter's default death; so does Ctrl-C. A bake replaces the
handler with its own (``StopSignals``); merge and combine-splits ignore stops once their output is in
place (``complete_once_in_place``).

A stop raised as an exception can be lost on its way out: raised while the main thread runs Python
code called back from C (numba loading its cached kernels calls back into Python), Python cannot
deliver it and prints "Exception ignored in ..." with a traceback; raised inside a library's bare
``except:``, it is dropped. So every stop raised before a bake's units start is also kept in
``pending`` (``swallowed_stops``, installed as ``sys.unraisablehook``, silences the traceback), and
``raise_pending`` raises it again at the next point where stopping is clean (a bake checks before
its units start). A stop that does get out ends the process, so a kept copy is never raised twice.

A handler imports nothing: it runs at any bytecode, possibly while a module is half-executed, and
an import there of that module fails ("cannot import name ... from partially initialized module",
a traceback instead of the stop). So everything a handler uses (``SignalStop``, the advice, the
stderr console) is imported before the handler is installed: this module imports only the standard
library modules the interpreter has loaded at start-up and ``whestbench.errors`` (which imports
nothing); ``StopSignals`` is given the console it writes to. A stop signal that arrives before
``cli/entry.py`` installs the handlers (the interpreter's own start-up and these few small imports)
meets the signal's default action: the process ends at once with 128 + the signal (143 for SIGTERM),
nothing written (docs/cli.md's "Signals")."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

from whestbench.errors import RESUME, RETRY, SignalStop

STOPS = tuple(s for s in (getattr(signal, n, None) for n in ("SIGTERM", "SIGUSR1", "SIGHUP", "SIGQUIT")) if s is not None)
"""The signals that stop a command like SIGTERM: a bake checkpoints and exits 75, other verbs 128+signal."""
STOP_CODES = (75, 130, *(128 + s for s in STOPS))
"""Every exit code a stop gives: a bake's resumable 75, Ctrl-C's 130, 128+signal for the others."""
pending: list[int] = []
"""Signals whose stop was raised before a bake's units started, kept in case it was swallowed on the
way out (see the module docstring)."""


def stop_now(signum: int, _frame=None) -> None:
    """Raise the stop for ``signum``, keeping it in ``pending`` too (see the module docstring); also the
    stop signals' handler from the process's start (``cli/entry.py``)."""
    pending.append(signum)
    raise SignalStop(signum)


def is_stop(exc: BaseException) -> bool:
    return isinstance(exc, KeyboardInterrupt) or type(exc).__name__ == "SignalStop"


def swallowed_stops(hook_args) -> None:
    """``sys.unraisablehook``: keep a stop (a signal's SignalStop, Ctrl-C's KeyboardInterrupt) that
    could not propagate in ``pending``, silently; anything else goes to Python's default hook."""
    exc = hook_args.exc_value
    if is_stop(exc) and not isinstance(exc, KeyboardInterrupt):
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
        raise SignalStop(signum)


def stopped(exc: BaseException, args: list[str]) -> tuple[str, int]:
    """``(message, exit code)`` for a signal or Ctrl-C that ended a command before it could handle it.

    A bake exits 75 (resumable: nothing is lost, re-run it); other verbs 128+signal (130 for
    Ctrl-C), and their outputs are atomic, so nothing is left half-written."""
    signalled = not isinstance(exc, KeyboardInterrupt)
    name, code = (exc.name, 128 + exc.signum) if signalled else ("Ctrl-C", 130)
    if "bake" in args[:3]:
        return (f"received {name} before the bake started: nothing was computed yet; {RESUME}.",
                75 if signalled else 130)
    return f"error: interrupted ({name}); nothing was left half-written: {RETRY}.", code


def interrupted(exc: BaseException) -> None:
    """End the process for a stop that arrived before the CLI took over: one line, its exit code."""
    try:
        message, code = stopped(exc, sys.argv[1:])
    except BaseException:  # noqa: BLE001 - a second stop while wording the first: still one line
        message, code = f"error: interrupted; nothing was left half-written: {RETRY}.", 130
    print(message, file=sys.stderr, flush=True)
    os._exit(code)


def is_cli_verb(verb: str) -> bool:
    """Whether this process is `whest dataset VERB` (not a library call or another verb)."""
    return len(sys.argv) > 2 and sys.argv[1:3] == ["dataset", verb]


class StopSignals:
    """Stop-signal (``STOPS``) handling for one bake: in set-up they end the command at once; once the
    executor has started they ask it to checkpoint and stop (``stop`` is the executor's event). Ctrl-C
    raises KeyboardInterrupt as Python's own handler does (the executor checkpoints and stops, exit
    130), after the same "received ..." line once units run."""

    def __init__(self, console) -> None:
        """``console``: the stderr console its lines go to (``cli.common.err``)."""
        self.stop = threading.Event()
        self.running = False
        self.writing = False
        self._previous: dict = {}
        self._previous_hook = None
        self._err = console

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            for sig in STOPS:
                self._previous[sig] = signal.signal(sig, self._handle)
            self._previous[signal.SIGINT] = signal.signal(signal.SIGINT, self._interrupt)
            self._previous_hook, sys.unraisablehook = sys.unraisablehook, swallowed_stops
            raise_pending()  # a stop that start-up could not deliver
        return self

    def __exit__(self, *exc) -> None:
        finished = exc[0] is None and is_cli_verb("bake")  # the dataset is written and this process only exits now
        for sig, handler in self._previous.items():
            # a stop arriving as the process exits changes nothing: ignore it rather than die by it (143)
            signal.signal(sig, signal.SIG_IGN if finished else handler)
        if self._previous_hook is not None:
            sys.unraisablehook = self._previous_hook
        pending.clear()  # a kept stop has been raised by now, or the bake ended without needing it

    def _handle(self, signum, _frame) -> None:
        name = signal.Signals(signum).name
        self.stop.set()
        if not self.running:  # set-up: end at once (``stopped`` words it, exit 75)
            stop_now(signum)
        # stamped like the progress lines, so a log shows when the stop came
        stamp = f"[{time.strftime('%H:%M:%S')}]"
        then = (" while writing the dataset: finishing the write (a few seconds), then exiting" if self.writing
                else ": checkpointing the units in flight, then stopping")
        self._err.print(f"{stamp} received {name}{then}", markup=False)

    def _interrupt(self, _signum, _frame) -> None:
        """Ctrl-C: while units run, say what happens (as a stop signal does) before the executor makes
        every running unit checkpoint and stop (exit 130); in set-up or while writing, as before."""
        if self.running and not self.writing:
            stamp = f"[{time.strftime('%H:%M:%S')}]"
            self._err.print(f"{stamp} received SIGINT (Ctrl-C): checkpointing the units in flight, then stopping",
                         markup=False)
        raise KeyboardInterrupt

    def on_event(self, event) -> None:
        if event.kind == "start":
            raise_pending()  # a stop that set-up could not deliver (it arrived inside a C callback)
            self.running = True
        elif event.kind == "writing":
            self.writing = True


@contextlib.contextmanager
def complete_once_in_place(verb: str, output: str):
    """Stop signals (``cli.signals.STOPS``, Ctrl-C) end the verb until its output is renamed into place;
    after that they are ignored and the verb exits 0, as a bake does: the output is complete, and
    ending with "interrupted ... re-run" would send the user to re-run a finished job.

    The output did not exist when the verb started (it is refused otherwise), so its existence is
    the sign that the final rename happened."""
    if threading.current_thread() is not threading.main_thread():  # signal handlers live on the main thread
        yield
        return

    def handle(signum, _frame) -> None:
        if os.path.isdir(output):
            name = signal.Signals(signum).name
            os.write(2, f"note: received {name} after {output} was complete: ignored\n".encode())
            return
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SignalStop(signum)

    previous = {s: signal.signal(s, handle) for s in (*STOPS, signal.SIGINT)}
    finished = False
    try:
        yield
        finished = True
    finally:
        # a CLI process that finished only exits now: a stop changes nothing, so ignore it (as bake does)
        ignore = finished and is_cli_verb(verb)
        for s, h in previous.items():
            signal.signal(s, signal.SIG_IGN if ignore else h)
