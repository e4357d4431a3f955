"""Distributed bakes (torchrun, srun) write the same dataset as one process, and survive failures.

Every test starts real processes on loopback: torchrun (``python -m torch.distributed.run``) with
static and c10d rendezvous, two "nodes" as two torchrun agents, and srun emulated by the SLURM_*
variables. The reference is the same bake run in-process by a single process. Compared: every
column except ``sampling_budget_breakdown`` (it records wall times).

The ``test_protocol_*`` tests at the end run the coordination protocol in one process (ranks as
threads around one store), where a test can plant what a crashed start leaves behind.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("torch.distributed")

from whestbench.compute.seeds import slice_bounds  # noqa: E402
from whestbench.bake.pipeline import BakeConfig, bake  # noqa: E402

from helpers.procs import children, clean_env, free_port as _free_port  # noqa: E402

COMPARED = ("mlp_id", "mlp_name", "mlp_seed", "weights", "all_layer_means", "final_means", "avg_variance",
            "all_layer_stderr")
# Equality tests: many small units, so both ranks get some; the time is mostly process start-up.
SMALL = dict(n_mlps=12, n_samples=20_000, width=16, depth=3, seed=9)
# Failure tests: units long enough that a kill lands while work is in flight.
LARGE = dict(n_mlps=12, n_samples=150_000, width=32, depth=3, seed=21)
STEP_TIMEOUT_S = 180  # every wait's hang guard: a verdict is what a process did, never how fast a busy machine ran it


def _clean_env(**extra: str) -> dict[str, str]:
    return clean_env(**{"OMP_NUM_THREADS": "1", **extra})


def _bake_args(shape: dict, output: Path, *extra: str) -> list[str]:
    return [
        "-m", "whestbench", "dataset", "bake",
        "--n-mlps", str(shape["n_mlps"]), "--n-samples", str(shape["n_samples"]),
        "--width", str(shape["width"]), "--depth", str(shape["depth"]),
        *(["--seed", str(shape["seed"])] if shape.get("seed") is not None else []),
        "--max-threads", "1", "--quiet", "--output", str(output), *extra,
    ]  # fmt: skip


class Procs:
    """Processes a test started; whatever still runs at teardown is killed (its whole session)."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen] = []

    def start(self, args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env or _clean_env(),
            start_new_session=True,  # torchrun's workers share the session: one killpg ends them all
        )
        self.started.append(proc)
        return proc

    def torchrun(self, launcher: list[str], shape: dict, output: Path, *extra: str) -> subprocess.Popen:
        return self.start(["-m", "torch.distributed.run", *launcher, *_bake_args(shape, output, *extra)])

    def srun(self, n: int, port: int, shape: dict, output: Path, *extra: str, rank_args=None,
             blas_threads: int = 1) -> list[subprocess.Popen]:
        """``n`` ranks as srun would start them (SLURM_* set, no torchrun), rank 0 hosting the store.
        ``blas_threads``: what BLAS would use outside the bake's own one-thread limit."""
        ranks = []
        for r in range(n):
            env = _clean_env(
                SLURM_PROCID=str(r), SLURM_NTASKS=str(n), SLURM_LOCALID=str(r), SLURM_JOB_ID="4242",
                SLURM_JOB_NODELIST="localhost", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                OMP_NUM_THREADS=str(blas_threads), OPENBLAS_NUM_THREADS=str(blas_threads),
            )  # fmt: skip
            more = (rank_args or {}).get(r, [])
            ranks.append(self.start(_bake_args(shape, output, *extra, *more), env))
        return ranks

    def kill_all(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=30)


@pytest.fixture
def procs():
    p = Procs()
    yield p
    p.kill_all()


def _finish(proc: subprocess.Popen, timeout_s: float = STEP_TIMEOUT_S) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"still running after {timeout_s}s; output so far:\n{out[-3000:]}") from None
    return proc.returncode, out


def _finish_ok(*running: subprocess.Popen) -> list[str]:
    outs = []
    for proc in running:
        code, out = _finish(proc)
        assert code == 0, f"exit {code}:\n{out[-3000:]}"
        outs.append(out)
    return outs


def _finish_after(proc: subprocess.Popen, marker: str, timeout_s: float = STEP_TIMEOUT_S) -> tuple[int, str, float]:
    """``_finish``, and the seconds from the first output line holding ``marker`` to the exit (inf
    when no line held it): a wait measured from where the process says it starts waiting, so neither
    interpreter start-up nor torch's import counts."""
    import threading

    seen: list[float] = []
    lines: list[str] = []

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if not seen and marker in line:
                seen.append(time.monotonic())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        reader.join(10)
        raise AssertionError(f"still running after {timeout_s}s; output so far:\n{''.join(lines)[-3000:]}") from None
    ended = time.monotonic()
    reader.join(30)
    return proc.returncode, "".join(lines), (ended - seen[0]) if seen else float("inf")


def _within_peer_timeout(waited: float, peer_timeout: float) -> bool:
    """A wait the code bounds by --peer-timeout, judged with wide slack for a loaded machine (three
    times the timeout plus 20 s for the exit): what it catches is a wait that ignores the flag (the
    defaults are 30-300 s, or no limit at all), not a slow scheduler."""
    return waited < 3 * peer_timeout + 20


def _units_saved(output: Path) -> int:
    return len(list((output.parent / f"{output.name}.whest-work" / "units").glob("*.unit")))


