"""``StoreExecutor``: one rank of a distributed bake, the ``work.executor.Executor`` that torchrun or
srun runs on every rank (its roles: ``roles.py``)."""

from __future__ import annotations

import os
import secrets
import socket
import threading

from whestbench.errors import UsageError, WorkFailed
from whestbench.events import EventSink, ignore
from whestbench.text import error_line
from whestbench.work.distributed.epoch import Context, PollStats, join_all
from whestbench.work.distributed.roles import run_peer, run_rank0
from whestbench.work.distributed.store import HEARTBEAT_S, THREAD_PREFIX, Heartbeat, connect_store, dist_errors
from whestbench.work.executor import Executor, Job
from whestbench.work.launch_env import DistEnv, resume_hint
from whestbench.work.steps import run_unit

LEAVE_JOIN_S = 10.0  # how long a leaving rank waits for its own threads (see epoch.join_all)
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


class StoreExecutor(Executor):
    """One rank of a distributed bake (torchrun or srun; the protocol: the package's docstring).

    On rank 0 the job's spec carries the seeds and the job has a ledger; on the other ranks the
    spec's seeds are empty (they arrive in rank 0's plan) and there is no ledger. ``step`` is the
    unit function (``work.steps.run_unit``; tests pass fakes).
    """

    def __init__(self, env: DistEnv, *, workers: int = 1, peer_timeout_s: float = 300.0, step=run_unit):
        why = check_peer_timeout(peer_timeout_s)
        if why:
            raise UsageError(f"the peer timeout {why}; got {peer_timeout_s!r}.",
                             fix="Pass a --peer-timeout (peer_timeout_s) within that range.")
        self.env, self.workers, self.peer_timeout_s, self.step = env, max(1, workers), peer_timeout_s, step
        self.stats = PollStats()

    def run(self, job: Job, *, on_event: EventSink = ignore, stop: threading.Event | None = None) -> bool:
        """Run this rank's share of ``job``; True on rank 0 (it holds the results), False elsewhere."""
        stop = stop or threading.Event()
        env = self.env
        base = connect_store(env, self.peer_timeout_s, stop, on_event)
        token = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        beat = Heartbeat(base, env.rank, token)
        beat.beat()
        beat.start()
        ctx = Context(env, base, token, self.step, self.workers, on_event, stop, self.peer_timeout_s, self.stats)
        try:
            if env.rank == 0:
                run_rank0(ctx, beat, job)
                return True
            try:
                run_peer(ctx, beat, job)
                return False
            except dist_errors() as exc:
                raise WorkFailed(f"rank {env.rank} lost its connection to rank 0 ({error_line(exc, 40)}); rank 0 "
                                 "probably died —", fix=f"{resume_hint(env)}.") from None
        finally:
            beat.halt.set()
            ctx.quit.set()
            join_all([beat, *ctx.threads], LEAVE_JOIN_S)


def lingering_threads() -> list[threading.Thread]:
    """This process's distributed-bake threads still running (see ``cli.app.run``)."""
    return [t for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX) and t.is_alive()]
