"""Executors: who runs a job's units, where, and how finished work is recorded and skipped.

A ``Job`` is a spec (what to compute), a ``Compute`` (how) and a ledger (where results go). An
``Executor`` (the protocol below; datatrove's ``executor/base.py`` separates pipeline steps from
executors the same way) runs every unit the ledger does not hold yet, saving each as it finishes,
and reports progress through ``whestbench.events``. Two executors declare it:

- ``LocalExecutor``: worker threads in this process, one unit each (``work.steps.run_unit``);
- ``StoreExecutor`` (``work/distributed/``): one rank of a torchrun/srun job, ranks coordinating
  through the rendezvous key-value store, rank 0 holding the ledger.

Parallelism is across units only, with every worker's BLAS at one thread, so results never depend
on the worker count (docs/distributed.md, "Units, not ranks"); the compute releases the GIL, so
threads use every core. A stop request (a stop signal, Ctrl-C) makes running units checkpoint and
stop, and starts no new one; the executor then raises ``BakeInterrupted`` with the resume advice.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import Counter
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from whestbench.errors import RESUME, BakeInterrupted, DamagedRecord
from whestbench.events import Event, EventSink, Progress, ignore
from whestbench.text import format_count, plural
from whestbench.work import CHECKPOINT_EVERY_S
from whestbench.work.ledger import Ledger
from whestbench.work.workdir import PHASES
from whestbench.work.steps import Compute, UnitContext, UnitStopped, checkpoint_samples, run_unit
from whestbench.work.threads import one_blas_thread
from whestbench.work.units import Unit, WorkSpec



@dataclass(frozen=True)
class Job:
    """What an executor runs: ``spec``'s units with ``compute``, results saved in ``ledger``."""

    spec: WorkSpec
    compute: Compute
    ledger: Ledger | None = None
    """None: results are computed and dropped (calibration); no resume, no checkpoints."""
    checkpoint_every: float = CHECKPOINT_EVERY_S
    """Seconds between checkpoints inside a unit (SPEC §5)."""


class Tracker:
    """Where a job stands, for progress events: samples (done, running, recovered), whole MLPs,
    checkpoints. Thread-safe; used by both executors."""

    def __init__(self, spec: WorkSpec, units: list[Unit], done: dict[str, int], emit: EventSink,
                 checkpointed: dict[str, int] | None = None):
        """``done``: unit key -> samples per MLP of the units already finished (a unit that reached
        its target standard error early covers fewer than planned). ``checkpointed``: unit key ->
        samples the unit's checkpoint holds, counted from the start (so the first progress line of a
        resumed bake does not read 0 %) and not again when the unit resumes from it."""
        self.spec, self.emit = spec, emit
        self.lock = threading.Lock()
        count = {u.key: done.get(u.key, spec.expected_samples(u)) for u in units}
        self.total = sum(count[u.key] * u.mlp_count for u in units)
        self.collected = sum(count[u.key] * u.mlp_count for u in units if u.key in done)
        self.recovered = self.collected
        self.recovered_at_start = self.collected  # so ``recovered - recovered_at_start``: checkpoint resumes
        self.running = 0  # samples inside units not yet saved (this process)
        self.external = {}  # rank -> (running samples, checkpoints, checkpoint-resumed samples) of other ranks
        self.checkpoints = 0
        self.kept = 0  # samples of stopped units that their checkpoints keep
        self.kept_elsewhere: dict[str, int] = {}  # unit key -> samples its latest checkpoint from another rank keeps
        self.units_left = Counter(i for u in units if u.key not in done for i in u.mlps)  # MLP -> its units to go
        self.mlps_total = spec.n_mlps
        self._reported: dict[str, int] = {}
        self._precounted = dict(checkpointed or {})
        self._taken: dict[str, int] = {}  # unit key -> samples it took over from a checkpoint not counted at the start
        self.counts_all_checkpoints = checkpointed is not None  # rank 0 / one process: counted at the start
        for key, n in self._precounted.items():
            self.running += n
            self.recovered += n
            self._reported[key] = n

    @property
    def taken_over(self) -> int:
        """Samples inside this process's running units that they took over from checkpoints it did
        not count at the start (another rank's: a distributed bake's rank 0 counted them)."""
        return sum(self._taken.values())

    @property
    def mlps_done(self) -> int:
        return self.mlps_total - len(self.units_left)

    def progress(self) -> Progress:
        ext_running = sum(r for r, _, _ in self.external.values())
        ext_ckpt = sum(c for _, c, _ in self.external.values())
        # the other ranks' units resume from the checkpoints this tracker counted at the start (rank 0's)
        ext_resumed = 0 if self.counts_all_checkpoints else sum(k for _, _, k in self.external.values())
        return Progress(
            "samples", min(self.total, self.collected + self.running + ext_running), self.total,
            mlps_done=self.mlps_done, mlps_total=self.mlps_total, checkpoints=self.checkpoints + ext_ckpt,
            flops_per_item=self.spec.flops_per_sample, recovered=self.recovered + ext_resumed,
        )

    def event(self, kind: str, **data) -> None:
        """Emit a ``kind`` event (start, progress, checkpoint, unit_done, done) carrying the progress."""
        with self.lock:
            p = self.progress()
        self.emit(Event(kind, progress=p, data=data))

    def samples(self, key: str, n: int) -> None:
        with self.lock:
            self.running += n
            self._reported[key] = self._reported.get(key, 0) + n
        self.event("progress")

    def resumed(self, key: str, n: int) -> None:
        """A unit continued from a checkpoint covering ``n`` samples (recovered work)."""
        with self.lock:
            n -= self._precounted.pop(key, 0)  # counted at the start already
            self.running += n
            self.recovered += n
            self._reported[key] = self._reported.get(key, 0) + n
            self._taken[key] = self._taken.get(key, 0) + n

    def checkpoint(self) -> None:
        with self.lock:
            self.checkpoints += 1
        self.event("checkpoint")

    def unit_done(self, unit: Unit, count: int | None = None, owner: int | None = None) -> None:
        """``unit`` is saved; ``count``: the samples per MLP it covered (fewer than planned when it
        reached its target standard error early: the total shrinks by the rest). ``owner``: the other
        rank that computed it, whose last report still counts it as running until its next one."""
        planned = self.spec.expected_samples(unit)
        count = planned if count is None else count
        with self.lock:
            self.running -= self._reported.pop(unit.key, 0)
            self._taken.pop(unit.key, None)
            if owner in self.external:  # not counted twice (collected and still "running" there)
                running, checkpoints, resumed = self.external[owner]
                self.external[owner] = (max(0, running - count * unit.mlp_count), checkpoints, resumed)
            self.kept_elsewhere.pop(unit.key, None)
            self.collected += count * unit.mlp_count
            self.total -= (planned - count) * unit.mlp_count
            self.units_left.subtract(unit.mlps)
            for i in unit.mlps:
                if self.units_left[i] <= 0:
                    del self.units_left[i]
        self.event("unit_done", unit=unit.key)

    def unit_abandoned(self, unit: Unit, *, checkpointed: bool = False) -> None:
        """A unit stopped before finishing: its samples count again when it is resumed (those a
        checkpoint kept are not computed again)."""
        with self.lock:
            n = self._reported.pop(unit.key, 0)
            self._taken.pop(unit.key, None)
            self.running -= n
            if checkpointed:
                self.kept += n

    def set_external(self, rank: int, running: int, checkpoints: int, resumed: int = 0) -> None:
        """What another rank reports: samples inside its running units, checkpoints it took, and the
        samples its units took over from checkpoints (not this run's work: excluded from rates)."""
        with self.lock:
            self.external[rank] = (running, checkpoints, resumed)


