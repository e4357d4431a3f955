"""Who is alive: each rank's heartbeat, the silences rank 0 and the peers time, and rank 0's record
of the ranks for ``whest dataset status``."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from whestbench.work.distributed.store import THREAD_PREFIX, get_text
from whestbench.work.workdir import update_status, utc_text

HEARTBEAT_S = 0.5
STATUS_EVERY_S = 5.0  # how often rank 0 records the ranks' last heartbeats in the work directory


class Heartbeat(threading.Thread):
    """Refreshes ``hb/<rank>`` = "<epoch> <token> <tick> <unix time>" (epoch "-" until this process
    joins one; the time, from this rank's own clock, is what ``whest dataset status`` shows as its last
    heartbeat)."""

    def __init__(self, store, rank: int, token: str):
        super().__init__(daemon=True, name=f"{THREAD_PREFIX}heartbeat-{rank}")
        self.store, self.rank, self.token = store, rank, token
        self.epoch = "-"
        self.tick = 0
        self.halt = threading.Event()
        self._lock = threading.Lock()

    def beat(self) -> None:
        with self._lock:
            self.tick += 1
            self.store.set(f"hb/{self.rank}", f"{self.epoch} {self.token} {self.tick} {time.time():.3f}")

    def join_epoch(self, epoch: int) -> None:
        self.epoch = str(epoch)
        self.beat()  # at once: watchers learn the epoch without waiting a period

    def run(self) -> None:
        while not self.halt.wait(HEARTBEAT_S):
            try:
                self.beat()
            except Exception:
                return  # the store is gone; the watchers will notice the silence


class Watch:
    """How long each rank's heartbeat has stood still, timed on this process's monotonic clock."""

    def __init__(self, store):
        self.store = store
        self.seen: dict[int, tuple[str | None, float]] = {}
        self.known: set[int] = set()  # ranks whose heartbeat key exists (it is never deleted)

    def observe(self, rank: int, value: str | None) -> tuple[float, str | None]:
        """(seconds since the value last changed, the value). A first look counts as a change."""
        now = time.monotonic()
        if value is not None:
            self.known.add(rank)
        prev = self.seen.get(rank)
        if prev is None or prev[0] != value:
            self.seen[rank] = (value, now)
            return 0.0, value
        return now - prev[1], value

    def silent_many(self, ranks) -> dict[int, tuple[float, str | None]]:
        """``observe`` of many ranks' heartbeats, in one store call for those whose key exists (one
        check each for the others): rank 0 watches hundreds of owners every heartbeat period."""
        ranks = sorted(set(ranks))
        known = [r for r in ranks if r in self.known]
        values = dict(zip(known, self.store.multi_get([f"hb/{r}" for r in known]))) if known else {}
        return {r: self.observe(r, values[r].decode() if r in values else get_text(self.store, f"hb/{r}"))
                for r in ranks}


class RankBook:
    """Rank 0: the ranks seen in this run and when each one's heartbeat last changed, as rank 0 saw
    it (at most ``STATUS_EVERY_S`` late), recorded in the work directory's status.json (``ranks``)
    for ``whest dataset status``. The recording never stops the bake: status.json is a report."""

    def __init__(self, run):  # an ``epoch.Epoch`` on rank 0
        self.run = run
        # rank -> (wall time of its last heartbeat, its epoch, its host, its pid), from the heartbeat's
        # "<epoch> <host>:<pid>:<nonce> <tick>" (the process token ``StoreExecutor.run`` makes)
        self.heard: dict[int, tuple[float, str, str | None, int | None]] = {}
        self.looked = float("-inf")
        self.asked: set[int] = set()
        self.ended: dict[int, str] = {}  # rank -> how it left (``finish``)

    def look(self, ranks, now: float) -> bool:
        """Read the heartbeats of ``ranks`` (one store call) and record them, at most every
        ``STATUS_EVERY_S``, and at once when a rank joined since the last look (so a rank that
        joined is never recorded as never seen for long); whether it read."""
        if now - self.looked < STATUS_EVERY_S and set(ranks) <= self.asked:
            return False
        self.asked |= set(ranks)
        self.looked, wall = now, time.time()
        for rank, (silent, value) in self.run.ctx.watch.silent_many(ranks).items():
            if value is not None:
                epoch, host, pid, stamp = beat_fields(value)
                # the rank's own time of its last beat; from an older whestbench, when rank 0 saw it change
                self.heard[rank] = (stamp if stamp is not None else wall - silent, epoch, host, pid)
        self.record()
        return True

    def finish(self, outcome: str) -> None:
        """Rank 0 leaves (``outcome``: "done", "stopped" or "failed"): read every rank's heartbeat a
        last time and record how each left — rank 0 with the outcome, the others by whether they
        acknowledged the end — so status tells a rank that was killed from one that was alive to the
        end (after a kill, both showed the same last heartbeat: the last periodic look's)."""
        ctx = self.run.ctx
        try:
            self.looked, self.asked = float("-inf"), set()
            self.look(sorted(self.run.events.joined | set(self.heard) | {ctx.env.rank}), time.monotonic())
        except Exception:  # the store is gone: what was last heard stands
            pass
        for rank in self.heard:
            self.ended[rank] = (outcome if rank == ctx.env.rank else
                                "acknowledged" if rank in self.run.events.byes else "no-goodbye")
        self.record()

    def record(self) -> None:
        """Write what was last read (no store call: also on the way out of a failed bake), with the
        world size, so the status command can name the ranks never heard."""
        ledger = self.run.job.ledger
        if ledger is None or not self.heard:
            return
        ranks = {str(r): {"last_heartbeat_utc": utc_text(t), "epoch": e, "host": host, "pid": pid,
                          **({"ended": self.ended[r]} if r in self.ended else {})}
                 for r, (t, e, host, pid) in sorted(self.heard.items())}
        try:
            update_status(Path(ledger.root), {"ranks": ranks, "ranks_recorded_utc": utc_text(time.time()),
                                              "epoch": self.run.epoch, "world_size": self.run.ctx.env.world_size})
        except OSError:
            pass


def beat_fields(value: str) -> tuple[str, str | None, int | None, float | None]:
    """(epoch, host, pid, unix time of the beat) of a heartbeat's value; None for a part it does not hold."""
    parts = value.split()
    epoch = parts[0] if parts else "-"
    host = pid = stamp = None
    if len(parts) > 1 and parts[1].count(":") >= 2:
        host_text, pid_text, _ = parts[1].rsplit(":", 2)
        host = host_text or None
        pid = int(pid_text) if pid_text.isdigit() else None
    if len(parts) > 3:
        try:
            stamp = float(parts[3])
        except ValueError:
            stamp = None
        if stamp is not None and not 0 < stamp < float("inf"):
            stamp = None
    return epoch, host, pid, stamp


def ranks_text(ranks) -> str:
    """``[1, 2, 3, 7]`` -> "ranks 1-3, 7" (hundreds of ranks stay one short line)."""
    ranks, parts, i = sorted(ranks), [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(parts)