def _wait_for_units(output: Path, n: int, *running: subprocess.Popen) -> None:
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while _units_saved(output) < n:
        assert all(p.poll() is None for p in running), "a process ended before the kill point"
        assert time.monotonic() < deadline, f"no {n} units saved within {STEP_TIMEOUT_S}s"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """The single-process reference bake of a shape (made once per module)."""
    made: dict[str, Path] = {}

    def get(shape: dict) -> Path:
        key = repr(sorted(shape.items()))
        if key not in made:
            made[key] = bake(BakeConfig(output=tmp_path_factory.mktemp("single") / "ds", **shape))
        return made[key]

    return get


@pytest.fixture
def same_as(read_columns, assert_bytes_equal):
    def check(got: Path, want: Path) -> None:
        a, b = read_columns(got), read_columns(want)
        assert sorted(a) == sorted(b)
        for col in COMPARED:
            if col == "mlp_name":
                assert a[col] == b[col]
            else:
                assert_bytes_equal(a[col], b[col], col)
        assert not got.with_name(got.name + ".whest-work").exists()
        # the audit trail too: ranks send the same unit records, so it is the single process's, byte for byte
        import pyarrow.parquet as pq

        trails = [sorted((d / "audit").glob("*.parquet")) for d in (got, want)]
        assert [p.name for p in trails[0]] == [p.name for p in trails[1]]
        for x, y in zip(*trails):
            assert pq.read_table(x).equals(pq.read_table(y)), x.name

    return check


