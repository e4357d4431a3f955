"""Distributed bakes: ranks claim units from a shared counter and post results to rank 0.

Coordination uses only the rendezvous key-value store (torch.distributed's TCPStore), never a
collective; the protocol (epochs, plan, claims, collection, news, liveness, stopping, endings) is
docs/distributed.md's "Design". Keys, all under ``whest/<run>``: ``epoch`` (counter), ``current``,
``hb/<rank>``, and per epoch ``e<epoch>/``: ``plan``, ``claim``, ``owner/<i>``, ``result/<i>``,
``ckpt/<i>``, ``ckpt-in/<i>``, ``prog/<rank>`` (each rank's progress counts), ``events`` (``r<i>@<rank>`` results, ``c…`` checkpoints, ``s…``
stopped units, ``j…`` joins, ``b…`` goodbyes), ``news`` and the announcements it counts (``stop``,
``done``, ``failed``, ``abort``, ``peer_failed``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from datetime import timedelta
from typing import Any, Sequence

from whestbench.compute.stats import LayerSums
from whestbench.errors import BakeInterrupted, DamagedRecord, UsageError, WorkFailed
from whestbench.events import Event, EventSink, ignore
from whestbench.text import error_line
from whestbench.work.executor import Job, Tracker, checkpointed_samples, scan_ledger, stop_summary, unit_context
from whestbench.work.launch_env import RERUN_HINT, DistEnv, resume_hint
from whestbench.work.ledger import identity_diff, identity_digest, read_unit_record, unit_record
from whestbench.work.records import decode_record, encode_record
from whestbench.work.steps import UnitStopped, checkpoint_samples, run_unit
from whestbench.work.threads import one_blas_thread
from whestbench.work.units import Unit, WorkSpec
from whestbench.work.workdir import output_for, update_status, utc_text

HEARTBEAT_S = 0.5
OWN_UNITS_WAIT_S = 10.0  # rank 0 leaving on an error: how long its own units get to checkpoint
POLL_S = 0.05  # rank 0's poll cycle: one store call unless something arrived
PEER_POLL_S = 0.2  # the other ranks' look at rank 0's news, epoch and heartbeat: one store call
JOIN_POLL_S = 0.1  # a rank waiting for rank 0's plan
LIVENESS_EVERY_S = HEARTBEAT_S  # rank 0 reads the heartbeats of the units' owners at most this often
SAVERS = 4  # rank 0's threads saving results to the ledger: one fsync each, ~8x the rate of one thread
BYE_WAIT_S = 30.0
MAX_DAMAGED_RESULTS = 2  # a unit's result that arrives damaged is recomputed on rank 0; this many times, then fail
LEAVE_JOIN_S = 10.0  # how long a leaving rank waits for its own threads (see _join_all)
THREAD_PREFIX = "whest-dist-"
# --peer-timeout: at least a few heartbeats (shorter declares live ranks dead); at most what every
# wait and the store's own timeout (a C++ deadline in int64 nanoseconds: 1e10 s overflows) take.
PEER_TIMEOUT_MIN_S = 4 * HEARTBEAT_S
PEER_TIMEOUT_MAX_S = 1e6  # 11.6 days


def check_peer_timeout(seconds: float) -> str | None:
    """Why ``seconds`` cannot be the peer timeout, or None."""
    if not PEER_TIMEOUT_MIN_S <= seconds <= PEER_TIMEOUT_MAX_S:
        return (f"must be between {PEER_TIMEOUT_MIN_S:g} s (four heartbeats: a shorter one declares live ranks dead) "
                f"and {PEER_TIMEOUT_MAX_S:g} s (11.6 days: the coordination store's timeout cannot hold much more)")
    return None


def _dist_errors() -> tuple[type[BaseException], ...]:
    import torch.distributed as dist

    return (getattr(dist, "DistError", RuntimeError),)


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
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.bind((addr[0], 0) + tuple(addr[2:]))
            return True
        except OSError:
            continue
    return infos[0][4][0] if infos else host


def _wait_reachable(env: DistEnv, timeout_s: float, stop: threading.Event, emit: EventSink) -> None:
    """Poll rank 0's store port with plain sockets (silent at first, a stop request is honoured);
    a wait of more than a few seconds says what it waits for."""
    start = time.monotonic()
    deadline, told = start + timeout_s, False
    while True:
        try:
            socket.create_connection((env.master_addr, env.master_port), timeout=2.0).close()
            return
        except OSError:
            pass
        if stop.is_set():
            raise BakeInterrupted(f"rank {env.rank}: stopped before rank 0 answered; nothing was computed here.")
        now = time.monotonic()
        if now > deadline:
            if not _resolves(env.master_addr):
                raise WorkFailed(f"rank {env.rank}: MASTER_ADDR={env.master_addr!r} does not resolve to an address "
                                 f"(tried for {timeout_s:.0f}s); set MASTER_ADDR to rank 0's host name or IP address.")
            raise WorkFailed(
                f"rank {env.rank}: nothing answers at {env.master_addr}:{env.master_port} after {timeout_s:.0f}s; "
                "start rank 0 with the same command and MASTER_ADDR/MASTER_PORT, or check the address and firewall."
            )
        if not told and now - start >= 5.0:
            told = True
            emit(Event("note", message=f"rank {env.rank}: waiting up to {deadline - now:.0f}s more (--peer-timeout) for "
                                       f"rank 0's coordination store at {env.master_addr}:{env.master_port}"))
        time.sleep(0.2)


def connect_store(env: DistEnv, timeout_s: float, stop: threading.Event | None = None, emit: EventSink = ignore):
    """The run's TCPStore, namespaced to ``whest/<run_id>`` (hosted by rank 0 unless torchrun's agent does).

    Bounded by ``timeout_s``: torch's client waits without limit for a program that accepts the
    connection but is not a store, so the connection is made on a helper thread (named, so the CLI
    leaves without waiting for it when it never returns).
    """
    import torch.distributed as dist

    is_master = env.rank == 0 and not env.agent_store
    if not is_master:
        _wait_reachable(env, timeout_s, stop or threading.Event(), emit)
    elif not _resolves(env.master_addr):
        raise WorkFailed(f"rank 0 cannot host the coordination store: MASTER_ADDR={env.master_addr!r} does not resolve "
                         "to an address of this host; set MASTER_ADDR to rank 0's host name or IP address, the same on "
                         "every rank.")
    elif (local := _local_address(env.master_addr)) is not True:
        # torch would try to bind it and print five blocks of C++ frames about the port
        raise UsageError(f"MASTER_ADDR={env.master_addr} ({local}) is not an address of this host; rank 0 hosts "
                         f"the coordination store: run rank 0 on {env.master_addr}, or set MASTER_ADDR to this "
                         f"host ({socket.gethostname()}), the same on every rank.")
    box: list = []

    def make() -> None:
        try:
            box.append(dist.TCPStore(env.master_addr, env.master_port, world_size=None, is_master=is_master,
                                     timeout=timedelta(seconds=timeout_s), wait_for_workers=False))
        except BaseException as exc:  # noqa: BLE001 - raised below, on the caller's thread
            box.append(exc)

    helper = threading.Thread(target=make, name=f"{THREAD_PREFIX}connect", daemon=True)
    helper.start()
    start = time.monotonic()
    deadline, told = start + timeout_s + 0.5, False  # the store's own timeout, and its answer
    while helper.is_alive() and time.monotonic() < deadline:
        helper.join(0.2)
        if stop is not None and stop.is_set() and not box:
            raise BakeInterrupted(f"rank {env.rank}: stopped before rank 0's store answered; nothing was computed here.")
        if not told and not box and time.monotonic() - start >= 5.0:
            told = True
            emit(Event("note", message=f"rank {env.rank}: waiting up to {deadline - time.monotonic():.0f}s more "
                                       f"(--peer-timeout) for the coordination store at {env.master_addr}:"
                                       f"{env.master_port} to answer"))
    if not box:
        raise WorkFailed(
            f"rank {env.rank}: something listens at {env.master_addr}:{env.master_port} but did not answer as rank 0's "
            f"coordination store within {timeout_s:.0f}s (--peer-timeout); another program holds that port: set "
            "MASTER_ADDR/MASTER_PORT to rank 0's, the same on every rank."
        )
    if isinstance(box[0], _dist_errors()):
        exc = box[0]
        if is_master:
            raise WorkFailed(
                f"rank 0 could not host the coordination store on port {env.master_port} ({error_line(exc, 40)}); "
                "set MASTER_PORT to a free port, the same on every rank."
            ) from None
        raise WorkFailed(
            f"rank {env.rank} could not connect to rank 0 at {env.master_addr}:{env.master_port} ({error_line(exc, 40)})."
        ) from None
    if isinstance(box[0], BaseException):
        raise box[0]
    return dist.PrefixStore(f"whest/{env.run_id}", box[0])


class _Heartbeat(threading.Thread):
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


class _Watch:
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
        return {r: self.observe(r, values[r].decode() if r in values else _get_text(self.store, f"hb/{r}"))
                for r in ranks}


def _ns(store, epoch: int):
    import torch.distributed as dist

    return dist.PrefixStore(f"e{epoch}", store)


def _get_text(store, key: str) -> str | None:
    return store.get(key).decode() if store.check([key]) else None


def _result_blob(spec: WorkSpec, unit: Unit, sums: LayerSums, wall_s: float) -> bytes:
    """A unit's result as posted to rank 0: the ledger's checked record (identity + checksum)."""
    return unit_record(unit.key, identity_digest(spec.identity()), sums, wall_s)


def _read_result(spec: WorkSpec, unit: Unit, blob: bytes) -> tuple[LayerSums, float]:
    """A posted result, checked like a ledger file (DamagedRecord if it fails)."""
    return read_unit_record(blob, unit.key, identity_digest(spec.identity()), lambda sums: spec.check_result(unit, sums))


class _StoreCheckpoints:
    """A peer's checkpoints, kept in rank 0's ledger through the store (``steps.Checkpoints``).

    Saving posts the checked record to ``ckpt/<i>`` and tells rank 0 in the event log; rank 0
    checks it and writes it to its ledger (``_collect``). Loading reads ``ckpt-in/<i>``, which rank
    0 publishes for every unit of the epoch that has a checkpoint in its ledger (listed in the plan,
    so a unit without one costs no store call), so a unit resumes wherever it is claimed.
    """

    def __init__(self, run: "_Epoch"):
        self.ns, self.rank, self.handed_over = run.ns, run.ctx.env.rank, run.handed_over
        self.digest = identity_digest(run.spec.identity())
        self.index = {u.key: i for i, u in enumerate(run.todo)}

    def load_checkpoint(self, key: str):
        i = self.index[key]
        if i not in self.handed_over or not self.ns.check([f"ckpt-in/{i}"]):
            return None
        return decode_record(self.ns.get(f"ckpt-in/{i}"), kind="checkpoint", key=key, plan=self.digest)

    def save_checkpoint(self, key: str, state: dict, arrays: dict) -> None:
        i = self.index[key]
        self.ns.set(f"ckpt/{i}", encode_record("checkpoint", key, self.digest, state, arrays))
        _post_event(self.ns, f"c{i}@{self.rank}")

    def drop_checkpoint(self, key: str) -> None:
        pass  # a damaged hand-over: the unit restarts; rank 0 replaces its file with the next one

    def checkpoint_path(self, key: str) -> str:
        return f"of unit {key} (from rank 0)"


def _post_event(ns, token: str) -> None:
    """Tell rank 0 something in the epoch's event log (see ``_Events``)."""
    ns.append("events", token + " ")