def scan_ledger(job: Job, units: list[Unit], emit: EventSink) -> dict[str, int]:
    """The units the ledger holds and that pass their checks (key -> samples per MLP); one note per
    damaged file."""
    if job.ledger is None:
        return {}
    if any(job.ledger.units_dir.glob("*.unit")):  # a resume: reading every saved unit takes a while at 10⁵ units
        emit(Event("stage", message=PHASES["resume"], data={"phase": "resume"}))
    by_key = {u.key: u for u in units}
    done, damaged = job.ledger.scan(by_key, lambda k, s: job.spec.check_result(by_key[k], s))
    for path, why in damaged:
        emit(Event("note", message=f"work file {path} failed its check ({why}); recomputing that unit"))
    if done:
        emit(Event("note", message=f"resuming: {len(done)} of {len(units)} units recovered from {job.ledger.root}"))
    return done


def checkpointed_samples(job: Job, units: list[Unit]) -> dict[str, int]:
    """Unit key -> samples its checkpoint holds, for the units with one that decodes (the unit
    checks it again when it resumes; one that fails there restarts and is counted as it runs)."""
    found: dict[str, int] = {}
    if job.ledger is None:
        return found
    for u in units:
        with contextlib.suppress(DamagedRecord, OSError, KeyError, TypeError, ValueError):
            saved = job.ledger.load_checkpoint(u.key)
            if saved is not None:
                found[u.key] = checkpoint_samples(job.spec, u, saved[0])
    return found


def unit_context(job: Job, tracker: Tracker, unit: Unit, stop: threading.Event, emit: EventSink,
                 checkpoints=None, arithmetic: threading.Event | None = None) -> UnitContext:
    """The unit's context; its checkpoints go to ``checkpoints`` (default: the job's ledger)."""
    return UnitContext(
        on_samples=lambda n: tracker.samples(unit.key, n),
        on_resumed=lambda n: tracker.resumed(unit.key, n),
        on_checkpoint=tracker.checkpoint,
        on_note=lambda text: emit(Event("note", message=text)),
        stop=stop,
        checkpoints=checkpoints if checkpoints is not None else job.ledger,
        checkpoint_every=job.checkpoint_every,
        arithmetic=arithmetic,
    )


