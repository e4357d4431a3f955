"""Where this process sits in a distributed bake (DistEnv), read from torchrun's or SLURM's environment.

torchrun sets RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT (its agent hosts the
store there) and TORCHELASTIC_RESTART_COUNT. ``srun`` sets SLURM_PROCID / SLURM_NTASKS /
SLURM_LOCALID; the store is then hosted by rank 0 at MASTER_ADDR (default: the first host of the
step's node list) and MASTER_PORT (default: derived from the job id).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from dataclasses import dataclass

from whestbench.errors import UsageError


@dataclass(frozen=True)
class DistEnv:
    """Where this process sits in a distributed bake (``dist_env_from_environ`` reads it)."""

    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    run_id: str = "whest"
    attempt: int = 0
    """torchrun's TORCHELASTIC_RESTART_COUNT or SLURM_RESTART_COUNT, shown to the user. Informational
    only: the store's epoch counter separates restarts, because this count differs between nodes."""
    agent_store: bool = False
    """True under torchrun: its agent already hosts the store at master_addr:master_port."""
    max_restarts: int | None = None
    """torchrun's TORCHELASTIC_MAX_RESTARTS (``--max-restarts``): how often its agent restarts the
    ranks itself after a failure; None elsewhere (srun, or unknown)."""


RERUN_HINT = "re-run the same command on every rank to resume"
LAUNCH = "Launch the ranks with torchrun or srun, which set these variables."


def resume_hint(env: "DistEnv | None") -> str:
    """What happens after a distributed bake fails or stops: torchrun restarts the ranks itself
    while it has restarts left (they resume from the saved units: nothing to do); otherwise the
    user re-runs the same command."""
    if env is not None and env.max_restarts is not None:
        if env.attempt < env.max_restarts:
            return (f"torchrun will restart the ranks (restart {env.attempt + 1} of {env.max_restarts}) and they resume "
                    "from the units saved — nothing to do")
        if env.max_restarts > 0:
            return f"torchrun's {env.max_restarts} restarts are used up: {RERUN_HINT}"
    return RERUN_HINT


def _int(env: dict, key: str) -> int:
    try:
        return int(env[key])
    except ValueError:
        raise UsageError(f"environment variable {key}={env[key]!r} is not an integer.", fix=LAUNCH) from None


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list, without scontrol: ``node[03-05,07]`` -> ``node03``.

    Handles several bracket groups and suffixes (``rack[1-2]-gpu[01-04]-ib`` -> ``rack1-gpu01-ib``).
    """
    depth, end = 0, len(nodelist)
    for i, ch in enumerate(nodelist):  # the first top-level comma ends the first entry
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            end = i
            break
    entry = nodelist[:end].strip()
    host = re.sub(r"\[([^\]]*)\]", lambda m: re.split(r"[-,]", m.group(1))[0], entry)
    if not host or depth < 0 or re.search(r"[\[\]\s]", host) or not re.fullmatch(r"[^,\[\]]+", host):
        raise UsageError(f"cannot read the first host of SLURM node list {nodelist!r};", fix="set MASTER_ADDR.")
    return host


def _first_host(nodelist: str) -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and out.stdout.split():
            return out.stdout.split()[0]
    return first_host(nodelist)


def _checked(env: DistEnv, rank_var: str, world_var: str) -> DistEnv:
    if not 0 <= env.rank < env.world_size:
        raise UsageError(f"{rank_var}={env.rank} is outside 0..{env.world_size - 1} ({world_var}={env.world_size}).",
                         fix=LAUNCH)
    if env.local_rank < 0:
        raise UsageError(f"the local rank must not be negative; got {env.local_rank}.", fix=LAUNCH)
    if not 1 <= env.master_port <= 65535:
        raise UsageError(f"MASTER_PORT must be a TCP port (1-65535); got {env.master_port}.",
                         fix="Set MASTER_PORT to a free port, the same on every rank.")
    return env


def dist_env_from_environ(environ: dict | None = None) -> DistEnv | None:
    """A DistEnv when launched as one of several ranks, else None (a plain single-process bake)."""
    env = dict(os.environ if environ is None else environ)
    if "RANK" in env and "WORLD_SIZE" in env:
        world = _int(env, "WORLD_SIZE")
        if world <= 1:
            return None
        if "MASTER_ADDR" not in env or "MASTER_PORT" not in env:
            raise UsageError("RANK/WORLD_SIZE are set but MASTER_ADDR/MASTER_PORT are not;", fix="launch with torchrun.")
        return _checked(DistEnv(
            rank=_int(env, "RANK"),
            world_size=world,
            local_rank=_int(env, "LOCAL_RANK") if "LOCAL_RANK" in env else 0,
            master_addr=env["MASTER_ADDR"],
            master_port=_int(env, "MASTER_PORT"),
            run_id=env.get("TORCHELASTIC_RUN_ID", "whest"),
            attempt=_int(env, "TORCHELASTIC_RESTART_COUNT") if "TORCHELASTIC_RESTART_COUNT" in env else 0,
            agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true",
            max_restarts=_int(env, "TORCHELASTIC_MAX_RESTARTS") if "TORCHELASTIC_MAX_RESTARTS" in env else None,
        ), "RANK", "WORLD_SIZE")
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        world = _int(env, "SLURM_NTASKS")
        if world <= 1:
            return None
        job = env.get("SLURM_JOB_ID", "0")
        nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST", "localhost")
        addr = env.get("MASTER_ADDR") or _first_host(nodes)
        port = _int(env, "MASTER_PORT") if "MASTER_PORT" in env else 20000 + int(re.sub(r"\D", "", job) or 0) % 20000
        return _checked(DistEnv(
            rank=_int(env, "SLURM_PROCID"),
            world_size=world,
            local_rank=_int(env, "SLURM_LOCALID") if "SLURM_LOCALID" in env else 0,
            master_addr=addr,
            master_port=port,
            run_id=f"slurm-{job}",
            attempt=_int(env, "SLURM_RESTART_COUNT") if "SLURM_RESTART_COUNT" in env else 0,
            agent_store=False,
        ), "SLURM_PROCID", "SLURM_NTASKS")
    return None