def _announce(ns, key: str, value: str) -> None:
    """Set one of the endings or requests every rank watches (stop, done, failed, abort,
    peer_failed), then bump ``news``: the other ranks read ``news`` on every look and these keys
    only when it moved."""
    ns.set(key, value)
    ns.add("news", 1)


class _Events:
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


@dataclass
class PollStats:
    """What rank 0's collection loop measured, for ``benchmarks/bench_dist_scale.py``: each poll
    cycle's own time (without its sleep) with the store keys it read and the results it collected."""

    cycles: list = field(default_factory=list)  # [(seconds, keys read, results collected, wall clock at the end)]
    MAX_CYCLES = 200_000  # ~3 h of 50 ms cycles; later cycles are not recorded

    def record(self, seconds: float, keys: int, results: int) -> None:
        if len(self.cycles) < self.MAX_CYCLES:
            self.cycles.append((seconds, keys, results, time.time()))


class StoreExecutor:
    """One rank of a distributed bake (torchrun or srun): ranks claim units from a shared counter
    in the rendezvous store and post results to rank 0, which saves them in its ledger.

    On rank 0 the job's spec carries the seeds and the job has a ledger; on the other ranks the
    spec's seeds are empty (they arrive in rank 0's plan) and there is no ledger. ``step`` is the
    unit function (``work.steps.run_unit``; tests pass fakes).
    """

    def __init__(self, env: DistEnv, *, workers: int = 1, peer_timeout_s: float = 300.0, step=run_unit):
        why = check_peer_timeout(peer_timeout_s)
        if why:
            raise UsageError(f"the peer timeout {why}; got {peer_timeout_s!r}.")
        self.env, self.workers, self.peer_timeout_s, self.step = env, max(1, workers), peer_timeout_s, step
        self.stats = PollStats()

    def run(self, job: Job, *, on_event: EventSink = ignore, stop: threading.Event | None = None) -> bool:
        stop = stop or threading.Event()
        env = self.env
        base = connect_store(env, self.peer_timeout_s, stop, on_event)
        token = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        beat = _Heartbeat(base, env.rank, token)
        beat.beat()
        beat.start()
        ctx = _Context(env, base, token, self.step, self.workers, on_event, stop, self.peer_timeout_s, self.stats)
        try:
            if env.rank == 0:
                _run_rank0(ctx, beat, job)
                return True
            try:
                _run_peer(ctx, beat, job)
                return False
            except _dist_errors() as exc:
                raise WorkFailed(
                    f"rank {env.rank} lost its connection to rank 0 ({error_line(exc, 40)}); rank 0 probably died — "
                    f"{resume_hint(env)}."
                ) from None
        finally:
            beat.halt.set()
            ctx.quit.set()
            _join_all([beat, *ctx.threads], LEAVE_JOIN_S)


