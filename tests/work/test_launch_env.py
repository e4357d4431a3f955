"""Where a process sits in a distributed bake, read from torchrun's or srun's environment."""

from __future__ import annotations

import subprocess

import pytest

from whestbench.errors import UsageError
from whestbench.work import launch_env
from whestbench.work.launch_env import dist_env_from_environ, first_host

TORCHRUN = {
    "RANK": "3",
    "WORLD_SIZE": "4",
    "LOCAL_RANK": "1",
    "MASTER_ADDR": "10.0.0.5",
    "MASTER_PORT": "29500",
    "TORCHELASTIC_RUN_ID": "job7",
    "TORCHELASTIC_RESTART_COUNT": "2",
    "TORCHELASTIC_USE_AGENT_STORE": "True",
}
SRUN = {
    "SLURM_PROCID": "5",
    "SLURM_NTASKS": "8",
    "SLURM_LOCALID": "1",
    "SLURM_JOB_ID": "123456",
    "SLURM_JOB_NODELIST": "node[03-05,07]",
}


@pytest.fixture
def no_scontrol(monkeypatch):
    """The machine's own scontrol (CI may run on a SLURM cluster) must not answer for the test."""

    def refuse(*args, **kwargs):
        raise FileNotFoundError("scontrol")

    monkeypatch.setattr(launch_env.subprocess, "run", refuse)


def test_torchrun_env_gives_rank_world_and_the_agents_store():
    env = dist_env_from_environ(TORCHRUN)
    assert (env.rank, env.world_size, env.local_rank) == (3, 4, 1)
    assert (env.master_addr, env.master_port) == ("10.0.0.5", 29500)
    assert env.agent_store is True  # torchrun's agent hosts the store; rank 0 must not bind the port
    assert env.run_id == "job7" and env.attempt == 2


def test_torchrun_without_agent_store_lets_rank_0_host_it():
    env = dist_env_from_environ({k: v for k, v in TORCHRUN.items() if k != "TORCHELASTIC_USE_AGENT_STORE"})
    assert env.agent_store is False


def test_srun_env_gives_rank_world_and_a_store_on_the_first_node(no_scontrol):
    env = dist_env_from_environ(SRUN)
    assert (env.rank, env.world_size, env.local_rank) == (5, 8, 1)
    assert env.master_addr == "node03"  # first host of node[03-05,07], expanded without scontrol
    assert 1 <= env.master_port <= 65535
    assert env.agent_store is False and env.run_id == "slurm-123456"


def test_srun_step_node_list_wins_over_the_job_node_list(no_scontrol):
    env = dist_env_from_environ({**SRUN, "SLURM_STEP_NODELIST": "gpu[11-12]"})
    assert env.master_addr == "gpu11"


def test_srun_master_addr_and_port_can_be_set_explicitly(no_scontrol):
    env = dist_env_from_environ({**SRUN, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "31000"})
    assert (env.master_addr, env.master_port) == ("127.0.0.1", 31000)


def test_srun_port_is_the_same_on_every_rank_of_a_job(no_scontrol):
    ports = {dist_env_from_environ({**SRUN, "SLURM_PROCID": str(r)}).master_port for r in range(8)}
    assert len(ports) == 1


def test_torchrun_wins_when_srun_launches_torchrun():
    env = dist_env_from_environ({**SRUN, **TORCHRUN})
    assert env.rank == 3 and env.agent_store is True


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "h", "MASTER_PORT": "1"},  # torchrun --nproc-per-node 1
        {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_ID": "5"},  # srun -n 1
        {"SLURM_JOB_ID": "5"},  # inside an allocation, but not a multi-task step
    ],
    ids=["plain", "torchrun-1", "srun-1", "salloc"],
)
def test_a_single_process_is_not_distributed(environ):
    assert dist_env_from_environ(environ) is None


