"""``whest dataset generate-seeds``: print a JSON array of distinct int63 seeds."""

from __future__ import annotations

import json

import click

from whestbench.cli.common import COUNT


@click.command("generate-seeds")
@click.option("--n-mlps", type=COUNT, required=True, help="How many seeds (one per MLP).")
@click.option("--seed", type=int, default=None, help="Derive the list deterministically from this root seed (default: random).")
def generate_seeds(n_mlps: int, seed: int | None) -> None:
    """Print a JSON array of N distinct int63 seeds, for --mlp-seeds.

    \b
    whest dataset generate-seeds --n-mlps 1000 > seeds.json
    """
    from whestbench.compute.seeds import derived_seeds, random_seeds
    from whestbench.errors import UsageError

    if n_mlps <= 0:
        raise UsageError(f"--n-mlps must be a positive integer; got {n_mlps}.")
    if seed is not None and seed < 0:
        raise UsageError(f"--seed must be a non-negative integer; got {seed}.")
    seeds = derived_seeds(seed, n_mlps) if seed is not None else random_seeds(n_mlps)
    click.echo(json.dumps(seeds))


COMMANDS = [generate_seeds]