def _join_all(threads: Sequence[threading.Thread], timeout_s: float) -> None:
    """Wait, up to ``timeout_s`` in all, for this run's heartbeat and unit threads to end.

    A daemon thread still inside a torch store call (or a compute kernel) when the interpreter shuts
    down is ended mid-call by CPython (``pthread_exit``); the unwinding through torch's C++ aborts the
    process ("terminate called without an active exception", exit -6) instead of exiting with the
    code the user was meant to see. Heartbeats and claims end within a store round trip; a unit in
    progress may not, which is what ``lingering_threads`` is for.
    """
    deadline = time.monotonic() + timeout_s
    for t in threads:
        if t.ident is not None:  # started
            t.join(max(0.0, deadline - time.monotonic()))


def lingering_threads() -> list[threading.Thread]:
    """This process's distributed-bake threads still running (see ``cli.app.run``)."""
    return [t for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX) and t.is_alive()]


@dataclass
class _Context:
    env: DistEnv
    base_store: Any
    token: str
    step: Any
    workers: int
    emit: EventSink
    stop: threading.Event
    peer_timeout_s: float
    stats: PollStats = field(default_factory=PollStats)

    def __post_init__(self) -> None:
        self.quit = threading.Event()  # this process is leaving: workers claim nothing more
        self.arithmetic = threading.Event()  # set while BLAS is held at one thread (threads.one_blas_thread)
        self.threads: list[threading.Thread] = []  # every unit thread this run started (joined on leaving)
        self.watch = _Watch(self.base_store)  # one history of heartbeats, so silence is never re-timed
        self.errors: list[BaseException] = []
        self.lock = threading.Lock()
        self.told_output = False  # a peer says once where rank 0 writes


PROGRESS_EVERY_S = 1.0  # how often a rank posts (and rank 0 reads) running samples and checkpoints
STATUS_EVERY_S = 5.0  # how often rank 0 records the ranks' last heartbeats in the work directory


class _RankBook:
    """Rank 0: the ranks seen in this run and when each one's heartbeat last changed, as rank 0 saw
    it (at most ``STATUS_EVERY_S`` late), recorded in the work directory's status.json (``ranks``)
    for ``whest dataset status``. The recording never stops the bake: status.json is a report."""

    def __init__(self, run: "_Epoch"):
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
                epoch, host, pid, stamp = _beat_fields(value)
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


