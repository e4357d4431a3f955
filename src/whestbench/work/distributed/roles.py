"""The two roles in a distributed bake. Rank 0 publishes each epoch's plan, collects the results
and checkpoints the other ranks post, saves them in its ledger, watches the owners of the units in
flight, and ends the bake for every rank. Every other rank (a peer) joins rank 0's live epoch, works
through it, and follows rank 0 when it restarts or ends the bake."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

from whestbench.compute.stats import LayerSums
from whestbench.errors import BakeInterrupted, DamagedRecord, UsageError, WorkFailed
from whestbench.events import Event
from whestbench.text import error_line
from whestbench.work.distributed import store
from whestbench.work.distributed.epoch import PROGRESS_EVERY_S, Context, Epoch, join_all
from whestbench.work.distributed.store import (SAME_COMMAND, THREAD_PREFIX, Events, RankBook, announce, dist_errors,
                                               epoch_store, get_many, get_text, post_event, ranks_text, wait_until)
from whestbench.work.executor import Job, scan_ledger, stop_summary
from whestbench.work.launch_env import RERUN_HINT, DistEnv, resume_hint
from whestbench.work.ledger import identity_diff, read_unit_record
from whestbench.work.steps import checkpoint_samples
from whestbench.work.threads import one_blas_thread
from whestbench.work.units import Unit
from whestbench.work.workdir import output_for

OWN_UNITS_WAIT_S = 10.0  # rank 0 leaving on an error: how long its own units get to checkpoint
POLL_S = 0.05  # rank 0's poll cycle: one store call unless something arrived
LIVENESS_EVERY_S = store.HEARTBEAT_S  # rank 0 reads the heartbeats of the units' owners at most this often
SAVERS = 4  # rank 0's threads saving results to the ledger: one fsync each, ~8x the rate of one thread
BYE_WAIT_S = 30.0
MAX_DAMAGED_RESULTS = 2  # a unit's result that arrives damaged is recomputed on rank 0; this many times, then fail
PEER_POLL_S = 0.2  # the other ranks' look at rank 0's news, epoch and heartbeat: one store call
JOIN_POLL_S = 0.1  # a rank waiting for rank 0's plan
RANK0_SAYS = "Rank 0's output says what to do."


def saved_hint(env: DistEnv) -> str:
    """The advice after a distributed bake failed with its finished units saved."""
    return f"finished units are saved — {resume_hint(env)}."


def run_rank0(ctx: Context, beat, job: Job) -> None:
    """Rank 0: open a new epoch, publish its plan, collect it, and end it for every rank."""
    epoch = int(ctx.base_store.add("epoch", 1))
    ns = epoch_store(ctx.base_store, epoch)
    for key, value in (("news", "0"), ("events", ""), ("claim", "0")):  # read by multi_get: they must exist
        ns.set(key, value)
    beat.join_epoch(epoch)
    run = None
    try:
        spec = job.spec
        if not spec.seeds:
            raise UsageError("rank 0 needs the seed list (--mlp-seeds, --seed, or generated).",
                             fix="Pass --mlp-seeds or --seed, or let rank 0 generate them.")
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
        run = Epoch(ctx, ns, epoch, job, units, done, todo, handed_over)
        with one_blas_thread(ctx.arithmetic):
            run.start()
            try:
                Collector(run).collect()
            except BaseException:
                # leaving on an error (a dead peer, a rank started with other arguments), before the BLAS limit
                # goes: its own units checkpoint at their next step and get a little while, so the re-run keeps
                # their work; one still running after that saves nothing more (``one_blas_thread``)
                ctx.stop.set()
                join_all(list(run.threads), OWN_UNITS_WAIT_S)
                raise
        announce(ns, "done", "1")
        _await_byes(ctx, epoch, BYE_WAIT_S, run.events, "is done")
        run.book.finish("done")  # the Collector made it
        abort = get_text(ns, "abort")
        if abort is not None:  # a late rank with another command: refuse the whole bake, as it would
            raise UsageError(abort, fix=SAME_COMMAND)
        run.tracker.event("done")
    except BaseException as exc:
        if not isinstance(exc, BakeInterrupted):
            with contextlib.suppress(Exception):  # tell the other ranks why, so they stop at once instead of timing out
                announce(ns, "failed", f"{type(exc).__name__}: {error_line(exc, 40)}")
                ctx.base_store.set("current", str(epoch))
        with contextlib.suppress(Exception):
            interrupted = isinstance(exc, BakeInterrupted)
            _await_byes(ctx, epoch, BYE_WAIT_S if interrupted else BYE_WAIT_S / 3, run.events if run else None,
                        "stopped" if interrupted else "failed")
            if run is not None and run.book is not None:
                run.book.finish("stopped" if interrupted else "failed")
        raise


def _await_byes(ctx: Context, epoch: int, cap_s: float, events: Events | None, outcome: str) -> None:
    """Keep this process (and, under srun, the store it hosts) up until the other ranks have read
    the outcome, so they exit with it instead of with a lost connection.

    Bounded by ``cap_s`` and by ``--peer-timeout``, whichever is shorter; a rank silent for a few
    heartbeats is not waited for, and a wait longer than a second says what it waits for. Under
    torchrun the agent's store outlives rank 0, so a rank that has not connected yet will still find
    ``done``; under srun the store leaves with rank 0, so it waits for those too.
    """
    ns, watch = epoch_store(ctx.base_store, epoch), ctx.watch
    events = events or Events(ns)
    waiting = set(range(1, ctx.env.world_size))
    looked = float("-inf")

    def all_read() -> bool | None:
        nonlocal looked
        if not waiting:
            return True
        events.read()
        waiting.difference_update(events.byes)
        now = time.monotonic()
        if waiting and now - looked >= store.HEARTBEAT_S / 2:
            looked = now
            for rank, (silent, value) in watch.silent_many(waiting).items():
                if ctx.env.agent_store if value is None else silent > 3 * store.HEARTBEAT_S:
                    waiting.discard(rank)
        return None if waiting else True

    def says(left: float) -> str:
        unseen = sorted(r for r in waiting if r not in watch.known)
        why = f" ({ranks_text(unseen)} never connected)" if unseen else ""
        return f"rank 0: the bake {outcome}; waiting up to {left:.0f}s more for {ranks_text(waiting)} to read that{why} before rank 0 exits"

    wait_until(all_read, min(cap_s, ctx.peer_timeout_s), every_s=POLL_S, says=says, emit=ctx.emit, tell_after_s=1.0)


class Collector:
    """Rank 0's collection of one epoch: read the event log, save each posted result to the ledger as
    it arrives, keep the checkpoints the other ranks post, watch the owners' heartbeats, and fold the
    other ranks' progress into the tracker.

    One poll is one store call (``claim``, ``events`` and ``news`` in one ``multi_get``) unless
    something arrived; the owners' heartbeats are read together at most every ``LIVENESS_EVERY_S``
    and the progress keys together every ``PROGRESS_EVERY_S``, so the cycle stays short at
    thousands of ranks (see ``benchmarks/bench_dist_scale.py``).
    """

    def __init__(self, run: Epoch):
        self.run, self.ctx, self.ns, self.todo, self.tracker = run, run.ctx, run.ns, run.todo, run.tracker
        self.savers = ThreadPoolExecutor(SAVERS, thread_name_prefix=f"{THREAD_PREFIX}save")  # collected once saved
        self.saving: dict = {}  # future -> (unit index, samples per MLP, the rank that computed it)
        self.arrived: set[int] = set()  # units whose result is being saved
        self.pending = set(range(len(self.todo)))  # not collected yet
        self.inflight: set[int] = set()  # claimed and not yet collected
        self.seen_claims = self.news = 0
        self.owners: dict[int, tuple[int, str]] = {}  # unit -> (rank, process token) computing it
        self.unowned_since: dict[int, float] = {}  # claimed units whose owner is not known yet
        self.stopped: set[int] = set()  # units that stopped where they ran
        self.stop_announced = False
        self.read_progress = self.looked = float("-inf")
        self.damaged: dict[int, int] = {}  # unit -> results that arrived damaged
        self.book = run.book = RankBook(run)

    def collect(self) -> None:
        """Poll until every unit of the epoch is collected (raises on a failure or a stop)."""
        try:
            while self.pending:
                self._cycle()
        finally:
            self.book.record()  # the ranks as last heard: a stopped or failed bake's status names them
            self.savers.shutdown()

    def _cycle(self) -> None:
        ctx, ns = self.ctx, self.ns
        cycle_t0, keys = time.perf_counter(), 3
        if ctx.errors:
            raise ctx.errors[0]
        claim_raw, log, news_raw = ns.multi_get(["claim", "events", "news"])
        if int(news_raw) != self.news:
            self.news = int(news_raw)
            self._read_news()
        claimed = min(int(claim_raw), len(self.todo))
        self.inflight.update(range(self.seen_claims, claimed))
        self.seen_claims = max(self.seen_claims, claimed)
        posted = self._read_events(log)
        if posted:
            keys += len(posted)
            self._take_results(posted)
        collected = self._harvest(block=not self.inflight and bool(self.saving))
        now = time.monotonic()
        batch, read = self._read_ranks(now)  # one batched read per cycle at most: progress or heartbeats
        keys += read
        if collected or not self.pending:
            ctx.stats.record(time.perf_counter() - cycle_t0, keys, collected)
            return  # look again at once: more may have arrived
        if ctx.stop.is_set():
            self._stopping(now, batch)
        elif now - self.looked >= LIVENESS_EVERY_S and not batch:
            self.looked = now
            keys += len(self.inflight)
            for i, kind, why in self._lost_units(ctx.peer_timeout_s):
                if kind == "silent":
                    raise WorkFailed(f"{why};", fix=saved_hint(ctx.env))
                # its launcher restarted that rank (torchrun --max-restarts on one node of a static
                # rendezvous): the bake goes on, and this process computes the lost unit itself
                self.owners[i] = (ctx.env.rank, ctx.token)
                self.run.recompute(i)
        ctx.stats.record(time.perf_counter() - cycle_t0, keys, collected)
        time.sleep(POLL_S)

    def _read_news(self) -> None:
        abort = get_text(self.ns, "abort")
        if abort is not None:
            raise UsageError(abort, fix=SAME_COMMAND)
        peer_failed = get_text(self.ns, "peer_failed")
        if peer_failed is not None:
            raise WorkFailed(f"{peer_failed} — finished units are saved;", fix=f"{resume_hint(self.ctx.env)}.")

    def _read_events(self, log: bytes) -> dict[int, int]:
        """Act on the event log's checkpoints and stops; the results posted: {unit: the rank that posted it}."""
        posted: dict[int, int] = {}
        for token in self.run.events.read(log):
            if token[0] not in "rcs":
                continue
            i, rank = (int(v) for v in token[1:].split("@"))
            if token[0] == "r" and i in self.pending and i not in self.arrived:
                posted[i] = rank
            elif token[0] == "c":
                _keep_checkpoint(self.run, i, keep=i in self.inflight)
            elif token[0] == "s":
                self.stopped.add(i)
        return posted

    def _take_results(self, posted: dict[int, int]) -> None:
        """Check each posted result and hand it to a saver; a damaged one is computed here instead."""
        ctx, ns, run = self.ctx, self.ns, self.run
        for i, blob in zip(posted, get_many(ns, [f"result/{i}" for i in posted])):
            if blob is None:
                continue
            unit = self.todo[i]
            ns.delete_key(f"result/{i}")
            try:
                sums, wall = read_unit_record(blob, unit.key, run.digest, lambda s: run.spec.check_result(unit, s))
            except DamagedRecord as exc:
                e = exc.problem
                self.damaged[i] = self.damaged.get(i, 0) + 1
                if self.damaged[i] > MAX_DAMAGED_RESULTS:
                    raise WorkFailed(f"the result of unit {unit.key} arrived damaged {self.damaged[i]} times ({e}), the "
                                     f"last time computed by rank 0 itself: the computation, not the network, is at fault "
                                     f"(check this host's memory and disk);", fix=saved_hint(ctx.env))
                ctx.emit(Event("note", message=f"the result of unit {unit.key} arrived damaged ({e}); computing it here"))
                self.owners[i] = (ctx.env.rank, ctx.token)
                run.recompute(i)
                continue
            if i in run.handed_over:
                ns.delete_key(f"ckpt-in/{i}")
            self.inflight.discard(i)  # arrived: its owner may leave now
            self.arrived.add(i)
            self.saving[self.savers.submit(self._save, unit, sums, wall)] = (i, sums.count, posted[i])

    def _save(self, unit: Unit, sums: LayerSums, wall: float) -> None:
        ledger = self.run.job.ledger
        if ledger is not None:
            ledger.save(unit.key, sums, wall)
            ledger.drop_checkpoint(unit.key)

    def _harvest(self, block: bool = False) -> int:
        """Count the units whose save finished (a failed save raises here)."""
        if not self.saving:
            return 0
        done, _ = wait(list(self.saving), timeout=None if block else 0, return_when=FIRST_COMPLETED)
        for fut in done:
            i, count, rank = self.saving.pop(fut)
            self.arrived.discard(i)
            fut.result()
            self.pending.discard(i)
            self.tracker.unit_done(self.todo[i], count, owner=rank)
        return len(done)

    def _read_ranks(self, now: float) -> tuple[bool, int]:
        """The other ranks' progress (every ``PROGRESS_EVERY_S``) or, else, their heartbeats for the
        status (``RankBook``): (whether a batched read was made, the progress keys read)."""
        joined = self.run.events.joined
        if now - self.read_progress >= PROGRESS_EVERY_S and joined:
            self.read_progress = now
            ranks = sorted(joined)
            for rank, text in zip(ranks, self.ns.multi_get([f"prog/{r}" for r in ranks])):
                self.tracker.set_external(rank, *(int(v) for v in text.decode().split()))
            return True, len(ranks)
        return self.book.look(sorted(joined | {self.ctx.env.rank}), now), 0

    def _stopping(self, now: float, batch: bool) -> None:
        """A stop was asked for: no rank claims more; wait for the units in flight, but not for owners
        that look dead, then raise ``BakeInterrupted``."""
        ctx, run, inflight = self.ctx, self.run, self.inflight
        if not self.stop_announced:
            announce(self.ns, "stop", "1")  # no rank claims more; the units already claimed still arrive
            self.stop_announced = True
        inflight -= self.stopped  # stopped where they ran, their checkpoints posted (and kept) first
        if now - self.looked >= store.HEARTBEAT_S / 2 and not batch:
            self.looked = now
            for i, _, _ in self._lost_units(3 * store.HEARTBEAT_S):
                inflight.discard(i)
        if not run.alive():
            # this process's unit threads have ended: each of its units either posted its result
            # (collected on the next poll) or stopped at a checkpoint and posts nothing
            inflight -= {i for i in inflight
                         if self.owners.get(i, (None, None))[1] == ctx.token and not self.ns.check([f"result/{i}"])}
            if not inflight:
                while self.saving:
                    self._harvest(block=True)
                raise BakeInterrupted(f"{stop_summary(run.job, self.tracker)}; {RERUN_HINT}.")  # torchrun stops too

    def _lost_units(self, timeout: float) -> list[tuple[int, str, str]]:
        """Uncollected units whose owner died: [(index, kind, message)]. ``kind`` is "silent" (no
        heartbeat for ``timeout`` seconds) or "replaced" (its rank now runs as a new process).

        The owners of units not seen before are read together, and so are the heartbeats of every
        owner: a few store calls, however many ranks hold units."""
        ctx, inflight, owners = self.ctx, self.inflight, self.owners
        now, lost = time.monotonic(), []
        new = sorted(i for i in inflight if i not in owners)
        for i, text in zip(new, get_many(self.ns, [f"owner/{i}" for i in new]) if new else ()):
            if text is not None:
                rank, token = text.decode().split(" ", 1)
                owners[i] = (int(rank), token)
        others = {owners[i][0] for i in inflight if i in owners and owners[i][1] != ctx.token}
        looked = ctx.watch.silent_many(others) if others else {}
        for i in sorted(inflight):
            key = self.todo[i].key
            if i not in owners:
                # claimed, but the claimer never said who it is: it died between the two store calls
                if now - self.unowned_since.setdefault(i, now) > timeout:
                    lost.append((i, "silent", f"unit {key} was claimed but never started for over {timeout:.0f}s (a rank died)"))
                continue
            rank, token = owners[i]
            if token == ctx.token:
                continue  # this process: a failure surfaces through ctx.errors
            silent, value = looked[rank]
            if value is not None and value.split(" ")[1] != token:
                lost.append((i, "replaced", f"rank {rank} was restarted while holding unit {key}"))
            elif silent > timeout:
                lost.append((i, "silent", f"rank {rank} stopped responding for over {timeout:.0f}s while holding unit {key}"))
        return lost