def bake_workers(workers: int | None, n_units: int | None = None) -> int:
    """The worker threads a bake runs at once: ``workers`` (``--max-threads``), else one per core; never
    more than ``n_units`` when given (the pool starts a thread per unit at most)."""
    n = workers or os.cpu_count() or 1
    return n if n_units is None else max(1, min(n, n_units))


@runtime_checkable
class Executor(Protocol):
    """Runs a job's units: what a bake, a calibration or a recompute is handed, local or distributed."""

    def run(self, job: Job, *, on_event: EventSink = ignore, stop: threading.Event | None = None) -> bool:
        """Run every unit of ``job`` not yet in its ledger, saving each as it finishes. True where the
        caller writes the dataset (one process, or rank 0), False on the other ranks. A set ``stop``
        makes running units checkpoint and stop; then ``BakeInterrupted`` is raised."""
        ...


class LocalExecutor(Executor):
    """Runs a job's units on worker threads in this process (one unit per thread)."""

    def __init__(self, workers: int | None = None):
        self.workers = workers

    def run(self, job: Job, *, on_event: EventSink = ignore, stop: threading.Event | None = None) -> bool:
        """``Executor.run``: always True here."""
        stop = stop or threading.Event()
        units = job.spec.units()
        done = scan_ledger(job, units, on_event)
        todo = [u for u in units if u.key not in done]
        tracker = Tracker(job.spec, units, done, on_event, checkpointed=checkpointed_samples(job, todo))
        tracker.event("start", units_total=len(units), units_done=len(done))
        stopped: list[Unit] = []
        arithmetic = threading.Event()

        def work(unit: Unit) -> None:
            t0 = time.perf_counter()
            uctx = unit_context(job, tracker, unit, stop, on_event, arithmetic=arithmetic)
            try:
                if stop.is_set():
                    raise UnitStopped(unit.key)  # queued when the stop came: it never starts
                sums = run_unit(job.spec, job.compute, unit, uctx)
            except UnitStopped:
                tracker.unit_abandoned(unit, checkpointed=job.ledger is not None)  # a checkpoint it had still counts
                stopped.append(unit)
                return
            except BaseException:
                tracker.unit_abandoned(unit)
                stop.set()  # the other workers checkpoint and stop too
                raise
            if job.ledger is not None:
                job.ledger.save(unit.key, sums, time.perf_counter() - t0)
                job.ledger.drop_checkpoint(unit.key)
            tracker.unit_done(unit, sums.count)

        if todo:
            # Units always run on worker threads, also with one worker: the main thread stays free to
            # take signals (Ctrl-C, SIGTERM) while the workers checkpoint and stop cleanly.
            with one_blas_thread(arithmetic):
                self._pool(todo, bake_workers(self.workers, len(todo)), work, stop, job, tracker)
        if stopped:
            raise self._interrupted(job, tracker, 75)
        tracker.event("done")
        return True

    def _pool(self, todo, n_workers, work, stop, job, tracker) -> None:
        with ThreadPoolExecutor(max_workers=n_workers, thread_name_prefix="whest-unit") as pool:
            futures = [pool.submit(work, u) for u in todo]
            try:
                done = _wait_awake(futures)
            except KeyboardInterrupt:
                # Ctrl-C lands here: the running units checkpoint and stop, queued ones never start
                stop.set()
                wait(futures)
                raise self._interrupted(job, tracker, 130) from None
            for f in done:
                if f.exception() is not None:
                    stop.set()
                    wait(futures)
                    raise f.exception()

    @staticmethod
    def _interrupted(job: Job, tracker: Tracker, code: int) -> BakeInterrupted:
        return BakeInterrupted(f"{stop_summary(job, tracker)}; {RESUME}.", exit_code=code)


WAKE_S = 0.2


def _wait_awake(futures: list) -> set:
    """``wait(futures, return_when=FIRST_EXCEPTION)``, the main thread waking every ``WAKE_S``.

    Python runs a signal's handler on the main thread, when that thread next runs Python code; the
    kernel may hand a stop signal to a worker thread instead (it does to a process resumed from
    SIGSTOP: a SLURM job suspended, then signalled and resumed), and a main thread asleep in one
    endless wait would run the handler only after every unit had finished: the stop came too late
    and the bake ran to the end. Waking keeps a stop within ``WAKE_S`` of its arrival."""
    while True:
        done, running = wait(futures, timeout=WAKE_S, return_when=FIRST_EXCEPTION)
        if not running or any(f.exception() is not None for f in done):
            return done


def stop_summary(job: Job, tracker: Tracker) -> str:
    """What a stopped bake keeps, in one clause: whole MLPs, samples, checkpoints, where."""
    p = tracker.progress()
    saved = tracker.collected + tracker.kept + sum(tracker.kept_elsewhere.values())
    where = f" in {job.ledger.root}" if job.ledger is not None else ""
    return (f"stopped: {p.mlps_done} of {plural(p.mlps_total, 'MLP')} complete, {format_count(saved)} of "
            f"{format_count(p.total)} samples saved{where} ({plural(p.checkpoints, 'checkpoint')} written by this run)")