def _beat_fields(value: str) -> tuple[str, str | None, int | None, float | None]:
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


class _Epoch:
    """One epoch's work as this process sees it: the todo list and the threads working through it."""

    def __init__(self, ctx: _Context, ns, epoch: int, job: Job, units: list[Unit], done: dict[str, int],
                 todo: list[Unit], handed_over: Sequence[int] = ()):
        """``units``, ``done``: the bake's units and the finished ones (key -> samples per MLP), for the
        progress; ``handed_over``: the todo indices whose checkpoint rank 0 published as ``ckpt-in/<i>``."""
        self.ctx, self.ns, self.epoch, self.job, self.todo = ctx, ns, epoch, job, todo
        self.spec = job.spec
        # rank 0 counts every checkpoint its ledger holds from the first line, whichever rank resumes it
        self.tracker = Tracker(job.spec, units, done, ctx.emit, checkpointed=checkpointed_samples(job, todo) if job.ledger is not None else None)
        self.tracker.start(units_total=len(units), units_done=len(done))
        self.handed_over = set(handed_over)
        self.book: _RankBook | None = None  # rank 0's record of the ranks (``_collect``)
        self.abandoned = threading.Event()  # rank 0 moved to a newer epoch
        self.events = _Events(ns)  # read by rank 0 only
        # rank 0: its ledger (the job's); other ranks: rank 0's, through the store
        self.checkpoints = _StoreCheckpoints(self) if ctx.env.rank != 0 else None
        self.threads: list[threading.Thread] = []  # the workers (``start``) and recomputations
        self._posted = 0.0

    def start(self) -> None:
        for t in range(self.ctx.workers):
            self._spawn(f"unit-{t}", self._worker)

    def _spawn(self, name: str, work) -> None:
        """Run ``work`` on a new unit thread: a unit that stopped ends it, an error is kept for the
        supervising thread."""

        def run() -> None:
            try:
                work()
            except UnitStopped:
                pass
            except BaseException as exc:  # surfaced by the supervising thread
                with self.ctx.lock:
                    self.ctx.errors.append(exc)

        t = threading.Thread(target=run, name=f"{THREAD_PREFIX}{name}", daemon=True)
        self.threads.append(t)
        self.ctx.threads.append(t)
        t.start()

    def alive(self) -> bool:
        return any(t.is_alive() for t in self.threads)

    def post_progress(self, force: bool = False) -> None:
        """Other ranks: publish running samples and checkpoints for rank 0's progress lines."""
        now = time.monotonic()
        if self.ctx.env.rank == 0 or (not force and now - self._posted < PROGRESS_EVERY_S):
            return
        self._posted = now
        with self.tracker.lock:
            t = self.tracker
            # the samples its units took over from checkpoints are rank 0's to count (it counted them from its
            # first line): the running count posted is this rank's own work
            text = f"{t.running - t.taken_over} {t.checkpoints} {t.recovered - t.recovered_at_start}"
        try:
            self.ns.set(f"prog/{self.ctx.env.rank}", text)
        except Exception:
            pass  # the store is gone: the supervisor reports that

    def _worker(self) -> None:
        ctx, ns = self.ctx, self.ns
        while not (ctx.stop.is_set() or ctx.quit.is_set() or self.abandoned.is_set() or ctx.errors):
            if ns.check(["stop"]):
                ctx.stop.set()  # rank 0 asked every rank to stop
                return
            i = int(ns.add("claim", 1)) - 1
            if i >= len(self.todo):
                return
            self._compute(i)

    def _compute(self, i: int) -> None:
        ctx, ns, unit = self.ctx, self.ns, self.todo[i]
        ns.set(f"owner/{i}", f"{ctx.env.rank} {ctx.token}")
        uctx = unit_context(self.job, self.tracker, unit, ctx.stop, ctx.emit, self.checkpoints, ctx.arithmetic)
        on_samples = uctx.on_samples

        def samples(n: int) -> None:
            on_samples(n)
            self.post_progress()

        uctx.on_samples = samples
        t0 = time.perf_counter()
        try:
            sums = ctx.step(self.spec, self.job.compute, unit, uctx)
        except UnitStopped:
            self.tracker.unit_abandoned(unit, checkpointed=uctx.checkpoints is not None)
            _post_event(ns, f"s{i}@{ctx.env.rank}")  # after its checkpoint's event: rank 0 waits no longer
            raise
        except BaseException:
            self.tracker.unit_abandoned(unit)
            raise
        ns.set(f"result/{i}", _result_blob(self.spec, unit, sums, time.perf_counter() - t0))
        _post_event(ns, f"r{i}@{ctx.env.rank}")
        if ctx.env.rank != 0:  # rank 0 counts the unit when it collects it
            self.tracker.unit_abandoned(unit)
            self.post_progress(force=True)

    def recompute(self, i: int) -> None:
        """Compute unit ``i`` here, on an extra thread (its owner was lost)."""
        self._spawn(f"retry-{i}", lambda: self._compute(i))


