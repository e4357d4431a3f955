"""``whest dataset generate-seeds``: print a JSON array of distinct int63 seeds."""

from __future__ import annotations

import json

import click

from whestbench.bake.cost import PER_MLP_LIST_BYTES
from whestbench.cli.common import COUNT, write_stdout
from whestbench.compute.seeds import derived_seeds, random_seeds
from whestbench.errors import UsageError
from whestbench.format.schema import MAX_MLPS, check_positive_int
from whestbench.text import format_bytes, format_count
from whestbench.work.machine import machine_memory


@click.command("generate-seeds")
@click.option("--n-mlps", type=COUNT, required=True, help="How many seeds (one per MLP).")
@click.option("--seed", type=int, default=None, help="Derive the list deterministically from this root seed (default: random).")
def generate_seeds(n_mlps: int, seed: int | None) -> None:
    """Print a JSON array of N distinct int63 seeds, for --mlp-seeds.

    \b
    whest dataset generate-seeds --n-mlps 1000 > seeds.json
    """
    check_positive_int("--n-mlps", n_mlps)
    if seed is not None and seed < 0:
        raise UsageError(f"--seed must be a non-negative integer; got {seed};",
                         fix="pass 0 or more, or leave --seed out for random seeds.")
    _check_size(n_mlps)
    seeds = derived_seeds(seed, n_mlps) if seed is not None else random_seeds(n_mlps)
    write_stdout((json.dumps(seeds) + "\n").encode(), "the seeds")


def _check_size(n_mlps: int) -> None:
    """The bake's size guard, before drawing: no bake takes more than MAX_MLPS seeds, and the list
    (Python ints while drawing, then its JSON text) must fit this machine's memory."""
    if n_mlps > MAX_MLPS:
        raise UsageError(f"--n-mlps {format_count(n_mlps)} is more than {format_count(MAX_MLPS)}, the most seeds a bake "
                         "can use (its mlp_id column is int32);", fix="ask for at most that many.")
    total, _ = machine_memory()
    need = n_mlps * PER_MLP_LIST_BYTES
    if total is not None and need > total:
        raise UsageError(f"{format_count(n_mlps)} seeds need about {format_bytes(need)} of memory to draw and print, but "
                         f"the machine has {format_bytes(total)};",
                         fix="ask for fewer (--n-mlps), or use a root seed (bake --seed S derives them).")


COMMANDS = [generate_seeds]
