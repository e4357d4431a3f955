"""The coordination store: connecting to it, its keys, the waits on it, and who is alive on it.

Every rank connects to rank 0's TCPStore (or torchrun's agent's) through ``connect_store``, bounded
by ``--peer-timeout``; ``wait_until`` is the one bounded wait every rank uses (for the store, for
rank 0's plan, for the other ranks' goodbyes), saying once what it waits for when it takes a while.
Liveness: each rank's ``Heartbeat``, the silences rank 0 and the peers time (``Watch``), and rank 0's
record of the ranks for ``whest dataset status`` (``RankBook``).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Callable, TypeVar

from whestbench.errors import BakeInterrupted, UsageError, WorkFailed
from whestbench.events import Event, EventSink, ignore
from whestbench.optional import require
from whestbench.text import error_line
from whestbench.work.launch_env import DistEnv
from whestbench.work.workdir import update_status, utc_text

THREAD_PREFIX = "whest-dist-"
HEARTBEAT_S = 0.5
STATUS_EVERY_S = 5.0  # how often rank 0 records the ranks' last heartbeats in the work directory
T = TypeVar("T")


def _torch_dist():
    return require("torch.distributed", needed_for="a distributed bake")


def dist_errors() -> tuple[type[BaseException], ...]:
    return (getattr(_torch_dist(), "DistError", RuntimeError),)


def wait_until(ready: Callable[[], T | None], timeout_s: float, *, every_s: float, says: Callable[[float], str],
               emit: EventSink, tell_after_s: float = 5.0, stop: threading.Event | None = None,
               stopped: str = "", pause: Callable[[float], object] = time.sleep) -> T | None:
    """Call ``ready`` every ``every_s`` (``pause`` between calls) until it returns something other than
    None, which is returned; None once ``timeout_s`` has passed. A wait longer than ``tell_after_s``
    emits, once, the note ``says(seconds left)``; ``stop`` set while not ready raises
    ``BakeInterrupted(stopped)``."""
    start = time.monotonic()
    deadline, told = start + timeout_s, False
    while True:
        got = ready()
        if got is not None:
            return got
        if stop is not None and stop.is_set():
            raise BakeInterrupted(stopped)
        now = time.monotonic()
        if now > deadline:
            return None
        if not told and now - start >= tell_after_s:
            told = True
            emit(Event("note", message=says(deadline - now)))
        pause(every_s)


def _resolves(host: str) -> bool:
    try:
        socket.getaddrinfo(host, None)
        return True
    except (OSError, UnicodeError):
        return False


def _local_address(host: str) -> "bool | str":
    """True when one of ``host``'s addresses can be bound on this machine (rank 0 must host the store
    there); else the first address it resolves to, for the message."""
    infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    for family, kind, proto, _, addr in infos:
        with contextlib.suppress(OSError), socket.socket(family, kind, proto) as probe:
            probe.bind((addr[0], 0) + tuple(addr[2:]))
            return True
    return infos[0][4][0] if infos else host


def _wait_reachable(env: DistEnv, timeout_s: float, stop: threading.Event, emit: EventSink) -> None:
    """Poll rank 0's store port with plain sockets (silent at first, a stop request is honoured)."""
    where = f"{env.master_addr}:{env.master_port}"

    def answers() -> bool | None:
        try:
            socket.create_connection((env.master_addr, env.master_port), timeout=2.0).close()
            return True
        except OSError:
            return None

    if wait_until(answers, timeout_s, every_s=0.2, emit=emit, stop=stop,
                  stopped=f"rank {env.rank}: stopped before rank 0 answered; nothing was computed here.",
                  says=lambda left: f"rank {env.rank}: waiting up to {left:.0f}s more (--peer-timeout) for "
                                    f"rank 0's coordination store at {where}"):
        return
    if not _resolves(env.master_addr):
        raise WorkFailed(f"MASTER_ADDR={env.master_addr!r} does not resolve to an address (tried for {timeout_s:.0f}s);",
                         where=f"rank {env.rank}", fix="set MASTER_ADDR to rank 0's host name or IP address.")
    raise WorkFailed(f"nothing answers at {where} after {timeout_s:.0f}s;", where=f"rank {env.rank}",
                     fix="start rank 0 with the same command and MASTER_ADDR/MASTER_PORT, or check the address and firewall.")


SAME_ADDRESS = "the same on every rank."
SAME_COMMAND = "launch every rank with the same command."