def _run_rank0(ctx: _Context, beat, job: Job) -> None:
    epoch = int(ctx.base_store.add("epoch", 1))
    ns = _ns(ctx.base_store, epoch)
    for key, value in (("news", "0"), ("events", ""), ("claim", "0")):  # read by multi_get: they must exist
        ns.set(key, value)
    beat.join_epoch(epoch)
    run = None
    try:
        spec = job.spec
        if not spec.seeds:
            raise UsageError("rank 0 needs the seed list (--mlp-seeds, --seed, or generated).")
        units = spec.units()
        done = scan_ledger(job, units, ctx.emit)
        todo = [u for u in units if u.key not in done]
        handed_over = []
        for i, u in enumerate(todo):  # a unit resumes from its checkpoint whichever rank claims it
            record = job.ledger.checkpoint_record(u.key) if job.ledger is not None else None
            if record is not None:
                ns.set(f"ckpt-in/{i}", record)
                handed_over.append(i)
        # the dataset rank 0 writes (its ledger is ``<output>.whest-work``), told to the other ranks
        output = output_for(job.ledger.root) if job.ledger is not None else None
        ns.set("plan", json.dumps({"identity": spec.identity(), "seeds": list(spec.seeds), "todo": [u.key for u in todo],
                                   "ckpt_in": handed_over, "output": str(output) if output else None}))
        beat.beat()
        ctx.base_store.set("current", str(epoch))
        if ctx.env.attempt:
            ctx.emit(Event("note", message=f"restart {ctx.env.attempt} of this job (counted by the launcher)"))
        run = _Epoch(ctx, ns, epoch, job, units, done, todo, handed_over)
        with one_blas_thread(ctx.arithmetic):
            run.start()
            try:
                _collect(run)
            except BaseException:
                _checkpoint_own_units(ctx, run)  # before the BLAS limit goes
                raise
        _announce(ns, "done", "1")
        _await_byes(ctx, epoch, BYE_WAIT_S, run.events, "is done")
        if run.book is not None:
            run.book.finish("done")
        abort = _get_text(ns, "abort")
        if abort is not None:  # a late rank with another command: refuse the whole bake, as it would
            raise UsageError(abort)
        run.tracker.done()
    except BaseException as exc:
        if not isinstance(exc, BakeInterrupted):
            try:  # tell the other ranks why, so they stop at once instead of timing out
                _announce(ns, "failed", f"{type(exc).__name__}: {error_line(exc, 40)}")
                ctx.base_store.set("current", str(epoch))
            except Exception:
                pass
        try:
            interrupted = isinstance(exc, BakeInterrupted)
            _await_byes(ctx, epoch, BYE_WAIT_S if interrupted else BYE_WAIT_S / 3, run.events if run else None,
                        "stopped" if interrupted else "failed")
            if run is not None and run.book is not None:
                run.book.finish("stopped" if interrupted else "failed")
        except Exception:
            pass
        raise


def _checkpoint_own_units(ctx: _Context, run: _Epoch) -> None:
    """Rank 0 is leaving on an error (a dead peer, a rank started with other arguments): ask its own
    units to checkpoint at their next step and wait for them a little, so the re-run keeps their
    work. A unit still running after that saves nothing more (``one_blas_thread``)."""
    ctx.stop.set()
    _join_all(list(run.threads), OWN_UNITS_WAIT_S)


