"""Rich progress display for bakes: MLPs done, samples/s, ETA, then one summary line."""

from __future__ import annotations

import time
from typing import Any

from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from whestbench.cli.common import err


def _rate(samples_per_s: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if samples_per_s >= scale:
            return f"{samples_per_s / scale:.2f} {unit}samples/s"
    return f"{samples_per_s:.0f} samples/s"


class BakeProgress:
    """Callable sink for bake events; use as a context manager around the bake."""

    def __init__(self, label: str, *, enabled: bool = True):
        self.label = label
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            TextColumn("{task.fields[units]}"),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=err,
            disable=not enabled,
            transient=False,
        )
        self.task = None
        self.t0 = time.perf_counter()
        self.samples_at_start = 0
        self.last: dict[str, Any] = {}
        self._last_refresh = 0.0

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        return self.progress.__exit__(*exc)

    def __call__(self, event: dict[str, Any]) -> None:
        phase = event.get("phase")
        if phase == "warning":
            err.print(f"warning: {event['message']}", markup=False)
            return
        if phase == "start":
            self.samples_at_start = event["samples_done"]
            self.t0 = time.perf_counter()
            if event.get("restart"):
                err.print(f"restart {event['restart']} of this job (counted by the launcher)", markup=False)
            if event.get("recovered_units"):
                err.print(
                    f"resuming: {event['recovered_units']} of {event['units_total']} units recovered "
                    "from the work directory",
                    markup=False,
                )
            self.task = self.progress.add_task(
                self.label,
                total=event["samples_total"],
                completed=event["samples_done"],
                units=f"{event['units_done']}/{event['units_total']} MLPs",
                rate="",
            )
        elif phase in ("sampling", "unit_done", "done") and self.task is not None:
            now = time.perf_counter()
            if phase == "sampling" and now - self._last_refresh < 0.1:
                return
            self._last_refresh = now
            dt = max(now - self.t0, 1e-9)
            rate = (event["samples_done"] - self.samples_at_start) / dt
            self.progress.update(
                self.task,
                completed=event["samples_done"],
                units=f"{event['units_done']}/{event['units_total']} MLPs",
                rate=_rate(rate),
            )
        self.last = event