@pytest.fixture(scope="module")
def torchrun_two_procs(tmp_path_factory) -> Path:
    """``torchrun --nproc-per-node 2`` (static rendezvous on a free port): the output directory."""
    procs = Procs()
    try:
        output = tmp_path_factory.mktemp("torchrun") / "ds"
        launcher = ["--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(_free_port())]
        _finish_ok(procs.torchrun(launcher, SMALL, output))
        return output
    finally:
        procs.kill_all()


@pytest.mark.distributed
def test_torchrun_two_processes_equal_one_process(torchrun_two_procs, single, same_as):
    same_as(torchrun_two_procs, single(SMALL))


@pytest.mark.distributed
def test_torchrun_c10d_rendezvous_equals_one_process(tmp_path, procs, single, same_as):
    output = tmp_path / "ds"
    endpoint = f"127.0.0.1:{_free_port()}"
    launcher = ["--nnodes", "1", "--nproc-per-node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint]
    _finish_ok(procs.torchrun(launcher, SMALL, output))
    same_as(output, single(SMALL))


@pytest.mark.distributed
def test_two_nodes_on_loopback_equal_one_process(tmp_path, procs, single, same_as):
    output = tmp_path / "ds"
    port = str(_free_port())
    nodes = [
        procs.torchrun(
            ["--nnodes", "2", "--node-rank", str(k), "--nproc-per-node", "1",
             "--master-addr", "127.0.0.1", "--master-port", port],
            SMALL, output,
        )  # fmt: skip
        for k in (0, 1)
    ]
    _finish_ok(*nodes)
    same_as(output, single(SMALL))


@pytest.mark.distributed
def test_srun_ranks_without_torchrun_equal_one_process(tmp_path, procs, single, same_as):
    output = tmp_path / "ds"
    outs = _finish_ok(*procs.srun(2, _free_port(), SMALL, output))
    assert "rank 1: done" in outs[1]
    same_as(output, single(SMALL))


@pytest.mark.distributed
def test_distributed_output_equals_merged_slices(tmp_path, torchrun_two_procs, read_columns, assert_bytes_equal):
    from whestbench.dataset_io import merge_datasets

    parts = []
    for k in range(2):
        cfg = dict(SMALL, mlp_range=slice_bounds(k, 2, SMALL["n_mlps"]))
        parts.append(bake(BakeConfig(output=tmp_path / f"part-{k}", **cfg)))
    merged = merge_datasets(parts, output_dir=tmp_path / "merged")
    a, b = read_columns(torchrun_two_procs), read_columns(merged)
    assert sorted(a) == sorted(b)
    for col in sorted(a):
        if col == "sampling_budget_breakdown":
            continue  # wall times
        if col in ("mlp_name",):
            assert a[col] == b[col]
        else:
            assert_bytes_equal(a[col], b[col], col)


@pytest.mark.distributed
def test_a_rank_started_with_different_arguments_fails_every_rank_naming_the_field(tmp_path, procs):
    output = tmp_path / "ds"
    ranks = procs.srun(2, _free_port(), SMALL, output, rank_args={1: ["--n-samples", "10000"]})
    # click takes the last --n-samples, so rank 1 bakes 10000 samples while rank 0 bakes 20000
    results = [_finish(p) for p in ranks]
    for code, out in results:
        assert code == 2, out
        assert "n_samples" in out and "same command" in out
    assert not output.exists()


def test_a_rank_started_with_another_seed_fails_every_rank_naming_seed(tmp_path, procs):
    """docs/distributed.md: a rank started with other seeds stops the bake. A peer's --seed was
    silently replaced by rank 0's seed list."""
    output = tmp_path / "ds"
    ranks = procs.srun(2, _free_port(), SMALL, output, rank_args={1: ["--seed", str(SMALL["seed"] + 1)]})
    results = [_finish(p) for p in ranks]
    for code, out in results:
        assert code == 2, out
        assert "seed (the seed list differs from MLP 0" in out and "same command" in out, out
    assert not output.exists()


def test_a_rank_given_another_seeds_file_fails_every_rank_naming_seed(tmp_path, procs):
    """docs/distributed.md: a rank started with other seeds stops the bake. A peer's --mlp-seeds file
    was never read (only rank 0 reads the file), so a list differing from rank 0's was silently
    replaced by rank 0's."""
    import json

    from whestbench.compute.seeds import derived_seeds

    seeds = derived_seeds(SMALL["seed"], SMALL["n_mlps"])
    mine, theirs = tmp_path / "a.json", tmp_path / "b.json"
    mine.write_text(json.dumps(seeds))
    theirs.write_text(json.dumps(seeds[:5] + [seeds[5] + 1] + seeds[6:]))
    output, shape = tmp_path / "ds", {**SMALL, "seed": None}
    ranks = procs.srun(2, _free_port(), shape, output, rank_args={0: ["--mlp-seeds", str(mine)],
                                                                   1: ["--mlp-seeds", str(theirs)]})
    for code, out in [_finish(p) for p in ranks]:
        assert code == 2, out
        assert "seed (the seed list differs from MLP 5" in out and "same command" in out, out
        assert "Traceback" not in out, out
    assert not output.exists()


@pytest.mark.distributed
def test_a_rank_without_the_seeds_file_takes_rank_0s_list(tmp_path, procs, single, same_as):
    """No shared filesystem: a rank whose --mlp-seeds path does not exist there bakes rank 0's list."""
    import json

    from whestbench.compute.seeds import derived_seeds

    seeds = tmp_path / "seeds.json"
    seeds.write_text(json.dumps(derived_seeds(SMALL["seed"], SMALL["n_mlps"])))
    output = tmp_path / "ds"
    _finish_ok(*procs.srun(2, _free_port(), {**SMALL, "seed": None}, output,
                           rank_args={0: ["--mlp-seeds", str(seeds)], 1: ["--mlp-seeds", str(tmp_path / "elsewhere.json")]}))
    same_as(output, single(SMALL))


@pytest.mark.distributed
def test_a_late_rank_with_other_arguments_leaves_rank_0s_unit_checkpointed(tmp_path, procs):
    """Rank 0 has computed for a while when a rank with another command joins: the bake is refused
    on every rank, and rank 0's unit in flight is checkpointed first (the default interval of 60 s
    would otherwise have lost all of it)."""
    output, port = tmp_path / "ds", _free_port()

    def rank(r: int, *more: str) -> subprocess.Popen:
        env = _clean_env(SLURM_PROCID=str(r), SLURM_NTASKS="2", SLURM_LOCALID=str(r), SLURM_JOB_ID="4243",
                         SLURM_JOB_NODELIST="localhost", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        return procs.start(_bake_args(LONG, output, *more), env)

    rank0 = rank(0)
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while not (output.parent / f"{output.name}.whest-work" / "plan.json").exists():  # rank 0 waits for rank 1 first
        assert rank0.poll() is None and time.monotonic() < deadline, "rank 0 never planned"
        time.sleep(0.05)
    rank1 = rank(1, "--n-samples", "3000000")
    for code, out in (_finish(rank0), _finish(rank1)):
        assert code == 2 and "n_samples" in out, out
    assert _checkpoints(output), "rank 0's unit in flight was not checkpointed"
    assert not output.exists()


def _holds_a_unit(port: int, rank: int, output: Path) -> bool:
    """Whether ``rank`` owns a unit rank 0 has not collected yet (read from the coordination store).

    White-box on purpose: the test must kill a rank while it holds work, or there is nothing to lose.
    """
    from datetime import timedelta

    import torch.distributed as dist

    try:  # a loaded machine can keep rank 0's store from answering in time: not yet known, ask again
        raw = dist.TCPStore("127.0.0.1", port, world_size=None, is_master=False, timeout=timedelta(seconds=30))
    except RuntimeError:  # DistNetworkError: the connection timed out
        return False
    store = dist.PrefixStore("whest/slurm-4242", raw)
    if not store.check(["current"]):
        return False
    epoch = dist.PrefixStore(f"e{store.get('current').decode()}", store)
    units = output.parent / f"{output.name}.whest-work" / "units"
    for i in range(LARGE["n_mlps"]):  # a fresh bake: todo index i is MLP i
        if epoch.check([f"owner/{i}"]) and epoch.get(f"owner/{i}").decode().split()[0] == str(rank):
            if not (units / f"mlp{i:08d}.unit").exists():
                return True
    return False


@pytest.mark.distributed
def test_a_dead_peer_is_reported_within_the_timeout_and_a_rerun_resumes(tmp_path, procs, single, same_as):
    output = tmp_path / "ds"
    port = _free_port()
    rank0, rank1 = procs.srun(2, port, LARGE, output, "--peer-timeout", "5")
    _wait_for_units(output, 1, rank0, rank1)
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while True:  # freeze rank 1, and kill it only while it holds a unit
        assert rank0.poll() is None and time.monotonic() < deadline, "rank 1 never held a unit"
        rank1.send_signal(signal.SIGSTOP)
        if _holds_a_unit(port, 1, output):
            break
        rank1.send_signal(signal.SIGCONT)
        time.sleep(0.02)
    rank1.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    code, out = _finish(rank0)
    assert code == 1, out
    waited = time.monotonic() - killed_at
    assert _within_peer_timeout(waited, 5), f"rank 0 noticed the dead peer {waited:.0f}s after the kill (--peer-timeout 5)"
    assert "rank 1 stopped responding" in out and "re-run the same command on every rank" in out
    saved = _units_saved(output)
    assert saved >= 1 and not output.exists()
    # the status command names both ranks with their host (rank 1 joined: it held a unit), as JSON too
    status = subprocess.run([sys.executable, "-m", "whestbench", "dataset", "status", str(output), "--json"],
                            capture_output=True, text=True, env=_clean_env(), timeout=STEP_TIMEOUT_S)
    assert status.returncode == 0, status.stderr
    doc = json.loads(status.stdout)
    assert doc["state"] == "stopped" and doc["world_size"] == 2 and doc["ranks_never_seen"] == []
    assert [(r["rank"], r["host"]) for r in doc["ranks"]] == [(0, socket.gethostname()), (1, socket.gethostname())]
    assert doc["ranks"][1]["pid"] == rank1.pid
    # which one died: rank 0 recorded how each left, and each rank's own time of its last beat (rank 0
    # beat on for the --peer-timeout of 5 s after rank 1 froze; both showed the same time before)
    assert {r["rank"]: r["ended"] for r in doc["ranks"]} == {0: "failed", 1: "no-goodbye"}
    assert doc["ranks"][0]["last_heartbeat_utc"] > doc["ranks"][1]["last_heartbeat_utc"]

    outs = _finish_ok(*procs.srun(2, _free_port(), LARGE, output, "--peer-timeout", "5"))
    recovered = [int(k) for k in re.findall(r"resuming: (\d+) of 12 units", outs[0])]
    assert recovered and recovered[0] >= saved
    same_as(output, single(LARGE))


# Two MLPs of several seconds each: one per rank, in flight when the stop comes.
LONG = dict(n_mlps=2, n_samples=6_000_000, width=64, depth=4, seed=1)


def _checkpoints(output: Path) -> list[str]:
    return sorted(p.name for p in (output.parent / f"{output.name}.whest-work" / "units").glob("*.ckpt"))


@pytest.mark.distributed
def test_a_slurm_stop_keeps_every_ranks_checkpoint_and_the_requeue_resumes_them(tmp_path, procs, single, same_as):
    """Every rank's unit checkpoints reach rank 0's ledger (periodically, and at the stop), so a
    preempted multi-host bake loses at most a few seconds per rank, not a whole MLP per peer."""
    output = tmp_path / "ds"
    ranks = procs.srun(2, _free_port(), LONG, output, "--checkpoint-every", "0.5")
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while len(_checkpoints(output)) < 2:  # rank 1's periodic checkpoint arrives without any stop
        assert all(p.poll() is None for p in ranks), "a rank ended before both had checkpointed"
        assert time.monotonic() < deadline, f"only {_checkpoints(output)} within {STEP_TIMEOUT_S}s"
        time.sleep(0.05)
    for p in ranks:
        p.send_signal(signal.SIGTERM)  # what SLURM sends every task before the time limit
    for p in ranks:
        code, out = _finish(p)
        assert code == 75, out
    assert _checkpoints(output) == ["mlp00000000.ckpt", "mlp00000001.ckpt"]
    assert not output.exists()

    outs = _finish_ok(*procs.srun(2, _free_port(), LONG, output, "--checkpoint-every", "0.5"))
    resumed = re.findall(r"resuming unit (mlp\d+) from its checkpoint", "".join(outs))
    assert sorted(resumed) == ["mlp00000000", "mlp00000001"], outs
    same_as(output, single(LONG))


@pytest.mark.distributed
def test_rank_0_failing_on_a_dead_peer_keeps_no_checkpoint_computed_after_its_blas_limit_went(tmp_path, procs, single,
                                                                                              same_as):
    """Rank 0 leaves on an error (a dead peer) while its own unit still runs: the units' BLAS limit of
    one thread is lifted as it leaves, and what the unit computes after that (other float32 sgemm
    results) must not reach a checkpoint, or the re-run resumes to other numbers."""
    output = tmp_path / "ds"
    rank0, rank1 = procs.srun(2, _free_port(), LONG, output, "--checkpoint-every", "0.3", "--peer-timeout", "3",
                              blas_threads=2)  # OpenBLAS's float32 sgemm differs at 1 and 2 threads (measured: 4-11 % of a chunk's entries)
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while len(_checkpoints(output)) < 2:  # both ranks deep inside their MLPs
        assert rank0.poll() is None and rank1.poll() is None, "a rank ended before both had checkpointed"
        assert time.monotonic() < deadline, f"only {_checkpoints(output)} within {STEP_TIMEOUT_S}s"
        time.sleep(0.05)
    rank1.send_signal(signal.SIGKILL)
    code, out = _finish(rank0)
    assert code == 1 and "rank 1 stopped responding" in out, out
    assert "mlp00000000.ckpt" in _checkpoints(output)  # rank 0's own unit kept its checkpoint
    (out,) = _finish_ok(procs.start(_bake_args(LONG, output)))  # resumed in one process
    assert "resuming unit mlp00000000 from its checkpoint" in out
    same_as(output, single(LONG))


def _rank_of(pid: int) -> int | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for item in env:
        if item.startswith(b"RANK="):
            return int(item[5:])
    return None


@pytest.mark.distributed
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds torchrun's workers through /proc")
def test_elastic_restart_after_a_killed_worker_completes_and_equals_one_process(tmp_path, procs, single, same_as):
    output = tmp_path / "ds"
    launcher = [
        "--nproc-per-node", "2", "--max-restarts", "1", "--monitor-interval", "0.2",
        "--master-addr", "127.0.0.1", "--master-port", str(_free_port()),
    ]  # fmt: skip
    agent = procs.torchrun(launcher, LARGE, output)
    _wait_for_units(output, 2, agent)
    workers = {_rank_of(pid): pid for pid in children(agent.pid)}
    assert 1 in workers, f"no rank-1 worker among {workers}"
    for pid in workers.values():  # frozen while rank 1 is killed: a fast machine cannot finish the bake first
        os.kill(pid, signal.SIGSTOP)
    os.kill(workers[1], signal.SIGKILL)
    for rank, pid in workers.items():
        if rank != 1:
            os.kill(pid, signal.SIGCONT)
    (out,) = _finish_ok(agent)
    assert re.search(r"resuming: [1-9]\d* of 12 units", out), out[-3000:]  # the restart kept finished units
    assert "restart 1 of this job" in out, out[-3000:]  # torchrun's restart count, shown to the user
    same_as(output, single(LARGE))


# --- The coordination protocol in one process: ranks as threads around one store -----------------
# Fast and exact: the store is created here (as torchrun's agent would host it), so a test can plant
# what an earlier, crashed start left in it.


def _fake_unit(spec, compute, unit, ctx):
    """A unit's "result": a function of the unit alone, so any mix-up of units shows."""
    import numpy as np

    from whestbench.compute.stats import LayerSums

    ctx.on_samples(spec.n_samples)
    sums = np.full((spec.depth, spec.width), float(unit.mlp_index + 1))
    return LayerSums(sums=sums, sumsq=sums * 2.0, count=spec.n_samples)


def _spec(seeds=(), n_samples: int = 10):
    from whestbench.work.units import WorkSpec

    return WorkSpec(seeds=tuple(seeds), n_samples=n_samples, width=2, depth=1, mlp_range=(0, len(seeds)))


@pytest.fixture
def agent_store(monkeypatch):
    """A TCPStore on a free port, as torchrun's agent hosts one; heartbeats sped up for the test."""
    from datetime import timedelta

    import torch.distributed as dist

    from whestbench.work.distributed import store as liveness

    monkeypatch.setattr(liveness, "HEARTBEAT_S", 0.2)
    port = _free_port()
    store = dist.TCPStore("127.0.0.1", port, world_size=None, is_master=True, timeout=timedelta(seconds=30))
    return port, store


def _ranks(port: int, n: int, *, seeds, tmp_path, attempts=None, peer_n_samples=None, steps=None, stops=None,
           only=None, ledger_root=None, **kw):
    """Run ranks ``only`` (default: all ``n``) in threads; return each one's outcome: rank 0 the
    results in its ledger ({mlp index: value}), other ranks False, or the exception it raised."""
    from concurrent.futures import ThreadPoolExecutor

    from whestbench.work.distributed.store_executor import StoreExecutor
    from whestbench.work.launch_env import DistEnv
    from whestbench.work.executor import Job
    from whestbench.work.ledger import Ledger
    from whestbench.work.steps import Compute

    n_total = len(list(seeds)) if seeds is not None else 0

    def one(rank: int):
        attempt = (attempts or [0] * n)[rank]
        env = DistEnv(rank, n, rank, "127.0.0.1", port, run_id="t", attempt=attempt, agent_store=True)
        executor = StoreExecutor(env, workers=2, peer_timeout_s=20, step=(steps or {}).get(rank, _fake_unit))
        try:
            if rank == 0:
                spec = _spec(seeds)
                ledger = Ledger(ledger_root or tmp_path / "w.whest-work", spec.identity())
                executor.run(Job(spec, Compute(), ledger), stop=(stops or {}).get(rank), **kw)
                return _got(ledger, spec)
            ns = peer_n_samples or 10
            return executor.run(Job(_spec(range(n_total), ns).with_seeds(()), Compute()), stop=(stops or {}).get(rank), **kw)
        except Exception as exc:  # returned, so the test can look at every rank's outcome
            return exc

    ranks = list(range(n)) if only is None else only
    with ThreadPoolExecutor(len(ranks)) as pool:
        futures = [pool.submit(one, r) for r in ranks]
        return [f.result(timeout=60) for f in futures]


def _expected(n: int) -> dict[int, float]:
    return {i: float(i + 1) for i in range(n)}


def _got(ledger, spec) -> dict[int, float]:
    out = {}
    for u in spec.units():
        if ledger.unit_path(u.key).exists():
            out[u.mlp_index] = float(ledger.load(u.key)[0].sums[0, 0])
    return out


def test_protocol_every_unit_arrives_once_at_rank_0(agent_store, tmp_path):
    port, _ = agent_store
    results, peer = _ranks(port, 2, seeds=range(8), tmp_path=tmp_path)
    assert results == _expected(8)
    assert peer is False  # a peer writes nothing


def test_protocol_every_rank_pulls_units(agent_store, tmp_path):
    port, _ = agent_store
    done_by: dict[int, list[int]] = {0: [], 1: []}

    def slow_unit_on(rank):
        def step(spec, compute, unit, ctx):
            time.sleep(0.05)
            done_by[rank].append(unit.mlp_index)
            return _fake_unit(spec, compute, unit, ctx)

        return step

    results, _ = _ranks(port, 2, seeds=range(40), tmp_path=tmp_path, steps={0: slow_unit_on(0), 1: slow_unit_on(1)})
    assert results == _expected(40)
    assert done_by[0] and done_by[1]  # both ranks claimed work from the shared counter
    assert sorted(done_by[0] + done_by[1]) == list(range(40))  # and no unit was computed twice


def test_protocol_a_stop_on_rank_0_stops_every_rank_and_keeps_every_finished_unit(agent_store, tmp_path):
    import threading

    from whestbench.work.executor import BakeInterrupted

    port, _ = agent_store
    stop0 = threading.Event()
    computed: list[int] = []

    def step(spec, compute, unit, ctx):
        time.sleep(0.05)
        computed.append(unit.mlp_index)
        if len(computed) == 12:
            stop0.set()  # SIGTERM on rank 0, mid-bake
        return _fake_unit(spec, compute, unit, ctx)

    root = tmp_path / "w.whest-work"
    outcomes = _ranks(port, 2, seeds=range(60), tmp_path=tmp_path, steps={0: step, 1: step}, stops={0: stop0})
    assert all(isinstance(o, BakeInterrupted) for o in outcomes), outcomes
    saved = sorted(int(p.stem[3:]) for p in (root / "units").glob("*.unit"))
    assert saved == sorted(computed)  # every unit computed anywhere reached rank 0's ledger
    assert 12 <= len(saved) < 60


def test_protocol_a_stop_on_rank_0_ends_rank_0_while_its_own_unit_is_interrupted(agent_store, tmp_path):
    """Real units honour the stop: rank 0's own unit in flight ends with UnitStopped (checkpointed),
    posts no result, and rank 0 must not wait for it (it used to wait forever)."""
    import threading

    from whestbench.work.executor import BakeInterrupted
    from whestbench.work.steps import UnitStopped

    port, _ = agent_store
    stop0 = threading.Event()
    started: list[int] = []

    def step(spec, compute, unit, ctx):
        started.append(unit.mlp_index)
        if len(started) == 6:
            stop0.set()  # SIGTERM on rank 0 while this unit runs
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:
            if ctx.stop.is_set():
                raise UnitStopped(unit.key)  # as run_unit does, after its checkpoint
            time.sleep(0.01)
        return _fake_unit(spec, compute, unit, ctx)

    box: list = []
    ranks = threading.Thread(target=lambda: box.append(
        _ranks(port, 2, seeds=range(40), tmp_path=tmp_path, steps={0: step, 1: step}, stops={0: stop0})), daemon=True)
    ranks.start()
    ranks.join(STEP_TIMEOUT_S)  # a hang guard: the bug was a wait without end
    assert box, "rank 0 is still waiting for a unit that had stopped"
    assert all(isinstance(o, BakeInterrupted) for o in box[0]), box[0]


def test_protocol_ignores_what_an_earlier_crashed_start_left_in_the_store(agent_store, tmp_path):
    import numpy as np
    import torch.distributed as dist

    from whestbench.compute.stats import LayerSums
    from whestbench.work.ledger import identity_digest, unit_record
    from whestbench.work.units import Unit

    port, store = agent_store
    old = dist.PrefixStore("whest/t", store)
    # an earlier rank 0 published a plan, handed out 5 units, and died with results uncollected
    old.set("epoch", "1")
    old.set("current", "1")
    old.set("hb/0", "1 dead-token 9")
    e1 = dist.PrefixStore("e1", old)
    e1.set("plan", '{"identity": {}, "seeds": [], "todo": []}')
    e1.set("claim", "5")
    junk = LayerSums(sums=np.full((1, 2), 99.0), sumsq=np.zeros((1, 2)), count=10)
    for i in range(5):
        e1.set(f"result/{i}", unit_record(Unit(i).key, identity_digest(_spec(range(8)).identity()), junk, 0.0))
    results, peer = _ranks(port, 2, seeds=range(8), tmp_path=tmp_path)
    assert not isinstance(peer, Exception), peer
    assert results == _expected(8)  # no unit skipped, no stale result taken for another unit


def test_protocol_does_not_need_the_same_restart_count_on_every_rank(agent_store, tmp_path):
    # torchrun counts a restart only on the node whose worker failed; other nodes restart at count 0
    port, _ = agent_store
    results, peer = _ranks(port, 2, seeds=range(6), tmp_path=tmp_path, attempts=[1, 0])
    assert not isinstance(peer, Exception), peer
    assert results == _expected(6)


def test_protocol_a_rank_with_other_arguments_fails_every_rank_naming_the_field(agent_store, tmp_path):
    from whestbench.errors import UsageError

    port, _ = agent_store
    outcomes = _ranks(port, 2, seeds=range(40), tmp_path=tmp_path, peer_n_samples=11)
    for outcome in outcomes:
        assert isinstance(outcome, UsageError), outcome
        assert "n_samples (rank 0: 10, rank 1: 11)" in str(outcome)


def test_protocol_a_damaged_result_is_computed_again_at_rank_0(agent_store, tmp_path):
    import numpy as np

    from whestbench.compute.stats import LayerSums

    port, _ = agent_store

    def liar(spec, compute, unit, ctx):  # rank 1 posts results that no sampling produces
        ctx.on_samples(spec.n_samples)
        bad = np.full((spec.depth, spec.width), np.nan)
        return LayerSums(sums=bad, sumsq=bad, count=spec.n_samples)

    def slow(spec, compute, unit, ctx):
        time.sleep(0.05)
        return _fake_unit(spec, compute, unit, ctx)

    events = []
    results, _ = _ranks(port, 2, seeds=range(20), tmp_path=tmp_path, steps={0: slow, 1: liar}, on_event=events.append)
    assert results == _expected(20)  # every unit, each once, all computed honestly
    notes = [e.message for e in events if e.kind == "note" and "arrived damaged" in e.message]
    assert notes and "non-finite" in notes[0]


def test_protocol_a_result_damaged_every_time_fails_instead_of_recomputing_forever(agent_store, tmp_path):
    import threading

    import numpy as np

    from whestbench.compute.stats import LayerSums
    from whestbench.errors import WorkFailed

    port, _ = agent_store

    def liar(spec, compute, unit, ctx):  # every rank, rank 0's recomputations too: a broken host
        ctx.on_samples(spec.n_samples)
        bad = np.full((spec.depth, spec.width), np.nan)
        return LayerSums(sums=bad, sumsq=bad, count=spec.n_samples)

    box: list = []
    ranks = threading.Thread(target=lambda: box.append(
        _ranks(port, 2, seeds=range(4), tmp_path=tmp_path, steps={0: liar, 1: liar})), daemon=True)
    ranks.start()
    ranks.join(60)
    assert box, "rank 0 is still recomputing a unit whose result is always damaged"
    failure = box[0][0]
    assert isinstance(failure, WorkFailed) and "arrived damaged 3 times" in str(failure), box[0]


def test_protocol_progress_counts_recovered_and_collected_units_of_every_rank(agent_store, tmp_path):
    from whestbench.work.ledger import Ledger
    from whestbench.work.units import Unit

    port, _ = agent_store
    ledger_root = tmp_path / "w.whest-work"
    spec = _spec(range(6))
    Ledger(ledger_root, spec.identity()).save("mlp00000000", _fake_unit(spec, None, Unit(0), _Ctx()), 0.1)
    events = []
    results, _ = _ranks(port, 2, seeds=range(6), tmp_path=tmp_path, ledger_root=ledger_root, on_event=events.append)
    assert results == _expected(6)
    rank0 = [e for e in events if e.progress is not None and e.progress.total == 60]
    start = next(e for e in rank0 if e.kind == "start" and e.progress.recovered)
    assert (start.progress.recovered, start.data["units_total"], start.data["units_done"]) == (10, 6, 1)
    done = [e for e in rank0 if e.kind == "done"]
    assert done and done[-1].progress.done == done[-1].progress.total and done[-1].progress.mlps_done == 6


class _Ctx:
    def on_samples(self, n):
        pass


def test_protocol_a_unit_held_by_a_rank_that_was_restarted_is_computed_again(agent_store, tmp_path):
    import threading

    import torch.distributed as dist

    port, store = agent_store
    base = dist.PrefixStore("whest/t", store)

    def slow(spec, compute, unit, ctx):
        time.sleep(0.02)
        return _fake_unit(spec, compute, unit, ctx)

    outcome: list = []
    rank0 = threading.Thread(
        target=lambda: outcome.extend(_ranks(port, 2, seeds=range(30), tmp_path=tmp_path, steps={0: slow}, only=[0]))
    )
    rank0.start()
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while not base.check(["current"]):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    epoch = base.get("current").decode()
    ns = dist.PrefixStore(f"e{epoch}", base)
    # rank 1's first process claims a unit and dies holding it; its launcher starts it again
    held = int(ns.add("claim", 1)) - 1
    ns.set(f"owner/{held}", "1 first-process")
    base.set("hb/1", f"{epoch} first-process 1")
    (peer,) = _ranks(port, 2, seeds=range(30), tmp_path=tmp_path, only=[1])
    rank0.join(timeout=STEP_TIMEOUT_S)
    assert not isinstance(peer, Exception), peer
    (results,) = outcome
    assert not isinstance(results, Exception), results
    assert results == _expected(30)  # including the unit the first process held


# --- Waits bounded by --peer-timeout, messages that name the cause (issue 21) ---------------------


def _srun_rank(procs: Procs, rank: int, world: int, port: int, shape: dict, output: Path, *extra: str,
               addr: str = "127.0.0.1") -> subprocess.Popen:
    env = _clean_env(SLURM_PROCID=str(rank), SLURM_NTASKS=str(world), SLURM_LOCALID=str(rank), SLURM_JOB_ID="4244",
                     SLURM_JOB_NODELIST="localhost", MASTER_ADDR=addr, MASTER_PORT=str(port))
    return procs.start(_bake_args(shape, output, *extra), env)


TINY_BAKE = dict(n_mlps=2, n_samples=1000, width=4, depth=1, seed=1)


@pytest.mark.distributed
def test_a_rank_0_without_its_peers_waits_for_them_at_most_the_peer_timeout_and_says_so(tmp_path, procs):
    """SLURM_NTASKS=3 under a plain sbatch script (no srun): rank 0 does every unit itself, then waits
    for ranks that never come — at most --peer-timeout (it used to wait a silent 30 s)."""
    output = tmp_path / "ds"
    code, out, waited = _finish_after(_srun_rank(procs, 0, 3, _free_port(), TINY_BAKE, output, "--peer-timeout", "4"),
                                      "waiting up to")
    assert code == 0, out
    assert "waiting up to" in out and "ranks 1-2 never connected" in out, out
    assert _within_peer_timeout(waited, 4), f"rank 0 waited {waited:.0f}s for ranks that never came (--peer-timeout 4)"
    assert output.is_dir()


class _Silent:
    """Another program on the port: it accepts connections and never answers."""

    def __init__(self) -> None:
        import threading

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.first: float | None = None  # when the first connection came: the rank's wait begins there
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                self.conns.append(self.sock.accept()[0])
                self.first = self.first or time.monotonic()
            except OSError:
                return

    def close(self) -> None:
        for c in self.conns:
            c.close()
        self.sock.close()


@pytest.mark.distributed
def test_a_rank_pointed_at_another_programs_port_gives_up_within_the_peer_timeout(tmp_path, procs):
    silent = _Silent()
    try:
        code, out = _finish(_srun_rank(procs, 1, 2, silent.port, TINY_BAKE, tmp_path / "ds", "--peer-timeout", "3"))
        ended = time.monotonic()
    finally:
        silent.close()
    assert code == 1, out
    assert "did not answer as rank 0's coordination store within 3s" in out and "MASTER_PORT" in out, out
    assert "frame #" not in out and "Traceback" not in out, out
    # from the rank's first connection (start-up and torch's import excluded) to its exit
    assert silent.first is not None, "the rank never connected"
    waited = ended - silent.first
    assert _within_peer_timeout(waited, 3), f"waited {waited:.0f}s with --peer-timeout 3 (it used to be 35 s)"


@pytest.mark.distributed
def test_a_rank_waiting_for_rank_0_says_what_it_waits_for_and_gives_up_at_the_peer_timeout(tmp_path, procs):
    code, out = _finish(_srun_rank(procs, 1, 2, _free_port(), TINY_BAKE, tmp_path / "ds", "--peer-timeout", "7"))
    assert code == 1, out
    assert "waiting up to" in out and "rank 0's coordination store" in out, out
    assert "nothing answers at 127.0.0.1" in out, out


@pytest.mark.distributed
@pytest.mark.parametrize("rank", [0, 1])
def test_an_unresolvable_master_addr_is_named_not_the_port(tmp_path, procs, rank):
    code, out = _finish(_srun_rank(procs, rank, 2, _free_port(), TINY_BAKE, tmp_path / "ds", "--peer-timeout", "2",
                                   addr="no-such-host.invalid"))
    assert code == 1, out
    assert "MASTER_ADDR='no-such-host.invalid' does not resolve" in out, out
    assert "set MASTER_PORT" not in out and "frame #" not in out, out


@pytest.mark.distributed
def test_a_rank_given_another_output_says_where_rank_0_writes(tmp_path, procs):
    output, port = tmp_path / "T", _free_port()
    rank0 = _srun_rank(procs, 0, 2, port, SMALL, output)
    rank1 = _srun_rank(procs, 1, 2, port, SMALL, tmp_path / "T2")
    _, out1 = _finish_ok(rank0, rank1)
    assert f"rank 0 writes the dataset to {output} " in out1, out1
    assert "rank 1: done in" in out1 and f"writes {tmp_path / 'T2'}" not in out1, out1
    assert output.is_dir() and not (tmp_path / "T2").exists()


def test_master_addr_of_another_host_is_one_line_before_the_store(monkeypatch):
    """MASTER_ADDR naming another host that answers gave five blocks of torch C++ frames, then a message
    about the port: rank 0 refuses it (UsageError naming the address and the fix), and never calls TCPStore."""
    import torch.distributed as dist

    from whestbench.errors import UsageError
    from whestbench.work.distributed.store import connect_store
    from whestbench.work.launch_env import DistEnv

    def never(*a, **k):
        raise AssertionError("TCPStore was called")

    monkeypatch.setattr(dist, "TCPStore", never)
    with pytest.raises(UsageError, match=r"MASTER_ADDR=192\.0\.2\.1 \(192\.0\.2\.1\) is not an address of this host"):
        connect_store(DistEnv(0, 2, 0, "192.0.2.1", 29500), 5.0)


def _heard_steps(units_first: int, rank0_pause: float = 0.0) -> dict:
    """Unit steps for ranks 0 and 1 where rank 0 waits until rank 1 has computed ``units_first`` units
    (each 0.05 s), so rank 0 hears rank 1's heartbeats for a while before the bake ends."""
    import threading

    peer_done, count = threading.Event(), [0]

    def rank0(spec, compute, unit, ctx):
        peer_done.wait(20)
        time.sleep(rank0_pause)
        return _fake_unit(spec, compute, unit, ctx)

    def rank1(spec, compute, unit, ctx):
        time.sleep(0.05)
        count[0] += 1
        if count[0] >= units_first:
            peer_done.set()
        return _fake_unit(spec, compute, unit, ctx)

    return {0: rank0, 1: rank1}


def test_protocol_rank_0_records_every_ranks_last_heartbeat_for_the_status_command(agent_store, tmp_path, monkeypatch):
    """``whest dataset status`` of a distributed bake names the ranks seen and their last heartbeat:
    rank 0 records them in the work directory's status.json (issue 28)."""

    from whestbench.bake.status import bake_status, status_lines
    from whestbench.work.distributed import store as liveness

    monkeypatch.setattr(liveness, "STATUS_EVERY_S", 0.0)
    port, _ = agent_store
    work = tmp_path / "w.whest-work"
    results, peer = _ranks(port, 2, seeds=range(16), tmp_path=tmp_path, steps=_heard_steps(4, rank0_pause=0.05))
    assert results == _expected(16) and peer is False
    doc = bake_status(work)
    assert doc["state"] == "stopped" and [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert all(r["last_heartbeat_utc"].endswith("Z") and 0 <= r["seconds_ago"] < 60 for r in doc["ranks"])
    host = socket.gethostname()
    assert [(r["host"], r["pid"]) for r in doc["ranks"]] == [(host, os.getpid())] * 2  # both ranks: threads here
    assert doc["world_size"] == 2 and doc["ranks_never_seen"] == []
    lines = status_lines(doc)
    assert any(line.strip().startswith(f"rank 1: on {host} (pid {os.getpid()}), last heartbeat ") for line in lines)
    assert not any("never seen" in line for line in lines)


def test_protocol_the_status_command_names_a_rank_that_never_joined(agent_store, tmp_path, monkeypatch):
    """A world of 3 where rank 2 never starts: rank 0 and rank 1 do every unit, and ``whest dataset
    status`` lists rank 2 as never seen (it listed only the ranks that joined), in --json too."""
    import json as json_

    from whestbench.bake.status import bake_status, status_lines
    from whestbench.work.distributed import store as liveness

    monkeypatch.setattr(liveness, "STATUS_EVERY_S", 0.0)
    port, _ = agent_store
    results, peer = _ranks(port, 3, seeds=range(12), tmp_path=tmp_path, only=[0, 1], steps=_heard_steps(3))
    assert results == _expected(12) and peer is False
    doc = json_.loads(json_.dumps(bake_status(tmp_path / "w.whest-work")))  # what --json prints
    assert doc["world_size"] == 3 and doc["ranks_never_seen"] == [2]
    assert [r["rank"] for r in doc["ranks"]] == [0, 1] and all(r["host"] == socket.gethostname() for r in doc["ranks"])
    assert "    rank 2: never seen" in status_lines(doc)