def _ranks_text(ranks) -> str:
    """``[1, 2, 3, 7]`` -> "ranks 1-3, 7" (hundreds of ranks stay one short line)."""
    ranks, parts, i = sorted(ranks), [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(parts)


def _await_byes(ctx: _Context, epoch: int, cap_s: float, events: _Events | None, outcome: str) -> None:
    """Keep this process (and, under srun, the store it hosts) up until the other ranks have read
    the outcome, so they exit with it instead of with a lost connection.

    Bounded by ``cap_s`` and by ``--peer-timeout``, whichever is shorter; a rank silent for a few
    heartbeats is not waited for, and a wait longer than a second says what it waits for. Under
    torchrun the agent's store outlives rank 0, so a rank that has not connected yet will still find
    ``done``; under srun the store leaves with rank 0, so it waits for those too.
    """
    ns, watch = _ns(ctx.base_store, epoch), ctx.watch
    events = events or _Events(ns)
    cap_s = min(cap_s, ctx.peer_timeout_s)
    start = time.monotonic()
    deadline, looked, told = start + cap_s, float("-inf"), False
    waiting = set(range(1, ctx.env.world_size))
    while waiting and time.monotonic() < deadline:
        events.read()
        waiting -= events.byes
        now = time.monotonic()
        if waiting and now - looked >= HEARTBEAT_S / 2:
            looked = now
            for rank, (silent, value) in watch.silent_many(waiting).items():
                gone = ctx.env.agent_store if value is None else silent > 3 * HEARTBEAT_S
                if gone:
                    waiting.discard(rank)
        if waiting and not told and now - start >= 1.0:
            told = True
            unseen = sorted(r for r in waiting if r not in watch.known)
            why = f" ({_ranks_text(unseen)} never connected)" if unseen else ""
            ctx.emit(Event("note", message=f"rank 0: the bake {outcome}; waiting up to {deadline - now:.0f}s more for "
                                           f"{_ranks_text(waiting)} to read that{why} before rank 0 exits"))
        time.sleep(POLL_S)


def _collect(run: _Epoch) -> None:
    """Rank 0: read the epoch's event log, save each posted result to the ledger as it arrives,
    keep the checkpoints the other ranks post, watch the owners' heartbeats, and fold the other
    ranks' progress into the tracker.

    One poll is one store call (``claim``, ``events`` and ``news`` in one ``multi_get``) unless
    something arrived; the owners' heartbeats are read together at most every ``LIVENESS_EVERY_S``
    and the progress keys together every ``PROGRESS_EVERY_S``, so the cycle stays short at
    thousands of ranks (see ``benchmarks/bench_dist_scale.py``).
    """
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    ctx, ns, todo, ledger, tracker = run.ctx, run.ns, run.todo, run.job.ledger, run.tracker
    savers = ThreadPoolExecutor(SAVERS, thread_name_prefix=f"{THREAD_PREFIX}save")  # a unit is collected once saved
    saving: dict = {}  # future -> (unit index, samples per MLP, the rank that computed it)
    arrived: set[int] = set()  # units whose result is being saved

    def save(unit: Unit, sums: LayerSums, wall: float) -> None:
        if ledger is not None:
            ledger.save(unit.key, sums, wall)
            ledger.drop_checkpoint(unit.key)

    def harvest(block: bool = False) -> int:
        """Count the units whose save finished (a failed save raises here)."""
        if not saving:
            return 0
        done, _ = wait(list(saving), timeout=None if block else 0, return_when=FIRST_COMPLETED)
        for fut in done:
            i, count, rank = saving.pop(fut)
            arrived.discard(i)
            fut.result()
            pending.discard(i)
            tracker.unit_done(todo[i], count, owner=rank)
        return len(done)

    pending = set(range(len(todo)))
    inflight: set[int] = set()  # claimed and not yet collected
    seen_claims, news = 0, 0
    owners: dict[int, tuple[int, str]] = {}
    unowned_since: dict[int, float] = {}
    stopped: set[int] = set()
    stop_announced = False
    read_progress = looked = float("-inf")
    damaged: dict[int, int] = {}  # unit -> results that arrived damaged
    book = run.book = _RankBook(run)
    try:
        while pending:
            cycle_t0, keys, collected = time.perf_counter(), 3, 0
            if ctx.errors:
                raise ctx.errors[0]
            claim_raw, log, news_raw = ns.multi_get(["claim", "events", "news"])
            if int(news_raw) != news:
                news = int(news_raw)
                abort = _get_text(ns, "abort")
                if abort is not None:
                    raise UsageError(abort)
                peer_failed = _get_text(ns, "peer_failed")
                if peer_failed is not None:
                    raise WorkFailed(f"{peer_failed} — finished units are saved; {resume_hint(ctx.env)}.")
            claimed = min(int(claim_raw), len(todo))
            inflight.update(range(seen_claims, claimed))
            seen_claims = max(seen_claims, claimed)
            posted: dict[int, int] = {}  # unit -> the rank that posted it
            for token in run.events.read(log):
                if token[0] not in "rcs":
                    continue
                i, rank = (int(v) for v in token[1:].split("@"))
                if token[0] == "r" and i in pending and i not in arrived:
                    posted[i] = rank
                elif token[0] == "c":
                    _keep_checkpoint(run, i, keep=i in inflight)
                elif token[0] == "s":
                    stopped.add(i)
            if posted:
                keys += len(posted)
                for i, blob in zip(posted, _get_many(ns, [f"result/{i}" for i in posted])):
                    if blob is None:
                        continue
                    unit = todo[i]
                    ns.delete_key(f"result/{i}")
                    try:
                        sums, wall = _read_result(run.spec, unit, blob)
                    except DamagedRecord as e:
                        damaged[i] = damaged.get(i, 0) + 1
                        if damaged[i] > MAX_DAMAGED_RESULTS:
                            raise WorkFailed(f"the result of unit {unit.key} arrived damaged {damaged[i]} times ({e}), the last "
                                             f"time computed by rank 0 itself: the computation, not the network, is at fault "
                                             f"(check this host's memory and disk); finished units are saved — {resume_hint(ctx.env)}.")
                        ctx.emit(Event("note", message=f"the result of unit {unit.key} arrived damaged ({e}); computing it here"))
                        owners[i] = (ctx.env.rank, ctx.token)
                        run.recompute(i)
                        continue
                    if i in run.handed_over:
                        ns.delete_key(f"ckpt-in/{i}")
                    inflight.discard(i)  # arrived: its owner may leave now
                    arrived.add(i)
                    saving[savers.submit(save, unit, sums, wall)] = (i, sums.count, posted[i])
            collected += harvest(block=not inflight and bool(saving))
            now = time.monotonic()
            batch = False  # one batched read per cycle at most: progress or heartbeats, not both
            if now - read_progress >= PROGRESS_EVERY_S and run.events.joined:
                read_progress, batch = now, True
                ranks = sorted(run.events.joined)
                keys += len(ranks)
                for rank, text in zip(ranks, ns.multi_get([f"prog/{r}" for r in ranks])):
                    tracker.set_external(rank, *(int(v) for v in text.decode().split()))
            elif book.look(sorted(run.events.joined | {ctx.env.rank}), now):
                batch = True
            if collected or not pending:
                ctx.stats.record(time.perf_counter() - cycle_t0, keys, collected)
                continue  # look again at once: more may have arrived
            if ctx.stop.is_set():
                if not stop_announced:
                    _announce(ns, "stop", "1")  # no rank claims more; the units already claimed still arrive
                    stop_announced = True
                # stopping anyway: wait for the units in flight, but not for owners that look dead
                inflight -= stopped  # stopped where they ran, their checkpoints posted (and kept) first
                if now - looked >= HEARTBEAT_S / 2 and not batch:
                    looked = now
                    for i, _, _ in _lost_units(run, inflight, owners, unowned_since, 3 * HEARTBEAT_S):
                        inflight.discard(i)
                if not run.alive():
                    # this process's unit threads have ended: each of its units either posted its result
                    # (collected on the next poll) or stopped at a checkpoint and posts nothing
                    inflight -= {i for i in inflight
                                 if owners.get(i, (None, None))[1] == ctx.token and not ns.check([f"result/{i}"])}
                if not run.alive() and not inflight:
                    while saving:
                        harvest(block=True)
                    raise BakeInterrupted(f"{stop_summary(run.job, tracker)}; {RERUN_HINT}.")  # a stop: torchrun stops too
            elif now - looked >= LIVENESS_EVERY_S and not batch:
                looked = now
                keys += len(inflight)
                for i, kind, why in _lost_units(run, inflight, owners, unowned_since, ctx.peer_timeout_s):
                    if kind == "silent":
                        raise WorkFailed(f"{why}; finished units are saved — {resume_hint(ctx.env)}.")
                    # its launcher restarted that rank (torchrun --max-restarts on one node of a static
                    # rendezvous): the bake goes on, and this process computes the lost unit itself
                    owners[i] = (ctx.env.rank, ctx.token)
                    run.recompute(i)
            ctx.stats.record(time.perf_counter() - cycle_t0, keys, collected)
            time.sleep(POLL_S)
    finally:
        book.record()  # the ranks as last heard: a stopped or failed bake's status names them
        savers.shutdown()


def _get_many(ns, names: list[str]) -> list[bytes | None]:
    """Values of ``names`` in one store call when all exist (the usual case), else one by one (None
    for a missing one): ``multi_get`` would block on a missing key until the store's timeout."""
    if ns.check(names):
        return list(ns.multi_get(names))
    return [ns.get(n) if ns.check([n]) else None for n in names]


def _keep_checkpoint(run: _Epoch, i: int, keep: bool = True) -> None:
    """Rank 0: save the checkpoint another rank posted for unit ``i`` in the ledger (``keep``: the
    unit is not collected yet; else the key is only removed)."""
    ns, unit, ledger = run.ns, run.todo[i], run.job.ledger
    name = f"ckpt/{i}"
    if not ns.check([name]):
        return
    blob = ns.get(name)
    ns.delete_key(name)
    if ledger is None or not keep:
        return
    try:
        meta = ledger.keep_checkpoint_record(unit.key, blob)
        kept = checkpoint_samples(run.spec, unit, meta)
    except (DamagedRecord, KeyError, TypeError, ValueError) as e:
        run.ctx.emit(Event("note", message=f"a checkpoint of unit {unit.key} arrived damaged ({e}); keeping the previous one"))
        return
    with run.tracker.lock:
        run.tracker.kept_elsewhere[unit.key] = kept


def _lost_units(job: _Epoch, inflight: set[int], owners: dict, unowned_since: dict, timeout: float):
    """Uncollected units whose owner died: [(index, kind, message)]. ``kind`` is "silent" (no
    heartbeat for ``timeout`` seconds) or "replaced" (its rank now runs as a new process).

    The owners of units not seen before are read together, and so are the heartbeats of every
    owner: a few store calls, however many ranks hold units."""
    ctx, ns = job.ctx, job.ns
    now, lost = time.monotonic(), []
    new = sorted(i for i in inflight if i not in owners)
    for i, text in zip(new, _get_many(ns, [f"owner/{i}" for i in new]) if new else ()):
        if text is not None:
            rank, token = text.decode().split(" ", 1)
            owners[i] = (int(rank), token)
    others = {owners[i][0] for i in inflight if i in owners and owners[i][1] != ctx.token}
    looked = ctx.watch.silent_many(others) if others else {}
    for i in sorted(inflight):
        key = job.todo[i].key
        if i not in owners:
            # claimed, but the claimer never said who it is: it died between the two store calls
            if now - unowned_since.setdefault(i, now) > timeout:
                why = f"unit {key} was claimed but never started for over {timeout:.0f}s (a rank died)"
                lost.append((i, "silent", why))
            continue
        rank, token = owners[i]
        if token == ctx.token:
            continue  # this process: a failure surfaces through ctx.errors
        silent, value = looked[rank]
        if value is not None and value.split(" ")[1] != token:
            lost.append((i, "replaced", f"rank {rank} was restarted while holding unit {key}"))
        elif silent > timeout:
            why = f"rank {rank} stopped responding for over {timeout:.0f}s while holding unit {key}"
            lost.append((i, "silent", why))
    return lost


def _seed_at(seeds, i: int) -> str:
    return str(seeds[i]) if i < len(seeds) else "none"


def _run_peer(ctx: _Context, beat, job: Job) -> None:
    """A non-zero rank: join rank 0's live epoch, work through it, follow rank 0 if it restarts."""
    env = ctx.env
    while True:
        epoch, ns = _join(ctx)
        beat.join_epoch(epoch)
        plan = json.loads(ns.get("plan").decode())
        spec = job.spec.with_seeds(plan["seeds"])
        own = list(job.spec.seeds)  # this rank's --seed or --mlp-seeds list; empty when it takes rank 0's
        if spec.identity() != plan["identity"] or (own and own != list(plan["seeds"])):
            mine, theirs = spec.identity(), plan["identity"]
            diff = identity_diff(theirs, mine, "rank 0:", f"rank {env.rank}:")
            if own and own != list(plan["seeds"]):  # --seed/--mlp-seeds differ (docs/distributed.md: it stops the bake)
                at = next((i for i, (a, b) in enumerate(zip(own, plan["seeds"])) if a != b), min(len(own), len(plan["seeds"])))
                seed_diff = (f"seed (the seed list differs from MLP {at}: rank 0's {_seed_at(plan['seeds'], at)}, "
                             f"rank {env.rank}'s --seed or --mlp-seeds gives {_seed_at(own, at)})")
                diff = ", ".join(d for d in (seed_diff, diff) if d)
            msg = (
                f"rank {env.rank} was started with different bake arguments than rank 0 — differs in {diff}; "
                "launch every rank with the same command."
            )
            _announce(ns, "abort", msg)  # rank 0 stops too: a bake with one odd rank is not what anyone meant
            _post_event(ns, f"b{env.rank}")
            raise UsageError(msg)
        if plan.get("output") and not ctx.told_output:
            ctx.told_output = True
            ctx.emit(Event("note", message=f"rank 0 writes the dataset to {plan['output']} (rank 0's --output)"))
        all_units = spec.units()
        by_key = {u.key: u for u in all_units}
        todo = [by_key[k] for k in plan["todo"]]
        here = dataclasses.replace(job, spec=spec, ledger=None)  # no ledger here: rank 0 keeps it
        todo_keys = set(plan["todo"])
        done = {u.key: spec.unit_samples(u) for u in all_units if u.key not in todo_keys}
        run = _Epoch(ctx, ns, epoch, here, all_units, done, todo, plan.get("ckpt_in", ()))
        ns.set(f"prog/{env.rank}", "0 0 0")
        _post_event(ns, f"j{env.rank}")  # rank 0 reads this rank's progress from now on
        with one_blas_thread(ctx.arithmetic):
            run.start()
            if _supervise_peer(ctx, run):
                return
        run.abandoned.set()  # rank 0 restarted: the old epoch's units in flight are lost


def _join(ctx: _Context):
    """Wait for the current epoch, once rank 0 is seen alive in it (its heartbeat names the epoch
    and moves). Keys of an earlier rank 0 (a ``failed`` mark, a plan) stay until a new rank 0
    replaces them, so they count only while their rank 0 is alive, or when the bake is done.
    Bounded by ``--peer-timeout``; a wait of more than a few seconds says what it waits for.
    """
    env, base_store, start = ctx.env, ctx.base_store, time.monotonic()
    deadline, told = start + ctx.peer_timeout_s, False
    first: tuple[str, str] | None = None  # (epoch, heartbeat) at the first sight of rank 0 in it
    failed = None
    while True:
        if ctx.stop.is_set():
            raise BakeInterrupted(f"rank {env.rank}: stopped before joining rank 0's bake; nothing was computed here.")
        if base_store.check(["current", "hb/0"]):
            current, hb = (v.decode() for v in base_store.multi_get(["current", "hb/0"]))
            ns = _ns(base_store, int(current))
            failed = _get_text(ns, "failed")
            planned = ns.check(["plan"])
            if failed is None and planned and ns.check(["done"]):
                return int(current), ns  # a late start: rank 0 already has every result
            if hb.split(" ")[0] == current:
                if first is None or first[0] != current:
                    first = (current, hb)
                elif hb != first[1]:  # rank 0 is alive in this epoch
                    if failed is not None:
                        _post_event(ns, f"b{env.rank}")
                        raise WorkFailed(f"rank 0 failed: {failed}")
                    if planned:
                        return int(current), ns
        now = time.monotonic()
        if now > deadline:
            if failed is not None:
                raise WorkFailed(f"rank 0 failed: {failed}")
            raise WorkFailed(
                f"rank {env.rank}: rank 0 published no live plan within {ctx.peer_timeout_s:.0f}s (--peer-timeout); "
                "is rank 0 running the same command?"
            )
        if not told and now - start >= 5.0:
            told = True
            ctx.emit(Event("note", message=f"rank {env.rank}: waiting up to {deadline - now:.0f}s more (--peer-timeout) "
                                           f"for rank 0's plan at {env.master_addr}:{env.master_port}"))
        time.sleep(JOIN_POLL_S)


def _supervise_peer(ctx: _Context, job: _Epoch) -> bool:
    """True when rank 0 has every result; False when rank 0 moved to a newer epoch. Raises otherwise.

    One store call a look (the epoch, rank 0's heartbeat and ``news``); the endings and the stop
    request are read only when ``news`` moved. Every ending that rank 0 decided (done, stop,
    failure) is acknowledged in the event log, so rank 0 can wait for it before it exits and takes
    the store (under srun) with it.
    """
    env, ns = ctx.env, job.ns
    look = ["current", "hb/0", f"e{job.epoch}/news"]
    seen_news, said = 0, {}

    def bye() -> None:
        _post_event(ns, f"b{env.rank}")

    while True:
        if ctx.errors:
            exc = ctx.errors[0]
            if not isinstance(exc, _dist_errors()):
                # rank 0 fails at once with the reason instead of waiting out the peer timeout
                _announce(ns, "peer_failed", f"rank {env.rank} failed: {type(exc).__name__}: {error_line(exc, 40)}")
                bye()
            raise exc
        current, hb, news = (v.decode() for v in ctx.base_store.multi_get(look))
        if int(news) != seen_news:
            seen_news = int(news)
            for name in ("failed", "abort", "stop", "done"):
                if name not in said:
                    value = _get_text(ns, name)
                    if value is not None:
                        said[name] = value
        if "failed" in said:
            bye()
            raise WorkFailed(f"rank 0 failed: {said['failed']}")
        if "abort" in said:
            bye()
            raise UsageError(said["abort"])
        if "stop" in said:
            ctx.stop.set()
        if not job.alive():
            if "done" in said:
                bye()
                return True
            if ctx.stop.is_set():
                bye()
                raise BakeInterrupted(
                    f"rank {env.rank} stopped after sending its finished units and checkpoints to rank 0; {RERUN_HINT}."
                )
        if int(current) != job.epoch:
            return False
        silent, _ = ctx.watch.observe(0, hb)
        if silent > ctx.peer_timeout_s:
            raise WorkFailed(
                f"rank {env.rank}: rank 0 has not answered for over {ctx.peer_timeout_s:.0f}s; "
                f"it probably died — {resume_hint(env)}."
            )
        time.sleep(PEER_POLL_S)