@pytest.mark.parametrize(
    "environ, fragment",
    [
        ({**TORCHRUN, "RANK": "x"}, "RANK"),
        ({**TORCHRUN, "WORLD_SIZE": "four"}, "WORLD_SIZE"),
        ({**TORCHRUN, "RANK": "4"}, "outside 0..3"),
        ({**TORCHRUN, "RANK": "-1"}, "outside 0..3"),
        ({**TORCHRUN, "MASTER_PORT": "70000"}, "MASTER_PORT"),
        ({k: v for k, v in TORCHRUN.items() if k != "MASTER_PORT"}, "MASTER_ADDR/MASTER_PORT"),
        ({**SRUN, "SLURM_PROCID": "8"}, "SLURM_PROCID"),
        ({**SRUN, "SLURM_NTASKS": "8x"}, "SLURM_NTASKS"),
        ({**SRUN, "MASTER_ADDR": "h", "MASTER_PORT": "port"}, "MASTER_PORT"),
    ],
    ids=["rank", "world", "rank-too-big", "rank-negative", "port-range", "no-port", "procid", "ntasks", "port-text"],
)
def test_bad_values_are_usage_errors_naming_the_variable(environ, fragment, no_scontrol):
    with pytest.raises(UsageError, match=fragment):
        dist_env_from_environ(environ)


@pytest.mark.parametrize(
    "nodelist, host",
    [
        ("node[03-05,07]", "node03"),
        ("node[7]", "node7"),
        ("gpu1,gpu2", "gpu1"),
        ("single", "single"),
        ("a[01-02],b[3-4]", "a01"),
        ("rack[1-2]-gpu[01-04]-ib,login1", "rack1-gpu01-ib"),
    ],
)
def test_first_host_of_a_node_list(nodelist, host):
    assert first_host(nodelist) == host


@pytest.mark.parametrize("nodelist", ["", "[", "node[01", ",x"])
def test_an_unreadable_node_list_asks_for_master_addr(nodelist):
    with pytest.raises(UsageError, match="MASTER_ADDR"):
        first_host(nodelist)


def test_scontrol_is_asked_first_when_present(monkeypatch):
    def fake_run(cmd, **kwargs):
        assert cmd[:3] == ["scontrol", "show", "hostnames"]
        return subprocess.CompletedProcess(cmd, 0, stdout="alpha\nbeta\n", stderr="")

    monkeypatch.setattr(launch_env.subprocess, "run", fake_run)
    assert dist_env_from_environ(SRUN).master_addr == "alpha"


def _torchrun(**extra):
    return {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", **extra}


def test_torchrun_max_restarts_is_read():
    from whestbench.work.launch_env import dist_env_from_environ

    env = dist_env_from_environ(_torchrun(TORCHELASTIC_MAX_RESTARTS="3", TORCHELASTIC_RESTART_COUNT="1"))
    assert (env.max_restarts, env.attempt) == (3, 1)
    assert dist_env_from_environ(_torchrun()).max_restarts is None


def test_resume_hint_under_torchrun_says_torchrun_restarts():
    """Issue 28: under torchrun --max-restarts the ranks advised a re-run that torchrun does itself."""
    from whestbench.work.launch_env import dist_env_from_environ, resume_hint

    first = resume_hint(dist_env_from_environ(_torchrun(TORCHELASTIC_MAX_RESTARTS="3", TORCHELASTIC_RESTART_COUNT="0")))
    assert first.startswith("torchrun will restart the ranks (restart 1 of 3)") and "re-run" not in first
    last = resume_hint(dist_env_from_environ(_torchrun(TORCHELASTIC_MAX_RESTARTS="3", TORCHELASTIC_RESTART_COUNT="3")))
    assert last == "torchrun's 3 restarts are used up: re-run the same command on every rank to resume"
    none = resume_hint(dist_env_from_environ(_torchrun(TORCHELASTIC_MAX_RESTARTS="0")))
    assert none == "re-run the same command on every rank to resume"
    assert resume_hint(None) == none
