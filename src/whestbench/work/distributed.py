"""Distributed bakes: ranks claim units from a shared counter and post results to rank 0.

Coordination uses only the rendezvous key-value store (torch.distributed's TCPStore), never a
collective: a bake runs for hours, and a rank parked in a blocking collective would hit NCCL's
watchdog or gloo's timeout. The protocol, all keys under ``whest/<run>/<attempt>/``:

- rank 0 resolves the seeds (file, ``--seed`` or random), loads its resume ledger and publishes
  ``plan`` (identity digest, seed list, the keys of units still to do); the other ranks wait for
  it, check that their own command has the same identity, and take the seeds from it (so only
  rank 0 needs the seeds file, and no rank needs a shared filesystem);
- every worker thread of every rank claims the next unit with ``add("claim", 1)`` (so fast and
  slow devices balance) and posts its result, a few KB of fp64 sums, as ``result/<i>``;
- rank 0 collects results as they arrive, saves each to its ledger (a restart skips it) and
  deletes the key; when all are in it writes the dataset;
- every rank refreshes ``hb/<rank>`` every few seconds; rank 0 fails with a clear error when a
  rank that still holds a claimed unit goes silent for ``peer_timeout_s``, and the other ranks
  fail when rank 0 does. Elastic restarts (torchrun ``--max-restarts``) start a new attempt
  namespace and lose only the units that were in flight.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Sequence

from whestbench.compute.stats import LayerSums
from whestbench.errors import UsageError, WorkFailed
from whestbench.work.ledger import Ledger, sums_from_bytes, sums_to_bytes
from whestbench.work.runner import BakeInterrupted, Event, UnitFn
from whestbench.work.units import Unit, WorkSpec

HEARTBEAT_S = 2.0
POLL_S = 0.05


@dataclass(frozen=True)
class DistEnv:
    """Where this process sits in a distributed bake (read from torchrun's or SLURM's env by the CLI)."""

    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    run_id: str = "whest"
    attempt: int = 0
    """torchrun's TORCHELASTIC_RESTART_COUNT: a restart gets a fresh key namespace."""
    agent_store: bool = False
    """True under torchrun: its agent already hosts the store at master_addr:master_port."""


def connect_store(env: DistEnv, timeout_s: float):
    """The shared TCPStore, namespaced to this run and attempt."""
    import torch.distributed as dist

    is_master = env.rank == 0 and not env.agent_store
    store = dist.TCPStore(
        env.master_addr,
        env.master_port,
        world_size=None,
        is_master=is_master,
        timeout=timedelta(seconds=timeout_s),
        wait_for_workers=False,
    )
    return dist.PrefixStore(f"whest/{env.run_id}/{env.attempt}/", store)


class _Heartbeat(threading.Thread):
    def __init__(self, store, rank: int):
        super().__init__(daemon=True, name=f"whest-heartbeat-{rank}")
        self.store, self.rank = store, rank
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                self.store.set(f"hb/{self.rank}", repr(time.time()))
            except Exception:
                return
            self.halt.wait(HEARTBEAT_S)


def _get_json(store, key: str) -> Any:
    return json.loads(store.get(key).decode())


