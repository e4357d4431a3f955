"""The one event type every long operation reports through: bake, merge, combine, push and pull.

A library function never prints; it calls ``on_event(Event(...))``. The CLI turns events into a
rich display on a terminal, or into plain log lines when stderr is a file (``cli/progress.py``).

    Event("start", progress=Progress("samples", done=0, total=10**9, mlps_total=4))
    Event("progress", progress=Progress("samples", done=..., total=..., mlps_done=1, mlps_total=4))
    Event("note", message="resuming: 3 of 8 units recovered from ./gt.whest-work")
    Event("stage", message="timing probe: timing this bake's own loop", data={"phase": "probe"})
    Event("commit", message="commit 1/2 ...", data={"oid": "...", "files": 3})

``kind`` names what happened; ``progress`` (when present) is where the operation stands, in one
unit of work (samples for a bake, bytes for a copy or an upload); ``message`` is a line meant for a
person; ``data`` carries the details a particular front end wants (ids, counts), never secrets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping

Kind = Literal[
    "plan",  # a bake is planned (data["plan"]: the BakePlan; a target bake's counts are known)
    "start",  # the operation begins; progress has the totals
    "progress",  # more work done
    "checkpoint",  # a unit saved its partial state (progress.checkpoints counts them)
    "unit_done",  # a unit of work finished and was saved
    "stage",  # a stretch of work without counts begins (start-up, a timing probe, a check); message: what it is
    "note",  # something a person should read (resuming, a recomputed unit, a plan)
    "warning",  # something that may make the result less than the user expects
    "writing",  # the result is being written
    "done",  # the operation finished; progress has the final counts
    # hub
    "planned",
    "compared",
    "commit",
    "tagged",
    "preflight",
    "downloaded",
    "verified",
]


@dataclass(frozen=True)
class Progress:
    """Where an operation stands, counted in one unit of work (``what``).

    ``flops_per_item``: floating-point operations per item (a bake: ``2·width²·depth`` per sample),
    so a display can show an effective FLOP rate; 0 for work that is not arithmetic (bytes).
    ``mlps_done``/``mlps_total``: whole MLPs finished (all of an MLP's samples), when the
    operation is about MLPs; a bake of one MLP in many units shows 0/1 until the last unit lands.
    """

    what: str
    done: int
    total: int
    mlps_done: int | None = None
    mlps_total: int | None = None
    checkpoints: int = 0
    flops_per_item: float = 0.0
    recovered: int = 0
    """Items already done when this run started (resumed work): excluded from rates."""
    phase: str = ""
    """What the operation is doing now, for a person (``verifying ./public``); "" for its main work."""

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0


@dataclass(frozen=True)
class Event:
    kind: Kind
    message: str = ""
    progress: Progress | None = None
    data: Mapping[str, Any] = field(default_factory=dict)


EventSink = Callable[[Event], None]


def ignore(_event: Event) -> None:
    """The sink used when the caller gives none."""