def connect_store(env: DistEnv, timeout_s: float, stop: threading.Event | None = None, emit: EventSink = ignore):
    """The run's TCPStore, namespaced to ``whest/<run_id>`` (hosted by rank 0 unless torchrun's agent does).

    Bounded by ``timeout_s``: torch's client waits without limit for a program that accepts the
    connection but is not a store, so the connection is made on a helper thread (named, so the CLI
    leaves without waiting for it when it never returns).
    """
    dist = _torch_dist()
    is_master = env.rank == 0 and not env.agent_store
    where = f"{env.master_addr}:{env.master_port}"
    if not is_master:
        _wait_reachable(env, timeout_s, stop or threading.Event(), emit)
    elif not _resolves(env.master_addr):
        raise WorkFailed(f"rank 0 cannot host the coordination store: MASTER_ADDR={env.master_addr!r} does not resolve "
                         "to an address of this host;", fix=f"set MASTER_ADDR to rank 0's host name or IP address, {SAME_ADDRESS}")
    elif (local := _local_address(env.master_addr)) is not True:
        # torch would try to bind it and print five blocks of C++ frames about the port
        raise UsageError(f"MASTER_ADDR={env.master_addr} ({local}) is not an address of this host; rank 0 hosts "
                         f"the coordination store:", fix=f"run rank 0 on {env.master_addr}, or set MASTER_ADDR to this "
                         f"host ({socket.gethostname()}), {SAME_ADDRESS}")
    box: list = []

    def make() -> None:
        try:
            box.append(dist.TCPStore(env.master_addr, env.master_port, world_size=None, is_master=is_master,
                                     timeout=timedelta(seconds=timeout_s), wait_for_workers=False))
        except BaseException as exc:  # noqa: BLE001 - raised below, on the caller's thread
            box.append(exc)

    helper = threading.Thread(target=make, name=f"{THREAD_PREFIX}connect", daemon=True)
    helper.start()
    wait_until(lambda: True if box else None, timeout_s + 0.5, every_s=0.2, pause=helper.join, emit=emit, stop=stop,
               stopped=f"rank {env.rank}: stopped before rank 0's store answered; nothing was computed here.",
               says=lambda left: f"rank {env.rank}: waiting up to {left:.0f}s more (--peer-timeout) for the "
                                 f"coordination store at {where} to answer")  # the store's own timeout, and its answer
    if not box:
        raise WorkFailed(f"something listens at {where} but did not answer as rank 0's coordination store within "
                         f"{timeout_s:.0f}s (--peer-timeout); another program holds that port:", where=f"rank {env.rank}",
                         fix=f"set MASTER_ADDR/MASTER_PORT to rank 0's, {SAME_ADDRESS}")
    if isinstance(box[0], dist_errors()):
        exc = box[0]
        if is_master:
            raise WorkFailed(f"rank 0 could not host the coordination store on port {env.master_port} "
                             f"({error_line(exc, 40)});", fix=f"set MASTER_PORT to a free port, {SAME_ADDRESS}") from None
        raise WorkFailed(f"rank {env.rank} could not connect to rank 0 at {where} ({error_line(exc, 40)}).",
                         fix="Start rank 0 with the same command and MASTER_ADDR/MASTER_PORT.") from None
    if isinstance(box[0], BaseException):
        raise box[0]
    return dist.PrefixStore(f"whest/{env.run_id}", box[0])


def epoch_store(store, epoch: int):
    """The keys of epoch ``epoch`` (``e<epoch>/...``)."""
    return _torch_dist().PrefixStore(f"e{epoch}", store)


def get_text(store, key: str) -> str | None:
    return store.get(key).decode() if store.check([key]) else None


def get_many(ns, names: list[str]) -> list[bytes | None]:
    """Values of ``names`` in one store call when all exist (the usual case), else one by one (None
    for a missing one): ``multi_get`` would block on a missing key until the store's timeout."""
    if ns.check(names):
        return list(ns.multi_get(names))
    return [ns.get(n) if ns.check([n]) else None for n in names]


def post_event(ns, token: str) -> None:
    """Tell rank 0 something in the epoch's event log (see ``Events``)."""
    ns.append("events", token + " ")


def announce(ns, key: str, value: str) -> None:
    """Set one of the endings or requests every rank watches (stop, done, failed, abort,
    peer_failed), then bump ``news``: the other ranks read ``news`` on every look and these keys
    only when it moved."""
    ns.set(key, value)
    ns.add("news", 1)


class Events:
    """Rank 0's reading of the epoch's event log ``events``.

    The other ranks append a short token for each thing rank 0 must act on: ``r<i>@<rank>`` (the
    result of unit i is posted), ``c<i>@<rank>`` (a checkpoint of it is posted), ``s<i>@<rank>`` (it
    stopped), ``j<rank>`` (joined: its progress key exists), ``b<rank>`` (it acknowledged the end).
    So rank 0 reads one key per poll however many units are in flight, rather than checking each
    unit's keys. What was read is cut from the log with ``compare_set``; if a rank appended
    meanwhile the cut fails and the next read skips the part already read (the log only grows
    between cuts, and only rank 0 cuts).
    """

    def __init__(self, ns):
        self.ns = ns
        self.offset = 0
        self.byes: set[int] = set()
        self.joined: set[int] = set()

    def read(self, raw: bytes | None = None) -> list[str]:
        raw = self.ns.get("events") if raw is None else raw
        new = raw[self.offset:]
        if not new:
            return []
        self.offset = 0 if self.ns.compare_set("events", raw, b"") == b"" else len(raw)
        tokens = new.decode().split()
        for t in tokens:
            if t[0] == "b":
                self.byes.add(int(t[1:]))
            elif t[0] == "j":
                self.joined.add(int(t[1:]))
        return tokens


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
        with contextlib.suppress(Exception):  # the store is gone: what was last heard stands
            self.looked, self.asked = float("-inf"), set()
            self.look(sorted(self.run.events.joined | set(self.heard) | {ctx.env.rank}), time.monotonic())
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
        with contextlib.suppress(OSError):
            update_status(Path(ledger.root), {"ranks": ranks, "ranks_recorded_utc": utc_text(time.time()),
                                              "epoch": self.run.epoch, "world_size": self.run.ctx.env.world_size})


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
