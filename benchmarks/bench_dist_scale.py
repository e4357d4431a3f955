#!/usr/bin/env python
"""The distributed protocol at hundreds of ranks, on one machine: real protocol, one real store.

Each simulated rank is one real call of ``whestbench.bake.pipeline.bake(plan, dist_env=...)``, the
call the CLI makes under srun: rank 0 hosts the one ``TCPStore`` (as under srun), plans, collects,
keeps its ledger and writes the dataset; every other rank joins, claims units and posts results.
Only the unit's compute is replaced, where the executor calls it (``StoreExecutor``'s ``step``): a
timed stand-in that sleeps ``--unit-seconds`` in steps of at most 0.25 s, reports samples,
checkpoints every ``--checkpoint-every`` seconds through the real ``UnitContext`` (records of the
real pcg64 checkpoint's size) and returns sums of the real shape (depth x width fp64, twice), whose
value is a function of the unit, so a unit lost or mixed up shows in the dataset.

Ranks are threads, ``--ranks-per-process`` of them in each process (processes are the "nodes"),
so 512 ranks fit a 2-core, 24 GB machine; rank 0 has a process of its own. The ranks start
together (after every process has imported torch: what torchrun's rendezvous does), and the clock
starts then.

Reported (JSON with ``--json``):

- ``wall_s`` (start to dataset written) and ``compute_wall_s`` (start to last result saved)
  against ``ideal_s`` = units x S / R; ``overhead_fraction`` = compute_wall_s / ideal_s - 1 (the
  protocol's cost: joining, claims, collection, the ragged end);
- ``rank0_poll_ms_p50`` / ``_p99``: rank 0's poll cycles, their own time without the sleep;
- ``store_ops_per_s``: store calls of every rank (counted at the Python API), over the wall time;
- ``last_result_to_written_s``; ``lost_units`` (units missing or wrong in the dataset, must be 0);
- ``peak_rss_mb_per_rank``: the peer processes' peak RSS over their ranks (rank 0's process apart);
- ``faults``: each run again with a fault: ``kill-restart`` (SIGKILL 5 % of the ranks once each
  holds a unit, their ranks started again in new processes as torchrun restarts a node's workers),
  ``kill-no-restart`` (SIGKILL, rank 0 fails after ``--peer-timeout``, the same command re-run on
  every rank resumes), ``stop`` (SIGUSR1 to every process, a SLURM pre-timeout: all ranks exit 75,
  the re-run resumes from the checkpoints) and ``late-start`` (10 % of the ranks join once the
  bake has saved a unit). ``recovered`` is true when the outcome is the documented one and the
  final dataset has every unit right.
- ``projection``: the same figures modelled for 1,024 and 4,096 ranks (the model is in ``model``).

Every fault is applied at a point of the bake's progress (units held, a unit saved, checkpoints
kept), never after a guessed delay; a restarted or late node's process is started, imported and
planned beside the others before the clock starts and only released at the fault (its Python and
torch start-up, seconds on a busy machine, is a per-process cost, not the protocol's, and would
otherwise decide whether it is back within ``--peer-timeout``). So the outcome is the same on a
busy machine as on an idle one. The nodes die with the driver: each watches the process that
started it (and, on Linux, asks the kernel for SIGKILL when it goes), so a killed driver or test
run leaves no node behind.

    .venv/bin/python benchmarks/bench_dist_scale.py --ranks 32
    .venv/bin/python benchmarks/bench_dist_scale.py --ranks 128 --json dist128.json
    .venv/bin/python benchmarks/bench_dist_scale.py --ranks 512 --ranks-per-process 64 --faults none
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAULTS = ("kill-restart", "kill-no-restart", "stop", "late-start")
STEP_S = 0.25  # the stand-in's longest sleep between checkpoint chances (a sampling step)
UNIT_TIMES: list[tuple[float, float]] = []  # this process's stand-in units: (start, end) wall clock


# --- the simulated ranks (one process: a "node") ---------------------------------------------------


def _standin(seconds: float, holding: Path):
    """A unit that takes ``seconds``: sleeps in steps, checkpoints through the real context. Creates
    ``holding`` when it starts a unit (the driver's sign that this rank holds one)."""
    import numpy as np

    from whestbench.compute.stats import LayerSums
    from whestbench.work.steps import UnitStopped

    def step(spec, compute, unit, ctx):
        started = time.time()
        holding.touch()
        n = spec.unit_samples(unit)
        k = max(1, math.ceil(seconds / STEP_S))
        saved = ctx.resume(unit.key)
        done = int(saved[0]["position"]) if saved else 0
        if done:
            ctx.on_resumed(done)
        shape = (spec.depth, spec.width)
        partial = np.zeros(shape)  # a pcg64 checkpoint: bit-generator state, position, fp64 partial sums

        def state():
            meta = {"position": done, "bit_generator": "PCG64", "state": {"state": 2**127 + done, "inc": 12345},
                    "has_uint32": 0, "uinteger": 0}
            return meta, {"sums": partial, "sumsq": partial}

        while done < n:
            chunk = min(n - done, max(1, n // k))
            time.sleep(seconds * chunk / n)
            done += chunk
            ctx.on_samples(chunk)
            if done < n:
                ctx.after_step(unit.key, state)
        if not ctx.arithmetic_held():
            raise UnitStopped(unit.key)
        v = _value(unit.mlp_index)
        UNIT_TIMES.append((started, time.time()))
        return LayerSums(sums=np.full(shape, v * n), sumsq=np.full(shape, (v * v + 0.01) * n), count=n)

    return step


def _value(i: int) -> float:
    return (i % 97 + 1) / 128.0  # exact in binary: the dataset's mean must equal it


def _count_store_ops(counts: dict, lock: threading.Lock) -> None:
    """Count every store call the protocol makes (all go through PrefixStore objects)."""
    import torch.distributed as dist

    for name in ("set", "get", "add", "check", "delete_key", "multi_get", "multi_set", "append",
                 "compare_set", "wait", "num_keys"):
        orig = getattr(dist.PrefixStore, name, None)
        if orig is None:
            continue

        def counted(self, *a, _orig=orig, _name=name, **kw):
            with lock:
                counts[_name] = counts.get(_name, 0) + 1
            return _orig(self, *a, **kw)

        setattr(dist.PrefixStore, name, counted)


def _holding(ready: str, rank: int) -> Path:
    """The file a rank's stand-in creates when it starts a unit (beside its node's ready file)."""
    return Path(ready).with_name(f"holding-{rank}")


PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """End this process when ``parent`` (the driver that started it) is gone, however it ended.

    On Linux the kernel sends SIGKILL when the parent's thread that started this process ends
    (``PR_SET_PDEATHSIG``; the driver starts nodes from the thread that runs ``main``, which outlives
    them). Everywhere, a daemon thread looks every 0.1 s whether this process was re-parented (its
    parent died, before the request above too) and ends it at once.
    """
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.1)
        os._exit(1)

    if os.getppid() != parent:
        os._exit(1)
    threading.Thread(target=watch, name="bench-parent-watch", daemon=True).start()


def host_main(cfg: dict) -> int:
    """One simulated node: ``cfg["ranks"]`` as threads, each running the real bake of one rank."""
    die_with_parent(cfg["parent"])
    import numpy  # noqa: F401
    import torch.distributed  # noqa: F401  (imported before the clock starts: a per-process cost, not the protocol's)

    from whestbench.bake.pipeline import bake
    from whestbench.bake.plan import BakeConfig, plan_bake
    from whestbench.errors import UsageError, WorkFailed
    from whestbench.work.distributed import store_executor as distributed
    from whestbench.work.executor import BakeInterrupted
    from whestbench.work.steps import kernel_module

    counts: dict = {}
    _count_store_ops(counts, threading.Lock())
    executors: dict[int, object] = {}
    init = distributed.StoreExecutor.__init__

    def capture(self, env, **kw):  # the stand-in goes where the executor calls the compute
        init(self, env, **{**kw, "step": _standin(cfg["unit_seconds"], _holding(cfg["ready"], env.rank))})
        executors[env.rank] = self

    distributed.StoreExecutor.__init__ = capture
    world = cfg["world"]
    stops = {r: threading.Event() for r in cfg["ranks"]}

    def on_signal(signum, frame):  # what the CLI's StopSignals does, for every rank of this process
        for ev in stops.values():
            ev.set()

    signal.signal(signal.SIGUSR1, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    def config(rank: int):
        return BakeConfig(n_mlps=cfg["units"], n_samples=cfg["n_samples"], width=cfg["width"], depth=cfg["depth"],
                          output=Path(cfg["output"]), seed=1 if rank == 0 else None, seeds_from_peer=rank != 0,
                          max_threads=1, checkpoint_every=cfg["checkpoint_every"],
                          audit_segments=0)  # the stand-in keeps no audit trail (its sums are not sampled)

    def env(rank: int):
        return distributed.DistEnv(rank, world, rank % 8, "127.0.0.1", cfg["port"], run_id="bench", agent_store=False)

    plans = {r: plan_bake(config(r), dist_env=env(r), probe=False) for r in cfg["ranks"][:1]}
    peer_plan = None
    for r in cfg["ranks"]:
        if r not in plans:
            peer_plan = peer_plan or plan_bake(config(r), dist_env=env(r), probe=False)
            plans[r] = peer_plan
    module = kernel_module(plans[cfg["ranks"][0]].spec, plans[cfg["ranks"][0]].compute)
    load = None if module is None else module.load_kernels
    if load is not None:
        load()
    Path(cfg["ready"]).write_text("1")
    go = Path(cfg["go"])
    while not go.exists():
        time.sleep(0.005)
    outcome: dict[int, dict] = {}
    last_unit = [0.0]

    started: dict[int, float] = {}  # rank -> when it had joined and planned (its tracker's start event)

    def on_event_of(rank: int):
        def on_event(event) -> None:
            if event.kind == "unit_done" and rank == 0:
                last_unit[0] = time.time()
            elif event.kind == "start":
                started.setdefault(rank, time.time())

        return on_event

    def run(rank: int) -> None:
        t0 = time.time()
        try:
            bake(plans[rank], dist_env=env(rank), stop=stops[rank], peer_timeout_s=cfg["peer_timeout"],
                 on_event=on_event_of(rank))
            code, msg = 0, ""
        except BakeInterrupted as e:
            code, msg = e.exit_code, str(e)
        except UsageError as e:
            code, msg = 2, str(e)
        except WorkFailed as e:
            code, msg = 1, str(e)
        except BaseException as e:  # noqa: BLE001 - reported, never hidden
            code, msg = 1, f"{type(e).__name__}: {e}"
        outcome[rank] = {"code": code, "message": msg[:400], "t_start": t0, "t_end": time.time(),
                         "t_joined": started.get(rank)}

    threads = [threading.Thread(target=run, args=(r,), name=f"bench-rank-{r}") for r in cfg["ranks"]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    result = {"ranks": outcome, "ops": counts, "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
              "units": UNIT_TIMES}
    if 0 in executors:
        result["rank0"] = {"cycles": executors[0].stats.cycles, "t_last_result": last_unit[0]}
    tmp = Path(cfg["result"] + ".tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, cfg["result"])
    return 0


# --- the driver -----------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


RUNS: list["Run"] = []  # every run started, so an interrupted benchmark leaves no node behind


class Run:
    """One bake of R simulated ranks in processes ("nodes"); faults are applied to whole nodes."""

    def __init__(self, args, work: Path, name: str, output: Path, *, late: set[int] = frozenset()):
        self.args, self.work, self.name, self.output = args, work / name, name, output
        self.work.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        r, per = args.ranks, args.ranks_per_process
        victims = max(1, round(0.05 * r))  # the last 5 % of the ranks, on nodes of up to 8
        self.victim_ranks = list(range(r - victims, r))
        late_ranks = sorted(late)
        rest = [k for k in range(1, r) if k not in self.victim_ranks and k not in late]
        self.nodes: list[list[int]] = [[0]]
        self.nodes += [rest[i:i + per] for i in range(0, len(rest), per)]
        self.victim_nodes = [len(self.nodes) + j for j in range(math.ceil(victims / 8))]
        self.nodes += [self.victim_ranks[i:i + 8] for i in range(0, victims, 8)]
        self.late_nodes = [len(self.nodes) + j for j in range(math.ceil(len(late_ranks) / per))]
        self.nodes += [late_ranks[i:i + per] for i in range(0, len(late_ranks), per)]
        self.procs: dict[int, subprocess.Popen] = {}
        self.spares: dict[int, subprocess.Popen] = {}  # replacements held until their node is killed
        RUNS.append(self)
        self.starts = 0
        self.go_file = self.work / "go"

    def _cfg(self, node: int) -> dict:
        a = self.args
        tag = f"{node}-{self.starts}"
        return {"parent": os.getpid(), "ranks": self.nodes[node], "world": a.ranks, "port": self.port, "units": a.units,
                "n_samples": a.n_samples, "width": a.width, "depth": a.depth, "output": str(self.output),
                "unit_seconds": a.unit_seconds, "checkpoint_every": a.checkpoint_every,
                "peer_timeout": a.peer_timeout, "go": str(self.go_file), "ready": str(self.work / f"ready-{tag}"),
                "result": str(self.work / f"result-{tag}.json")}

    def start_node(self, node: int, *, go: Path | None = None) -> Path:
        """Start ``node``'s process; it imports and plans, creates its ready file (returned), then
        waits for ``go`` (default: the run's go file)."""
        self.starts += 1
        cfg = self._cfg(node)
        if go is not None:
            cfg["go"] = str(go)
        import whestbench  # the nodes import the package this driver imported

        src = Path(whestbench.__file__).resolve().parents[1]
        env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
        if self.args.no_dns:
            env["RES_OPTIONS"] = "attempts:0"  # see --dns
        proc = subprocess.Popen(
            [sys.executable, __file__, "--host", json.dumps(cfg)], env=env, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=open(self.work / f"stderr-{node}-{self.starts}.txt", "w"))
        if go is None or node not in self.procs:
            self.procs[node] = proc
        else:  # a node's replacement, held until its predecessor is killed
            self.spares[node] = proc
        self.results = getattr(self, "results", [])
        self.results.append(Path(cfg["result"]))
        return Path(cfg["ready"])

    def start(self, nodes, *, held=(), spares=()) -> float:
        """Start ``nodes``, wait until each has imported and planned, then start them all at once.
        ``held`` nodes and the replacements of the ``spares`` nodes start beside them but wait for
        ``release`` (their go files: ``go-<node>``)."""
        self.go_file.unlink(missing_ok=True)
        ready = [self.start_node(n) for n in nodes]
        ready += [self.start_node(n, go=self.work / f"go-{n}") for n in (*held, *spares)]
        deadline = time.monotonic() + self.args.timeout
        while not all(p.exists() for p in ready):
            for n, p in [*self.procs.items(), *self.spares.items()]:
                if p.poll() is not None:
                    raise SystemExit(f"node {n} exited {p.returncode} while starting: see {self.work}/stderr-{n}-*.txt")
            if time.monotonic() > deadline:
                raise SystemExit(f"the nodes did not import and plan within {self.args.timeout}s (--timeout)")
            time.sleep(0.05)
        t0 = time.time()
        self.go_file.write_text(str(t0))
        return t0

    def release(self, nodes) -> None:
        """Let held nodes (or the replacements of killed ones) start their bake now."""
        for n in nodes:
            if n in self.spares:
                self.procs[n] = self.spares.pop(n)
            (self.work / f"go-{n}").write_text(str(time.time()))

    def wait_until(self, what: str, done) -> None:
        """Wait until ``done()`` (a point of the bake's progress), bounded by ``--timeout`` as a hang
        guard; a bake that ends first or the guard stops the benchmark, saying what it waited for."""
        deadline = time.monotonic() + self.args.timeout
        while not done():
            if all(p.poll() is not None for p in self.procs.values()):
                raise SystemExit(f"{self.name}: every node ended before {what}; see {self.work}/stderr-*.txt")
            if time.monotonic() > deadline:
                self.abort()
                raise SystemExit(f"{self.name}: not {what} within {self.args.timeout}s (--timeout); "
                                 f"see {self.work}/stderr-*.txt")
            time.sleep(0.02)

    def holding(self, nodes) -> bool:
        """Whether every rank of ``nodes`` has started a unit."""
        return all(_holding(str(self.work / "ready"), r).exists() for n in nodes for r in self.nodes[n])

    def kill_nodes(self, nodes) -> None:
        for n in nodes:
            os.killpg(self.procs[n].pid, signal.SIGKILL)
            self.procs[n].wait()

    def signal_all(self, sig) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(sig)

    def wait(self) -> None:
        deadline = time.monotonic() + self.args.timeout
        for n, p in self.procs.items():
            try:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.abort()
                raise SystemExit(f"{self.name}: node {n} still running after {self.args.timeout}s; "
                                 f"see {self.work}/stderr-*.txt") from None

    def abort(self) -> None:
        for p in [*self.procs.values(), *self.spares.values()]:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()

    def collect(self) -> dict:
        """Every finished process's report, merged: outcome per rank (the last process of each)."""
        ranks, ops, rss, rank0, units = {}, {}, [], None, []
        for path in self.results:
            if not path.exists():
                continue  # a killed node
            rep = json.loads(path.read_text())
            units += rep["units"]
            for r, o in rep["ranks"].items():
                ranks[int(r)] = o
            for k, v in rep["ops"].items():
                ops[k] = ops.get(k, 0) + v
            n = len(rep["ranks"])
            if "rank0" in rep:
                rank0 = rep["rank0"]
                rank0["maxrss_mb"] = rep["maxrss_kb"] / 1024
            else:
                rss.append((rep["maxrss_kb"] / 1024, n))
        self.results = []
        return {"ranks": ranks, "ops": ops, "rss_per_rank_mb": rss, "rank0": rank0, "units": sorted(units)}


def _check_dataset(output: Path, units: int) -> int:
    """Units missing from the dataset or holding another unit's numbers."""
    import numpy as np
    import pyarrow.parquet as pq

    if not output.is_dir():
        return units
    files = sorted(output.rglob("*.parquet"))
    table = pq.read_table(files[0], columns=["mlp_id", "final_means"]) if len(files) == 1 else None
    if table is None:
        import pyarrow as pa

        table = pa.concat_tables(pq.read_table(f, columns=["mlp_id", "final_means"]) for f in files)
    good = set()
    for mid, means in zip(table.column("mlp_id").to_pylist(), table.column("final_means").to_pylist()):
        if np.allclose(np.asarray(means, dtype=np.float64), _value(int(mid)), rtol=0, atol=1e-12):
            good.add(int(mid))
    return units - len(good & set(range(units)))


def _pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def measure(args, work: Path) -> dict:
    """The fault-free run: wall against ideal, poll cycles, ops, memory, lost units."""
    output = work / "clean" / "ds"
    run = Run(args, work, "clean", output)
    t0 = run.start(range(len(run.nodes)))
    run.wait()
    t_end = time.time()
    rep = run.collect()
    bad = {r: o for r, o in rep["ranks"].items() if o["code"] != 0}
    if bad or len(rep["ranks"]) != args.ranks:
        first = next(iter(bad.items()), None)
        raise SystemExit(f"the fault-free run failed: {len(bad)} ranks did not exit 0, {args.ranks - len(rep['ranks'])} "
                         f"reported nothing; first: {first}")
    r0 = rep["rank0"]
    t_written = rep["ranks"][0]["t_end"]
    units = rep["units"]  # where the time beyond the ideal went
    first_starts = [u[0] for u in units[:args.ranks]]
    join_s = max(first_starts) - t0
    # steady state: rank 0's cycles once every rank computes (the connection stall, if any, is apart)
    cycles = [c for c in r0["cycles"] if c[3] >= max(first_starts)] or r0["cycles"]
    ms = [c[0] * 1000 for c in cycles]
    ideal = args.units * args.unit_seconds / args.ranks
    compute_wall = r0["t_last_result"] - t0
    total_ops = sum(rep["ops"].values())
    busy = sum(e - b for b, e in units)
    out = {
        "ranks": args.ranks, "units": args.units, "unit_seconds": args.unit_seconds,
        "checkpoint_every": args.checkpoint_every, "ranks_per_process": args.ranks_per_process,
        "ideal_s": ideal, "compute_wall_s": compute_wall, "wall_s": t_written - t0,
        "overhead_fraction": compute_wall / ideal - 1,
        "overhead_after_join_fraction": (compute_wall - join_s) / ideal - 1,
        "rank0_poll_ms_p50": _pct(ms, 0.5), "rank0_poll_ms_p99": _pct(ms, 0.99), "rank0_poll_cycles": len(ms),
        "rank0_poll_ms_max_while_joining": max([c[0] * 1000 for c in r0["cycles"] if c[3] < max(first_starts)],
                                               default=0.0),
        "store_ops_per_s": total_ops / (t_end - t0), "store_ops": rep["ops"],
        "last_result_to_written_s": t_written - r0["t_last_result"],
        "lost_units": _check_dataset(output, args.units),
        # a node process's peak RSS over its ranks, all nodes together (each node's ~300 MB of imports included)
        "peak_rss_mb_per_rank": sum(mb for mb, _ in rep["rss_per_rank_mb"]) / sum(n for _, n in rep["rss_per_rank_mb"]),
        "peak_rss_mb_largest_node": max(mb for mb, _ in rep["rss_per_rank_mb"]),
        "rank0_peak_rss_mb": r0["maxrss_mb"],
        "breakdown": {
            "join_s": join_s,  # until every rank computes
            "rank0_planned_s": rep["ranks"][0]["t_joined"] - t0,
            "peers_joined_s": sorted(o["t_joined"] - t0 for r, o in rep["ranks"].items() if r and o["t_joined"]),
            "unit_s_mean": busy / len(units),  # the stand-in's own units (sleep overrun on a loaded machine)
            "idle_between_units_s": args.ranks * (max(e for _, e in units) - t0) - busy
            - sum(b - t0 for b in first_starts),  # over all ranks: claims, posting, the ragged end
            "last_unit_to_collected_s": r0["t_last_result"] - max(e for _, e in units),
        },
        "cycles": cycles,
    }
    shutil.rmtree(output, ignore_errors=True)
    return out


def _outcome_ok(rep: dict, want: set[int], ranks: int) -> tuple[bool, str]:
    codes = {r: o["code"] for r, o in rep["ranks"].items()}
    wrong = {r: c for r, c in codes.items() if c not in want}
    if wrong:
        r = min(wrong)
        return False, f"rank {r} exited {wrong[r]}: {rep['ranks'][r]['message']}"
    return True, ""


def fault(args, work: Path, kind: str) -> dict:
    """One run with a fault; the re-run where the docs say to re-run. Returns {kind, recovered, seconds, ...}."""
    output = work / kind / "ds"
    late = set()
    if kind == "late-start":  # the 10 % of ranks just below the last 5 % (the kill victims of other runs)
        victims = max(1, round(0.05 * args.ranks))
        n_late = max(1, round(0.10 * args.ranks))
        late = set(range(max(1, args.ranks - victims - n_late), args.ranks - victims))
    run = Run(args, work, kind, output, late=late)
    on_time = [n for n in range(len(run.nodes)) if n not in run.late_nodes]
    # a late node, and the replacement of a node to be killed, import and plan beside the others and
    # wait for their release (module docstring)
    t0 = run.start(on_time, held=run.late_nodes, spares=run.victim_nodes if kind == "kill-restart" else ())
    note = ""
    work_dir = output.parent / f"{output.name}.whest-work"
    need = math.ceil(0.5 * (args.ranks - 1))  # checkpoints the stop must keep (below)
    if kind == "stop":
        # the stop is judged by what the bake promises (every unit in flight is kept), not by when the
        # scheduler ran it: wait until units are in flight with a checkpoint, however long a busy
        # machine takes to get there (bounded by --timeout), then stop
        before = _units_and_checkpoints(work_dir, run, need, args.timeout)
    elif kind == "late-start":  # late: the bake is under way (rank 0 has saved a result)
        run.wait_until("a unit saved", lambda: _count_saved(work_dir)[0] >= 1)
    else:  # the ranks killed hold a unit: the fault loses work in flight, on any machine
        run.wait_until("the ranks to kill holding a unit", lambda: run.holding(run.victim_nodes))
    t_fault = time.time()
    if kind == "late-start":
        run.release(run.late_nodes)
        run.wait()
        rep = run.collect()
        ok, why = _outcome_ok(rep, {0}, args.ranks)
        ok = ok and len(rep["ranks"]) == args.ranks
    elif kind == "kill-restart":
        run.kill_nodes(run.victim_nodes)
        run.release(run.victim_nodes)  # torchrun restarts the failed node's workers, as new processes
        run.wait()
        rep = run.collect()
        ok, why = _outcome_ok(rep, {0}, args.ranks)
    else:
        if kind == "kill-no-restart":
            run.kill_nodes(run.victim_nodes)
            want = {1}  # rank 0: "rank N stopped responding" after --peer-timeout; the others follow it
        else:
            run.signal_all(signal.SIGUSR1)  # SLURM's --signal=USR1@T reaches every task
            want = {75}
        run.wait()
        t_out = time.time()
        rep = run.collect()
        if kind == "kill-no-restart" and rep["ranks"][0]["code"] == 0:
            want = {0}  # the killed ranks held no unit (the docs: "a dead rank that held no unit is not waited for")
        ok, why = _outcome_ok(rep, want, args.ranks)
        if ok and want == {1} and "stopped responding" not in rep["ranks"][0]["message"]:
            ok, why = False, f"rank 0: {rep['ranks'][0]['message']}"
        note = f"first run ended {t_out - t_fault:.1f}s after the fault; "
        saved, ckpts = _count_saved(work_dir)
        note += f"{saved} units and {ckpts} checkpoints saved; "
        # each unit that held a checkpoint when the stop was sent ends with its checkpoint or finished:
        # checkpoints now plus units finished since >= checkpoints then, whatever the timing
        if kind == "stop" and ok and ckpts + saved - before[0] < before[1]:
            ok, why = False, (f"only {ckpts} checkpoints kept and {saved - before[0]} units finished after the stop, "
                              f"for {before[1]} units checkpointed when it was sent")
        if want != {0}:
            rerun = Run(args, work, kind + "-rerun", output)  # the same command on every rank
            rerun.start(range(len(rerun.nodes)))
            rerun.wait()
            ok2, why2 = _outcome_ok(rerun.collect(), {0}, args.ranks)
            ok, why = ok and ok2, why or why2
            note += f"the re-run {'completed' if ok2 else 'FAILED'}"
    t_done = time.time()
    lost = _check_dataset(output, args.units)
    ok = ok and lost == 0
    shutil.rmtree(output.parent, ignore_errors=True)
    return {"kind": kind, "recovered": bool(ok), "seconds": round(t_done - t_fault, 2), "lost_units": lost,
            "detail": (why or note).strip(), "total_s": round(t_done - t0, 2)}


def _count_saved(work_dir: Path) -> tuple[int, int]:
    """(finished units, checkpoints) in a bake's work directory, from one listing."""
    try:
        names = os.listdir(work_dir / "units")
    except OSError:
        return 0, 0
    return sum(n.endswith(".unit") for n in names), sum(n.endswith(".ckpt") for n in names)


def _units_and_checkpoints(work_dir: Path, run, need: int, timeout: float) -> tuple[int, int]:
    """Wait until ``need`` units hold a checkpoint (or every node has ended, or ``timeout``); return
    (finished units, checkpoints) as last counted."""
    deadline = time.monotonic() + timeout
    while True:
        counted = _count_saved(work_dir)
        if (counted[1] >= need or time.monotonic() > deadline
                or all(p.poll() is not None for p in run.procs.values())):
            return counted
        time.sleep(0.02)


OPS_PER_UNIT = 8  # a peer's store calls per unit: stop check, claim, owner, result, its event, progress; rank 0's share


def store_costs(ranks: list[int]) -> dict:
    """Per-call costs of this machine's store, measured now on a scratch TCPStore in this process:
    one small call, and the batched read of rank 0's heaviest regular cycle (every rank's progress,
    or every owner's heartbeat, never both in one cycle: R + 3 keys) at each of ``ranks``. Median of 5."""
    from datetime import timedelta

    import torch.distributed as dist

    server = dist.TCPStore("127.0.0.1", 0, world_size=None, is_master=True, timeout=timedelta(seconds=60),
                           wait_for_workers=False)
    store = dist.PrefixStore("whest/cost", dist.TCPStore("127.0.0.1", server.port, world_size=None, is_master=False,
                                                         timeout=timedelta(seconds=60)))

    def timed(call, n=5) -> float:
        times = []
        for _ in range(n):
            t = time.perf_counter()
            call()
            times.append(time.perf_counter() - t)
        return statistics.median(times)

    store.set("claim", "0")
    out = {"check_ms": 1000 * timed(lambda: [store.check(["claim"]) for _ in range(100)]) / 100}
    for r in ranks:
        keys = [f"hb/{k}" for k in range(r + 3)]
        for k in keys:
            store.set(k, "12 myhost:123456:abcdef01 12345")
        out[f"multi_get_{len(keys)}_keys_ms"] = 1000 * timed(lambda: store.multi_get(keys))
    del store, server
    return out


def project(m: dict) -> dict:
    """Rank-0 poll cycle, store ops/s and overhead at 1,024 and 4,096 ranks from this run's costs."""
    from whestbench.work.distributed import roles as d

    cycles = m["cycles"]
    light = [c for c in cycles if c[2] == 0 and c[1] == min(cc[1] for cc in cycles)]
    base_p99 = _pct([c[0] for c in light], 0.99)
    base_p50 = _pct([c[0] for c in light], 0.5)
    with_results = [(c[0] - base_p50) / c[2] for c in cycles if c[2] > 0]
    per_result = max(0.0, statistics.median(with_results)) if with_results else 0.0
    costs = m["store_costs"]
    r, s = m["ranks"], m["unit_seconds"]
    steady = max(0.0, m["store_ops_per_s"] / r - OPS_PER_UNIT / s)
    fixed_s = max(0.0, m["compute_wall_s"] - m["ideal_s"])
    out = {}
    for big in (1024, 4096):
        reads = costs[f"multi_get_{big + 3}_keys_ms"] / 1000
        results = max(1.0, big * d.POLL_S / s)
        out[str(big)] = {
            "rank0_poll_ms_p99": round(1000 * (base_p99 + reads + per_result * results), 1),
            # the same without this machine's CPU contention (R simulated ranks on 2 cores): a light cycle's median
            "rank0_poll_ms_quiet_host": round(1000 * (base_p50 + reads + per_result * results), 1),
            "rank0_poll_ms_p99_10min_units": round(1000 * (base_p99 + reads + per_result), 1),
            "store_ops_per_s": round(big * (steady + OPS_PER_UNIT / s)),
            "store_ops_per_s_10min_units": round(big * (steady + OPS_PER_UNIT / 600)),
            "overhead_fraction_10min_units": round(fixed_s / (4 * 600), 5),
        }
    out["model"] = (
        f"poll cycle p99 = p99 of this run's cycles that read nothing extra ({base_p99 * 1000:.2f} ms; their median, "
        f"{base_p50 * 1000:.2f} ms, for a host not shared with R simulated ranks) + one multi_get of "
        f"R + 3 keys (every rank's progress or every owner's heartbeat, timed on a scratch store here: "
        f"{costs[f'multi_get_{1024 + 3}_keys_ms']:.1f} ms at R = 1,024, "
        f"{costs[f'multi_get_{4096 + 3}_keys_ms']:.1f} ms at 4,096) + {per_result * 1000:.2f} ms per result "
        f"collected in that cycle (median of this run's cycles with results, less a light cycle's median), R x "
        f"{d.POLL_S} s / unit seconds of them, at least 1; store ops/s = R x ({steady:.2f} steady calls per rank per "
        f"second measured here: heartbeats, looks, progress) + R x {OPS_PER_UNIT} calls per unit / unit seconds; "
        f"overhead with 10-minute units, 4 per rank = this run's fixed cost ({fixed_s:.2f} s: joining, claims, the "
        f"ragged end; ranks join in parallel, so it is taken as independent of R) / 2,400 s."
    )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=None)
    p.add_argument("--units", type=int, default=None, help="default: 4 per rank")
    p.add_argument("--unit-seconds", type=float, default=10.0)
    p.add_argument("--checkpoint-every", type=float, default=3.0)
    p.add_argument("--ranks-per-process", type=int, default=32)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--n-samples", type=int, default=10_000)
    p.add_argument("--peer-timeout", type=float, default=30.0,
                   help="the ranks' --peer-timeout: the kill-no-restart fault waits it out, and a restarted node "
                        "must be back within it")
    p.add_argument("--dns", dest="no_dns", action="store_false",
                   help="let the nodes' resolver query DNS. torch's store looks up the name of every connection's "
                        "address; where no DNS server answers (this project's VM) each lookup waits 5-10 s and "
                        "stalls the store, so by default the nodes run with RES_OPTIONS=attempts:0 (no query, the "
                        "numeric address), as a cluster whose DNS answers behaves")
    p.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated from {FAULTS}, or none")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds any one run may take")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--work", type=Path, default=None, help="scratch directory (default: a temporary one)")
    p.add_argument("--host", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    try:
        import whestbench  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(ROOT / "src"))
    if args.host:
        return host_main(json.loads(args.host))
    if args.ranks is None or args.ranks < 2:
        p.error("--ranks must be at least 2")
    args.units = args.units or 4 * args.ranks
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    faults = [] if args.faults == "none" else args.faults.split(",")
    for f in faults:
        if f not in FAULTS:
            p.error(f"unknown fault {f!r}; choose from {', '.join(FAULTS)} or none")
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-dist-"))
    try:
        print(f"{args.ranks} ranks ({args.ranks_per_process} per process), {args.units} units of {args.unit_seconds}s, "
              f"checkpoints every {args.checkpoint_every}s; load average {os.getloadavg()[0]:.2f}", flush=True)
        m = measure(args, work)
        print(f"wall {m['wall_s']:.2f}s, last result at {m['compute_wall_s']:.2f}s against ideal {m['ideal_s']:.2f}s: "
              f"overhead {100 * m['overhead_fraction']:.2f} % ({100 * m['overhead_after_join_fraction']:.2f} % once every "
              f"rank computes); rank-0 poll p50 {m['rank0_poll_ms_p50']:.2f} ms, "
              f"p99 {m['rank0_poll_ms_p99']:.2f} ms; {m['store_ops_per_s']:.0f} store ops/s; last result to dataset "
              f"{m['last_result_to_written_s']:.2f}s; lost units {m['lost_units']}; peak RSS "
              f"{m['peak_rss_mb_per_rank']:.1f} MiB per simulated rank", flush=True)
        b = m["breakdown"]
        print(f"beyond the ideal: every rank computing after {b['join_s']:.2f}s; stand-in units took {b['unit_s_mean']:.2f}s "
              f"on average (of {args.unit_seconds}s); {b['idle_between_units_s']:.1f} rank-seconds idle between and after "
              f"units; last unit to collected {b['last_unit_to_collected_s']:.2f}s", flush=True)
        m["faults"] = []
        for f in faults:
            res = fault(args, work, f)
            m["faults"].append(res)
            print(f"fault {f}: recovered {res['recovered']} in {res['seconds']}s ({res['detail']})", flush=True)
        m["store_costs"] = store_costs([1024, 4096])
        m["projection"] = project(m)
        for big in ("1024", "4096"):
            pj = m["projection"][big]
            print(f"modelled at {big} ranks: poll p99 {pj['rank0_poll_ms_p99']} ms ({pj['rank0_poll_ms_quiet_host']} ms on a "
                  f"quiet host), {pj['store_ops_per_s']} store ops/s, "
                  f"overhead with 10-min units {100 * pj['overhead_fraction_10min_units']:.3f} %")
        print(f"model: {m['projection']['model']}")
        m["load_average_after"] = os.getloadavg()[0]
        m.pop("cycles")
        if args.json:
            args.json.write_text(json.dumps(m, indent=2))
        ok = m["lost_units"] == 0 and all(f["recovered"] for f in m["faults"])
        return 0 if ok else 1
    finally:
        for run in RUNS:
            run.abort()
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