def _keep_checkpoint(run: Epoch, i: int, keep: bool = True) -> None:
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
    except (DamagedRecord, KeyError, TypeError, ValueError) as exc:
        e = getattr(exc, "problem", None) or exc
        run.ctx.emit(Event("note", message=f"a checkpoint of unit {unit.key} arrived damaged ({e}); keeping the previous one"))
        return
    with run.tracker.lock:
        run.tracker.kept_elsewhere[unit.key] = kept



def _seed_at(seeds, i: int) -> str:
    return str(seeds[i]) if i < len(seeds) else "none"


def run_peer(ctx: Context, beat, job: Job) -> None:
    """A non-zero rank: join rank 0's live epoch, work through it, follow rank 0 if it restarts."""
    env = ctx.env
    while True:
        epoch, ns = _join(ctx)
        beat.join_epoch(epoch)
        plan = json.loads(ns.get("plan").decode())
        spec = job.spec.with_seeds(plan["seeds"])
        own = list(job.spec.seeds)  # this rank's --seed or --mlp-seeds list; empty when it takes rank 0's
        if spec.identity() != plan["identity"] or (own and own != list(plan["seeds"])):
            diff = identity_diff(plan["identity"], spec.identity(), "rank 0:", f"rank {env.rank}:")
            if own and own != list(plan["seeds"]):  # --seed/--mlp-seeds differ (docs/distributed.md: it stops the bake)
                at = next((i for i, (a, b) in enumerate(zip(own, plan["seeds"])) if a != b), min(len(own), len(plan["seeds"])))
                seed_diff = (f"seed (the seed list differs from MLP {at}: rank 0's {_seed_at(plan['seeds'], at)}, "
                             f"rank {env.rank}'s --seed or --mlp-seeds gives {_seed_at(own, at)})")
                diff = ", ".join(d for d in (seed_diff, diff) if d)
            msg = f"rank {env.rank} was started with different bake arguments than rank 0 — differs in {diff};"
            announce(ns, "abort", msg)  # rank 0 stops too: a bake with one odd rank is not what anyone meant
            post_event(ns, f"b{env.rank}")
            raise UsageError(msg, fix=SAME_COMMAND)
        if plan.get("output") and not ctx.told_output:
            ctx.told_output = True
            ctx.emit(Event("note", message=f"rank 0 writes the dataset to {plan['output']} (rank 0's --output)"))
        all_units = spec.units()
        by_key = {u.key: u for u in all_units}
        todo = [by_key[k] for k in plan["todo"]]
        here = dataclasses.replace(job, spec=spec, ledger=None)  # no ledger here: rank 0 keeps it
        todo_keys = set(plan["todo"])
        done = {u.key: spec.unit_samples(u) for u in all_units if u.key not in todo_keys}
        run = Epoch(ctx, ns, epoch, here, all_units, done, todo, plan.get("ckpt_in", ()))
        ns.set(f"prog/{env.rank}", "0 0 0")
        post_event(ns, f"j{env.rank}")  # rank 0 reads this rank's progress from now on
        with one_blas_thread(ctx.arithmetic):
            run.start()
            if _supervise_peer(ctx, run):
                return
        run.abandoned.set()  # rank 0 restarted: the old epoch's units in flight are lost


