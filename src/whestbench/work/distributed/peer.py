"""A rank other than 0: it joins rank 0's live epoch, works through it, and follows rank 0 when it
restarts or ends the bake."""

from __future__ import annotations

import dataclasses
import json
import time

from whestbench.errors import BakeInterrupted, UsageError, WorkFailed
from whestbench.events import Event
from whestbench.text import error_line
from whestbench.work.distributed.epoch import Context, Epoch
from whestbench.work.distributed.store import (SAME_COMMAND, announce, dist_errors, epoch_store, get_text, post_event,
                                        wait_until)
from whestbench.work.executor import Job
from whestbench.work.launch_env import RERUN_HINT, resume_hint
from whestbench.work.ledger import identity_diff
from whestbench.work.threads import one_blas_thread

PEER_POLL_S = 0.2  # the other ranks' look at rank 0's news, epoch and heartbeat: one store call
JOIN_POLL_S = 0.1  # a rank waiting for rank 0's plan
RANK0_SAYS = "Rank 0's output says what to do."


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
            mine, theirs = spec.identity(), plan["identity"]
            diff = identity_diff(theirs, mine, "rank 0:", f"rank {env.rank}:")
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
