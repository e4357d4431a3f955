"""How long operations show progress: a rich display on a terminal, plain log lines in a log file.

``Reporter`` is the ``on_event`` sink of every long verb (bake, merge, combine, push, pull). On a
terminal it draws a live bar. When stderr is not a terminal (a file, SLURM's output, ``nohup``) it
writes one plain line — no colour or cursor codes — every ``log_every`` seconds, from a timer, so a
10-hour bake's log shows where it stands even when nothing else happens::

    [06:01:02] bake: 3/8 MLPs, 1,200,000,000/4,000,000,000 samples (30.0%), 2.31 M samples/s,
               121.0 GFLOP/s, ETA 0:20:12, 5 checkpoints

Notes and warnings from the operation are one line each in both modes.

A stretch of work without counts (a bake's start-up, its timing probe, a verify check) is a
``stage`` event: until the next progress arrives, the live line (terminal) names it, and each log
line says it and how long it has run, so no stretch is silent for longer than ``log_every``::

    [06:00:31] bake: timing probe: timing this bake's own loop for the time estimate (running 31.0 s)
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from typing import TextIO

import click

from whestbench.cli.common import LOG_SECONDS, err, out
from whestbench.events import Event, Progress
from whestbench.text import format_bytes, format_clock, format_count, format_duration, format_rate, sanitize

DEFAULT_LOG_EVERY = 60.0
ETA_SETTLE_S = 20.0  # a bake's ETA moves from the timing probe's rate to its own over this long


def _rate(per_s: float, what: str) -> str:
    if what == "bytes":
        return f"{format_bytes(per_s)}/s"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if per_s >= scale:
            return f"{format_rate(per_s / scale)} {unit} {what}/s"
    return f"{per_s:.0f} {what}/s" if per_s >= 10 else f"{format_rate(per_s)} {what}/s"


class Reporter:
    """Callable event sink; use as a context manager around the operation.

    ``mode``: "auto" (a terminal gets the rich display, anything else log lines), "rich", "log" or
    "quiet" (notes and warnings only).
    """

    def __init__(self, label: str, *, mode: str = "auto", log_every: float = DEFAULT_LOG_EVERY,
                 stream: TextIO | None = None, clock=time.monotonic):
        self.label, self.log_every, self.clock = label, float(log_every), clock
        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "rich" if self.stream.isatty() else "log"
        self.mode = mode
        self.last: Progress | None = None
        self._t0 = clock()
        self.latest: dict[str, Progress] = {}  # the last progress of each kind of item ("samples", "rows", …)
        self._base: dict[str, int] = {}  # items of each kind already done when its phase started (not this run's)
        self._lock = threading.Lock()
        self._say_lock = threading.Lock()
        self._halt = threading.Event()
        self._timer: threading.Thread | None = None
        self._bar = None
        self._task = None
        self.started = threading.Event()
        self._printed: tuple | None = None  # what the last log line showed
        self.expected: dict[str, float] = {}  # kind of item -> rate the plan expects (the bake's timing probe)
        self.after: dict[str, float] = {}  # kind of item -> seconds of work after the last item (``expect``)
        self.stage: tuple[str, float] | None = None  # (what, since) of a stage no progress has followed yet
        self._stage_task = None

    def expect(self, what: str, per_s: float | None, *, then_s: float = 0.0) -> None:
        """The rate the plan expects for items of kind ``what`` (a bake's timing probe): the ETA starts
        from it and moves to the measured rate over ``ETA_SETTLE_S``, so the first lines' ETA is not
        the start-up's (kernel loading, control-variate fits and cold caches slow a bake's first
        second; a cumulative rate reads 30-70 % long there). ``then_s``: what the operation does once
        these items are done (a bake's writing), counted in the ETA, which is the time to the end."""
        if per_s is not None and per_s > 0:
            self.expected[what] = float(per_s)
        self.after[what] = max(0.0, float(then_s))

    # --- context

    def __enter__(self) -> "Reporter":
        if self.mode == "rich":
            from rich.progress import BarColumn, Progress as Bar, TaskProgressColumn, TextColumn, TimeElapsedColumn

            self._bar = Bar(TextColumn("[bold]{task.description}"), BarColumn(), TaskProgressColumn(),
                            TextColumn("{task.fields[status]}"), TimeElapsedColumn(), console=err, transient=False)
            self._bar.__enter__()
        elif self.mode == "log":
            self._timer = threading.Thread(target=self._tick, name="whest-log", daemon=True)
            self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._halt.is_set():  # closed already (a verb ends the display before its last line)
            return
        self._halt.set()
        if self._timer is not None:
            self._timer.join(timeout=1.0)
        if self._bar is not None:
            self._bar.__exit__(*exc)
        elif self.mode == "log" and self.last is not None and exc[0] is None and self._printed != self._key(self.last):
            self._line()  # the final count, unless the last line already showed it

    # --- events

    def __call__(self, event: Event) -> None:
        if event.kind in ("note", "warning"):
            self._say(f"{event.kind}: {sanitize(event.message)}")
        if event.kind == "stage":
            with self._lock:
                self.stage = (sanitize(event.message), self.clock())
            if self._bar is not None:
                self._draw_stage()
            return
        if event.progress is None:
            return
        with self._lock:
            self.stage = None  # counts follow: the progress line says where it stands
            other = self.last is not None and (event.progress.what, event.progress.phase) != (self.last.what,
                                                                                          self.last.phase)
            first = self.last is None or event.kind == "start" or other
            if (first and self.mode == "log" and other and self._printed != self._key(self.last)):
                self._line()  # the phase that ends gets its final count (all samples) before the next starts
            if not first and event.progress.done < self.last.done:
                # never step backwards: a peer's running count can drop for a moment when its unit
                # lands (its samples move from running to collected through the store, not at once)
                event = dataclasses.replace(event, progress=dataclasses.replace(
                    event.progress, done=min(self.last.done, event.progress.total)))
            if first:
                self._t0 = self.clock()
                self._base[event.progress.what] = event.progress.done
                self.started.set()
            self.last = self.latest[event.progress.what] = event.progress
        if self._bar is not None:
            self._draw(event.progress, first)
        elif self.mode == "log" and first:
            self._line()

    def _say(self, text: str) -> None:
        with self._say_lock:  # notes come from worker threads and the timer: one whole line at a time
            if self._bar is not None:
                self._bar.console.print(text, markup=False, highlight=False)
            else:
                self.stream.write(text + "\n")  # one write: print() writes the newline separately
                self.stream.flush()

    # --- rendering

    def computed(self, what: str = "samples") -> int:
        """Items of a kind this run did itself (see ``_own``)."""
        p = self.latest.get(what)
        return 0 if p is None else self._own(p)

    def _own(self, p: Progress) -> int:
        """What was done when the phase started, and samples a unit took over from a checkpoint
        (``recovered``), are not this run's work."""
        return max(p.done - max(self._base.get(p.what, 0), p.recovered), 0)

    def status(self, p: Progress) -> str:
        """The one-line summary of ``p``: counts, rate, FLOP rate, ETA, checkpoints."""
        elapsed = max(self.clock() - self._t0, 1e-9)
        rate = self._own(p) / elapsed
        parts = []
        if p.mlps_total is not None:
            parts.append(f"{format_count(p.mlps_done)}/{format_count(p.mlps_total)} MLPs")
        if p.what == "bytes":
            parts.append(f"{format_bytes(p.done)}/{format_bytes(p.total)} ({100 * p.fraction:.1f}%)")
        else:
            parts.append(f"{format_count(p.done)}/{format_count(p.total)} {p.what} ({100 * p.fraction:.1f}%)")
        parts.append(_rate(rate, p.what))
        if p.flops_per_item:
            parts.append(f"{format_rate(rate * p.flops_per_item / 1e9)} GFLOP/s")
        left = p.total - p.done
        expected = self.expected.get(p.what)
        if expected is not None:  # the measured rate's weight grows from 0 to 1 over the first ETA_SETTLE_S
            settled = min(1.0, elapsed / ETA_SETTLE_S)
            rate = settled * rate + (1 - settled) * expected
        then = self.after.get(p.what, 0.0)
        parts.append(f"ETA {format_clock(left / rate + then) if rate > 0 else '?'}" if left > 0 else "ETA 0:00:00")
        if p.what == "samples":
            parts.append(f"{p.checkpoints} checkpoint{'s' if p.checkpoints != 1 else ''}")
        return ", ".join(parts)

    @staticmethod
    def _key(p: Progress) -> tuple:
        return p.what, p.done, p.total, p.mlps_done, p.checkpoints, p.phase

    def _line(self) -> None:
        p = self.last
        if p is not None:
            self._printed = self._key(p)
            phase = f"{p.phase}: " if p.phase else ""
            self._say(f"[{time.strftime('%H:%M:%S')}] {self.label}: {phase}{self.status(p)}")

    def stage_text(self) -> str | None:
        """The stage under way and how long it has run (None when progress followed it)."""
        with self._lock:
            stage = self.stage
        if stage is None:
            return None
        return f"{stage[0]} (running {format_duration(max(0.0, self.clock() - stage[1]))})"

    def beat(self) -> None:
        """One log line of where the operation stands: the stage under way, else the last progress
        (nothing before either). The timer calls it every ``log_every`` seconds."""
        text = self.stage_text()
        if text is not None:
            self._say(f"[{time.strftime('%H:%M:%S')}] {self.label}: {text}")
            return
        with self._lock:
            ready = self.last is not None
        if ready:
            self._line()

    def _tick(self) -> None:
        while not self._halt.wait(self.log_every):
            self.beat()

    def _draw_stage(self) -> None:
        """The stage as the live display's line: its spinner and elapsed-time column keep it moving."""
        with self._lock:
            stage = self.stage
        if stage is None:
            return
        text = stage[0]
        if self._stage_task is None:
            self._stage_task = self._bar.add_task(text, total=None, status="")
        else:
            self._bar.update(self._stage_task, description=text)

    def _draw(self, p: Progress, first: bool) -> None:
        if self._stage_task is not None:
            self._bar.remove_task(self._stage_task)
            self._stage_task = None
        if first or self._task is None:
            if self._task is not None:
                self._bar.remove_task(self._task)
            self._task = self._bar.add_task(p.phase or (self.label if p.what == "samples" else p.what.capitalize()),
                                            total=p.total, completed=p.done, status="")
        self._bar.update(self._task, completed=p.done, status=self.status(p))


def log_every_option(f):
    """The ``--log-every SECONDS`` option every long verb takes."""
    return click.option("--log-every", type=LOG_SECONDS, default=DEFAULT_LOG_EVERY, show_default=True,
                        help="When stderr is not a terminal: seconds between progress lines.")(f)


class VerbEvents(Reporter):
    """A verb's event sink: progress and notes as ``Reporter`` shows them (on stderr: a bar on a
    terminal, log lines in a log file); the messages of the kinds in ``say`` (a verb's own lines,
    such as "Merging 4 partials → out") printed on stdout."""

    def __init__(self, label: str, say: set[str], **kw):
        super().__init__(label, **kw)
        self.say = say

    def __call__(self, event: Event) -> None:
        if event.kind in self.say and event.message:
            out.print(sanitize(event.message), markup=False, emoji=False)
        super().__call__(event)