def _join(ctx: Context):
    """Wait for the current epoch, once rank 0 is seen alive in it (its heartbeat names the epoch
    and moves). Keys of an earlier rank 0 (a ``failed`` mark, a plan) stay until a new rank 0
    replaces them, so they count only while their rank 0 is alive, or when the bake is done.
    Bounded by ``--peer-timeout``.
    """
    env, base_store = ctx.env, ctx.base_store
    first: tuple[str, str] | None = None  # (epoch, heartbeat) at the first sight of rank 0 in it
    failed = None

    def live_plan():
        nonlocal first, failed
        if ctx.stop.is_set():
            raise BakeInterrupted(f"rank {env.rank}: stopped before joining rank 0's bake; nothing was computed here.")
        if not base_store.check(["current", "hb/0"]):
            return None
        current, hb = (v.decode() for v in base_store.multi_get(["current", "hb/0"]))
        ns = epoch_store(base_store, int(current))
        failed = get_text(ns, "failed")
        planned = ns.check(["plan"])
        if failed is None and planned and ns.check(["done"]):
            return int(current), ns  # a late start: rank 0 already has every result
        if hb.split(" ")[0] == current:
            if first is None or first[0] != current:
                first = (current, hb)
            elif hb != first[1]:  # rank 0 is alive in this epoch
                if failed is not None:
                    post_event(ns, f"b{env.rank}")
                    raise WorkFailed(f"rank 0 failed: {failed}", fix=RANK0_SAYS)
                if planned:
                    return int(current), ns
        return None

    joined = wait_until(live_plan, ctx.peer_timeout_s, every_s=JOIN_POLL_S, emit=ctx.emit,
                        says=lambda left: f"rank {env.rank}: waiting up to {left:.0f}s more (--peer-timeout) for "
                                          f"rank 0's plan at {env.master_addr}:{env.master_port}")
    if joined is not None:
        return joined
    if failed is not None:
        raise WorkFailed(f"rank 0 failed: {failed}", fix=RANK0_SAYS)
    raise WorkFailed(f"rank 0 published no live plan within {ctx.peer_timeout_s:.0f}s (--peer-timeout);",
                     where=f"rank {env.rank}", fix="is rank 0 running the same command?")


