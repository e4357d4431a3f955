"""One epoch as one process sees it: the run's context, the unit threads claiming units from the
shared counter, the results and checkpoints they post, and the wait for those threads on leaving."""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from whestbench.events import EventSink
from whestbench.work.distributed.store import THREAD_PREFIX, Events, RankBook, Watch, post_event
from whestbench.work.executor import Job, Tracker, checkpointed_samples, unit_context
from whestbench.work.launch_env import DistEnv
from whestbench.work.ledger import identity_digest, unit_record
from whestbench.work.records import decode_record, encode_record
from whestbench.work.steps import UnitStopped
from whestbench.work.units import Unit

PROGRESS_EVERY_S = 1.0  # how often a rank posts (and rank 0 reads) running samples and checkpoints


@dataclass
class PollStats:
    """What rank 0's collection loop measured, for ``benchmarks/bench_dist_scale.py``: each poll
    cycle's own time (without its sleep) with the store keys it read and the results it collected."""

    cycles: list = field(default_factory=list)  # [(seconds, keys read, results collected, wall clock at the end)]
    MAX_CYCLES = 200_000  # ~3 h of 50 ms cycles; later cycles are not recorded

    def record(self, seconds: float, keys: int, results: int) -> None:
        if len(self.cycles) < self.MAX_CYCLES:
            self.cycles.append((seconds, keys, results, time.time()))


@dataclass
class Context:
    """What one process's ranks' threads share for the whole run (across epochs)."""

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
        self.watch = Watch(self.base_store)  # one history of heartbeats, so silence is never re-timed
        self.errors: list[BaseException] = []
        self.lock = threading.Lock()
        self.told_output = False  # a peer says once where rank 0 writes


class Epoch:
    """One epoch's work as this process sees it: the todo list and the threads working through it."""

    def __init__(self, ctx: Context, ns, epoch: int, job: Job, units: list[Unit], done: dict[str, int],
                 todo: list[Unit], handed_over: Sequence[int] = ()):
        """``units``, ``done``: the bake's units and the finished ones (key -> samples per MLP), for the
        progress; ``handed_over``: the todo indices whose checkpoint rank 0 published as ``ckpt-in/<i>``."""
        self.ctx, self.ns, self.epoch, self.job, self.todo = ctx, ns, epoch, job, todo
        self.spec = job.spec
        self.digest = identity_digest(job.spec.identity())  # what its results and checkpoints are bound to
        # rank 0 counts every checkpoint its ledger holds from the first line, whichever rank resumes it
        self.tracker = Tracker(job.spec, units, done, ctx.emit, checkpointed=checkpointed_samples(job, todo) if job.ledger is not None else None)
        self.tracker.event("start", units_total=len(units), units_done=len(done))
        self.handed_over = set(handed_over)
        self.book: RankBook | None = None  # rank 0's record of the ranks (``roles.Collector``)
        self.abandoned = threading.Event()  # rank 0 moved to a newer epoch
        self.events = Events(ns)  # read by rank 0 only
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
        with contextlib.suppress(Exception):  # the store is gone: the supervisor reports that
            self.ns.set(f"prog/{self.ctx.env.rank}", text)

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
            post_event(ns, f"s{i}@{ctx.env.rank}")  # after its checkpoint's event: rank 0 waits no longer
            raise
        except BaseException:
            self.tracker.unit_abandoned(unit)
            raise
        ns.set(f"result/{i}", unit_record(unit.key, self.digest, sums, time.perf_counter() - t0))  # the ledger's format
        post_event(ns, f"r{i}@{ctx.env.rank}")
        if ctx.env.rank != 0:  # rank 0 counts the unit when it collects it
            self.tracker.unit_abandoned(unit)
            self.post_progress(force=True)

    def recompute(self, i: int) -> None:
        """Compute unit ``i`` here, on an extra thread (its owner was lost)."""
        self._spawn(f"retry-{i}", lambda: self._compute(i))


class _StoreCheckpoints:
    """A peer's checkpoints, kept in rank 0's ledger through the store (``steps.Checkpoints``).

    Saving posts the checked record to ``ckpt/<i>`` and tells rank 0 in the event log; rank 0
    checks it and writes it to its ledger (``roles.Collector``). Loading reads ``ckpt-in/<i>``, which rank
    0 publishes for every unit of the epoch that has a checkpoint in its ledger (listed in the plan,
    so a unit without one costs no store call), so a unit resumes wherever it is claimed.
    """

    def __init__(self, run: "Epoch"):
        self.ns, self.rank, self.handed_over, self.digest = run.ns, run.ctx.env.rank, run.handed_over, run.digest
        self.index = {u.key: i for i, u in enumerate(run.todo)}

    def load_checkpoint(self, key: str):
        i = self.index[key]
        if i not in self.handed_over or not self.ns.check([f"ckpt-in/{i}"]):
            return None
        return decode_record(self.ns.get(f"ckpt-in/{i}"), kind="checkpoint", key=key, plan=self.digest)

    def save_checkpoint(self, key: str, state: dict, arrays: dict) -> None:
        i = self.index[key]
        self.ns.set(f"ckpt/{i}", encode_record("checkpoint", key, self.digest, state, arrays))
        post_event(self.ns, f"c{i}@{self.rank}")

    def drop_checkpoint(self, key: str) -> None:
        pass  # a damaged hand-over: the unit restarts; rank 0 replaces its file with the next one

    def checkpoint_path(self, key: str) -> str:
        return f"of unit {key} (from rank 0)"


def join_all(threads: Sequence[threading.Thread], timeout_s: float) -> None:
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