def run_distributed(
    spec_for_seeds: Callable[[Sequence[int]], WorkSpec],
    units_for_spec: Callable[[WorkSpec], list[Unit]],
    env: DistEnv,
    *,
    seeds: Sequence[int] | None,
    ledger_for_spec: Callable[[WorkSpec], Ledger] | None,
    unit_fn: UnitFn,
    workers: int = 1,
    on_event: Callable[[Event], None] | None = None,
    stop: threading.Event | None = None,
    peer_timeout_s: float = 300.0,
    samples_of: Callable[[Unit], int] | None = None,
) -> tuple[WorkSpec, dict[str, tuple[LayerSums, float]] | None]:
    """Run one rank of a distributed bake. Rank 0 returns (spec, all results); others (spec, None).

    ``seeds`` is required on rank 0 (other ranks receive them). ``spec_for_seeds`` builds this
    rank's WorkSpec from the seed list; its identity must match rank 0's.
    """
    emit = on_event or (lambda e: None)
    stop = stop or threading.Event()
    store = connect_store(env, peer_timeout_s)
    beat = _Heartbeat(store, env.rank)
    beat.start()
    try:
        if env.rank == 0:
            if seeds is None:
                raise UsageError("rank 0 needs the seed list (--mlp-seeds, --seed, or generated).")
            spec = spec_for_seeds(seeds)
            units = units_for_spec(spec)
            ledger = ledger_for_spec(spec) if ledger_for_spec else None
            done = {k: v for k, v in (ledger.load_done() if ledger else {}).items()}
            todo = [u for u in units if u.key not in done]
            store.set(
                "plan",
                json.dumps({"identity": spec.identity_digest(), "seeds": list(spec.seeds), "todo": [u.key for u in todo]}),
            )
        else:
            store.wait(["plan"], timedelta(seconds=peer_timeout_s))
            plan = _get_json(store, "plan")
            spec = spec_for_seeds(plan["seeds"])
            if spec.identity_digest() != plan["identity"]:
                raise UsageError(
                    f"rank {env.rank} was started with different bake arguments than rank 0 "
                    "(sizes, sampler, range or seeds); launch every rank with the same command."
                )
            by_key = {u.key: u for u in units_for_spec(spec)}
            todo = [by_key[k] for k in plan["todo"]]
            done, ledger = {}, None
        samples_of = samples_of or (lambda u: spec.n_samples)
        total = sum(samples_of(u) for u in units_for_spec(spec))
        state = {"samples_done": total - sum(samples_of(u) for u in todo), "units_done": 0}
        base = {"units_total": len(todo), "samples_total": total}
        emit({"phase": "start", **base, **state, "recovered_units": len(done) if env.rank == 0 else 0})
        lock = threading.Lock()

        def add_samples(n: int) -> None:
            with lock:
                state["samples_done"] += n
                snap = dict(state)
            emit({"phase": "sampling", **base, **snap})

        errors: list[BaseException] = []

        def worker() -> None:
            try:
                while not stop.is_set() and not errors:
                    i = store.add("claim", 1) - 1
                    if i >= len(todo):
                        return
                    store.set(f"owner/{i}", str(env.rank))
                    t0 = time.perf_counter()
                    sums = unit_fn(spec, todo[i], add_samples)
                    store.set(f"result/{i}", sums_to_bytes(sums, time.perf_counter() - t0))
                    with lock:
                        state["units_done"] += 1
            except BaseException as exc:  # surfaced by the caller
                errors.append(exc)
                stop.set()

        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=1, user_api="blas"):
            threads = [threading.Thread(target=worker, name=f"whest-unit-{t}", daemon=True) for t in range(max(1, workers))]
            for t in threads:
                t.start()
            if env.rank == 0:
                results = _collect(store, env, todo, done, ledger, threads, errors, stop, peer_timeout_s, emit, base, state, lock)
            else:
                _wait_workers(store, env, threads, errors, peer_timeout_s)
                results = None
        if errors:
            raise errors[0]
        if env.rank == 0:
            store.set("finished", "1")
        return spec, results
    finally:
        beat.halt.set()


def _wait_workers(store, env: DistEnv, threads, errors, peer_timeout_s: float) -> None:
    """Non-zero ranks: wait for the local workers, failing if rank 0 falls silent meanwhile."""
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(timeout=1.0)
        if not errors and _age(store, 0) > peer_timeout_s:
            raise WorkFailed(
                f"rank {env.rank}: rank 0 has not answered for over {peer_timeout_s:.0f}s; "
                "it probably died — re-run the same command on every rank to resume."
            )


def _age(store, rank: int) -> float:
    try:
        return time.time() - float(store.get(f"hb/{rank}").decode())
    except Exception:
        return float("inf")


def _collect(store, env, todo, done, ledger, threads, errors, stop, peer_timeout_s, emit, base, state, lock):
    results = dict(done)
    pending = set(range(len(todo)))
    unowned_since: dict[int, float] = {}
    while pending:
        if errors:
            raise errors[0]
        got = False
        for i in sorted(pending):
            key = f"result/{i}"
            if store.check([key]):
                sums, wall = sums_from_bytes(store.get(key))
                if ledger is not None:
                    ledger.save(todo[i].key, sums, wall)
                results[todo[i].key] = (sums, wall)
                store.delete_key(key)
                pending.discard(i)
                got = True
                with lock:
                    snap = dict(state)
                emit({"phase": "unit_done", **base, **snap, "unit": todo[i].key})
        if got:
            continue
        local_alive = any(t.is_alive() for t in threads)
        if stop.is_set() and not local_alive:
            raise BakeInterrupted(
                f"stopped with {len(results)} units saved; re-run the same command (on every rank) to resume."
            )
        _check_peers(store, env, pending, peer_timeout_s, unowned_since)
        time.sleep(POLL_S)
    return results


def _check_peers(store, env: DistEnv, pending: set[int], peer_timeout_s: float, unowned_since: dict[int, float]) -> None:
    """Fail when a unit is held by a rank that went silent (it died mid-unit)."""
    claimed = int(store.add("claim", 0))
    now = time.time()
    for i in sorted(pending):
        if i >= claimed:
            break  # nobody holds this unit yet; a live worker will claim it
        key = f"owner/{i}"
        if not store.check([key]):
            # claimed but the owner never said who it is: it died between the two store calls
            if now - unowned_since.setdefault(i, now) > peer_timeout_s:
                raise WorkFailed(
                    f"unit {i} was claimed but never started for over {peer_timeout_s:.0f}s; "
                    "a rank died — re-run the same command on every rank to resume."
                )
            continue
        owner = int(store.get(key).decode())
        if owner != env.rank and _age(store, owner) > peer_timeout_s:
            raise WorkFailed(
                f"rank {owner} stopped responding for over {peer_timeout_s:.0f}s while holding a unit; "
                "finished units are saved — re-run the same command on every rank to resume."
            )