def _supervise_peer(ctx: Context, job: Epoch) -> bool:
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
        post_event(ns, f"b{env.rank}")

    while True:
        if ctx.errors:
            exc = ctx.errors[0]
            if not isinstance(exc, dist_errors()):
                # rank 0 fails at once with the reason instead of waiting out the peer timeout
                announce(ns, "peer_failed", f"rank {env.rank} failed: {type(exc).__name__}: {error_line(exc, 40)}")
                bye()
            raise exc
        current, hb, news = (v.decode() for v in ctx.base_store.multi_get(look))
        if int(news) != seen_news:
            seen_news = int(news)
            for name in ("failed", "abort", "stop", "done"):
                if name not in said:
                    value = get_text(ns, name)
                    if value is not None:
                        said[name] = value
        if "failed" in said:
            bye()
            raise WorkFailed(f"rank 0 failed: {said['failed']}", fix=RANK0_SAYS)
        if "abort" in said:
            bye()
            raise UsageError(said["abort"], fix=SAME_COMMAND)
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
            raise WorkFailed(f"rank 0 has not answered for over {ctx.peer_timeout_s:.0f}s; it probably died —",
                             where=f"rank {env.rank}", fix=f"{resume_hint(env)}.")
        time.sleep(PEER_POLL_S)
